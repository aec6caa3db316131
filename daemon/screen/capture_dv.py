"""Capture from an HDMI bridge (DV timings): the states it reports, and one streaming session.

The order is ustreamer's: cable (+5 V present), then the source's timings (QUERY_DV_TIMINGS),
set them (S_DV_TIMINGS), subscribe to SOURCE_CHANGE, set the format to the timings' size, map
the buffers, stream. On any source change, a stall (no frame within the watchdog's limit) or a
dequeue error the session ends and the reader opens the device again, which reads the source
afresh: frames after a change come in the new size, and nothing is ever frozen on the last
frame of a source that went away. While there is no usable signal the session reports the
state and asks again every `retry_s` (at once on a SOURCE_CHANGE).

A device takes this path when it answers VIDIOC_QUERY_DV_TIMINGS with anything but "not
supported" (ENOTTY, or ENODATA for an input without DV timings): that is what it supports, not
a setting. A bridge whose timings live on a sub-device (/dev/v4l-subdevN behind a media
controller, as on the Raspberry Pi's unicam or the RV1106) is driven there: timings, EDID,
power and events on the sub-device, format and buffers on the video node. The media pipeline's
pad formats are the board's set-up (docs/board.md), not ours.

Raw frames (UYVY, YUYV, RGB24, BGR24) are kept as the driver's bytes and converted to BGR only
when someone asks for the frame (`to_bgr`).
"""

from __future__ import annotations

import errno
import glob
import os
import select
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import structlog

from daemon.screen import edid as edid_mod
from daemon.screen import v4l2

if TYPE_CHECKING:
    from daemon.frames import Image

log = structlog.get_logger("daemon.screen.capture")

# States a capture is in, as health_check, /metrics and the stream show them. The error codes
# of screen tools are the non-streaming ones (no_device answers capture_unavailable, as ever).
STATES = ("no_device", "no_cable", "no_signal", "no_sync", "out_of_range", "streaming")
SIGNAL_STATES = ("no_cable", "no_signal", "no_sync", "out_of_range")
STATE_TEXT = {
    "no_device": "no capture device",
    "no_cable": "no cable: the HDMI bridge sees no +5 V from the target",
    "no_signal": "no signal: the target sends no video (asleep, off, or no EDID yet)",
    "no_sync": "no sync: the bridge cannot lock on the target's video",
    "out_of_range": "out of range: the target sends timings the bridge cannot take",
    "streaming": "streaming",
}
REMEDIATION = {
    "no_cable": "plug the HDMI cable into the target (and its adapter, for a phone); capture "
    "resumes by itself within 3 s",
    "no_signal": "wake the target or unlock the phone, and check that its video output is on "
    "(a phone's HDMI adapter, a computer's display settings); capture resumes by itself",
    "no_sync": "the signal is unstable: reseat the HDMI cable or try a shorter one; capture "
    "resumes by itself",
    "out_of_range": "set the target's output to 1920x1080 at 60 or 30 Hz (or 1280x720); "
    "capture resumes by itself",
}
# Pixel formats we convert, in order of preference (a TC358743 offers UYVY and RGB24).
FORMATS = ("UYVY", "YUYV", "RGB3", "BGR3")
WATCHDOG_MIN_S = 2.0  # no frame for this long (or 5 frame intervals) ends the session


def state_of(power: bool | None, query_errno: int | None) -> str:
    """The state a bridge's answers mean: POWER_PRESENT, then QUERY_DV_TIMINGS's errno (None
    when it answered timings). ValueError for an errno that is no signal state."""
    if power is False:
        return "no_cable"
    if query_errno is None:
        return "streaming"
    state = v4l2.SIGNAL_ERRNOS.get(query_errno)
    if state is None:
        raise ValueError(f"QUERY_DV_TIMINGS failed with errno {query_errno}")
    return state


@dataclass(frozen=True)
class Signal:
    """What the bridge says of its source, and when it was read."""

    state: str
    timings: v4l2.Timings | None = None
    at: float = field(default_factory=time.monotonic)

    @property
    def reason(self) -> str:
        text = STATE_TEXT[self.state]
        return f"{text} ({self.timings.label()})" if self.timings is not None else text

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"state": self.state}
        if self.timings is not None:
            out["timings"] = self.timings.to_dict()
        return out


def read_signal(fd: int) -> Signal:
    """The bridge's state now (OSError for a fault that is no signal state: ENODEV...)."""
    power = v4l2.power_present(fd)
    if power is False:
        return Signal("no_cable")
    try:
        timings = v4l2.query_dv_timings(fd)
    except OSError as e:
        if e.errno in v4l2.SIGNAL_ERRNOS:
            return Signal(state_of(power, e.errno))
        raise
    return Signal("streaming", timings)


