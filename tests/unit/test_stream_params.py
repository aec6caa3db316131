"""The stream's query parameters and the caller label, against hostile input (pure)."""

from __future__ import annotations

import math
import re
import time

import cv2
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from multidict import MultiDict

from daemon.config import ConfigError, StreamConfig, from_mapping
from daemon.errors import ToolError
from daemon.frames import Frame
from daemon.invocations import MAX_LABEL, Running, caller_label
from daemon.screen.stream import Params, StreamHub, parse_params

CONFIG = StreamConfig()
NAMES = st.sampled_from(["fps", "quality", "max_width", "token", "width", "", "FPS"])
VALUES = st.one_of(
    st.text(max_size=40),
    st.integers(-(10**30), 10**30).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
)


def test_defaults_and_bounds() -> None:
    assert parse_params(MultiDict(), CONFIG) == Params(15.0, 70, None)
    assert parse_params(MultiDict(fps="30", quality="95", max_width="16"), CONFIG) == Params(
        30.0, 95, 16
    )


@given(st.lists(st.tuples(NAMES, VALUES), max_size=5))
def test_any_query_is_params_within_bounds_or_stream_params_invalid(
    pairs: list[tuple[str, str]],
) -> None:
    try:
        p = parse_params(MultiDict(pairs), CONFIG)
    except ToolError as exc:
        assert exc.code == "stream_params_invalid" and exc.message
        return
    assert 0.5 <= p.fps <= CONFIG.max_fps and math.isfinite(p.fps)
    assert CONFIG.min_quality <= p.quality <= CONFIG.max_quality
    assert p.max_width is None or 16 <= p.max_width <= 8192


@given(st.text(max_size=500))
def test_caller_label_is_clean_and_short(header: str) -> None:
    label = caller_label("127.0.0.1", header)
    assert label.startswith("127.0.0.1")
    suffix = label.removeprefix("127.0.0.1")
    assert len(suffix) <= MAX_LABEL + 1
    assert all(c.isascii() and (c.isalnum() or c in "._:-/") for c in suffix)


def test_running_registry_enters_and_leaves() -> None:
    running = Running()
    key = running.enter("tap", "http", "127.0.0.1/lab")
    (entry,) = running.snapshot()
    assert entry["tool"] == "tap" and entry["caller"] == "127.0.0.1/lab"
    running.leave(key)
    running.leave(key)  # twice is harmless
    assert running.snapshot() == []


class JpegSource:
    """A capture that delivers MJPEG: each frame carries its own JPEG bytes."""

    def __init__(self) -> None:
        image = np.zeros((48, 64, 3), np.uint8)
        image[:, :32] = 200
        self.jpeg = cv2.imencode(".jpg", image)[1].tobytes()
        self.image = image
        self.seq = 0

    async def frame(self, *, newer_than: float | None = None, timeout: float = 2.0) -> Frame:
        self.seq += 1
        now = time.monotonic()
        return Frame(self.image, self.seq, now, time.time(), jpeg=self.jpeg)

    def available(self) -> tuple[bool, str]:
        return True, ""


async def test_a_device_jpeg_is_passed_through_untouched_and_resized_only_on_request() -> None:
    source = JpegSource()
    hub = StreamHub(source, CONFIG, 1.0)
    feed = hub.join(Params(30.0, 70, None))
    part = await feed.after(0)
    assert part is not None and part.data.split(b"\r\n\r\n", 1)[1] == source.jpeg + b"\r\n"
    assert hub.counters.passed_through == 1 and hub.counters.encoded == 0
    small = hub.join(Params(30.0, 70, 32))
    assert (await small.after(0)) is not None
    assert hub.counters.encoded == 1  # a resize is an encode
    assert hub.metrics()["feeds"] == 2
    hub.leave(feed)
    hub.leave(small)
    await hub.close()
    assert hub.metrics()["feeds"] == 0 and not hub.capturing


@pytest.mark.parametrize(
    ("stream", "message"),
    [
        ({"min_quality": 90, "max_quality": 50}, "min_quality <= default_quality <= max_quality"),
        ({"default_quality": 99}, "min_quality <= default_quality <= max_quality, got 10, 99, 95"),
        ({"default_fps": 40.0}, "default_fps 40 is above max_fps 30"),
    ],
)
def test_stream_bounds_that_contradict_each_other_are_a_config_error(
    stream: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError, match=re.escape(f"<mapping>: stream: {message}")):
        from_mapping({"stream": stream})


class SignalSource:
    """A scripted FrameSource (a fake: no HDMI bridge runs here) that answers no_signal until
    `back` is set, then frames."""

    def __init__(self) -> None:
        self.back = False
        self.asked = 0

    async def frame(self, *, newer_than: float | None = None, timeout: float = 2.0) -> Frame:
        self.asked += 1
        if not self.back:
            raise ToolError("no_signal", "no signal: the target sends no video", retryable=True)
        image = np.full((90, 160, 3), 200, np.uint8)
        return Frame(image, self.asked, time.monotonic(), time.time())

    def available(self) -> tuple[bool, str]:
        return self.back, "" if self.back else "no signal"


async def test_no_signal_is_a_picture_in_the_stream_then_frames_when_the_source_is_back() -> None:
    source = SignalSource()
    hub = StreamHub(source, CONFIG, 1.0)
    feed = hub.join(Params(30.0, 70, 640))
    part = await feed.after(0)
    assert part is not None and b"X-Signal-State: no_signal" in part.data
    jpeg = part.data.split(b"\r\n\r\n", 1)[1].removesuffix(b"\r\n")
    picture = cv2.imdecode(np.frombuffer(jpeg, np.uint8), cv2.IMREAD_COLOR)
    assert picture.shape == (360, 640, 3)
    assert picture.max() > 200 and np.median(picture) < 40  # white words on a dark frame
    assert feed.ended is None and hub.counters.no_signal_parts == 1
    source.back = True
    while True:  # the pump asks again within NO_SIGNAL_RETRY_S: a frame, not another picture
        part = await feed.after(part.seq)
        assert part is not None
        if b"X-Signal-State" not in part.data:
            break
    assert b"X-Frame-Seq: " in part.data and hub.counters.encoded == 1
    assert hub.metrics()["no_signal_parts"] >= 1
    hub.leave(feed)
    await hub.close()
