"""Frames to image bytes, and the one place the screenshot JSON shape is made. Pure.

OpenCV is imported by encode() itself, on the first frame: a daemon that has not captured yet
does not hold it (the small-board memory budget)."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from daemon.frames import Frame
from daemon.screen.options import SHOT, Format

if TYPE_CHECKING:
    import numpy.typing as npt


@dataclass(frozen=True)
class Encoded:
    data: bytes
    width: int
    height: int
    fmt: Format


def output_size(
    width: int, height: int, *, max_width: int | None = None, scale: float | None = None
) -> tuple[int, int]:
    """The size after `scale` (0 < scale <= 1) and then the `max_width` cap; never upscales."""
    factor = 1.0
    if scale is not None:
        if not 0 < scale <= 1:
            raise ValueError("scale must be in (0, 1]")
        factor = scale
    if max_width is not None:
        if max_width < 1:
            raise ValueError("max_width must be >= 1")
        factor = min(factor, max_width / width)
    if factor >= 1.0:
        return width, height
    return max(1, round(width * factor)), max(1, round(height * factor))


def encode(
    frame: Frame,
    *,
    fmt: Format = SHOT.fmt,
    quality: int = SHOT.quality,
    max_width: int | None = None,
    scale: float | None = None,
) -> Encoded:
    """Encode `frame` as JPEG (at `quality`, 1..100) or PNG (OpenCV's default compression).

    MJPEG passthrough: when the frame carries the device's own JPEG (`frame.jpeg`), the format
    is jpeg and no resize is needed, those very bytes are returned untouched and `quality` is
    ignored (the device chose its own). Any resize or PNG decodes from `frame.image` instead.
    """
    if not 1 <= quality <= 100:
        raise ValueError("quality must be in 1..100")
    if fmt not in ("jpeg", "png"):
        raise ValueError(f"unknown format {fmt!r}")
    width, height = output_size(frame.width, frame.height, max_width=max_width, scale=scale)
    if fmt == "jpeg" and frame.jpeg is not None and (width, height) == (frame.width, frame.height):
        return Encoded(frame.jpeg, width, height, "jpeg")
    import cv2

    image: npt.NDArray[Any] = frame.image
    if (width, height) != (frame.width, frame.height):
        image = cv2.resize(image, (width, height), interpolation=cv2.INTER_AREA)
    if fmt == "jpeg":
        ok, buf = cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, quality])
    else:
        ok, buf = cv2.imencode(".png", image)
    if not ok:
        raise RuntimeError(f"OpenCV could not encode a {width}x{height} {fmt}")
    return Encoded(buf.tobytes(), width, height, fmt)


def iso_utc(timestamp: float) -> str:
    """ISO-8601 UTC with milliseconds, e.g. 2024-05-01T12:00:00.123Z."""
    text = datetime.fromtimestamp(timestamp, tz=UTC).isoformat(timespec="milliseconds")
    return text.replace("+00:00", "Z")


def screenshot_dict(encoded: Encoded, frame: Frame) -> dict[str, Any]:
    """The screenshot fields every screen-bearing result carries."""
    return {
        "width": encoded.width,
        "height": encoded.height,
        "format": encoded.fmt,
        "size": len(encoded.data),
        "data": base64.b64encode(encoded.data).decode("ascii"),
        "captured_at": iso_utc(frame.captured_at_utc),
    }
