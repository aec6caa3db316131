"""V4L2Capture's parts that run without a capture device (the kernel tier has the real one)."""

from __future__ import annotations

import cv2
import pytest

from daemon.config import CaptureConfig
from daemon.errors import ToolError
from daemon.screen.capture import V4L2Capture, capture_time, fourcc_text, resolve_device


def test_driver_timestamps_are_used_only_when_plausible() -> None:
    assert capture_time(99_950.0, now=100.0) == 99.95  # 50 ms ago on the monotonic clock
    assert capture_time(0.0, now=100.0) == 100.0  # no timestamp
    assert capture_time(1.7e12, now=100.0) == 100.0  # a wall-clock stamp
    assert capture_time(100_500.0, now=100.0) == 100.0  # in the future


def test_fourcc_text() -> None:
    assert fourcc_text(cv2.VideoWriter.fourcc(*"MJPG")) == "MJPG"
    assert fourcc_text(float(cv2.VideoWriter.fourcc(*"YUYV"))) == "YUYV"


def test_device_specs_that_match_nothing_resolve_to_none() -> None:
    assert resolve_device("/dev/video-not-here") is None
    assert resolve_device("ID_SERIAL=no-such-grabber") is None
    assert resolve_device("no-such-grabber") is None  # a bare value is an ID_SERIAL
    assert resolve_device("/dev/null") == "/dev/null"


async def test_a_missing_device_is_unavailable_at_once_and_starts_nothing() -> None:
    cap = V4L2Capture(CaptureConfig(device="/dev/video-not-here"))
    try:
        assert cap.available() == (False, "capture device /dev/video-not-here not found")
        with pytest.raises(ToolError) as e:
            await cap.frame(timeout=30)
        assert e.value.code == "capture_unavailable" and e.value.retryable
        assert e.value.details is not None
        assert e.value.details["reason"] == "missing"
        assert "remediation" in e.value.details
        assert not cap.running
    finally:
        cap.close()


async def test_a_node_that_is_no_capture_device_fails_fast_not_at_the_timeout() -> None:
    # /dev/null exists, so the reader starts and OpenCV's V4L2 open fails: a hard error that
    # ends the wait at once instead of after the 60 s timeout.
    cap = V4L2Capture(CaptureConfig(device="/dev/null", idle_stop_s=0.1))
    try:
        assert cap.available() == (True, "")
        with pytest.raises(ToolError) as e:
            await cap.frame(timeout=60)
        assert e.value.code == "capture_unavailable"
        assert e.value.details is not None and e.value.details["reason"] == "open"
        assert "cannot open /dev/null" in e.value.message
    finally:
        cap.close()
    assert not cap.running
