"""The certificate helper: a short-lived child (`python -m daemon.tls REQUEST`) that makes or
reads a certificate, and run_child, the daemon's side of it. Only this module imports
`cryptography` (about 9 MB in a process), and only in the child."""

from __future__ import annotations

import hashlib
import ipaddress
import json
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from daemon.private_files import set_aside, write_private
from daemon.tls.certinfo import CertInfo, TlsError, certificate_sha256, pin, read_pem

CHILD_TIMEOUT_S = 300.0  # an emulated or very slow board takes seconds to import cryptography


# -- the child ----------------------------------------------------------------------------------


def inspect(cert_path: Path) -> dict[str, Any]:
    """The first certificate of a PEM file, as a CertInfo's dict."""
    from cryptography import x509

    data = read_pem(cert_path)
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


def make(
    key_path: Path, cert_path: Path, names: Iterable[str], common_name: str, days: float
) -> dict[str, Any]:
    """A self-signed certificate for `names` ("DNS:x", "IP:y"), signed by the key in key_path
    (made when missing or unreadable: ECDSA P-256; an unreadable one is set aside). Its
    CertInfo's dict, new_key, and damaged_key (reason, kept_as) when one was set aside."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    key: Any = None
    damaged: dict[str, str | None] = {}
    try:
        key = serialization.load_pem_private_key(read_pem(key_path), password=None)
    except FileNotFoundError:
        pass
    except (OSError, ValueError, TypeError) as exc:
        damaged["reason"] = f"{type(exc).__name__}: {exc}"
    if key is not None and not isinstance(key, ec.EllipticCurvePrivateKey):
        damaged["reason"] = f"not an ECDSA key: {type(key).__name__}"
    if damaged:  # a cut or a hand left it unusable: kept for reading, never overwritten
        kept = set_aside(key_path, damaged["reason"] or "")
        damaged["kept_as"] = str(kept) if kept else None
        key = None
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
    described = _describe(cert, hashlib.sha256(data).hexdigest())
    return {**described, "new_key": new_key, "damaged_key": damaged or None}


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
