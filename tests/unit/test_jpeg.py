"""jpeg_length: where an MJPEG buffer's JPEG ends, whatever follows it in the buffer."""

from __future__ import annotations

import struct

import cv2
import numpy as np
import pytest

from daemon.screen.jpeg import jpeg_length


def picture(seed: int, width: int = 320, height: int = 180) -> np.ndarray:
    """Noise (so the scan holds many 0xFF bytes, stuffed) under a line of text."""
    rng = np.random.default_rng(seed)
    image = rng.integers(0, 256, (height, width, 3), np.uint8)
    cv2.putText(image, f"frame {seed}", (10, 90), cv2.FONT_HERSHEY_SIMPLEX, 1.5, (255,) * 3, 3)
    return image


def jpeg(image: np.ndarray, *params: int) -> bytes:
    ok, buf = cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, 90, *params])
    assert ok
    return buf.tobytes()


def with_segment(data: bytes, marker: int, payload: bytes) -> bytes:
    """`data` with a marker segment inserted right after its SOI."""
    segment = bytes((0xFF, marker)) + struct.pack(">H", len(payload) + 2) + payload
    return data[:2] + segment + data[2:]


BASELINE = jpeg(picture(1))


def test_a_whole_jpeg_is_its_own_length() -> None:
    assert BASELINE.count(b"\xff\x00") > 10  # the scan does hold stuffed bytes to step over
    assert jpeg_length(BASELINE) == len(BASELINE)


@pytest.mark.parametrize(
    "tail",
    [
        b"\x00" * 4096,  # zero padding
        jpeg(picture(2, 640, 360))[len(BASELINE) :],  # an older, longer frame's tail, EOI included
        b"\xff\xd9" * 3,
        b"\xff",
    ],
    ids=["zeros", "older-frame", "eoi-markers", "ff"],
)
def test_what_follows_the_eoi_is_not_part_of_the_jpeg(tail: bytes) -> None:
    assert jpeg_length(BASELINE + tail) == len(BASELINE)


def test_progressive_and_restart_markers_are_walked_through() -> None:
    progressive = jpeg(picture(3), cv2.IMWRITE_JPEG_PROGRESSIVE, 1)
    assert progressive.count(b"\xff\xda") > 1  # several scans, tables between them
    assert jpeg_length(progressive + b"\x00" * 100) == len(progressive)
    restarts = jpeg(picture(4), cv2.IMWRITE_JPEG_RST_INTERVAL, 4)
    assert any(bytes((0xFF, m)) in restarts for m in range(0xD0, 0xD8))
    assert jpeg_length(restarts + b"junk") == len(restarts)


def test_an_exif_thumbnail_eoi_is_not_the_end() -> None:
    thumbnail = jpeg(picture(5, 32, 18))  # an APP1 segment's payload holding a whole JPEG
    data = with_segment(BASELINE, 0xE1, b"Exif\x00\x00" + thumbnail)
    assert jpeg_length(data + b"\x00" * 10) == len(data)


def test_fill_bytes_before_a_marker_are_skipped() -> None:
    data = BASELINE[:2] + b"\xff\xff\xff" + BASELINE[2:]
    assert jpeg_length(data) == len(data)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\xff",
        b"\xff\xd8",
        BASELINE[: len(BASELINE) // 2],  # truncated in the scan
        BASELINE[:-1],  # the EOI cut in half
        BASELINE[:20],  # truncated in a segment's header
        b"\x00" * 100,  # not a JPEG
        np.zeros((10, 10, 2), np.uint8).tobytes(),  # a raw YUYV buffer
        b"\xff\xd8\xff\xe0\x00\x01",  # a segment length below its own two bytes
        b"\xff\xd8\x00\x00\xff\xd9",  # no marker where one must be
    ],
    ids=["empty", "ff", "soi", "half", "half-eoi", "header", "zeros", "yuyv", "bad-length", "junk"],
)
def test_no_whole_jpeg_is_none(data: bytes) -> None:
    assert jpeg_length(data) is None