def answers_dv(fd: int) -> bool:
    """Whether this node has DV timings (an HDMI receiver), by what it answers."""
    try:
        v4l2.query_dv_timings(fd)
    except OSError as e:
        return e.errno not in v4l2.NOT_DV_ERRNOS
    return True


def find_subdevice(configured: str) -> str | None:
    """The sub-device that holds the DV timings: the configured one, else the only one of
    /dev/v4l-subdev* that answers for them."""
    if configured:
        return configured
    found = []
    for node in sorted(glob.glob("/dev/v4l-subdev*")):
        try:
            fd = v4l2.open_node(node)
        except OSError:
            continue
        try:
            if answers_dv(fd):
                found.append(node)
        finally:
            os.close(fd)
    return found[0] if len(found) == 1 else None


@dataclass(frozen=True)
class Route:
    """Where a DV device's parts live: the video node (format, buffers) and the node with the
    timings, EDID and events (the same node, or a sub-device)."""

    video: str
    control: str


def route_of(node: str, subdevice: str) -> Route | None:
    """The DV route for `node`, or None for a device without DV timings (the OpenCV path).
    OSError when the node cannot be opened."""
    fd = v4l2.open_node(node)
    try:
        if answers_dv(fd):
            return Route(node, node)
        try:
            driver = bytes(v4l2.querycap(fd).driver).rstrip(b"\0")
        except OSError:  # no V4L2 device at all: the OpenCV path says so
            return None
    finally:
        os.close(fd)
    if driver == b"uvcvideo":  # a USB grabber: never some other device's sub-device
        return None
    sub = find_subdevice(subdevice)
    return Route(node, sub) if sub is not None else None


def ensure_edid(fd: int, want: bytes) -> bool:
    """Load `want` unless the bridge already has it; True when it was written."""
    try:
        if edid_mod.same(v4l2.get_edid(fd), want):
            return False
    except OSError:
        pass  # none set yet (some bridges answer ENODATA)
    v4l2.set_edid(fd, want)
    return True


def probe(route: Route, edid: Callable[[int], None]) -> Signal:
    """Open, load the EDID if due (`edid`), read the state, close: for a device nobody streams."""
    fd = v4l2.open_node(route.control)
    try:
        edid(fd)
        return read_signal(fd)
    finally:
        os.close(fd)


def to_bgr(data: bytes, fourcc: str, width: int, height: int, stride: int) -> Image:
    """The driver's raw frame as BGR (one conversion, OpenCV's)."""
    import cv2
    import numpy as np

    if fourcc not in FORMATS:
        raise ValueError(f"cannot convert {fourcc}")
    plane = np.frombuffer(data, np.uint8, count=stride * height).reshape(height, stride)
    if fourcc in ("YUYV", "UYVY"):
        pixels = plane[:, : width * 2].reshape(height, width, 2)
        code = cv2.COLOR_YUV2BGR_YUYV if fourcc == "YUYV" else cv2.COLOR_YUV2BGR_UYVY
        return cv2.cvtColor(pixels, code).astype(np.uint8, copy=False)
    pixels = plane[:, : width * 3].reshape(height, width, 3)
    if fourcc == "RGB3":
        return cv2.cvtColor(pixels, cv2.COLOR_RGB2BGR).astype(np.uint8, copy=False)
    return pixels.copy()  # BGR3


@dataclass(frozen=True)
class RawFrame:
    data: bytes
    fourcc: str
    width: int
    height: int
    stride: int


class Host(Protocol):
    """What a session needs of the capture that runs it (V4L2Capture)."""

    retry_s: float

    def still_wanted(self) -> bool: ...
    def dv_signal(self, signal: Signal) -> None: ...
    def dv_edid(self, fd: int) -> None: ...
    def dv_streaming(self, signal: Signal, fourcc: str, fps: float) -> None: ...
    def dv_frame(self, raw: RawFrame, buffer_ms: float) -> None: ...
    def dv_source_change(self) -> None: ...
    def dv_fault(self, kind: str, reason: str) -> None: ...


def choose_format(fd: int, width: int, height: int, preferred: str) -> v4l2.PixFormat:
    order = [preferred, *FORMATS] if preferred in FORMATS else list(FORMATS)
    last: v4l2.PixFormat | None = None
    for name in order:
        pix = v4l2.set_format(fd, width, height, v4l2.fourcc(name))
        if v4l2.fourcc_name(pix.pixelformat) in FORMATS:
            return pix
        last = pix
    got = v4l2.fourcc_name(last.pixelformat) if last is not None else "?"
    raise OSError(errno.EINVAL, f"the bridge offers {got}, none of {', '.join(FORMATS)}")


