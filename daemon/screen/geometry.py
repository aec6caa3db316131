"""Screen geometry: where the target's own screen is inside the captured frame, and how HID
coordinates reach it. The one place that knows the frame; everything else speaks the screen.

An iPhone's HDMI adapter sends a 1920x1080 frame with the phone's portrait picture pillarboxed
in the middle and often an overscan border on every side; Android phones mirroring to HDMI do
the same. Tools and transports work in the target's screen (its pixels, or normalized 0..1000
across it): `ScreenFrames` hands them frames cropped to the screen, and `HidMap` turns a
screen position into the HID pointer's 0..32767 for the platform (see `HID_SPAN`).

Where the rectangle comes from (`Geometry.source`):
- detected: dark bars found on the picture by `detect` (pure: a reduced frame, sanity limits,
  refined to the pixel at full resolution), re-run only when the reduced frame's edge profile
  changes (`EdgeProbe`), so it costs a small fraction of a screenshot;
- configured: `[screen] geometry = [x, y, w, h]`;
- full: `[screen] geometry = "full"`, or nothing detected yet.

The HID map is the platform's (`HID_SPAN`) unless a calibration (daemon.screen.calibrate: the
cursor seen at known HID positions) was made for the same rectangle: then the fitted one.

A dark or all-black picture (a locked phone, a dark app) says nothing about the bars: it keeps
the last good rectangle. A black status bar is not a bar: bars on both sides of an axis are
taken as one size (adapters centre the picture), and a bar on one side only counts where the
picture's line next to it is solidly lit.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

import structlog

from daemon.frames import Frame, FrameSource
from gadget import reports

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from daemon.frames import Image

    Mask = npt.NDArray[np.bool_]

log = structlog.get_logger("daemon.screen.geometry")

Source = Literal["detected", "configured", "full"]
Span = Literal["screen", "frame"]

# What the HID pointer's 0..32767 spans, per platform. iOS maps the absolute pointer
# (AssistiveTouch) across the phone's own screen; Android binds a USB touchscreen to the
# external display, so it spans the whole frame, bars included (dead zones); a desktop's
# absolute pointer spans its screen. iOS in landscape is not documented anywhere we found:
# "screen" is the guess, calibration settles it.
HID_SPAN: dict[str, Span] = {
    "ios": "screen",
    "android": "frame",
    "macos": "screen",
    "windows": "screen",
    "linux": "screen",
}

# Detection. A pixel is lit when its brightest channel is above DARK: HDMI black is 0..16
# (limited range) plus a little compression noise. A line has content when more than
# LIT_LINE of it is lit (a few bright pixels are noise, not a picture).
DARK = 40
LIT_LINE = 0.01
SOLID_EDGE = 0.5  # a picture's edge line is at least this lit (a status bar's text is not)
REDUCED_WIDTH = 240  # the reduced frame detection runs on, in pixels across
PROBE_POINTS = 64  # points per line the edge probe samples
MIN_SIDE = 0.2  # sanity: the screen spans at least this much of the frame on each axis
MAX_ASPECT = 3.0  # sanity: no screen is longer than 3:1 (a phone is about 2.2:1)
SYMMETRY_PX = 2  # bars this close are one size (a centred picture of odd size)
SNAP_WITHIN = 0.1  # a detected aspect this close to the model's is snapped to it
STICKY_PX = 2  # a re-detection within this many pixels keeps the rectangle (no jitter)


@dataclass(frozen=True)
class Rect:
    """A rectangle in frame pixels: x, y of its top-left pixel, its width and height."""

    x: int
    y: int
    w: int
    h: int

    def to_list(self) -> list[int]:
        return [self.x, self.y, self.w, self.h]

    def near(self, other: Rect, px: int) -> bool:
        return all(abs(a - b) <= px for a, b in zip(self.to_list(), other.to_list(), strict=True))


@dataclass(frozen=True)
class HidMap:
    """Screen-normalized (0..1000 across the target's screen) to the HID's normalized 0..1000
    (then 0..32767 by gadget.reports' one rounding rule), per axis: hid = offset + screen *
    scale. The identity when the pointer spans the screen."""

    x0: float = 0.0
    y0: float = 0.0
    sx: float = 1.0
    sy: float = 1.0

    def to_abs(self, x: float, y: float) -> tuple[int, int]:
        return (
            reports.norm_to_abs(self.x0 + x * self.sx),
            reports.norm_to_abs(self.y0 + y * self.sy),
        )

    def from_abs(self, x: int, y: int) -> tuple[float, float]:
        """The inverse (a mouse's last report back to where it is on the screen)."""
        return (
            (reports.abs_to_norm(x) - self.x0) / self.sx,
            (reports.abs_to_norm(y) - self.y0) / self.sy,
        )

    @property
    def identity(self) -> bool:
        return self == IDENTITY

    def to_dict(self) -> dict[str, float]:
        return {k: round(v, 6) for k, v in vars(self).items()}


IDENTITY = HidMap()


class Calibration(Protocol):
    """A measured map (daemon.screen.calibrate.Fit), for the rectangle it was measured on."""

    @property
    def rect(self) -> Rect: ...

    @property
    def frame(self) -> tuple[int, int]: ...

    @property
    def residual_px(self) -> float: ...

    def hid_map(self, rect: Rect) -> HidMap: ...


@dataclass(frozen=True)
class Geometry:
    """The target's screen inside the frame: one value, replaced whole when it changes."""

    frame_w: int
    frame_h: int
    rect: Rect
    source: Source
    detected_at: float = 0.0  # time.time() of the detection or configuration

    @property
    def orientation(self) -> Literal["portrait", "landscape"]:
        return "portrait" if self.rect.h > self.rect.w else "landscape"

    @property
    def is_full(self) -> bool:
        return self.rect == Rect(0, 0, self.frame_w, self.frame_h)

    def hid_map(self, span: Span) -> HidMap:
        """The map for a pointer spanning `span`. Pixel centres: 0 and 1000 are the first and
        last pixel, as coord_space "pixel" counts them."""
        if span == "screen" or self.is_full:
            return IDENTITY
        r, fw, fh = self.rect, max(1, self.frame_w - 1), max(1, self.frame_h - 1)
        return HidMap(
            x0=r.x * 1000 / fw,
            y0=r.y * 1000 / fh,
            sx=max(1, r.w - 1) / fw,
            sy=max(1, r.h - 1) / fh,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "frame": {"width": self.frame_w, "height": self.frame_h},
            "screen": {
                "x": self.rect.x,
                "y": self.rect.y,
                "width": self.rect.w,
                "height": self.rect.h,
            },
            "orientation": self.orientation,
            "source": self.source,
        }


def full(frame_w: int, frame_h: int, source: Source = "full") -> Geometry:
    return Geometry(frame_w, frame_h, Rect(0, 0, frame_w, frame_h), source, time.time())


def fit(frame_w: int, frame_h: int, pic_w: int, pic_h: int, overscan: float = 0.0) -> Rect:
    """Where a source that scales a pic_w x pic_h picture to fit the frame, inside an overscan
    border of `overscan` (a fraction of each axis, per side), places it: centred."""
    inner_w, inner_h = frame_w * (1 - 2 * overscan), frame_h * (1 - 2 * overscan)
    scale = min(inner_w / pic_w, inner_h / pic_h)
    w, h = max(1, round(pic_w * scale)), max(1, round(pic_h * scale))
    return Rect((frame_w - w) // 2, (frame_h - h) // 2, w, h)


# ---- detection (pure) --------------------------------------------------------------------------


def _bright(pixels: Any) -> Any:
    """Each pixel's brightest channel (numpy's max over a 3-wide axis is slow: pairwise)."""
    import numpy as np

    if pixels.ndim == 1 or pixels.shape[-1] != 3:
        return pixels
    return np.maximum(np.maximum(pixels[..., 0], pixels[..., 1]), pixels[..., 2])


def _lit(image: Image, step: int) -> Mask:
    """Lit pixels of the frame sampled every `step` pixels on both axes."""
    import cv2
    import numpy as np

    h, w = int(image.shape[0]), int(image.shape[1])
    small = cv2.resize(
        image, (max(1, w // step), max(1, h // step)), interpolation=cv2.INTER_NEAREST
    )
    lit: Mask = np.greater(_bright(small), DARK)
    return lit


def _step(width: int) -> int:
    return max(1, width // REDUCED_WIDTH)


class EdgeProbe:
    """What must change before a new detection can find another rectangle, sampled cheaply:
    the line just outside each edge of the current screen (a bar: it lights up when the
    picture grows) and the line just inside (the picture's edge: it goes dark when the
    picture shrinks or turns), PROBE_POINTS each, gathered in one indexing."""

    def __init__(self, frame_w: int, frame_h: int, r: Rect) -> None:
        import numpy as np

        lines: list[tuple[Any, Any]] = []
        xs = np.linspace(r.x, r.x + r.w - 1, num=min(PROBE_POINTS, r.w)).astype(np.intp)
        ys = np.linspace(r.y, r.y + r.h - 1, num=min(PROBE_POINTS, r.h)).astype(np.intp)
        for row in (r.y - 1, r.y + 1, r.y + r.h - 2, r.y + r.h):
            if 0 <= row < frame_h:
                lines.append((np.full_like(xs, row), xs))
        for col in (r.x - 1, r.x + 1, r.x + r.w - 2, r.x + r.w):
            if 0 <= col < frame_w:
                lines.append((ys, np.full_like(ys, col)))
        self.rows = np.concatenate([a for a, _ in lines])
        self.cols = np.concatenate([b for _, b in lines])
        self.starts = np.cumsum([0] + [len(a) for a, _ in lines[:-1]])
        self.sizes = np.array([len(a) for a, _ in lines])

    def signature(self, image: Image) -> bytes:
        """Per probed line: has content, and is solid (a picture's edge)."""
        import numpy as np

        lit = np.add.reduceat(
            (_bright(image[self.rows, self.cols]) > DARK).astype(np.int32), self.starts
        )
        lit = lit / self.sizes
        return bytes(np.packbits(np.concatenate([lit > LIT_LINE, lit >= SOLID_EDGE])))


def _extent(lines: Any) -> tuple[int, int] | None:
    import numpy as np

    idx = np.flatnonzero(lines)
    return (int(idx[0]), int(idx[-1])) if idx.size else None


def _line_lit(image: Image, axis: int, index: int, lo: int, hi: int, step: int) -> float:
    """How much of full-resolution row (axis 0) or column (axis 1) `index`, between lo and hi,
    is lit (sampled every `step` pixels along it)."""
    import numpy as np

    line = image[index, lo:hi:step] if axis == 0 else image[lo:hi:step, index]
    if line.size == 0:
        return 0.0
    return float(np.count_nonzero(_bright(line) > DARK)) / len(line)  # 1-D: fast


def _refine(image: Image, axis: int, coarse: int, step: int, lo: int, hi: int, sign: int) -> int:
    """The exact first content line near `coarse` (found every `step` lines), scanning
    inward (sign +1 from the start edge, -1 from the end edge): one band, read at once."""
    import numpy as np

    size = int(image.shape[axis])
    a, b = max(0, coarse - step), min(size - 1, coarse + step)
    along = max(1, (hi - lo) // 200)
    band = image[a : b + 1, lo:hi:along] if axis == 0 else image[lo:hi:along, a : b + 1]
    lit = (_bright(band) > DARK).astype(np.uint16)
    counts = lit.sum(axis=1 - axis)  # per line of the band
    content = np.flatnonzero(counts > LIT_LINE * max(1, lit.shape[1 - axis]))
    if content.size == 0:
        return coarse
    return a + int(content[0] if sign > 0 else content[-1])


def detect(image: Image) -> Rect | None:
    """The target's screen inside `image`, or None when the picture cannot tell (all dark,
    dark on every side, or what is lit fails the sanity limits). Found on a reduced frame,
    each edge then refined to the pixel; bars on either axis or both (see `_axis` for which
    dark sides are bars and which are the picture's own)."""
    import numpy as np

    height, width = int(image.shape[0]), int(image.shape[1])
    step = _step(width)
    lit = _lit(image, step)
    counts = lit.astype(np.uint16)  # summed per row and column (count_nonzero by axis is slow)
    rows = _extent(counts.sum(axis=1) > LIT_LINE * lit.shape[1])
    cols = _extent(counts.sum(axis=0) > LIT_LINE * lit.shape[0])
    if rows is None or cols is None:
        return None  # nothing lit: a black screen says nothing about the bars
    # Coarse edges, in full-resolution pixels.
    top, bottom = rows[0] * step, rows[1] * step
    left, right = cols[0] * step, cols[1] * step
    top = _refine(image, 0, top, step, left, right + 1, +1)
    bottom = _refine(image, 0, bottom, step, left, right + 1, -1)
    left = _refine(image, 1, left, step, top, bottom + 1, +1)
    right = _refine(image, 1, right, step, top, bottom + 1, -1)
    ys = _axis(image, 0, top, bottom, height, (left, right + 1))
    xs = _axis(image, 1, left, right, width, (top, bottom + 1))
    if ys is None or xs is None:
        return None
    (y0, y1), (x0, x1) = ys, xs
    w, h = x1 - x0 + 1, y1 - y0 + 1
    if w < MIN_SIDE * width or h < MIN_SIDE * height:
        return None
    if max(w / h, h / w) > MAX_ASPECT:
        return None
    return Rect(x0, y0, w, h)


def _axis(
    image: Image, axis: int, first: int, last: int, size: int, span: tuple[int, int]
) -> tuple[int, int] | None:
    """The screen's first and last line on one axis from the lit extent, or None when the
    picture cannot tell. A bar ends at a picture's edge, whose line is solidly lit; a dark
    side whose line is not (a black status bar with its clock, a dark app) is content."""
    along = max(1, (span[1] - span[0]) // 200)
    bar_a, bar_b = first, size - 1 - last

    def solid(line: int, inward: int) -> bool:
        # The outermost lines of a scaled picture blend with the black: look a few lines in.
        lines = (min(size - 1, max(0, line + inward * k)) for k in range(3))
        return max(_line_lit(image, axis, i, *span, along) for i in lines) >= SOLID_EDGE

    # A side without a bar is the frame's edge. Bars on both sides are one size (adapters
    # centre the picture): a wider dark side is the picture's own (a header, a status bar).
    # A bar on one side only (a picture placed at an edge) counts where the picture's line
    # next to it is solid.
    real_a = bar_a > 0 and solid(first, +1)
    real_b = bar_b > 0 and solid(last, -1)
    if bar_a > 0 and bar_b > 0:
        if not (real_a or real_b):
            return None  # dark on both sides and no picture edge: this picture cannot tell
        if abs(bar_a - bar_b) > SYMMETRY_PX:
            bar_a = bar_b = min(bar_a, bar_b)
    else:
        bar_a, bar_b = (bar_a if real_a else 0), (bar_b if real_b else 0)
    return bar_a, size - 1 - bar_b


def snap(rect: Rect, model: tuple[int, int], frame_w: int, frame_h: int) -> Rect:
    """`rect` with the model screen's aspect ratio, in the rectangle's own orientation: an
    adapter fits the picture to the frame, so the long side found is kept (it touches the
    frame's inner edges) and the short side follows, centred where it was found. A rectangle
    whose aspect is more than SNAP_WITHIN off is not the model's screen: kept as found."""
    long_side, short_side = max(model), min(model)
    ratio = short_side / long_side
    if rect.h >= rect.w:
        w = round(rect.h * ratio)
        if abs(w - rect.w) > SNAP_WITHIN * rect.w:
            return rect
        x = min(max(0, round(rect.x + rect.w / 2 - w / 2)), frame_w - w)
        return Rect(x, rect.y, w, rect.h)
    h = round(rect.w * ratio)
    if abs(h - rect.h) > SNAP_WITHIN * rect.h:
        return rect
    y = min(max(0, round(rect.y + rect.h / 2 - h / 2)), frame_h - h)
    return Rect(rect.x, y, rect.w, h)


# ---- the live value ----------------------------------------------------------------------------


def parse_setting(value: str | list[int]) -> Literal["auto", "full"] | Rect:
    """[screen] geometry: "auto", "full", or [x, y, w, h] in frame pixels."""
    if isinstance(value, str):
        if value not in ("auto", "full"):
            raise ValueError(f'geometry must be "auto", "full" or [x, y, w, h], not {value!r}')
        return "auto" if value == "auto" else "full"
    x, y, w, h = (int(v) for v in value)
    if w < 1 or h < 1:
        raise ValueError("geometry [x, y, w, h] needs a width and height of at least 1")
    return Rect(x, y, w, h)


def span_setting(value: str) -> Span | None:
    """[screen] hid_span: "platform" (None: HID_SPAN by device type), "screen" or "frame"."""
    if value == "platform":
        return None
    if value not in ("screen", "frame"):
        raise ValueError(f'hid_span must be "platform", "screen" or "frame", not {value!r}')
    return "screen" if value == "screen" else "frame"


@dataclass
class ScreenGeometry:
    """The daemon's screen geometry: configured, or detected from the frames as they pass.

    `observe(frame)` is called with each frame a tool takes; it re-detects only when the
    frame's size or its edge profile changed (or after `invalidate()`), so the common case is
    one reduced-frame profile per new frame. Thread-safe: frames may be observed from worker
    threads.
    """

    setting: Literal["auto", "full"] | Rect = "auto"
    platform: str = "ios"
    model: tuple[int, int] | None = None  # the target's screen size: snap to its aspect
    # What the HID pointer spans when the target binds it otherwise than its platform does
    # (a touchscreen on a Linux desktop spans the desktop's screen): None, HID_SPAN's.
    hid_span: Span | None = None
    current: Geometry | None = None
    detections: int = 0  # how many times detect() ran (diagnostics, tests)
    calibration: Calibration | None = None  # the measured map, for the rectangle it was made with
    _probe: EdgeProbe | None = None
    _signature: bytes | None = None
    _seq: int | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def span(self) -> Span:
        return self.hid_span or HID_SPAN.get(self.platform, "screen")

    def invalidate(self) -> None:
        """Forget what the edges looked like: the next frame is detected afresh. The capture
        calls this when the source changes (new DV timings, a re-plugged grabber)."""
        with self._lock:
            self._signature = None
            self._seq = None

    def observe(self, frame: Frame) -> Geometry:
        """The geometry for `frame` (detecting if its edges changed)."""
        with self._lock:
            cur = self.current
            if cur is not None and frame.seq == self._seq and self._fits(cur, frame):
                return cur
            new = self._for(frame, cur)
            self._seq = frame.seq
            changed = new != cur
            self.current = new
        if changed and (cur is None or new.rect != cur.rect or new.source != cur.source):
            log.info("screen.geometry", **new.to_dict())
        return new

    def unchanged(self, frame: Frame) -> Geometry | None:
        """The current geometry when `frame` cannot change it (the same frame, a fixed
        setting, or edges the probe sees unchanged: cheap, fine on the event loop), else
        None: observe() must run (in a worker thread: it may detect)."""
        with self._lock:
            cur = self.current
            if cur is None or not self._fits(cur, frame):
                return None
            if frame.seq == self._seq or self.setting != "auto":
                return cur
            if self._probe is not None and self._probe.signature(frame.image) == self._signature:
                self._seq = frame.seq
                return cur
            return None

    @staticmethod
    def _fits(g: Geometry, frame: Frame) -> bool:
        return (g.frame_w, g.frame_h) == (frame.width, frame.height)

    def _for(self, frame: Frame, cur: Geometry | None) -> Geometry:
        w, h = frame.width, frame.height
        setting = self.setting
        if setting == "full":
            return cur if cur is not None and self._fits(cur, frame) else full(w, h)
        if isinstance(setting, Rect):
            if cur is not None and self._fits(cur, frame):
                return cur
            return Geometry(w, h, _clamp(setting, w, h), "configured", time.time())
        same_size = cur is not None and self._fits(cur, frame)
        if same_size and cur is not None and self._probe is not None:
            signature = self._probe.signature(frame.image)
            if signature == self._signature:
                return cur
        self.detections += 1
        rect = detect(frame.image)
        if rect is not None and self.model is not None:
            rect = snap(rect, self.model, w, h)
        if rect is None:  # nothing to go by: keep the last good one (or the frame, at first)
            new = cur if same_size and cur is not None else full(w, h)
        elif (
            same_size
            and cur is not None
            and cur.source == "detected"
            and rect.near(cur.rect, STICKY_PX)
        ):
            new = cur
        elif rect == Rect(0, 0, w, h):
            new = full(w, h, "detected")
        else:
            new = Geometry(w, h, rect, "detected", time.time())
        if self._probe is None or new is not cur:
            self._probe = EdgeProbe(w, h, new.rect)
        self._signature = self._probe.signature(frame.image)
        return new

    def calibrated(self) -> bool:
        """Whether the calibration holds for the screen as it is now."""
        g, c = self.current, self.calibration
        return (
            g is not None
            and c is not None
            and (c.rect, c.frame) == (g.rect, (g.frame_w, g.frame_h))
        )

    def hid_map(self) -> HidMap:
        """The current screen-normalized -> HID map (identity until a frame was seen): the
        calibrated one while it holds, else the platform's."""
        g = self.current
        if g is None:
            return IDENTITY
        if self.calibrated():
            assert self.calibration is not None
            return self.calibration.hid_map(g.rect)
        return g.hid_map(self.span)

    def status(self) -> dict[str, Any]:
        """health_check's `screen` section."""
        g = self.current
        setting = self.setting.to_list() if isinstance(self.setting, Rect) else self.setting
        out: dict[str, Any] = {
            "setting": setting,
            "hid_span": self.span,
            "detections": self.detections,
        }
        c = self.calibration
        if c is not None:
            out["calibration"] = {
                "residual_px": round(c.residual_px, 2),
                "screen": c.rect.to_list(),
                "holds": self.calibrated(),
            }
        if g is None:
            return {**out, "known": False}
        hid_map = {
            **self.hid_map().to_dict(),
            "from": "calibration" if self.calibrated() else "platform",
        }
        return {**out, "known": True, **g.to_dict(), "hid_map": hid_map}


def _clamp(r: Rect, w: int, h: int) -> Rect:
    """A configured rectangle inside a frame of w x h (a smaller capture than configured)."""
    x, y = min(max(0, r.x), w - 1), min(max(0, r.y), h - 1)
    return Rect(x, y, max(1, min(r.w, w - x)), max(1, min(r.h, h - y)))


def crop(frame: Frame, g: Geometry) -> Frame:
    """The frame cut to the screen (a view: nothing is copied); the device's own JPEG is kept
    only when nothing is cut."""
    if g.is_full or (g.frame_w, g.frame_h) != (frame.width, frame.height):
        return frame
    r = g.rect
    image = frame.image[r.y : r.y + r.h, r.x : r.x + r.w]
    return Frame(image, frame.seq, frame.captured_at, frame.captured_at_utc)


class ScreenFrames:
    """A FrameSource of the target's screen: the capture's frames, cropped to the geometry."""

    def __init__(self, frames: FrameSource, geometry: ScreenGeometry) -> None:
        self.frames = frames
        self.geometry = geometry

    async def frame(self, *, newer_than: float | None = None, timeout: float = 2.0) -> Frame:
        raw = await self.frames.frame(newer_than=newer_than, timeout=timeout)
        return crop(raw, await self._geometry(raw))

    async def _geometry(self, raw: Frame) -> Geometry:
        g = self.geometry
        known = g.unchanged(raw)
        return known if known is not None else await asyncio.to_thread(g.observe, raw)

    async def full_frame(self, *, newer_than: float | None = None, timeout: float = 2.0) -> Frame:
        """The whole captured frame, bars included (the geometry still follows it)."""
        raw = await self.frames.frame(newer_than=newer_than, timeout=timeout)
        await self._geometry(raw)
        return raw

    def available(self) -> tuple[bool, str]:
        return self.frames.available()
