"""On-device OCR as the daemon sees it: readings of frames, made by a worker process.

The engine (daemon.screen.ocr_engine: RapidOCR on onnxruntime) never runs in the daemon. It
lives in a process of its own (daemon.screen.ocr_worker), started on the first read and told
to exit `[ocr].idle_exit_s` after the last one, so:
- the daemon holds none of the engine's ~100 MB of libraries and models, nor a read's working
  memory (a 1080x1920 frame's detection peaks near 200 MB), and gives all of it back when OCR
  is idle: the process ends;
- a read that runs out of memory, crashes or hangs costs only that read. The kernel's OOM
  killer picks the worker (it raises its own oom_score_adj), a crash is the worker's exit, a
  hang is `[ocr].read_timeout_s` and a kill; the caller gets `ocr_unavailable` (retryable),
  and the next read starts a new worker. The HID flow, the stream and every other tool never
  notice.

Here: one read at a time, at most MAX_QUEUED callers waiting (then `ocr_busy`), and readings
cached per frame so callers of the same frame share one run.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import signal
import sys
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import structlog

from daemon.config import OcrConfig
from daemon.errors import ToolError
from daemon.frames import Frame
from daemon.memory import board_memory_mb, ocr_enabled
from daemon.screen import ocr_wire as wire

# OCR's values live in ocr_types; named here too (`as`: re-exported) for readers of this module.
from daemon.screen.ocr_types import Crop as Crop
from daemon.screen.ocr_types import Line as Line
from daemon.screen.ocr_types import Word as Word
from daemon.screen.ocr_types import shifted

log = structlog.get_logger("daemon.screen.ocr")

ENGINE_PACKAGES = ("rapidocr", "onnxruntime")
MAX_QUEUED = 4  # OCR runs waiting behind the running one before callers get ocr_busy
# Readings kept, newest first: a snapshot id stays usable for this many frames. Each holds its
# frame (6 MB at 1080p), for telling whether the screen still shows it.
CACHED_FRAMES = 2
# Older readings' lines alone (a few KB each) stay this long, for screen_text's `since`.
REMEMBERED = 32
RETIRE_GRACE_S = 5.0  # a worker told to exit gets this long before it is killed


@dataclass(frozen=True)
class Remembered:
    """What stays of a reading once its frame is let go: enough to say what changed since."""

    lines: tuple[Line, ...]
    width: int
    height: int
    snapshot_id: str  # the reading's (Reading.snapshot_id)


@dataclass(frozen=True)
class Reading:
    """The OCR of one frame, or of the `crop` of it that was read (boxes are frame pixels)."""

    frame: Frame
    lines: tuple[Line, ...]
    elapsed_ms: int
    crop: Crop | None = None

    @property
    def snapshot_id(self) -> str:
        """Names the frame: its capture sequence number and capture time (ms, monotonic), and
        the rectangle read when a region was (r x0.y0.x1.y1 in pixels)."""
        f = self.frame
        out = f"f{f.seq}-{round(f.captured_at * 1000)}"
        return out if self.crop is None else out + "-r" + ".".join(map(str, self.crop))


def engine_installed() -> bool:
    """Whether the engine's packages are installed, without importing them (no memory)."""
    return all(importlib.util.find_spec(p) is not None for p in ENGINE_PACKAGES)


