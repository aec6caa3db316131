"""The board's capture: a V4L2 device read through OpenCV, fresh, on demand, surviving unplugs.

Freshness. A reader thread drains the device continuously while capture runs and keeps only
the newest frame, so OpenCV's queued buffers never hand out a stale image. Each frame carries
a sequence number (ours, +1 per frame delivered, across reopenings) and its capture time: the
driver's buffer timestamp (CLOCK_MONOTONIC, the clock of time.monotonic()) when plausible, else
the moment the buffer was dequeued. `frame(newer_than=t)` returns a frame captured after t;
`frame()` returns a frame captured no earlier than one frame interval before the call (the
newest one if it is that fresh, else the next one). So no screenshot is older than its request
by more than one frame interval.

On demand. The reader starts with the first request and stops `idle_stop_s` after the last
one, closing the device: an idle daemon reads no video and spends no CPU on it.

MJPEG passthrough. With a MJPG/JPEG device, CAP_PROP_CONVERT_RGB=0 makes OpenCV's V4L2 backend
hand back the driver's buffer unconverted (cap_v4l.cpp's retrieveFrame skips imdecode and
copies the buffer's `bytesused` bytes; 4.x returns them as a 1xN array), so the reader keeps
the device's own JPEG and decodes nothing. What the kernel tier saw with OpenCV 5.0 on vivid
(which has no MJPEG): raw YUYV comes back unconverted, shaped H x W x 2. The reader takes the
bytes whatever the array's shape and serves the JPEG they begin with, cut at its EOI
(jpeg.py: `bytesused` can cover padding, or with v4l2loopback an older frame's tail); a buffer
without a whole JPEG is a corrupt frame. With a real MJPEG source (v4l2loopback carrying MJPG,
tests/kernel/guest/test_mjpeg_passthrough.py) the frames come back byte for byte as the source
wrote them. A frame is decoded
(full size, once per frame) only when someone asks for it, because Frame.image must be the
full picture (cv2.IMREAD_REDUCED_8 would be 2-5x cheaper for the detector, see
tests/bench/bench_screen.py, but Frame has no place for a reduced image); a screenshot that
needs no resize then serves the device's bytes untouched.

Faults. A missing node is `available() == (False, reason)` and an immediate, retryable
capture_unavailable error; a device that cannot be opened, or that disappears mid-stream, is
the same error as soon as the reader sees it; a device that delivers nothing is that error
when the caller's timeout ends, never a hang. The reader retries every `retry_s` while frames
are wanted, and a pyudev monitor (video4linux add/remove) wakes it at once when a device
comes back, so capture resumes by itself. Without udevd (the kernel-test guest) the monitor
listens to the kernel's own uevents instead.

HDMI bridges. A device that has DV timings (a TC358743 HDMI-to-CSI-2 bridge, vivid's HDMI
input) takes the native path of capture_dv.py instead of OpenCV: EDID, timings, the source's
state (no cable, no signal, no sync, out of range) and a reopen on every source change. Its
state is `available()`'s answer and the screen tools' error code (no_signal, ...; retryable),
read from the streaming reader when one runs, else by a quick open-query-close of the device.
`on_source_change` holds callbacks run (in the reader thread) whenever the source starts
streaming in new timings: the screen geometry is re-detected there.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyudev
import structlog

from daemon.config import CaptureConfig
from daemon.errors import ToolError
from daemon.frames import Frame
from daemon.screen import capture_dv
from daemon.screen.capture_dv import REMEDIATION as SIGNAL_REMEDIATION
from daemon.screen.capture_dv import SIGNAL_STATES, RawFrame, Route, Signal
from daemon.screen.jpeg import jpeg_length

if TYPE_CHECKING:
    from daemon.frames import Image

log = structlog.get_logger("daemon.screen.capture")

# OpenCV waits in select() up to this many seconds for each frame (default 10), and the
# reader cannot stop or reopen meanwhile. Read once, at the first wait, hence set at import.
os.environ.setdefault("OPENCV_VIDEOIO_V4L_SELECT_TIMEOUT", "1")
SELECT_TIMEOUT_S = float(os.environ["OPENCV_VIDEOIO_V4L_SELECT_TIMEOUT"])

PASSTHROUGH_FOURCCS = ("MJPG", "JPEG")
REMEDIATION = {
    "missing": "connect the capture device (HDMI grabber) or set [capture].device to its path "
    "or udev id; capture resumes by itself when it appears",
    "open": "the device exists but cannot be opened: another process may hold it, or it does "
    "not support the configured format/size (v4l2-ctl --list-formats-ext)",
    "silent": "the device is open but delivers no frames: check that the target's screen "
    "output (HDMI) is connected, awake and sending video",
    "corrupt": "the device delivered a frame that does not decode; retry",
    "stalled": "the HDMI bridge stopped delivering frames; it is being reopened, retry",
    **SIGNAL_REMEDIATION,
}


def unavailable(reason: str, kind: str, device: str) -> ToolError:
    """The error of a frame that cannot be had: the state's own code for an HDMI source's
    state (no_signal, no_sync, no_cable, out_of_range), else capture_unavailable."""
    if kind in SIGNAL_STATES:
        details = {"device": device, "state": kind, "remediation": REMEDIATION[kind]}
        return ToolError(kind, reason, retryable=True, details=details)
    return ToolError(
        "capture_unavailable",
        reason,
        retryable=True,
        details={"device": device, "reason": kind, "remediation": REMEDIATION[kind]},
    )


def state_of_kind(kind: str) -> str:
    """The capture state (capture_dv.STATES) an availability answer means."""
    if kind in SIGNAL_STATES:
        return kind
    return "streaming" if kind == "" else "no_device"  # missing, or there but not answering


def capture_time(buffer_ms: float, now: float) -> float:
    """The frame's capture time: the driver's timestamp (ms, CLOCK_MONOTONIC) if plausible.

    Drivers stamp buffers on the monotonic clock, which is time.monotonic(); one that stamps
    on another clock (or not at all) gets the dequeue time instead.
    """
    stamp = buffer_ms / 1000
    return stamp if now - 2.0 < stamp <= now else now


def fourcc_text(code: float) -> str:
    n = int(code)
    return "".join(chr((n >> (8 * i)) & 0xFF) for i in range(4))


def resolve_device(spec: str, context: pyudev.Context | None = None) -> str | None:
    """The device node for `spec`, or None when it is not there now.

    `spec` is a path (/dev/video0, /dev/v4l/by-id/...), a udev property match KEY=VALUE
    (ID_SERIAL=..., ID_PATH=...), or a bare value taken as ID_SERIAL. Among matching nodes a
    capture node is preferred (a UVC grabber also has a metadata node), then the lowest index.
    """
    if spec.startswith("/"):
        return spec if os.path.exists(spec) else None
    key, _, value = spec.partition("=") if "=" in spec else ("ID_SERIAL", "", spec)
    ctx = context or pyudev.Context()
    found = ctx.list_devices(subsystem="video4linux").match_property(key, value)

    def rank(dev: pyudev.Device) -> tuple[int, int, str]:
        caps = dev.properties.get("ID_V4L_CAPABILITIES", ":capture:")
        index = dev.attributes.get("index")
        return (":capture:" not in caps, int(index) if index else 0, dev.device_node or "")

    nodes = sorted((d for d in found if d.device_node), key=rank)
    return nodes[0].device_node if nodes else None


@dataclass(frozen=True)
class _Raw:
    """What the reader keeps of the newest frame (decoding waits until someone asks)."""

    seq: int
    captured_at: float
    captured_at_utc: float
    image: Image | None  # BGR, converted by OpenCV (YUYV and other raw formats)
    jpeg: bytes | None  # the device's own JPEG (passthrough)
    raw: RawFrame | None = None  # an HDMI bridge's bytes, converted when asked for


@dataclass(frozen=True)
class _Error:
    kind: str  # a REMEDIATION key
    reason: str
    at: float
    hard: bool  # fail waiting requests at once (vs. "silent": they wait out their timeout)


class V4L2Capture:
    """FrameSource for a V4L2 capture device (see the module docstring for the guarantees)."""

    def __init__(self, config: CaptureConfig, *, retry_s: float = 1.0) -> None:
        self.config = config
        self.retry_s = retry_s
        self._lock = threading.Lock()
        self._wake = threading.Event()  # wakes the reader out of its retry pause
        self._thread: threading.Thread | None = None
        self._closing = False
        self._wanted_until = 0.0
        self._waiters: set[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = set()
        self._latest: _Raw | None = None
        self._decoded: Frame | None = None
        self._decode_lock = threading.Lock()
        self._error: _Error | None = None
        self._seq = 0
        self._nominal_interval = 0.0
        self._measured_interval = 0.0
        self._observer: pyudev.MonitorObserver | None = None
        self._udev: pyudev.Context | None = None
        self._resolved: tuple[float, str | None] | None = None  # (when, node) for udev specs
        self._hotplug_events = 0
        # HDMI bridges (capture_dv): the route per node (None = OpenCV), the source's state,
        # whether a DV session runs now, the EDID, and who hears of a new source.
        self._routes: dict[str, Route | None] = {}
        self._signal: Signal | None = None
        self._probed: tuple[float, str, Signal] | None = None
        self._dv_active = False
        self._path: str | None = None
        self._last_timings: tuple[int, int] | None = None
        self._edid, self._edid_info = capture_dv.load_edid(config.edid)
        self._edid_loaded: set[str] = set()
        self.on_source_change: list[Callable[[dict[str, Any]], None]] = []
        # The last state known (capture_dv.STATES), read by /metrics without asking the device.
        self.state = "unknown"

    # ---- FrameSource -----------------------------------------------------------------------

    def available(self) -> tuple[bool, str]:
        """Whether the device node is there and usable now (for an HDMI bridge: whether its
        source sends a signal); starts nothing."""
        kind, reason = self._availability()
        return kind == "", reason

    def _availability(self) -> tuple[str, str]:
        """("", "") when usable, else (a REMEDIATION key, reason); updates `state`."""
        kind, reason = self._check()
        self.state = state_of_kind(kind)
        return kind, reason

    def _check(self) -> tuple[str, str]:
        node = self._node()
        if node is None:
            return "missing", f"capture device {self.config.device} not found"
        if not os.access(node, os.R_OK | os.W_OK):
            return "missing", f"no read/write permission on {node}"
        try:
            route = self._route(node)
        except OSError as e:
            return "open", f"cannot open {node}: {e.strerror}"
        if route is None:
            return "", ""
        try:
            signal = self._current_signal(route)
        except OSError as e:
            return "open", f"{route.control} does not answer: {e.strerror}"
        return ("", "") if signal.state == "streaming" else (signal.state, signal.reason)

    def capture_status(self) -> dict[str, Any]:
        """For health_check: the path the device takes, its state (with the timings), the
        EDID. Starts nothing (an HDMI bridge nobody reads is asked by open-query-close)."""
        _, reason = self._availability()
        with self._lock:
            signal, path = self._signal, self._path
        node = self._node()
        route = self._routes.get(node) if node else None
        state = self.state
        out: dict[str, Any] = {"state": state, "path": path or ("dv" if route else "uvc")}
        if route is not None:
            out["control_node"] = route.control
            if state == "streaming" and signal is not None and signal.timings is not None:
                out["timings"] = signal.timings.to_dict()
            out["edid"] = {**self._edid_info, "loaded": route.control in self._edid_loaded}
        if reason:
            out["reason"] = reason
        return out

    async def frame(self, *, newer_than: float | None = None, timeout: float = 2.0) -> Frame:
        requested = time.monotonic()
        kind, reason = self._availability()
        if kind:
            raise unavailable(reason, kind, self.config.device)
        loop = asyncio.get_running_loop()
        waiter = (loop, asyncio.Event())
        with self._lock:
            if self._closing:
                raise unavailable("capture is shut down", "missing", self.config.device)
            self._waiters.add(waiter)
            self._want_locked(requested)
        try:
            raw = await self._wait(waiter[1], requested, newer_than, timeout)
        finally:
            with self._lock:
                self._waiters.discard(waiter)
                self._want_locked(time.monotonic())
        return await self._materialize(raw)

    # ---- control and introspection ----------------------------------------------------------

    @property
    def running(self) -> bool:
        """True while the reader thread holds (or is trying to open) the device."""
        with self._lock:
            return self._thread is not None

    @property
    def frame_interval(self) -> float:
        """Seconds between frames: what the driver promised, else measured (0 = unknown)."""
        with self._lock:
            return self._interval_locked()

    @property
    def hotplug_events(self) -> int:
        """video4linux add/remove events seen since the first request (diagnostics)."""
        with self._lock:
            return self._hotplug_events

    def close(self) -> None:
        """Stop the reader (closing the device) and the hotplug monitor. Blocks while a read
        finishes (up to OpenCV's select timeout, 1 s)."""
        with self._lock:
            self._closing = True
            thread, observer = self._thread, self._observer
            self._observer = None
        self._wake.set()
        if thread is not None:
            thread.join(timeout=5.0)
        if observer is not None:
            observer.stop()

    async def aclose(self) -> None:
        await asyncio.to_thread(self.close)

    # ---- waiting (event loop side) ----------------------------------------------------------

    async def _wait(
        self, event: asyncio.Event, requested: float, newer_than: float | None, timeout: float
    ) -> _Raw:
        deadline = requested + timeout
        while True:
            event.clear()  # before looking, so a frame published meanwhile is not missed
            with self._lock:
                raw, err = self._latest, self._error
                floor = requested - self._interval_locked() if newer_than is None else newer_than
            if raw is not None and raw.captured_at > floor:
                return raw
            fresh_err = err if err is not None and err.at >= requested else None
            if err is not None and err.kind in SIGNAL_STATES and self._signal_is(err.kind):
                fresh_err = err  # the source is in that state now: answer it, do not wait
            if fresh_err is not None and fresh_err.hard:
                raise unavailable(fresh_err.reason, fresh_err.kind, self.config.device)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                why = fresh_err.reason if fresh_err else f"no frame within {timeout:g} s"
                raise unavailable(why, "silent", self.config.device)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), remaining)

    async def _materialize(self, raw: _Raw) -> Frame:
        if raw.image is not None:
            return Frame(raw.image, raw.seq, raw.captured_at, raw.captured_at_utc)
        if raw.raw is not None:
            return await asyncio.to_thread(self._convert, raw, raw.raw)
        return await asyncio.to_thread(self._decode, raw)

    def _convert(self, raw: _Raw, data: RawFrame) -> Frame:
        with self._decode_lock:  # one conversion per frame, however many ask at once
            if self._decoded is not None and self._decoded.seq == raw.seq:
                return self._decoded
            image = capture_dv.to_bgr(data.data, data.fourcc, data.width, data.height, data.stride)
            frame = Frame(image, raw.seq, raw.captured_at, raw.captured_at_utc)
            self._decoded = frame
            return frame

    def _decode(self, raw: _Raw) -> Frame:
        import cv2
        import numpy as np

        with self._decode_lock:  # one decode per frame, however many ask at once
            if self._decoded is not None and self._decoded.seq == raw.seq:
                return self._decoded
            assert raw.jpeg is not None
            # The JPEG alone: a buffer may carry padding or an older frame's tail after it.
            length = jpeg_length(raw.jpeg)
            jpeg = raw.jpeg if length in (None, len(raw.jpeg)) else raw.jpeg[:length]
            image = None
            if length is not None:  # a whole JPEG (a truncated one would decode half grey)
                image = cv2.imdecode(np.frombuffer(jpeg, np.uint8), cv2.IMREAD_COLOR)
            if image is None:
                raise unavailable("the device sent a corrupt JPEG", "corrupt", self.config.device)
            frame = Frame(
                image.astype(np.uint8, copy=False),
                raw.seq,
                raw.captured_at,
                raw.captured_at_utc,
                jpeg=jpeg,
            )
            self._decoded = frame
            return frame

    # ---- shared state (callers hold self._lock) ---------------------------------------------

    def _interval_locked(self) -> float:
        # The driver's promise, when it made one, keeps the freshness floor from stretching
        # with a stall; a slower-than-promised device only makes requests wait for a new frame.
        return self._nominal_interval or self._measured_interval

    def _want_locked(self, now: float) -> None:
        self._wanted_until = max(self._wanted_until, now + self.config.idle_stop_s)
        if self._thread is None:
            self._thread = threading.Thread(target=self._reader, name="v4l2-capture", daemon=True)
            self._thread.start()
        self._wake.set()  # a new request retries a failing device at once

    def _still_wanted(self) -> bool:
        with self._lock:
            return not self._closing and (
                bool(self._waiters) or time.monotonic() < self._wanted_until
            )

    def _fail(self, kind: str, reason: str, *, hard: bool, quiet: bool = False) -> None:
        with self._lock:
            self._error = _Error(kind, reason, time.monotonic(), hard)
            self._latest = None  # never serve the last frame of a source that went away
            waiters = list(self._waiters)
        if not quiet:
            log.warning("capture.fault", device=self.config.device, kind=kind, reason=reason)
        self._notify(waiters)

    @staticmethod
    def _notify(waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]]) -> None:
        for loop, event in waiters:
            with contextlib.suppress(RuntimeError):  # that loop has closed
                loop.call_soon_threadsafe(event.set)

    # ---- device resolution and hotplug ------------------------------------------------------

    def _node(self) -> str | None:
        spec = self.config.device
        if spec.startswith("/"):
            return resolve_device(spec)
        now = time.monotonic()
        with self._lock:
            cached = self._resolved
        if cached is not None and now - cached[0] < 2.0:
            return cached[1]
        if self._udev is None:
            self._udev = pyudev.Context()
        node = resolve_device(spec, self._udev)
        with self._lock:
            self._resolved = (now, node)
        return node

    def _start_monitor(self) -> None:
        if self._observer is not None:
            return
        # Events "udev" come after udevd made the by-id links; with no udevd there are none,
        # so listen to the kernel's own uevents.
        source = "udev" if os.path.exists("/run/udev/control") else "kernel"
        try:
            monitor = pyudev.Monitor.from_netlink(self._udev or pyudev.Context(), source=source)
            monitor.filter_by("video4linux")
            observer = pyudev.MonitorObserver(monitor, callback=self._on_uevent, daemon=True)
            observer.start()
        except OSError as e:
            log.warning("capture.no_hotplug_monitor", error=str(e))
            return
        with self._lock:
            self._observer = observer

    def _on_uevent(self, device: pyudev.Device) -> None:
        log.info("capture.hotplug", action=device.action, node=device.device_node)
        with self._lock:
            self._resolved = None
            self._hotplug_events += 1
            self._routes.clear()  # a new device may be another kind; its EDID is gone
            self._edid_loaded.clear()
            self._probed = None
        self._wake.set()

    # ---- HDMI bridges (capture_dv) ----------------------------------------------------------

    def _route(self, node: str) -> Route | None:
        """The DV route of `node` (None: the OpenCV path), found once per device."""
        with self._lock:
            if node in self._routes:
                return self._routes[node]
        route = capture_dv.route_of(node, self.config.subdevice)
        with self._lock:
            self._routes[node] = route
        if route is not None:
            log.info("capture.dv_device", node=node, control=route.control)
        return route

    def _current_signal(self, route: Route) -> Signal:
        """The source's state: the streaming reader's when one runs, else asked (kept 0.2 s)."""
        now = time.monotonic()
        with self._lock:
            if self._dv_active and self._signal is not None:
                return self._signal  # (None while a session opens: asked below)
            probed = self._probed
        if probed is not None and probed[1] == route.control and now - probed[0] < 0.2:
            return probed[2]
        signal = capture_dv.probe(route, lambda fd: self._load_edid(route.control, fd))
        with self._lock:
            self._probed = (now, route.control, signal)
            if not self._dv_active:
                self._signal = signal
        return signal

    def _signal_is(self, state: str) -> bool:
        with self._lock:
            return self._dv_active and self._signal is not None and self._signal.state == state

    def _load_edid(self, control: str, fd: int) -> None:
        """Our EDID into the bridge, once per device appearance (so an EDID someone clears
        later stays cleared until the device comes back)."""
        with self._lock:
            if self._edid is None or control in self._edid_loaded:
                return
        try:
            wrote = capture_dv.ensure_edid(fd, self._edid)
        except OSError as e:  # EBUSY: another process streams from it; try at the next open
            log.warning("capture.edid_not_loaded", node=control, error=e.strerror)
            return
        with self._lock:
            self._edid_loaded.add(control)
        log.info("capture.edid", node=control, written=wrote, **self._edid_info)

    # capture_dv.Host: what a DV session tells the capture (from the reader thread)

    def still_wanted(self) -> bool:
        return self._still_wanted()

    def dv_edid(self, fd: int) -> None:
        node = self._node()
        route = self._routes.get(node) if node else None
        if route is not None:
            self._load_edid(route.control, fd)

    def dv_signal(self, signal: Signal) -> None:
        with self._lock:
            changed = self._signal is None or self._signal.state != signal.state
            self._signal = signal
        self.state = signal.state
        if signal.state != "streaming":
            if changed:
                log.warning("capture.signal", state=signal.state, reason=signal.reason)
            self._fail(signal.state, signal.reason, hard=True, quiet=True)

    def dv_streaming(self, signal: Signal, fourcc: str, fps: float) -> None:
        timings = signal.timings
        assert timings is not None
        self.state = "streaming"
        with self._lock:
            self._signal = signal
            self._nominal_interval = 1.0 / fps if fps > 0 else 0.0
            self._measured_interval = 0.0
            size = (timings.width, timings.height)
            new = self._last_timings != size
            self._last_timings = size
            hooks = list(self.on_source_change)
        log.info(
            "capture.opened",
            node=self.config.device,
            path="dv",
            fourcc=fourcc,
            timings=timings.label(),
        )
        if new:
            info = {"width": timings.width, "height": timings.height, **timings.to_dict()}
            for hook in hooks:
                try:
                    hook(info)
                except Exception:  # a listener's bug must not stop capture
                    log.exception("capture.source_change_hook_failed")

    def dv_frame(self, raw: RawFrame, buffer_ms: float) -> None:
        now = time.monotonic()
        captured_at = capture_time(buffer_ms, now)
        utc = time.time() - (now - captured_at)
        with self._lock:
            prev = self._latest.captured_at if self._latest is not None else None
        step = captured_at - prev if prev is not None else 0.0
        self._publish(_Raw(self._seq + 1, captured_at, utc, None, None, raw), step)

    def dv_source_change(self) -> None:
        with self._lock:  # the frames of the source before the change are not served again
            self._latest, self._signal, self._probed = None, None, None

    def dv_fault(self, kind: str, reason: str) -> None:
        with self._lock:  # a fault ends the session: its last state is no longer the answer
            self._dv_active, self._probed = False, None
        self._fail(kind, reason, hard=kind != "stalled")

    # ---- the reader thread ------------------------------------------------------------------

    def _reader(self) -> None:
        log.info("capture.reader_start", device=self.config.device)
        self._start_monitor()
        delivered = 0
        while self._continue(delivered):
            node = self._node()
            if node is None:
                self._fail("missing", f"capture device {self.config.device} not found", hard=True)
                delivered = 0
                continue
            try:
                route = self._route(node)
            except OSError as e:
                self._fail("open", f"cannot open {node}: {e.strerror}", hard=True)
                delivered = 0
                continue
            if route is not None:
                delivered = self._dv_session(route)
                continue
            with self._lock:
                self._path = "uvc"
            cap = self._open(node)
            if cap is None:
                delivered = 0
                continue
            try:
                delivered = self._stream(cap, node)
            finally:
                cap.release()  # before any decision to exit, so a successor can open it
                log.info("capture.closed", node=node, frames=delivered)
        log.info("capture.reader_stop", device=self.config.device)

    def _dv_session(self, route: Route) -> int:
        with self._lock:
            # What the last session knew is not this one's answer until it reads the source.
            self._dv_active, self._path, self._signal = True, "dv", None
            self._probed = None
        try:
            return capture_dv.run_session(self, route, self.config.fourcc, self.config.buffers)
        finally:
            with self._lock:
                self._dv_active = False

    def _continue(self, delivered: int) -> bool:
        """Whether to (re)open; pauses first unless the last session delivered frames."""
        if delivered == 0 and self._still_wanted():
            self._wake.wait(self.retry_s)  # returns at once when a request or uevent set it
            self._wake.clear()
        with self._lock:
            wanted = not self._closing and (
                bool(self._waiters) or time.monotonic() < self._wanted_until
            )
            if not wanted:
                self._thread = None  # decided under the lock: the next request starts a reader
            return wanted

    def _open(self, node: str) -> Any:
        import cv2  # here, in the reader thread: a daemon that never captured does not hold it

        c = self.config
        cap = cv2.VideoCapture(node, cv2.CAP_V4L2)
        if not cap.isOpened():
            cap.release()
            self._fail("open", f"cannot open {node} with V4L2", hard=True)
            return None
        # The driver's buffers: the reader keeps only the newest frame, and each buffer of a raw
        # format holds a whole one (6 MB at 1920x1080): OpenCV's default of four held 25 MB of
        # the board VM's 119 MB while a stream ran.
        cap.set(cv2.CAP_PROP_BUFFERSIZE, c.buffers)
        # FOURCC first: each of these restarts OpenCV's buffers, the size needs both set.
        cap.set(cv2.CAP_PROP_FOURCC, cv2.VideoWriter.fourcc(*c.fourcc))
        cap.set(cv2.CAP_PROP_FRAME_WIDTH, c.width)
        cap.set(cv2.CAP_PROP_FRAME_HEIGHT, c.height)
        cap.set(cv2.CAP_PROP_FPS, c.fps)
        fourcc = fourcc_text(cap.get(cv2.CAP_PROP_FOURCC))
        passthrough = fourcc in PASSTHROUGH_FOURCCS
        if passthrough:
            cap.set(cv2.CAP_PROP_CONVERT_RGB, 0)
        fps = cap.get(cv2.CAP_PROP_FPS)
        with self._lock:
            self._nominal_interval = 1.0 / fps if fps > 0 else 0.0
            self._measured_interval = 0.0
        log.info(
            "capture.opened",
            node=node,
            fourcc=fourcc,
            width=int(cap.get(cv2.CAP_PROP_FRAME_WIDTH)),
            height=int(cap.get(cv2.CAP_PROP_FRAME_HEIGHT)),
            fps=fps,
            passthrough=passthrough,
            asked=f"{c.fourcc} {c.width}x{c.height}@{c.fps:g}",
        )
        return cap

    def _stream(self, cap: Any, node: str) -> int:
        """Drain frames while wanted; returns how many were delivered before it stopped."""
        import cv2

        delivered = 0
        passthrough = cap.get(cv2.CAP_PROP_CONVERT_RGB) == 0
        prev_at: float | None = None
        while self._still_wanted():
            began = time.monotonic()
            if not cap.grab():
                # OpenCV says only "no frame": a wait that ran into its select() timeout is a
                # silent source (it may recover), a quick failure a dead or vanished device.
                silent = time.monotonic() - began >= SELECT_TIMEOUT_S / 2
                if not os.path.exists(node):
                    self._fail("missing", f"{node} disappeared", hard=True)
                elif silent:
                    self._fail("silent", f"{node} delivered no frame", hard=False)
                else:
                    self._fail("open", f"{node} failed while streaming (unplugged?)", hard=True)
                return delivered
            now = time.monotonic()
            ok, data = cap.retrieve()
            if not ok or data is None:
                continue
            captured_at = capture_time(cap.get(cv2.CAP_PROP_POS_MSEC), now)
            utc = time.time() - (now - captured_at)
            if passthrough:  # the buffer's bytes, whatever shape OpenCV gives the array
                raw = _Raw(self._seq + 1, captured_at, utc, None, data.tobytes())
            else:
                raw = _Raw(self._seq + 1, captured_at, utc, data, None)
            step = captured_at - prev_at if prev_at is not None else 0.0
            prev_at = captured_at
            self._publish(raw, step)
            delivered += 1
        return delivered

    def _publish(self, raw: _Raw, step: float) -> None:
        with self._lock:
            if step > 0:
                m = self._measured_interval
                self._measured_interval = step if m == 0 else 0.8 * m + 0.2 * step
            self._seq = raw.seq
            self._latest = raw
            self._error = None
            waiters = list(self._waiters)
        self._notify(waiters)