def run_session(host: Host, route: Route, preferred: str, buffers: int) -> int:
    """One open-to-close session; returns the frames delivered (0 = pause before the next)."""
    try:
        vid = v4l2.open_node(route.video)
    except OSError as e:
        host.dv_fault("open", f"cannot open {route.video}: {e.strerror}")
        return 0
    ctl = vid
    try:
        if route.control != route.video:
            ctl = v4l2.open_node(route.control)
        host.dv_edid(ctl)
        try:
            v4l2.subscribe_source_change(ctl)
        except OSError as e:  # the stall watchdog still notices a change
            log.warning("capture.no_source_change_events", node=route.control, error=e.strerror)
        signal = _wait_for_signal(host, ctl)
        if signal is None or signal.timings is None:
            return 0
        return _stream(host, route, vid, ctl, signal, preferred, buffers)
    except OSError as e:
        host.dv_fault("open", f"{route.video} failed: {e.strerror or e}")
        return 0
    finally:
        if ctl != vid:
            os.close(ctl)
        os.close(vid)


def _wait_for_signal(host: Host, ctl: int) -> Signal | None:
    """Read the state until it streams (None when capture is no longer wanted)."""
    while host.still_wanted():
        signal = read_signal(ctl)
        host.dv_signal(signal)
        if signal.state == "streaming":
            return signal
        # A SOURCE_CHANGE (POLLPRI) wakes this at once; else ask again in retry_s.
        ready = select.select([], [], [ctl], host.retry_s)[2]
        if ready:
            v4l2.dequeue_events(ctl)
    return None


def _stream(
    host: Host, route: Route, vid: int, ctl: int, signal: Signal, preferred: str, count: int
) -> int:
    assert signal.timings is not None
    timings = signal.timings
    try:
        v4l2.set_dv_timings(ctl, timings)
    except OSError as e:
        if e.errno != errno.EBUSY:  # EBUSY: already set and someone streams; S_FMT will tell
            raise
    pix = choose_format(vid, timings.width, timings.height, preferred)
    fourcc = v4l2.fourcc_name(pix.pixelformat)
    frame_w, frame_h, stride = pix.width, pix.height, pix.bytesperline or pix.width * 2
    bufs = v4l2.Buffers(vid, max(2, count))
    delivered = 0
    try:
        bufs.start()
        host.dv_streaming(signal, fourcc, timings.fps)
        limit = max(WATCHDOG_MIN_S, 5 / timings.fps if timings.fps > 0 else 0)
        poller = select.poll()
        poller.register(vid, select.POLLIN | select.POLLPRI)
        if ctl != vid:
            poller.register(ctl, select.POLLPRI)
        while host.still_wanted():
            ready = poller.poll(limit * 1000)
            if not ready:
                host.dv_fault("stalled", f"no frame from {route.video} in {limit:g} s")
                return delivered
            for fd, mask in ready:
                if mask & select.POLLPRI and v4l2.EVENT_SOURCE_CHANGE in v4l2.dequeue_events(fd):
                    log.info("capture.source_change", node=route.control, was=timings.label())
                    host.dv_source_change()
                    return max(delivered, 1)  # reopen at once, reading the source afresh
            for fd, mask in ready:
                if fd != vid:
                    continue
                if mask & (select.POLLERR | select.POLLHUP | select.POLLNVAL):
                    host.dv_fault("open", f"{route.video} failed while streaming (unplugged?)")
                    return delivered
                if mask & select.POLLIN:
                    try:
                        buf = bufs.dequeue()
                    except BlockingIOError:
                        continue
                    data = bufs.data(buf)
                    bufs.requeue(buf)
                    stamp_ms = buf.timestamp.tv_sec * 1000 + buf.timestamp.tv_usec / 1000
                    host.dv_frame(RawFrame(data, fourcc, frame_w, frame_h, stride), stamp_ms)
                    delivered += 1
        return delivered
    except OSError as e:
        host.dv_fault("open", f"{route.video} failed while streaming: {e.strerror or e}")
        return delivered
    finally:
        bufs.close()


def load_edid(setting: str) -> tuple[bytes | None, dict[str, object]]:
    """The EDID `[capture].edid` asks for and how health_check names it (None: keep the
    bridge's own). A file that is not an EDID is the default, with the error shown."""
    if setting == "keep":
        return None, {"source": "the bridge's own (edid = 'keep')"}
    if not setting:
        data = edid_mod.build()
        return data, {"source": f"default ({edid_mod.SHIPPED.name})", **edid_mod.describe(data)}
    try:
        data = edid_mod.load(setting)
    except (OSError, ValueError) as e:
        log.error("capture.edid_unusable", path=setting, error=str(e))
        data = edid_mod.build()
        error = f"{setting}: {e}; the default is loaded instead"
        return data, {"source": f"default ({edid_mod.SHIPPED.name})", "error": error}
    return data, {"source": setting, **edid_mod.describe(data)}
