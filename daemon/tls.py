"""TLS on the HTTP port: which listeners have it, the certificate and its fingerprint, and the
one SSLContext every such site is handed (daemon.service gives it to limits.CappedSite;
transports never see it).

- Which listeners: [server].tls "auto" (every listen address but loopback: `make run` stays
  plain HTTP), "on" (all of them) or "off" (none: a warning at start and in health_check).
- Which certificate: [server].tls_cert and tls_key (the user's own, from their CA or
  `tailscale cert`), else one the board makes for itself in the state folder: ECDSA P-256,
  self-signed, the board's names and addresses as subject alternative names, files 0600. It is
  kept across restarts and deploys and made again, with the same key, when it comes within
  RENEW_DAYS of its end or its names change (a listen address added).
- The fingerprint is the SHA-256 of the certificate's public key (SubjectPublicKeyInfo), in
  curl's --pinnedpubkey form `sha256//<base64>`. It pins the key, as SSH does: a renewed
  certificate keeps it. (`certificate_sha256`, what a browser's certificate viewer shows,
  changes with every renewal.)
- Memory: `cryptography` costs a process about 9 MB. The certificate is made or read by a
  short-lived child (`python -m daemon.tls`, the functions under "the child" below) and what it
  found is cached beside the certificate, keyed by the file's SHA-256: the daemon never imports
  `cryptography`, and on an ordinary start it runs no child either.
- Reload (SIGHUP, and the renewal check every CHECK_INTERVAL_S): a new SSLContext is built whole
  and swapped in through the SNI callback, which every handshake runs; one that cannot be built
  leaves the old one serving and is logged.
- A connection's first byte decides (Gate): a TLS handshake record goes on to TLS; anything else
  (plain HTTP sent to a TLS port) gets a short plain-text 400 saying to use https, not a hang
  or a reset.
- TLS 1.2 at least (1.3 preferred by every client that has it); 1.2's suites are ECDHE with
  AES-GCM or ChaCha20-Poly1305 only.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import ipaddress
import json
import os
import re
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

if TYPE_CHECKING:
    from daemon.config import Config

log = structlog.get_logger("daemon.tls")

MODES = ("auto", "on", "off")
CERT_FILE = "tls-cert.pem"
KEY_FILE = "tls-key.pem"
INFO_FILE = "tls-cert.json"  # what the child found in the certificate in use, by file hash
VALID_DAYS = 397  # a self-made certificate's life (Apple's clients refuse more than 825)
RENEW_DAYS = 30  # made again this long before its end
CHECK_INTERVAL_S = 6 * 3600.0
CHILD_TIMEOUT_S = 300.0  # an emulated or very slow board takes seconds to import cryptography
MAX_PEM_BYTES = 1 << 20  # a certificate chain or key file larger than this is no such file
CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20"  # TLS 1.2 only; all of TLS 1.3's suites are fine
READ_BUFFER = 32 << 10  # asyncio's TLS read buffer per connection (smaller_read_buffers)
HANDSHAKE_RECORD = b"\x16"  # the first byte of every TLS connection (a handshake record)
# DNS names a certificate may carry: LDH labels (an A-label for an international name).
_LABEL = r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)"
_DNS_NAME = re.compile(rf"^{_LABEL}(\.{_LABEL})*$")


class TlsError(OSError):
    """The certificate cannot be made, read or used: one line, like a port that is taken."""


def loopback(address: str) -> bool:
    """A listen address only this machine can reach."""
    from daemon.auth import is_loopback

    return address.lower() == "localhost" or is_loopback(address)


def secured(address: str, mode: str) -> bool:
    """Whether a listen address gets TLS under [server].tls `mode`."""
    if mode == "on":
        return True
    if mode == "off":
        return False
    return not loopback(address)


def pin(spki_der: bytes) -> str:
    """The fingerprint of a public key (its DER SubjectPublicKeyInfo): curl's pin form."""
    return "sha256//" + base64.b64encode(hashlib.sha256(spki_der).digest()).decode()


def certificate_sha256(der: bytes) -> str:
    """A certificate's SHA-256 as browsers and `openssl x509 -fingerprint` print it."""
    return hashlib.sha256(der).hexdigest().upper()


def _pairs(hexdigits: str) -> str:
    return ":".join(hexdigits[i : i + 2] for i in range(0, len(hexdigits), 2))