class Worker:
    """One worker process and its pipes: start, read, retire, kill."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.pid = proc.pid
        assert proc.stdin is not None and proc.stdout is not None
        self._stdin, self._stdout = proc.stdin, proc.stdout
        self._next_id = 0
        self.version = ""

    @classmethod
    async def start(cls, threads: int) -> Worker:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "daemon.screen.ocr_worker",
            "--threads",
            str(threads),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            # Its tracebacks (if any) go where the daemon's log goes (journald on a board).
            stderr=None,
            close_fds=True,
        )
        return cls(proc)

    async def ready(self) -> None:
        """Wait for the engine to load (raises what a failed load says)."""
        header, _ = await self._receive()
        if "fatal" in header:
            raise EngineFailed(str(header["fatal"]))
        self.version = str(header.get("version", ""))

    async def read(self, image: Any) -> tuple[list[Line], int]:
        """The engine's lines for `image` (an H x W x 3 uint8 array) and its time in ms."""
        self._next_id += 1
        shape = [int(n) for n in image.shape]
        payload = memoryview(image if image.flags.c_contiguous else image.copy()).cast("B")
        for part in wire.encode({"id": self._next_id, "op": "read", "shape": shape}, len(payload)):
            self._stdin.write(part)
        # In slices with a drain after each: the pipe takes 64 KiB at a time, and whatever it
        # has not taken is copied into the transport's buffer (a whole 6 MB frame otherwise).
        for at in range(0, len(payload), wire.CHUNK):
            self._stdin.write(payload[at : at + wire.CHUNK])
            await self._stdin.drain()
        header, _ = await self._receive()
        if header.get("id") != self._next_id:
            raise wire.ProtocolError(f"reply {header.get('id')} to request {self._next_id}")
        if "error" in header:
            raise ReadFailed(str(header["error"]))
        return [wire.line_from(item) for item in header["lines"]], int(header.get("ms", 0))

    async def _receive(self) -> tuple[dict[str, Any], bytes]:
        sizes = await self._stdout.readexactly(wire.PREFIX.size)
        header_len, payload_len = wire.sizes(sizes)
        header = wire.decode_header(await self._stdout.readexactly(header_len))
        payload = await self._stdout.readexactly(payload_len) if payload_len else b""
        return header, payload

    async def retire(self) -> None:
        """End of input: the worker exits; killed if it does not within RETIRE_GRACE_S."""
        with contextlib.suppress(OSError, RuntimeError):
            self._stdin.close()
        try:
            await asyncio.wait_for(self.proc.wait(), RETIRE_GRACE_S)
        except TimeoutError:
            await self.kill()

    async def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()
        await self.proc.wait()

    def exit_text(self) -> str:
        code = self.proc.returncode
        if code is None:
            return "still running"
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            why = " (out of memory?)" if code == -signal.SIGKILL else ""
            return f"killed by {name}{why}"
        return f"exited with status {code}"


class EngineFailed(Exception):
    """The engine cannot load in the worker (a broken install): not retried per call."""


class ReadFailed(Exception):
    """The engine raised on one frame; the worker lives on."""


