"""Encoding frames: JPEG/PNG, resizing, MJPEG passthrough and the screenshot fields."""

from __future__ import annotations

import base64
from datetime import datetime

import cv2
import numpy as np
import pytest

from daemon.frames import Frame
from daemon.screen.encode import encode, output_size, screenshot_dict


def picture(w: int = 640, h: int = 400) -> np.ndarray:
    """Something with edges and colour, so JPEG quality matters."""
    image = np.random.default_rng(7).integers(0, 256, (h, w, 3), dtype=np.uint8)
    cv2.rectangle(image, (50, 50), (w // 2, h // 2), (20, 200, 40), -1)
    return image


def frame(image: np.ndarray, jpeg: bytes | None = None) -> Frame:
    return Frame(image, seq=1, captured_at=1.0, captured_at_utc=1_700_000_000.25, jpeg=jpeg)


def decode(data: bytes) -> np.ndarray:
    out = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    assert out is not None
    return out


def test_jpeg_round_trips_and_quality_matters() -> None:
    f = frame(picture())
    low, high = encode(f, quality=20), encode(f, quality=95)
    assert low.data[:2] == b"\xff\xd8" and low.fmt == "jpeg"
    assert (low.width, low.height) == (640, 400)
    assert decode(high.data).shape == (400, 640, 3)
    assert len(low.data) < len(high.data)


def test_png_is_lossless() -> None:
    image = picture()
    out = encode(frame(image), fmt="png")
    assert out.data[:8] == b"\x89PNG\r\n\x1a\n" and out.fmt == "png"
    assert np.array_equal(decode(out.data), image)


def test_max_width_and_scale_shrink_but_never_grow() -> None:
    f = frame(picture(1600, 1000))
    assert decode(encode(f, max_width=800).data).shape == (500, 800, 3)
    assert decode(encode(f, scale=0.25).data).shape == (250, 400, 3)
    both = encode(f, scale=0.5, max_width=400)  # the smaller of the two wins
    assert (both.width, both.height) == (400, 250)
    assert output_size(1600, 1000, max_width=4000) == (1600, 1000)
    assert output_size(3, 3, scale=0.01) == (1, 1)


@pytest.mark.parametrize(
    "kwargs", [{"scale": 0.0}, {"scale": 1.5}, {"quality": 0}, {"quality": 101}, {"fmt": "gif"}]
)
def test_bad_arguments_are_rejected(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        encode(frame(picture()), **kwargs)  # type: ignore[arg-type]


def test_mjpeg_passthrough_returns_the_same_bytes_object() -> None:
    image = picture()
    device_jpeg = cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, 60])[1].tobytes()
    f = frame(image, jpeg=device_jpeg)
    for quality in (80, 10):  # the device's quality stands
        out = encode(f, quality=quality)
        assert out.data is device_jpeg
        assert (out.width, out.height, out.fmt) == (640, 400, "jpeg")
    assert encode(f, max_width=640).data is device_jpeg  # no resize needed: still passthrough


def test_resizing_or_png_re_encodes_a_passthrough_frame() -> None:
    image = picture()
    device_jpeg = cv2.imencode(".jpg", image)[1].tobytes()
    f = frame(image, jpeg=device_jpeg)
    small = encode(f, max_width=320)
    assert small.data != device_jpeg and decode(small.data).shape == (200, 320, 3)
    assert encode(f, fmt="png").data[:4] == b"\x89PNG"


def test_screenshot_dict_fields() -> None:
    f = frame(picture())
    enc = encode(f)
    shot = screenshot_dict(enc, f)
    assert set(shot) == {"width", "height", "format", "size", "data", "captured_at"}
    assert (shot["width"], shot["height"], shot["format"]) == (640, 400, "jpeg")
    assert base64.b64decode(shot["data"]) == enc.data
    assert shot["size"] == len(enc.data)
    assert shot["captured_at"] == "2023-11-14T22:13:20.250Z"
    assert datetime.fromisoformat(shot["captured_at"]).timestamp() == 1_700_000_000.25
