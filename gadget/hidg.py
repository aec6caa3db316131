"""Non-blocking writers for /dev/hidgN and the keyboard's LED reader, on the event loop.

A write that the target does not take within its deadline is an error, never a silent
success (a real bug in one project). Any failure closes the descriptor: after a
re-enumeration old descriptors keep failing, so the next write opens the node afresh.

A writer is a plain writer: it remembers nothing about what it sent. What the target may
still hold, and releasing it, is the input engine's (daemon/engine).
"""

from __future__ import annotations

import asyncio
import errno
import os
from pathlib import Path

import structlog

from gadget import reports
from gadget.errors import GadgetError, TargetNotAttached

log = structlog.get_logger("gadget.hidg")

# errno values that mean "no host on the other end (any more)", not a bug of ours.
NOT_ATTACHED = frozenset(
    {
        errno.ESHUTDOWN,  # f_hid: endpoint disabled, host gone or not configured
        errno.ENODEV,
        errno.ENXIO,
        errno.EPIPE,
        errno.ENOENT,  # the node went away with the function
        errno.ECONNRESET,
    }
)


def _error(exc: OSError, role: str, path: Path, doing: str) -> GadgetError:
    name = errno.errorcode.get(exc.errno or 0, str(exc.errno))
    if exc.errno in NOT_ATTACHED:
        return TargetNotAttached(
            f"{role}: target not attached ({doing} {path}: {name} {exc.strerror})"
        )
    return GadgetError(
        f"{role}: {doing} {path} failed: {name} {exc.strerror}", code="hid_io_failed"
    )


async def _wait_writable(fd: int, timeout: float) -> None:
    """Until fd is writable or timeout passes (the caller then retries once and gives up)."""
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_writer(fd, wake)
    try:
        async with asyncio.timeout(timeout):
            await ready
    except TimeoutError:
        pass
    finally:
        loop.remove_writer(fd)


class HidWriter:
    """One /dev/hidgN. `role` is the descriptor's role (keyboard, mouse, touchscreen, consumer),
    named in errors."""

    def __init__(self, path: Path, role: str, *, timeout: float = 0.75) -> None:
        self.path = path
        self.role = role
        self.timeout = timeout
        self._fd: int | None = None
        self._lock = asyncio.Lock()  # one writer at a time: add_writer holds one callback per fd

    @property
    def is_open(self) -> bool:
        return self._fd is not None

    def _open(self) -> int:
        if self._fd is None:
            try:
                self._fd = os.open(self.path, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
            except OSError as exc:
                raise _error(exc, self.role, self.path, "opening") from exc
            log.debug("hidg.opened", role=self.role, path=str(self.path))
        return self._fd

    def close(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)

    def reopen(self) -> None:
        """Drop the descriptor now (after a re-enumeration); the next write opens the node."""
        self.close()

    async def write(self, report: bytes, timeout: float | None = None) -> None:
        """Hand one report to the target within `timeout` (default: the writer's) or raise
        TargetNotAttached; other I/O failures raise GadgetError."""
        limit = self.timeout if timeout is None else timeout
        loop = asyncio.get_running_loop()
        deadline = loop.time() + limit
        async with self._lock:
            fd = self._open()
            while True:
                try:
                    written = os.write(fd, report)
                except BlockingIOError:
                    remaining = deadline - loop.time()
                    if remaining <= 0:
                        self.close()
                        raise TargetNotAttached(
                            f"{self.role}: target not reading reports from {self.path}"
                            f" (none accepted within {limit:g} s)"
                        ) from None
                    await _wait_writable(fd, remaining)
                    continue
                except OSError as exc:
                    self.close()
                    raise _error(exc, self.role, self.path, "writing") from exc
                if written != len(report):
                    self.close()
                    raise GadgetError(
                        f"{self.role}: short write to {self.path} ({written} of {len(report)})",
                        code="hid_io_failed",
                    )
                return


class LedReader:
    """Reads the keyboard's LED output reports and keeps the latest state.

    `known` turns true with the host's first LED report since this reader opened the node (one
    reader per enumeration): before it, `leds` is only the all-off default, not the host's state.
    `count` numbers the reports, so a caller can wait for the one after something it did.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._leds = reports.Leds()
        self._changed = asyncio.Event()
        self._reported = asyncio.Event()
        self.count = 0

    @property
    def leds(self) -> reports.Leds:
        return self._leds

    @property
    def known(self) -> bool:
        return self.count > 0

    @property
    def is_open(self) -> bool:
        return self._fd is not None

    def start(self) -> None:
        """Open the node and read it on the running loop; raises TargetNotAttached when the
        node is missing."""
        if self._fd is not None:
            return
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:
            raise _error(exc, "keyboard", self.path, "opening") from exc
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(fd, self._readable)
        self._fd = fd

    def close(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            if self._loop is not None:
                self._loop.remove_reader(fd)
            os.close(fd)

    def reopen(self) -> None:
        self.close()
        self.start()

    def _readable(self) -> None:
        assert self._fd is not None
        try:
            data = os.read(self._fd, 64)
        except BlockingIOError:
            return
        except OSError as exc:
            log.info("hidg.leds_stopped", path=str(self.path), error=exc.strerror)
            self.close()
            return
        if not data:  # the other end is gone; reopen() after the next enumeration
            log.info("hidg.leds_stopped", path=str(self.path), error="end of file")
            self.close()
            return
        # f_hid yields one report per read; a pipe may join several: the last one wins.
        size = reports.LEDS_REPORT_LENGTH
        for i in range(0, len(data) - size + 1, size):
            self._set(reports.unpack_leds(data[i : i + size]))

    def _set(self, leds: reports.Leds) -> None:
        self.count += 1
        self._reported.set()
        self._reported = asyncio.Event()
        if leds == self._leds:
            return
        log.debug("hidg.leds", leds=leds)
        self._leds = leds
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait_change(self, timeout: float) -> reports.Leds:
        """The LED state after the next report that changes it; TimeoutError otherwise."""
        changed = self._changed
        async with asyncio.timeout(timeout):
            await changed.wait()
        return self._leds

    async def wait_report(self, after: int, timeout: float) -> reports.Leds | None:
        """The state once report number `after` + 1 has come (at once if it has), or None when
        none comes within `timeout`."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self.count <= after:
            remaining = deadline - loop.time()
            if remaining <= 0 or self._fd is None:
                return None
            try:
                async with asyncio.timeout(remaining):
                    await self._reported.wait()
            except TimeoutError:
                return None
        return self._leds
