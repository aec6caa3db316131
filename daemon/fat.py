"""FAT images for virtual media, through pyfatfs (MIT, pure Python: the board needs no mkfs.fat
or mtools): a file drop built from the files a client sent, and the files a target wrote read
back without mounting. Blocking; the media tools call it through asyncio.to_thread. pyfatfs and
PyFilesystem2 are imported on first use (about 0.4 s and a few MB the idle daemon never pays).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from daemon.errors import ToolError

MB = 1 << 20
MIN_IMAGE = 16 * MB  # FAT16's smallest comfortable size: every host reads it
MAX_FILES = 256
# A long file name FAT keeps: no separators, no characters Windows refuses, no control
# characters; not "." or "..", no leading or trailing space or dot trouble.
_FILE_NAME = re.compile(r'^[^\x00-\x1f\x7f/\\:*?"<>|]{1,255}$')
_MAX_ENTRIES = 10_000  # what a listing of a target-written image walks at most


@dataclass(frozen=True)
class DropFile:
    name: str
    data: bytes


def check_file_name(name: str) -> str:
    if (
        not _FILE_NAME.match(name)
        or name.strip(". ") == ""
        or name != name.strip(" ")
        or name.endswith(".")
    ):
        raise ToolError(
            "media_name_invalid",
            f"{name!r} is not a file name for a FAT drive: one name (no '/', '\\\\' or"
            ' :*?"<>|), not only dots, no leading or trailing space, no trailing dot',
        )
    return name


def image_size(files: list[DropFile], free_bytes: int) -> int:
    """Bytes of an image that holds `files` and `free_bytes` more: each file rounded up to a
    32 KB cluster (the largest FAT16 uses) and a megabyte for the tables."""
    cluster = 32 << 10
    content = sum(-(-max(len(f.data), 1) // cluster) * cluster for f in files)
    size = content + free_bytes + MB
    return max(MIN_IMAGE, -(-size // MB) * MB)


def check_drop(files: list[DropFile], free_bytes: int, max_bytes: int) -> int:
    """The image size for a valid drop; media_files_invalid or media_name_invalid otherwise."""
    if not files:
        raise ToolError("media_files_invalid", "a file drop needs at least one file")
    if len(files) > MAX_FILES:
        raise ToolError("media_files_invalid", f"{len(files)} files: at most {MAX_FILES}")
    seen: set[str] = set()
    for f in files:
        check_file_name(f.name)
        folded = f.name.casefold()  # FAT compares names without case
        if folded in seen:
            raise ToolError("media_files_invalid", f"{f.name!r} is given twice (case ignored)")
        seen.add(folded)
    size = image_size(files, free_bytes)
    if size > max_bytes:
        raise ToolError(
            "media_files_invalid",
            f"the drop needs a {size // MB} MB image; [media].drop_max_mb allows {max_bytes // MB}",
        )
    return size


def build(path: Path, files: list[DropFile], size: int, label: str = "FINGERTIP") -> None:
    """Write a new FAT16 image of `size` bytes holding exactly `files` at `path` (which must
    not exist: the caller renames it into place)."""
    from pyfatfs.PyFat import PyFat
    from pyfatfs.PyFatFS import PyFatFS

    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o640)
    os.close(fd)
    fat = PyFat()
    fat.mkfs(str(path), PyFat.FAT_TYPE_FAT16, size=size, label=label)
    fat.close()
    fs = PyFatFS(str(path))
    try:
        for f in files:
            fs.writebytes("/" + f.name, f.data)
    finally:
        fs.close()
    with open(path, "rb+") as done:
        os.fsync(done.fileno())


@contextlib.contextmanager
def _opened(path: Path) -> Iterator[Any]:
    from pyfatfs.PyFatFS import PyFatFS

    try:
        fs = PyFatFS(str(path), read_only=True)
    except Exception as exc:  # pyfatfs raises its own and OSError/ValueError on garbage
        raise ToolError(
            "media_image_unreadable", f"{path.name!r} holds no FAT file system: {exc}"
        ) from exc
    try:
        yield fs
    finally:
        fs.close()


def list_files(path: Path) -> list[dict[str, Any]]:
    """Every file in the image (path, size), as the target left it. At most _MAX_ENTRIES: a
    target-written image is not trusted to be small."""
    out: list[dict[str, Any]] = []
    with _opened(path) as fs:
        try:
            for name in fs.walk.files():
                out.append({"path": name, "size": fs.getinfo(name, namespaces=["details"]).size})
                if len(out) >= _MAX_ENTRIES:
                    break
        except ToolError:
            raise
        except Exception as exc:
            raise ToolError("media_image_unreadable", f"reading {path.name!r}: {exc}") from exc
    return out


def read_file(path: Path, name: str, max_bytes: int) -> tuple[bytes, str]:
    """(content, sha256) of file `name` in the image; its size is checked before reading."""
    if not name.startswith("/"):
        name = "/" + name
    if any(part in ("", ".", "..") for part in name[1:].split("/")):
        raise ToolError("media_name_invalid", f"{name!r} is not a file's path in the image")
    with _opened(path) as fs:
        try:
            if not fs.isfile(name):
                raise ToolError("media_not_found", f"no file {name!r} in {path.name!r}")
            size = fs.getinfo(name, namespaces=["details"]).size
            if size > max_bytes:
                raise ToolError(
                    "media_files_invalid",
                    f"{name!r} has {size} bytes; a tool returns at most {max_bytes}",
                )
            data: bytes = fs.readbytes(name)
        except ToolError:
            raise
        except Exception as exc:
            raise ToolError("media_image_unreadable", f"reading {name!r}: {exc}") from exc
    return data, hashlib.sha256(data).hexdigest()