@dataclass(frozen=True)
class CertInfo:
    """What the child read from a certificate (the first one of its file)."""

    fingerprint: str
    certificate_sha256: str
    not_before: float
    not_after: float
    names: tuple[str, ...]  # subject alternative names, "DNS:x" and "IP:y", sorted
    subject: str
    file_sha256: str  # of the file's bytes: the cache's key

    @staticmethod
    def from_dict(data: dict[str, Any]) -> CertInfo:
        return CertInfo(
            fingerprint=str(data["fingerprint"]),
            certificate_sha256=str(data["certificate_sha256"]),
            not_before=float(data["not_before"]),
            not_after=float(data["not_after"]),
            names=tuple(str(n) for n in data["names"]),
            subject=str(data["subject"]),
            file_sha256=str(data["file_sha256"]),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "fingerprint": self.fingerprint,
            "certificate_sha256": self.certificate_sha256,
            "not_before": self.not_before,
            "not_after": self.not_after,
            "names": list(self.names),
            "subject": self.subject,
            "file_sha256": self.file_sha256,
        }

    def ends_within(self, days: float, now: float) -> bool:
        return self.not_after - now < days * 86400


# -- the child: the only code that imports cryptography -----------------------------------------


def _read_pem(path: Path) -> bytes:
    """A certificate, key or info file, read no further than MAX_PEM_BYTES."""
    with path.open("rb") as fh:
        data = fh.read(MAX_PEM_BYTES + 1)
    if len(data) > MAX_PEM_BYTES:
        raise ValueError(f"{path} is over {MAX_PEM_BYTES} bytes: not a certificate or key file")
    return data


def inspect(cert_path: Path) -> dict[str, Any]:
    """The first certificate of a PEM file, as a CertInfo's dict."""
    from cryptography import x509

    data = _read_pem(cert_path)
    certs = x509.load_pem_x509_certificates(data)
    return _describe(certs[0], hashlib.sha256(data).hexdigest())


def _describe(cert: Any, file_sha256: str) -> dict[str, Any]:
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    spki = cert.public_key().public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo)
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        names = [f"DNS:{n}" for n in san.get_values_for_type(x509.DNSName)]
        names += [f"IP:{a}" for a in san.get_values_for_type(x509.IPAddress)]
    except x509.ExtensionNotFound:
        names = []
    return CertInfo(
        fingerprint=pin(spki),
        certificate_sha256=certificate_sha256(cert.public_bytes(Encoding.DER)),
        not_before=cert.not_valid_before_utc.timestamp(),
        not_after=cert.not_valid_after_utc.timestamp(),
        names=tuple(sorted(names)),
        subject=cert.subject.rfc4514_string(),
        file_sha256=file_sha256,
    ).to_dict()


def write_private(path: Path, data: bytes) -> None:
    """Write a file 0600 whatever the umask, whole or not at all (a crash leaves the old one)."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)  # a leftover .tmp keeps its own mode otherwise
        with os.fdopen(fd, "wb", closefd=False) as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
    finally:
        os.close(fd)
    os.replace(tmp, path)


def make(
    key_path: Path, cert_path: Path, names: Iterable[str], common_name: str, days: float
) -> dict[str, Any]:
    """A self-signed certificate for `names` ("DNS:x", "IP:y"), signed by the key in key_path
    (made when missing or unreadable: ECDSA P-256). Its CertInfo's dict, and new_key."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    key: Any = None
    with contextlib.suppress(OSError, ValueError, TypeError):
        key = serialization.load_pem_private_key(_read_pem(key_path), password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        key = ec.generate_private_key(ec.SECP256R1())
        pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        write_private(key_path, pem)
        new_key = True
    else:
        new_key = False
    general: list[x509.GeneralName] = []
    for name in names:
        kind, _, value = name.partition(":")
        if kind == "IP":
            general.append(x509.IPAddress(ipaddress.ip_address(value)))
        else:
            general.append(x509.DNSName(value))
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = time.time()
    public = key.public_key()
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        # An hour back: a target or host whose clock is a little behind still accepts it.
        .not_valid_before(_utc(now - 3600))
        .not_valid_after(_utc(now + days * 86400))
        .add_extension(x509.SubjectAlternativeName(general), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
        .sign(key, hashes.SHA256())
    )
    data = cert.public_bytes(serialization.Encoding.PEM)
    write_private(cert_path, data)
    return {**_describe(cert, hashlib.sha256(data).hexdigest()), "new_key": new_key}


def _utc(epoch: float) -> Any:
    import datetime

    return datetime.datetime.fromtimestamp(epoch, datetime.UTC)


def child_main(argv: list[str]) -> int:
    """`python -m daemon.tls REQUEST`: one JSON request, one JSON answer on stdout; a failure is
    one line on stderr and exit 1."""
    try:
        request = json.loads(argv[0])
        if request["op"] == "inspect":
            answer = inspect(Path(request["cert"]))
        elif request["op"] == "make":
            answer = make(
                Path(request["key"]),
                Path(request["cert"]),
                request["names"],
                request["common_name"],
                float(request["days"]),
            )
        else:
            raise ValueError(f"unknown op {request['op']!r}")
    except Exception as exc:  # the file, the request, the library: one line to the daemon
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(answer))
    return 0


