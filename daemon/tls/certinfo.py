"""What a certificate is to the daemon: its fingerprint and dates as the child read them
(CertInfo), the names the board's own certificate carries, and TlsError."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MAX_PEM_BYTES = 1 << 20  # a certificate chain or key file larger than this is no such file
# DNS names a certificate may carry: LDH labels (an A-label for an international name).
_LABEL = r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)"
_DNS_NAME = re.compile(rf"^{_LABEL}(\.{_LABEL})*$")


class TlsError(OSError):
    """The certificate cannot be made, read or used: one line, like a port that is taken."""


def read_pem(path: Path) -> bytes:
    """A certificate, key or info file, read no further than MAX_PEM_BYTES."""
    with path.open("rb") as fh:
        data = fh.read(MAX_PEM_BYTES + 1)
    if len(data) > MAX_PEM_BYTES:
        raise ValueError(f"{path} is over {MAX_PEM_BYTES} bytes: not a certificate or key file")
    return data


def pin(spki_der: bytes) -> str:
    """The fingerprint of a public key (its DER SubjectPublicKeyInfo): curl's pin form."""
    return "sha256//" + base64.b64encode(hashlib.sha256(spki_der).digest()).decode()


def certificate_sha256(der: bytes) -> str:
    """A certificate's SHA-256 as browsers and `openssl x509 -fingerprint` print it."""
    return hashlib.sha256(der).hexdigest().upper()


def pairs(hexdigits: str) -> str:
    """AB:CD:... as certificate viewers show a digest."""
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
        name = host_part(entry)
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


def host_part(entry: str) -> str:
    """The host of "name", "name:port", "[v6]" or "[v6]:port" (a bare v6 address as it is)."""
    entry = entry.strip()
    if entry.startswith("["):
        return entry[1:].partition("]")[0]
    if entry.count(":") == 1:
        return entry.partition(":")[0]
    return entry


def interface_addresses() -> list[str]:
    """Every address of the machine's interfaces (what 0.0.0.0 or :: listens on)."""
    import ifaddr

    out = []
    for adapter in ifaddr.get_adapters():
        for ip in adapter.ips:
            out.append(ip.ip if isinstance(ip.ip, str) else ip.ip[0])
    return out
