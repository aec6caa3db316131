"""Files only the daemon's user may read (the pairing token, the TLS key and certificate): one
way to write them, used by daemon.auth and daemon.tls alike."""

from __future__ import annotations

import os
from pathlib import Path


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