# -- the daemon's side ------------------------------------------------------------------------


def run_child(request: dict[str, Any]) -> dict[str, Any]:
    """The child's answer (blocking: called in a thread, or before anything is served)."""
    try:
        done = subprocess.run(
            [sys.executable, "-m", "daemon.tls", json.dumps(request)],
            capture_output=True,
            timeout=CHILD_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise TlsError(f"the certificate helper did not run: {exc}") from None
    if done.returncode != 0:
        lines = done.stderr.decode(errors="replace").strip().splitlines()
        raise TlsError(lines[-1] if lines else f"the certificate helper exited {done.returncode}")
    answer: dict[str, Any] = json.loads(done.stdout)
    return answer


def read_info(cert: Path, cache: Path) -> CertInfo:
    """What the certificate file holds: from the cache when the file is the one it describes,
    else from the child (and cached)."""
    try:
        digest = hashlib.sha256(_read_pem(cert)).hexdigest()
    except (OSError, ValueError) as exc:
        raise TlsError(f"cannot read the certificate {cert}: {exc}") from None
    # A damaged cache (any content at all) is a miss: the child reads the certificate again.
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError, RecursionError):
        cached = CertInfo.from_dict(json.loads(_read_pem(cache)))
        if cached.file_sha256 == digest:
            return cached
    try:
        info = CertInfo.from_dict(run_child({"op": "inspect", "cert": str(cert)}))
    except TlsError as exc:
        raise TlsError(f"{cert} holds no usable certificate: {exc}") from None
    remember(cache, info)
    return info


def remember(cache: Path, info: CertInfo) -> None:
    try:
        write_private(cache, json.dumps(info.to_dict()).encode())
    except OSError as exc:  # a read-only state folder: the child runs again next start
        log.warning("tls_info_not_kept", path=str(cache), error=str(exc))


def certificate_names(
    listen: Iterable[str],
    allowed_hosts: Iterable[str],
    hostname: str,
    board: str,
    interface_addresses: Iterable[str] = (),
) -> list[str]:
    """The subject alternative names of the board's own certificate, sorted: loopback, every
    listen address (for 0.0.0.0 or ::, the machine's `interface_addresses`), the host's name
    (and its .local), the board's DNS-SD host name and [server].allowed_hosts. Whatever is no
    IP address or valid DNS name is left out."""
    names = {"DNS:localhost", "IP:127.0.0.1", "IP:::1"}
    if board:
        names.add(f"DNS:fingertip-{board[:12]}.local")  # daemon.discovery's host name
    host = hostname.strip().rstrip(".")
    candidates = [host, f"{host}.local" if host and not host.endswith(".local") else ""]
    for entry in [*listen, *allowed_hosts]:
        candidates.append(entry)
    for entry in candidates:
        name = _host_part(entry)
        if not name:
            continue
        try:
            ip = ipaddress.ip_address(name.split("%")[0])
        except ValueError:
            if len(name) <= 253 and _DNS_NAME.match(name):
                names.add(f"DNS:{name.lower()}")
            continue
        if ip.is_unspecified:
            for addr in interface_addresses:
                with contextlib.suppress(ValueError):
                    names.add(f"IP:{ipaddress.ip_address(addr.split('%')[0])}")
        else:
            names.add(f"IP:{ip}")
    return sorted(names)


