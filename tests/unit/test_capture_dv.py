"""daemon/screen/capture_dv.py's pure parts: the state a bridge's answers mean, the error each
state gives the screen tools, the EDID setting, and the raw-frame conversion."""

from __future__ import annotations

import errno
from pathlib import Path

import cv2
import numpy as np
import pytest

from daemon.screen import capture_dv, edid
from daemon.screen.capture import REMEDIATION, unavailable


@pytest.mark.parametrize(
    ("power", "err", "state"),
    [
        (False, None, "no_cable"),
        (False, errno.ENOLINK, "no_cable"),  # no cable wins: it explains the missing signal
        (True, errno.ENOLINK, "no_signal"),
        (None, errno.ENOLINK, "no_signal"),  # a bridge without the control
        (True, errno.ENOLCK, "no_sync"),
        (True, errno.ERANGE, "out_of_range"),
        (True, None, "streaming"),
        (None, None, "streaming"),
    ],
)
def test_state_of_a_bridges_answers(power: bool | None, err: int | None, state: str) -> None:
    assert capture_dv.state_of(power, err) == state


def test_an_errno_that_is_no_state_is_not_guessed() -> None:
    with pytest.raises(ValueError, match="errno"):
        capture_dv.state_of(True, errno.ENODEV)


@pytest.mark.parametrize("state", capture_dv.SIGNAL_STATES)
def test_each_signal_state_is_its_own_retryable_code_with_a_remediation(state: str) -> None:
    e = unavailable(capture_dv.STATE_TEXT[state], state, "/dev/video0")
    assert e.code == state and e.retryable
    assert e.details == {
        "device": "/dev/video0",
        "state": state,
        "remediation": capture_dv.REMEDIATION[state],
    }
    assert REMEDIATION[state] == capture_dv.REMEDIATION[state]


def test_no_device_stays_capture_unavailable() -> None:
    e = unavailable("gone", "missing", "/dev/video0")
    assert e.code == "capture_unavailable" and e.details is not None
    assert e.details["reason"] == "missing"


def test_signal_reason_names_the_timings() -> None:
    assert capture_dv.Signal("no_sync").reason.startswith("no sync")
    assert capture_dv.Signal("no_sync").to_dict() == {"state": "no_sync"}


def test_edid_setting(tmp_path: Path) -> None:
    data, info = capture_dv.load_edid("")
    assert data == edid.build() and info["source"] == "default (edid-1080p.hex)"
    assert info["underscan"] is True
    assert capture_dv.load_edid("keep")[0] is None
    own = tmp_path / "mine.bin"
    own.write_bytes(edid.build(name="Mine"))
    data, info = capture_dv.load_edid(str(own))
    assert data == own.read_bytes() and info["source"] == str(own) and info["name"] == "Mine"


def test_an_unusable_edid_file_falls_back_to_the_default_and_says_so(tmp_path: Path) -> None:
    bad = tmp_path / "bad.bin"
    bad.write_bytes(b"\0" * 128)
    data, info = capture_dv.load_edid(str(bad))
    assert data == edid.build()
    assert "header" in str(info["error"])
    data, info = capture_dv.load_edid(str(tmp_path / "missing.bin"))
    assert data == edid.build() and "No such file" in str(info["error"])


def _bgr_picture(w: int, h: int) -> np.ndarray:
    rng = np.random.default_rng(7)
    # Flat 2x1 blocks keep 4:2:2 chroma subsampling exact enough to compare.
    return np.repeat(rng.integers(0, 256, (h, w // 2, 3), dtype=np.uint8), 2, axis=1)


@pytest.mark.parametrize("fourcc", ["RGB3", "BGR3"])
def test_rgb_frames_convert_exactly_with_a_padded_stride(fourcc: str) -> None:
    w, h, stride = 6, 4, 6 * 3 + 2
    bgr = _bgr_picture(w, h)
    pix = bgr[:, :, ::-1] if fourcc == "RGB3" else bgr
    rows = np.zeros((h, stride), np.uint8)
    rows[:, : w * 3] = pix.reshape(h, w * 3)
    out = capture_dv.to_bgr(rows.tobytes(), fourcc, w, h, stride)
    assert out.shape == (h, w, 3) and np.array_equal(out, bgr)


@pytest.mark.parametrize("fourcc", ["YUYV", "UYVY"])
def test_yuv_frames_convert_like_opencv(fourcc: str) -> None:
    w, h = 8, 4
    bgr = _bgr_picture(w, h)
    yuv = cv2.cvtColor(bgr, cv2.COLOR_BGR2YUV_YUYV)
    if fourcc == "UYVY":  # swap each (Y, C) pair into (C, Y)
        yuv = yuv.reshape(h, w, 2)[:, :, ::-1]
    out = capture_dv.to_bgr(np.ascontiguousarray(yuv).tobytes(), fourcc, w, h, w * 2)
    assert out.shape == (h, w, 3)
    assert np.abs(out.astype(int) - bgr.astype(int)).max() <= 12


def test_an_unknown_format_is_refused() -> None:
    with pytest.raises(ValueError, match="MJPG"):
        capture_dv.to_bgr(b"\0" * 16, "MJPG", 2, 2, 4)


def test_a_node_without_dv_timings_or_v4l2_takes_the_opencv_path() -> None:
    # /dev/null answers ENOTTY to every ioctl: no DV timings, no V4L2 at all.
    assert capture_dv.route_of("/dev/null", "") is None


def test_a_configured_subdevice_is_taken_as_given() -> None:
    assert capture_dv.find_subdevice("/dev/v4l-subdev3") == "/dev/v4l-subdev3"
