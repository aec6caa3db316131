"""The one way the daemon writes a file that must survive a power cut (the pairing token, the
TLS key, certificate and its cache, the board id, known boards), and what it does with one a
cut damaged anyway.

write_atomic: a temporary file in the same folder, created with its final mode from the first
byte (secrets 0600, whatever the umask), written, fsynced, renamed over the old one, and the
folder fsynced so the rename itself is on the disk. A cut at any moment leaves the old file or
the new one, never an empty or half-written one (ext4's data=ordered alone does not promise
that for a rename without fsync).

set_aside: a state file found empty, truncated or unparsable at start is renamed with a
timestamp (kept for reading, never deleted) and listed for health_check.

Standard library only: the host's tools (deploy/, the one-shot CLI) import it.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

PRIVATE = 0o600
PUBLIC = 0o644
TMP_SUFFIX = ".tmp"

# Files set aside since this process started, for health_check: the last of each state file
# (bounded by their number).
_set_aside: dict[str, dict[str, Any]] = {}


def write_atomic(path: Path, data: bytes, mode: int = PUBLIC) -> None:
    """Replace `path` with `data`, whole or not at all, durably (see the module's text)."""
    folder = path.parent
    _sweep(path)
    tmp = folder / f".{path.name}.{os.getpid()}.{time.monotonic_ns()}{TMP_SUFFIX}"
    # O_EXCL: never follow or reuse a file someone else put there; `mode` from the first byte,
    # fchmod because the umask may have taken bits off it.
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
    try:
        os.fchmod(fd, mode)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    os.close(fd)
    try:
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    fsync_folder(folder)


def write_private(path: Path, data: bytes) -> None:
    """write_atomic for a secret: 0600 from the first byte whatever the umask."""
    write_atomic(path, data, PRIVATE)


def fsync_folder(folder: Path) -> None:
    """Make a rename or a new file in `folder` durable."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _sweep(path: Path) -> None:
    """Temporary files a cut left beside `path` (never renamed: they are not the file)."""
    with contextlib.suppress(OSError):
        for leftover in path.parent.glob(f".{path.name}.*{TMP_SUFFIX}"):
            with contextlib.suppress(OSError):
                leftover.unlink()


def set_aside(path: Path, reason: str, now: float | None = None) -> Path | None:
    """Rename a damaged state file to PATH.damaged-YYYYmmddTHHMMSSZ, kept for reading (None
    when it could not be renamed: the caller then rebuilds it in place)."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() if now is None else now))
    target = path.with_name(f"{path.name}.damaged-{stamp}")
    n = 1
    while target.exists():
        n += 1
        target = path.with_name(f"{path.name}.damaged-{stamp}-{n}")
    try:
        os.replace(path, target)
        fsync_folder(path.parent)
    except OSError:
        return None
    return target


def read_state(
    path: Path, parse: Callable[[bytes], T], consequence: str, limit: int = 1 << 20
) -> T | None:
    """`parse(the file's bytes)`, or None when the file is missing; a file `parse` refuses
    (ValueError: empty, truncated, unparsable) or that cannot be read is set aside, logged once
    with `consequence` (what the daemon does instead), and None is returned: never a crash."""
    try:
        with path.open("rb") as fh:
            data = fh.read(limit + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        reason = f"unreadable: {exc.strerror or exc}"
    else:
        try:
            if len(data) > limit:
                raise ValueError(f"over {limit} bytes")
            return parse(data)
        except ValueError as exc:
            reason = str(exc) or type(exc).__name__
    report_damaged(path, reason, consequence)
    return None


def report_damaged(path: Path, reason: str, consequence: str) -> Path | None:
    """Set a damaged state file aside and say so once, loudly."""
    kept = set_aside(path, reason)
    note_damaged(path, reason, kept, consequence)
    return kept


def note_damaged(path: Path, reason: str, kept: Path | None, consequence: str) -> None:
    """Say once (the daemon's log, and health_check's `state_files`) that a damaged state file
    was set aside as `kept` (None: it could not be renamed) and what the daemon did instead."""
    note = {
        "file": str(path),
        "reason": reason,
        "kept_as": str(kept) if kept else None,
        "consequence": consequence,
    }
    _set_aside.pop(str(path), None)  # the newest last
    if len(_set_aside) < 64:
        _set_aside[str(path)] = note
    import structlog  # the daemon's log; the host's tools never get here

    structlog.get_logger("daemon.state").error("state_file_set_aside", **note)


def set_aside_files() -> list[dict[str, Any]]:
    """The state files set aside since the start (health_check's `state_files`)."""
    return [dict(n) for n in _set_aside.values()]