def _host_part(entry: str) -> str:
    """The host of "name", "name:port", "[v6]" or "[v6]:port" (a bare v6 address as it is)."""
    entry = entry.strip()
    if entry.startswith("["):
        return entry[1:].partition("]")[0]
    if entry.count(":") == 1:
        return entry.partition(":")[0]
    return entry


def _interface_addresses() -> list[str]:
    import ifaddr

    out = []
    for adapter in ifaddr.get_adapters():
        for ip in adapter.ips:
            out.append(ip.ip if isinstance(ip.ip, str) else ip.ip[0])
    return out


def _no_password() -> bytes:
    # Without this, OpenSSL asks for an encrypted key's passphrase on the terminal: a daemon
    # started from one would wait there for ever.
    raise TlsError("the key file is encrypted: give an unencrypted key (0600)")


def server_context(cert: Path, key: Path) -> ssl.SSLContext:
    """A server context for the pair: TLS 1.2 at least, forward-secret AEAD suites only."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.set_ciphers(CIPHERS)
    ctx.options |= ssl.OP_NO_COMPRESSION | ssl.OP_CIPHER_SERVER_PREFERENCE
    ctx.options |= ssl.OP_NO_RENEGOTIATION
    ctx.set_alpn_protocols(["http/1.1"])  # what aiohttp's server speaks
    try:
        ctx.load_cert_chain(cert, key, password=_no_password)
    except TlsError:
        raise
    except (OSError, ssl.SSLError, ValueError) as exc:
        raise TlsError(f"cannot use {cert} with {key}: {exc}") from None
    return ctx


def smaller_read_buffers() -> None:
    """asyncio's TLS (3.11 to 3.13) gives every connection a 256 KiB read buffer, its class's
    max_size: an idle TLS connection held 344 KiB of the daemon's memory against 33 KiB plain,
    86 MB at [server].max_connections. A TLS record carries at most 16 KiB, so READ_BUFFER
    (two records) reads as well. (A Python without the attribute is left as it is.)"""
    from asyncio import sslproto

    if getattr(sslproto.SSLProtocol, "max_size", 0) > READ_BUFFER:
        sslproto.SSLProtocol.max_size = READ_BUFFER


@dataclass(frozen=True)
class Loaded:
    info: CertInfo
    context: ssl.SSLContext
    source: str  # "self-made" or "user"
    cert: Path
    key: Path
    # What health_check shows of it, formatted once (health_check is called often).
    shown: dict[str, str] = field(init=False)

    def __post_init__(self) -> None:
        shown = {
            "source": self.source,
            "fingerprint": self.info.fingerprint,
            "certificate_sha256": _pairs(self.info.certificate_sha256),
            "not_after": _iso(self.info.not_after),
            "certificate": str(self.cert),
        }
        object.__setattr__(self, "shown", shown)


class Tls:
    """The HTTP port's TLS, built once by daemon.service: `context` is handed to every secured
    site; load() at start, reload() on SIGHUP and for renewal."""

    def __init__(self, config: Config):
        self.config = config
        self.mode = config.server.tls
        self.listeners = [(a, secured(a, self.mode)) for a in config.server.listen]
        self.enabled = any(tls for _, tls in self.listeners)
        self.user = bool(config.server.tls_cert)
        self.context: ssl.SSLContext | None = None  # the sites' context; SNI picks _live
        self._live: Loaded | None = None
        self.reloaded_at: float | None = None
        self.last_error = ""  # the last reload's failure, until one succeeds
        from daemon.transports.limits import Throttled  # aiohttp: not for the child

        self._failed = Throttled("tls_handshake_failed")

    @property
    def info(self) -> CertInfo | None:
        return self._live.info if self._live is not None else None

    def load(self) -> None:
        """Make or read the certificate and build the context (blocking). TlsError: the
        daemon cannot serve TLS, and does not start."""
        smaller_read_buffers()
        loaded = self._load()
        self._live = loaded
        self.context = loaded.context
        self.context.sni_callback = self._pick
        log.info(
            "tls_ready",
            source=loaded.source,
            fingerprint=loaded.info.fingerprint,
            certificate_sha256=_pairs(loaded.info.certificate_sha256),
            not_after=_iso(loaded.info.not_after),
            names=list(loaded.info.names),
            listeners=[a for a, tls in self.listeners if tls],
        )

    def _pick(self, sslobj: ssl.SSLObject, server_name: str | None, ctx: ssl.SSLContext) -> None:
        """Every handshake: the context loaded last (a reload swaps it without touching the
        listening sockets)."""
        live = self._live
        if live is not None and live.context is not ctx:
            sslobj.context = live.context

    async def reload(self, reason: str = "SIGHUP") -> bool:
        """Load again; the old certificate keeps serving when the new one cannot be used."""
        if not self.enabled or self._live is None:
            log.info("tls_reload_skipped", reason="no listener has TLS")
            return False
        old = self._live.info
        try:
            loaded = await asyncio.to_thread(self._load)
        except TlsError as exc:
            self.last_error = str(exc)
            log.error("tls_reload_failed", reason=reason, error=str(exc), serving=old.fingerprint)
            return False
        self._live, self.reloaded_at, self.last_error = loaded, time.time(), ""
        new = loaded.info
        event = log.warning if new.fingerprint != old.fingerprint else log.info
        event(
            "tls_reloaded",
            reason=reason,
            fingerprint=new.fingerprint,
            previous_fingerprint=old.fingerprint,
            certificate_sha256=_pairs(new.certificate_sha256),
            not_after=_iso(new.not_after),
        )
        return True

    def renewal_due(self, now: float) -> bool:
        info = self.info
        return info is not None and not self.user and info.ends_within(RENEW_DAYS, now)

    async def watch(self, on_change: Callable[[], Any]) -> None:
        """Every CHECK_INTERVAL_S: renew a self-made certificate that is due; warn about a
        user's that ends soon (it is theirs to renew, then SIGHUP)."""
        while True:
            await asyncio.sleep(CHECK_INTERVAL_S)
            now = time.time()
            info = self.info
            if self.renewal_due(now):
                if await self.reload("renewal"):
                    on_change()
            elif info is not None and info.ends_within(RENEW_DAYS, now):
                log.warning("tls_certificate_ending", not_after=_iso(info.not_after))

    def _load(self) -> Loaded:
        try:
            return self._load_now()
        except TlsError:
            raise
        except (OSError, ValueError, KeyError, TypeError) as exc:  # a folder we may not read
            raise TlsError(f"the certificate could not be made or read: {exc!r}") from exc

    def _load_now(self) -> Loaded:
        server = self.config.server
        if self.user:
            cert, key = Path(server.tls_cert), Path(server.tls_key)
            info = read_info(cert, self.config.state_dir / INFO_FILE)
            if info.ends_within(0, time.time()):
                log.warning(
                    "tls_certificate_expired", path=str(cert), not_after=_iso(info.not_after)
                )
            return Loaded(info, server_context(cert, key), "user", cert, key)
        cert = self.config.state_dir / CERT_FILE
        key = self.config.state_dir / KEY_FILE
        info = self._self_made(cert, key)
        return Loaded(info, server_context(cert, key), "self-made", cert, key)

    def _self_made(self, cert: Path, key: Path) -> CertInfo:
        from daemon.discovery import board_id

        board = board_id(self.config.state_dir)
        server = self.config.server
        unspecified = any(_host_part(a) in ("0.0.0.0", "::") for a in server.listen)
        names = certificate_names(
            server.listen,
            server.allowed_hosts,
            socket.gethostname(),
            board,
            _interface_addresses() if unspecified else (),
        )
        cache = self.config.state_dir / INFO_FILE
        info: CertInfo | None = None
        reason = "first start"
        if cert.exists() and key.exists():
            try:
                info = read_info(cert, cache)
            except TlsError as exc:
                reason = f"unreadable ({exc})"
        if info is not None:
            if info.ends_within(RENEW_DAYS, time.time()):
                reason = "renewal"
            elif list(info.names) != names:
                reason = "its names changed"
            else:
                return info
        made = run_child(
            {
                "op": "make",
                "key": str(key),
                "cert": str(cert),
                "names": names,
                "common_name": f"Fingertip {board[:8]}",
                "days": VALID_DAYS,
            }
        )
        new = CertInfo.from_dict(made)
        remember(cache, new)
        (log.warning if made.get("new_key") and info is not None else log.info)(
            "tls_certificate_made",
            reason=reason,
            new_key=bool(made.get("new_key")),
            fingerprint=new.fingerprint,
            not_after=_iso(new.not_after),
        )
        return new

    def status(self) -> dict[str, Any]:
        """health_check's and the start-up log's view (daemon.posture)."""
        out: dict[str, Any] = {"mode": self.mode}
        live = self._live
        if live is not None:
            out.update(live.shown, names=list(live.info.names))
        if self.reloaded_at is not None:
            out["reloaded_at"] = _iso(self.reloaded_at)
        if self.last_error:
            out["last_reload_error"] = self.last_error
        return out

    def gate(
        self,
        serve: Callable[[], asyncio.BaseProtocol],
        refuse_plain: Callable[[], asyncio.BaseProtocol],
        done: Callable[[Gate], None],
    ) -> Gate:
        assert self.context is not None, "load() first"
        timeout = self.config.server.header_timeout_s
        return Gate(self.context, serve, refuse_plain, done, timeout, self._failed)


