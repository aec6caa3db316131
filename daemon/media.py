"""Virtual media: disk images in a folder of their own with a quota, and the drive that shows
one of them to the target (the gadget's mass-storage LUN on a board, a simulation otherwise).

Safety rules, all enforced here: an image the drive holds is never written, replaced or deleted
(an upload to its name is refused); an upload streams to a temporary file in the same folder
and is renamed into place only once whole, so a cut upload leaves nothing and is restarted from
the beginning; what an upload may write is bounded before it starts (quota, free space) and
while it runs (a body longer than announced).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hashlib
import os
import re
import secrets
import shutil
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import structlog

from daemon import fat
from daemon.config import Config
from daemon.errors import ToolError
from daemon.private_files import fsync_folder
from gadget.configfs import Medium
from gadget.errors import GadgetError

log = structlog.get_logger("daemon.media")

# Letters, digits, '.', '_', '-'; not starting with a dot (no hidden or temporary files, no
# "..") and no separator: a name is one file in the folder, never a path.
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
NAME_SCHEMA = {"type": "string", "pattern": NAME.pattern, "description": "an image's file name"}
_PARTIAL = ".upload-"  # an upload's temporary file; removed at start if a crash left one
MB = 1 << 20
CHUNK = 64 << 10  # what an upload holds in memory at once


def check_name(name: object) -> str:
    if not isinstance(name, str) or not NAME.match(name) or ".." in name:
        raise ToolError(
            "media_name_invalid",
            f"{name!r} is not an image name: letters, digits, '.', '_' and '-', up to 100,"
            " not starting with '.' and without '..'",
        )
    return name


class Drive(Protocol):
    """The target's removable drive: empty, or holding one image."""

    def medium(self) -> Medium | None: ...

    async def attach(self, medium: Medium) -> None: ...

    async def eject(self, *, forced: bool) -> bool: ...


def _tool_error(exc: GadgetError) -> ToolError:
    return ToolError(exc.code, exc.message, retryable=exc.retryable)


class GadgetDrive:
    """The board's drive: the mass-storage function's LUN through gadget.configfs. A target
    reads the drive's type (CD-ROM or disk) only when it enumerates the device: attaching in
    the other mode re-enumerates the composite (`reenumerate`, the board's profiles)."""

    def __init__(
        self, gadget: Any, reenumerate: Callable[[], Awaitable[None]] | None = None
    ) -> None:
        self.gadget = gadget  # gadget.configfs.Gadget
        self.reenumerate = reenumerate

    def medium(self) -> Medium | None:
        medium: Medium | None = self.gadget.medium()
        return medium

    async def attach(self, medium: Medium) -> None:
        try:
            was_cdrom = await asyncio.to_thread(self.gadget.drive_is_cdrom)
            await asyncio.to_thread(self.gadget.attach_medium, medium)
        except GadgetError as exc:
            raise _tool_error(exc) from exc
        if was_cdrom != medium.cdrom and self.reenumerate is not None:
            log.info("media.reenumerating", cdrom=medium.cdrom)
            await self.reenumerate()

    async def eject(self, *, forced: bool) -> bool:
        try:
            ejected: bool = await asyncio.to_thread(self.gadget.eject_medium, forced=forced)
        except GadgetError as exc:
            raise _tool_error(exc) from exc
        return ejected


class SimulatedDrive:
    """A SIMULATION of the drive for the simulated backend, which has no USB: it records what
    is attached and opens the image as the kernel would (a missing file fails), nothing more.
    `locked` stands for a target that prevented medium removal."""

    def __init__(self) -> None:
        self._medium: Medium | None = None
        self.locked = False

    def medium(self) -> Medium | None:
        return self._medium

    async def attach(self, medium: Medium) -> None:
        if self._medium is not None:
            message = "the drive holds a medium: detach it first"
            raise ToolError("media_busy", message, retryable=False)
        if not medium.path.is_file():
            raise ToolError("media_not_found", f"no image {medium.path.name!r}")
        self._medium = medium

    async def eject(self, *, forced: bool) -> bool:
        if self._medium is None:
            return False
        if self.locked and not forced:
            raise ToolError(
                "media_locked", "the target has locked the drive's medium: eject it there, or force"
            )
        self._medium = None
        return True


def drive_for(config: Config, backend: Any) -> Drive | None:
    """The backend's drive: a simulated one with the simulated target, the gadget's LUN on a
    board whose composite has one ([gadget].mass_storage), else none."""
    if config.backend.kind == "simulated":
        return SimulatedDrive()
    if config.gadget.mass_storage:
        return GadgetDrive(backend.gadget, backend.board_profiles.reenumerate)
    return None


@dataclass(frozen=True)
class Uploaded:
    name: str
    size: int
    sha256: str

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "size": self.size, "sha256": self.sha256}