class Ocr:
    """The daemon's OCR service: one worker process, started on first use and retired when
    idle; one read at a time; at most MAX_QUEUED callers waiting; per-frame readings shared by
    concurrent callers and kept for the last CACHED_FRAMES frames."""

    def __init__(self, config: OcrConfig | None = None, *, enabled: bool | None = None) -> None:
        self.config = config or OcrConfig()
        self.enabled = (
            ocr_enabled(self.config.enabled, board_memory_mb()) if enabled is None else enabled
        )
        self.load_error: str | None = None
        self.load_ms: int | None = None
        self.version = ""
        self._worker: Worker | None = None
        self._lock = asyncio.Lock()  # one read (and one worker start) at a time
        self._idle: asyncio.TimerHandle | None = None
        self._retiring: set[asyncio.Task[None]] = set()
        # Runs by (frame seq, crop); None is the whole frame.
        self._runs: OrderedDict[tuple[int, Crop | None], asyncio.Future[Reading]] = OrderedDict()
        self._waiting = 0
        self._remembered: OrderedDict[tuple[int, Crop | None], Remembered] = OrderedDict()
        self.counts = {"reads": 0, "worker_starts": 0, "worker_failures": 0}
        self.last_failure = ""

    @property
    def loaded(self) -> bool:
        """Whether a worker with its engine is running now."""
        return self._worker is not None

    @property
    def worker_pid(self) -> int | None:
        return self._worker.pid if self._worker is not None else None

    def status(self) -> dict[str, Any]:
        """For health_check: on or off, the worker's state and what went wrong last."""
        out: dict[str, Any] = {
            "enabled": self.enabled,
            "worker": "running" if self._worker is not None else "stopped",
            **self.counts,
        }
        if self._worker is not None:
            out["worker_pid"] = self._worker.pid
        if self.version:
            out["engine"] = self.version
        if self.load_ms is not None:
            out["load_ms"] = self.load_ms
        if self.last_failure:
            out["last_failure"] = self.last_failure
        return out

    def remembered(self, seq: int, crop: Crop | None = None) -> Remembered | None:
        """The lines of one of the last REMEMBERED readings, by its frame and crop."""
        return self._remembered.get((seq, crop))

    def cached(self, seq: int, crop: Crop | None = None) -> Reading | None:
        fut = self._runs.get((seq, crop))
        if fut is None or not fut.done() or fut.cancelled() or fut.exception() is not None:
            return None
        return fut.result()

    async def read(self, frame: Frame, crop: Crop | None = None) -> Reading:
        """The OCR of `frame` (of its `crop` only, when given; a reading of the whole frame
        serves any crop): from the cache, joined to a run in progress, or a new run."""
        if not self.enabled:  # the text tools are listed unavailable; other callers ask too
            raise ToolError("ocr_disabled", "on-device OCR is off on this board ([ocr] enabled)")
        whole = self._runs.get((frame.seq, None))
        fut = whole if whole is not None else self._runs.get((frame.seq, crop))
        if fut is not None:
            self._runs.move_to_end((frame.seq, None if fut is whole else crop))
            return await asyncio.shield(fut)
        if self._waiting >= MAX_QUEUED + 1:
            raise ToolError(
                "ocr_busy",
                f"{self._waiting} OCR runs are already queued; retry shortly",
                retryable=True,
            )
        self._waiting += 1
        fut = asyncio.ensure_future(self._run(frame, crop))
        fut.add_done_callback(self._finished)
        self._runs[(frame.seq, crop)] = fut
        while len(self._runs) > CACHED_FRAMES:
            self._runs.popitem(last=False)
        return await asyncio.shield(fut)

    def _finished(self, fut: asyncio.Future[Reading]) -> None:
        self._waiting -= 1
        if fut.cancelled() or fut.exception() is not None:  # a failed run is not cached
            for key, f in list(self._runs.items()):
                if f is fut:
                    del self._runs[key]

    async def _run(self, frame: Frame, crop: Crop | None) -> Reading:
        async with self._lock:
            if self._idle is not None:
                self._idle.cancel()
            try:
                return await self._read(frame, crop)
            finally:
                if self._worker is not None:
                    loop = asyncio.get_running_loop()
                    self._idle = loop.call_later(self.config.idle_exit_s, self._retire_idle)

    async def _read(self, frame: Frame, crop: Crop | None) -> Reading:
        started = time.monotonic()
        deadline = started + self.config.read_timeout_s
        x0, y0, x1, y1 = crop or (0, 0, frame.width, frame.height)
        try:
            worker = await asyncio.wait_for(self._ready_worker(), deadline - time.monotonic())
            lines, _ = await asyncio.wait_for(
                worker.read(frame.image[y0:y1, x0:x1]), deadline - time.monotonic()
            )
        except TimeoutError:
            await self._lost(
                f"no answer within {self.config.read_timeout_s:g} s: killed", hung=True
            )
            raise self._unavailable("the OCR run did not finish in time") from None
        except (asyncio.IncompleteReadError, ConnectionError, wire.ProtocolError) as exc:
            await self._lost(repr(exc))
            raise self._unavailable("the OCR worker ended during the read") from None
        except ReadFailed as exc:
            log.warning("ocr.read_failed", seq=frame.seq, crop=crop, error=str(exc))
            raise ToolError("ocr_failed", f"the OCR engine failed on this frame: {exc}") from None
        self.counts["reads"] += 1
        shifted_lines = tuple(shifted(ln, x0, y0) for ln in lines) if crop else tuple(lines)
        ms = round((time.monotonic() - started) * 1000)
        log.info("ocr.read", seq=frame.seq, crop=crop, lines=len(lines), ms=ms)
        reading = Reading(frame, shifted_lines, ms, crop)
        remembered = Remembered(shifted_lines, frame.width, frame.height, reading.snapshot_id)
        self._remembered[(frame.seq, crop)] = remembered
        while len(self._remembered) > REMEMBERED:
            self._remembered.popitem(last=False)
        return reading

    async def _ready_worker(self) -> Worker:
        if self._worker is not None:
            return self._worker
        if self.load_error is not None:
            raise ToolError("ocr_engine_failed", self.load_error)
        started = time.monotonic()
        try:
            worker = await Worker.start(self.config.threads)
        except OSError as exc:
            raise self._unavailable(f"the OCR worker could not start: {exc}") from None
        self._worker = worker
        self.counts["worker_starts"] += 1
        try:
            await worker.ready()
        except EngineFailed as exc:
            self.load_error = f"the OCR engine failed to load: {exc}"
            log.error("ocr.load_failed", error=str(exc))
            await self._drop()
            raise ToolError("ocr_engine_failed", self.load_error) from None
        self.load_ms = round((time.monotonic() - started) * 1000)
        self.version = worker.version
        log.info("ocr.loaded", engine=worker.version, load_ms=self.load_ms, pid=worker.pid)
        return worker

    def _unavailable(self, reason: str) -> ToolError:
        return ToolError(
            "ocr_unavailable",
            f"{reason}; the next read starts a new OCR worker",
            retryable=True,
            details={"worker": self.last_failure},
        )

    async def _lost(self, why: str, *, hung: bool = False) -> None:
        """The worker failed mid-read: kill what is left of it, say how it ended. One whose
        pipes broke has ended (or is ending) by itself: it is waited for first, because
        killing it polls it, and a poll that reaps it leaves asyncio's child watcher without
        its exit status (reported as 255 instead of the signal that ended it)."""
        worker = self._worker
        self._worker = None
        if worker is None:
            return
        if not hung:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(worker.proc.wait()), RETIRE_GRACE_S)
        if worker.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                worker.proc.kill()
        await worker.proc.wait()
        self.counts["worker_failures"] += 1
        self.last_failure = f"{worker.exit_text()} ({why})"
        log.warning("ocr.worker_lost", pid=worker.pid, how=worker.exit_text(), why=why)

    async def _drop(self) -> None:
        worker, self._worker = self._worker, None
        if worker is not None:
            await worker.kill()

    def _retire_idle(self) -> None:
        """(timer) Nothing read for idle_exit_s: the worker and its memory go, and so do the
        cached readings' frames (a 1080p frame is 6 MB): their snapshot ids are stale for
        find_text and tap_text from then on, their lines stay for `since`."""
        self._idle = None
        if self._lock.locked() or self._worker is None:
            return  # a read started meanwhile; its end re-arms the timer
        self._runs = OrderedDict((k, f) for k, f in self._runs.items() if not f.done())
        worker, self._worker = self._worker, None
        log.info("ocr.worker_retired", pid=worker.pid, idle_s=self.config.idle_exit_s)
        task = asyncio.ensure_future(worker.retire())
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)

    async def close(self) -> None:
        """At daemon stop: queued runs fail, the worker is killed (a run cannot be cut)."""
        if self._idle is not None:
            self._idle.cancel()
        for fut in list(self._runs.values()):
            fut.cancel()
        await self._drop()
        if self._retiring:
            await asyncio.gather(*self._retiring, return_exceptions=True)
