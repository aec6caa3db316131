"""The certificate's files in the state folder, and what the child found in the one in use,
cached beside it keyed by the file's SHA-256 (an ordinary start runs no child)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import structlog

from daemon.private_files import read_state, write_private
from daemon.tls.certinfo import CertInfo, TlsError, read_pem
from daemon.tls.child import run_child

log = structlog.get_logger("daemon.tls")

CERT_FILE = "tls-cert.pem"
KEY_FILE = "tls-key.pem"
INFO_FILE = "tls-cert.json"  # what the child found in the certificate in use, by file hash


def read_info(cert: Path, cache: Path) -> CertInfo:
    """What the certificate file holds: from the cache when the file is the one it describes,
    else from the child (and cached)."""
    try:
        digest = hashlib.sha256(read_pem(cert)).hexdigest()
    except (OSError, ValueError) as exc:
        raise TlsError(f"cannot read the certificate {cert}: {exc}") from None
    # A damaged cache (any content at all) is a miss, set aside: the child reads the
    # certificate again. One of another certificate is a plain miss (a cut between the two).
    cached = read_state(cache, _parse_info, "the certificate is read again and the cache rebuilt")
    if cached is not None and cached.file_sha256 == digest:
        return cached
    try:
        info = CertInfo.from_dict(run_child({"op": "inspect", "cert": str(cert)}))
    except TlsError as exc:
        raise TlsError(f"{cert} holds no usable certificate: {exc}") from None
    remember(cache, info)
    return info


def _parse_info(data: bytes) -> CertInfo:
    try:
        return CertInfo.from_dict(json.loads(data))
    except (KeyError, TypeError, RecursionError, UnicodeDecodeError) as exc:
        raise ValueError(f"not a certificate's info: {type(exc).__name__}") from None


def remember(cache: Path, info: CertInfo) -> None:
    try:
        write_private(cache, json.dumps(info.to_dict()).encode())
    except OSError as exc:  # a read-only state folder: the child runs again next start
        log.warning("tls_info_not_kept", path=str(cache), error=str(exc))