def _iso(epoch: float) -> str:
    from daemon.wire import iso_utc

    return iso_utc(epoch)


class Gate(asyncio.Protocol):
    """A new connection on a TLS listener until its first byte is known.

    The accepting transport only hands the socket over: at once a duplicate of its fd is taken
    and the transport aborted (that closes its own fd, not the connection), before it can read
    a byte (Python 3.11.2, Debian 12's, registers a transport's reader even when paused in
    connection_made, and its read took the ClientHello). The first byte is then peeked at
    (MSG_PEEK), never read: a handshake record goes to asyncio's TLS, anything else is plain
    HTTP, answered by `refuse_plain`; both through connect_accepted_socket on the socket.
    Nothing within `timeout` (or EOF) closes it. `done` is called once: the connection served
    by TLS, refused or closed."""

    def __init__(
        self,
        context: ssl.SSLContext,
        serve: Callable[[], asyncio.BaseProtocol],
        refuse_plain: Callable[[], asyncio.BaseProtocol],
        done: Callable[[Gate], None],
        timeout: float,
        failed: Callable[..., None],
    ):
        self.context, self.serve, self.refuse_plain = context, serve, refuse_plain
        self.done, self.timeout, self.failed = done, timeout, failed
        self.loop = asyncio.get_running_loop()
        self.sock: socket.socket | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.task: asyncio.Task[None] | None = None
        self.finished = False
        self.counted = True  # toward the connection cap (an over-cap refusal is not)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        raw = transport.get_extra_info("socket")
        try:
            self.sock = socket.socket(fileno=os.dup(raw.fileno()))
        except OSError:  # out of fds: this connection cannot be looked at
            self._finish()
            return
        finally:
            assert isinstance(transport, asyncio.Transport)
            transport.abort()  # its fd only, and before it reads: `sock` holds the connection
        self.sock.setblocking(False)
        self.loop.add_reader(self.sock.fileno(), self._first_byte)
        self.timer = self.loop.call_later(self.timeout, self.abort)

    def _first_byte(self) -> None:
        assert self.sock is not None
        try:
            first = self.sock.recv(1, socket.MSG_PEEK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            first = b""
        self._stop_watching()
        if not first:  # EOF before a byte
            self.abort()
            return
        sock, self.sock = self.sock, None
        self.task = self.loop.create_task(self._hand_over(sock, first == HANDSHAKE_RECORD))

    async def _hand_over(self, sock: socket.socket, tls: bool) -> None:
        try:
            if tls:
                await self.loop.connect_accepted_socket(
                    self.serve, sock, ssl=self.context, ssl_handshake_timeout=self.timeout
                )
            else:
                await self.loop.connect_accepted_socket(self.refuse_plain, sock)
        except (OSError, ssl.SSLError, EOFError) as exc:  # a client that is not one, or left
            sock.close()
            self.failed(error=type(exc).__name__, reason=str(exc)[:200])
        except BaseException:  # cancelled at shutdown
            sock.close()
            raise
        finally:
            self._finish()

    def _stop_watching(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
        if self.sock is not None:
            with contextlib.suppress(Exception):
                self.loop.remove_reader(self.sock.fileno())

    def _finish(self) -> None:
        if not self.finished:
            self.finished = True
            self.done(self)

    def abort(self) -> None:
        """Close the connection (silence, EOF before a byte, shutdown)."""
        self._stop_watching()
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        if self.task is not None:
            self.task.cancel()
        self._finish()

    def connection_lost(self, exc: Exception | None) -> None:
        pass  # the accepting transport ends here at once; the connection lives on in `sock`

    def data_received(self, data: bytes) -> None:
        pass  # never: the accepting transport was aborted before it could read


def _main() -> int:
    return child_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(_main())