class MediaStore:
    """The images' folder, its quota, and the drive."""

    def __init__(self, config: Config, drive: Drive | None) -> None:
        self.dir = config.media_dir
        self.cfg = config.media
        self.drive = drive
        self.quota = int(config.media.quota_mb * MB)
        self.reserve = int(config.media.reserve_mb * MB)
        # Running uploads and drops: name -> the bytes each may write. Subtracted from the room
        # a new one gets, so uploads running together cannot pass the quota between them.
        self._uploading: dict[str, int] = {}
        self._lock = asyncio.Lock()  # attach, detach, delete and the end of an upload
        try:
            self.prepare()
        except OSError as exc:  # reported by every media call that needs the folder
            log.warning("media.folder_unusable", dir=str(self.dir), error=str(exc))

    # --- the folder ----------------------------------------------------------------------------

    def prepare(self) -> None:
        """Make the folder (private to the daemon) and remove what a crash mid-upload left."""
        self.dir.mkdir(mode=0o750, parents=True, exist_ok=True)
        for entry in os.scandir(self.dir):
            if entry.name.startswith(_PARTIAL):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.path)

    def path(self, name: str) -> Path:
        return self.dir / check_name(name)

    def existing(self, name: str) -> Path:
        path = self.path(name)
        if not path.is_file():
            raise ToolError("media_not_found", f"no image {name!r}")
        return path

    def used(self) -> int:
        """Bytes the folder's images take (running uploads are counted by what they may
        write, see room)."""
        total = 0
        with contextlib.suppress(FileNotFoundError):
            for entry in os.scandir(self.dir):
                if entry.is_file(follow_symlinks=False) and not entry.name.startswith(_PARTIAL):
                    total += entry.stat(follow_symlinks=False).st_size
        return total

    def attached_name(self) -> str | None:
        medium = self.drive.medium() if self.drive is not None else None
        if medium is None or medium.path.parent != self.dir:
            return None
        return medium.path.name

    def status(self) -> dict[str, Any]:
        """For health_check and media_list: what the drive holds, and the folder's room."""
        medium = self.drive.medium() if self.drive is not None else None
        attached = None
        if medium is not None:
            attached = {
                "name": medium.path.name,
                "mode": "cdrom" if medium.cdrom else "flash",
                "read_only": medium.read_only,
            }
        return {
            "drive": self.drive is not None,
            "attached": attached,
            "used_bytes": self.used(),
            "quota_bytes": self.quota,
        }

    def images(self) -> list[dict[str, Any]]:
        attached = self.attached_name()
        images = []
        with contextlib.suppress(FileNotFoundError):
            for entry in sorted(os.scandir(self.dir), key=lambda e: e.name):
                if entry.name.startswith(".") or not entry.is_file(follow_symlinks=False):
                    continue
                st = entry.stat(follow_symlinks=False)
                images.append(
                    {
                        "name": entry.name,
                        "size": st.st_size,
                        "modified": int(st.st_mtime),
                        "attached": entry.name == attached,
                    }
                )
        return images

    def _not_attached(self, name: str, doing: str) -> None:
        if self.attached_name() == name:
            raise ToolError(
                "media_attached",
                f"{name!r} is attached to the target: detach it before {doing} it",
            )

    async def delete(self, name: str) -> None:
        async with self._lock:
            path = self.existing(name)
            self._not_attached(name, "deleting")
            path.unlink()
            log.info("media.deleted", image=name)

    # --- uploads -------------------------------------------------------------------------------

    def room(self, replacing: str | None = None) -> tuple[int, bool]:
        """(bytes an upload may write, whether the free disk space rather than the quota
        bounds it)."""
        used = self.used()
        if replacing is not None:
            with contextlib.suppress(FileNotFoundError):
                used -= (self.dir / replacing).stat().st_size
        running = sum(self._uploading.values())
        by_quota = self.quota - used - running
        by_disk = shutil.disk_usage(self.dir).free - self.reserve - running
        if by_disk < by_quota:
            return max(0, by_disk), True
        return max(0, by_quota), False

    def _refuse_size(self, size: int, room: int, by_disk: bool) -> ToolError:
        details = {"size": size, "room": room}
        if by_disk:
            message = f"{size} bytes do not fit: {room} bytes of disk free (less the reserve)"
            return ToolError("media_disk_full", message, details=details)
        message = f"{size} bytes do not fit: {room} bytes left within the images' quota"
        return ToolError("media_quota_exceeded", message, details=details)

    async def upload(self, name: str, chunks: AsyncIterator[bytes], length: int | None) -> Uploaded:
        """Stream `chunks` into image `name`; the announced `length` (None: unknown) is checked
        against the room first and the body must match it. Replaces an image of that name that
        is not attached, only once the new one is whole."""
        path = self.path(name)
        self._not_attached(name, "replacing")
        if name in self._uploading:
            raise ToolError("media_busy", f"{name!r} is being uploaded already", retryable=True)
        if len(self._uploading) >= self.cfg.max_uploads:
            raise ToolError(
                "media_busy", f"{len(self._uploading)} uploads are running", retryable=True
            )
        self.dir.mkdir(mode=0o750, parents=True, exist_ok=True)
        room, by_disk = self.room(replacing=name)
        if length is not None and length > room:
            raise self._refuse_size(length, room, by_disk)
        limit = room if length is None else length
        self._uploading[name] = limit
        temp = self.dir / f"{_PARTIAL}{secrets.token_hex(8)}"
        sha, size = hashlib.sha256(), 0
        try:
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o640)
            try:
                async for chunk in chunks:
                    size += len(chunk)
                    if size > limit:
                        if length is not None:
                            raise ToolError(
                                "media_upload_incomplete",
                                f"the body is longer than its Content-Length ({length})",
                            )
                        raise self._refuse_size(size, room, by_disk)
                    sha.update(chunk)
                    await asyncio.to_thread(_write_all, fd, chunk)
                if length is not None and size != length:
                    raise ToolError(
                        "media_upload_incomplete",
                        f"the body ended after {size} of {length} bytes: upload it again",
                    )
                await asyncio.to_thread(os.fsync, fd)
            finally:
                os.close(fd)
            async with self._lock:  # an attach cannot come between the check and the rename
                self._not_attached(name, "replacing")
                os.replace(temp, path)
                fsync_folder(self.dir)
        except OSError as exc:
            # ENOSPC: another writer took the space; EFBIG: a file size limit stands for it.
            if exc.errno in (errno.ENOSPC, errno.EFBIG):
                message = f"the disk filled up during the upload: {exc}"
                raise ToolError("media_disk_full", message) from exc
            raise
        finally:
            del self._uploading[name]
            with contextlib.suppress(FileNotFoundError):
                temp.unlink()
        log.info("media.uploaded", image=name, size=size)
        return Uploaded(name, size, sha.hexdigest())

    # --- file drops and files back -------------------------------------------------------------

    async def drop(
        self, name: str, files: list[fat.DropFile], *, free_bytes: int, read_only: bool
    ) -> Uploaded:
        """Build image `name` holding exactly `files` (and `free_bytes` for the target to write
        into), replacing one of that name that is not attached."""
        path = self.path(name)
        self._not_attached(name, "replacing")
        size = fat.check_drop(files, free_bytes, int(self.cfg.drop_max_mb * MB))
        room, by_disk = self.room(replacing=name)
        if size > room:
            raise self._refuse_size(size, room, by_disk)
        if name in self._uploading:
            raise ToolError("media_busy", f"{name!r} is being uploaded already", retryable=True)
        self.dir.mkdir(mode=0o750, parents=True, exist_ok=True)
        temp = self.dir / f"{_PARTIAL}{secrets.token_hex(8)}"
        self._uploading[name] = size
        try:
            await asyncio.to_thread(fat.build, temp, files, size)
            async with self._lock:
                self._not_attached(name, "replacing")
                os.replace(temp, path)
                fsync_folder(self.dir)
        finally:
            del self._uploading[name]
            with contextlib.suppress(FileNotFoundError):
                temp.unlink()
        digest = await asyncio.to_thread(_sha256, path)
        log.info("media.dropped", image=name, files=len(files), size=size)
        return Uploaded(name, size, digest)

    def readable(self, name: str) -> Path:
        """An image whose files may be read: not attached writable (the target may be
        writing, and its cache is not on the image until it lets go)."""
        path = self.existing(name)
        medium = self.drive.medium() if self.drive is not None else None
        if medium is not None and medium.path == path and not medium.read_only:
            raise ToolError(
                "media_attached", f"{name!r} is attached writable: detach it to read its files"
            )
        return path

    async def files(self, name: str) -> list[dict[str, Any]]:
        path = self.readable(name)
        return await asyncio.to_thread(fat.list_files, path)

    async def read(self, name: str, file: str, max_bytes: int) -> tuple[bytes, str]:
        path = self.readable(name)
        return await asyncio.to_thread(fat.read_file, path, file, max_bytes)

    # --- the drive -----------------------------------------------------------------------------

    def _drive(self) -> Drive:
        if self.drive is None:
            raise ToolError(
                "media_unavailable", "this board has no drive (set gadget.mass_storage = true)"
            )
        return self.drive

    async def attach(self, name: str, *, cdrom: bool, read_only: bool) -> dict[str, Any]:
        drive = self._drive()
        async with self._lock:
            path = self.existing(name)
            if name in self._uploading:
                raise ToolError("media_busy", f"{name!r} is being uploaded", retryable=True)
            held = drive.medium()
            if held is not None:
                raise ToolError(
                    "media_busy",
                    f"the drive holds {held.path.name!r}: detach it first",
                    retryable=False,
                    details={"attached": held.path.name},
                )
            await drive.attach(Medium(path, cdrom=cdrom, read_only=read_only or cdrom))
            log.info("media.attached", image=name, cdrom=cdrom, read_only=read_only or cdrom)
        return self.status()

    async def detach(self, *, forced: bool) -> dict[str, Any]:
        """Empty the drive; `forced` takes the medium away even from a target that locked it."""
        drive = self._drive()
        async with self._lock:
            held = drive.medium()
            ejected = await drive.eject(forced=forced)
            if ejected and held is not None:
                log.info("media.detached", image=held.path.name, forced=forced)
        return {**self.status(), "detached": held.path.name if ejected and held else None}


def _sha256(path: Path) -> str:
    sha = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            sha.update(chunk)
    return sha.hexdigest()


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
