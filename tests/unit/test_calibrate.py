"""Pointer calibration's pure part: the cursor found in frames (an arrow's tip, a round
cursor's centre), the fitted map and its residual, and the map taps then use."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest

from daemon.screen import calibrate
from daemon.screen.geometry import Rect, ScreenGeometry
from tests.unit.test_geometry import FH, FW, PORTRAIT_OVERSCAN, frame, framed, picture

ARROW = np.array([(0, 0), (0, 34), (9, 26), (15, 40), (21, 37), (15, 24), (27, 24)])


def with_cursor(image: np.ndarray, at: tuple[float, float], round_cursor: bool) -> np.ndarray:
    img = image.copy()
    x, y = round(at[0]), round(at[1])
    if round_cursor:  # AssistiveTouch: a grey disc, hot spot in the middle
        cv2.circle(img, (x, y), 14, (90, 90, 90), -1)
    else:  # an arrow, tip at the hot spot
        pts = (ARROW * 0.6 + (x, y)).astype(np.int32)
        cv2.fillPoly(img, [pts], (255, 255, 255))
        cv2.polylines(img, [pts], True, (0, 0, 0), 1)
    return img


def truth(h: tuple[float, float]) -> tuple[float, float]:
    """Where a made-up target puts the cursor for HID position h: across the screen rect."""
    r = PORTRAIT_OVERSCAN
    return r.x + h[0] / 1000 * (r.w - 1), r.y + h[1] / 1000 * (r.h - 1)


@pytest.mark.parametrize("round_cursor", [False, True], ids=["arrow", "round"])
def test_the_fit_recovers_the_map_within_a_pixel(round_cursor: bool) -> None:
    screen = framed(picture(1170, 2532), PORTRAIT_OVERSCAN)
    images = [with_cursor(screen, truth(p), round_cursor) for p in calibrate.POINTS]
    seen = calibrate.find_cursors(images)
    assert all(s is not None for s in seen)
    for s, p in zip(seen, calibrate.POINTS, strict=True):
        assert s is not None
        assert np.hypot(s[0] - truth(p)[0], s[1] - truth(p)[1]) <= 1.0, (s, truth(p))
    found = [s for s in seen if s is not None]
    fit = calibrate.fit(calibrate.POINTS, found, PORTRAIT_OVERSCAN, (FW, FH))
    assert fit.residual_px <= 1.0
    # The map taps use: a screen position goes to the HID position that puts the cursor there.
    m = fit.hid_map(PORTRAIT_OVERSCAN)
    for sx, sy in ((0, 0), (500, 500), (1000, 1000), (123, 877)):
        hx, hy = m.x0 + sx * m.sx, m.y0 + sy * m.sy
        px, py = truth((hx, hy))
        r = PORTRAIT_OVERSCAN
        assert abs(px - (r.x + sx / 1000 * (r.w - 1))) <= 1.0
        assert abs(py - (r.y + sy / 1000 * (r.h - 1))) <= 1.0


def test_no_cursor_is_none_and_a_still_cursor_cannot_fit() -> None:
    screen = framed(picture(1170, 2532), PORTRAIT_OVERSCAN)
    assert calibrate.find_cursors([screen, screen, screen]) == [None, None, None]
    with pytest.raises(ValueError):
        calibrate.fit([(1, 1), (1, 1)], [(5, 5), (5, 5)], PORTRAIT_OVERSCAN, (FW, FH))


def test_the_calibration_is_kept_and_holds_only_for_its_rectangle(tmp_path: Path) -> None:
    screen = framed(picture(1170, 2532), PORTRAIT_OVERSCAN)
    # A made-up target that is off by 20 pixels to the right: the fit says so.
    seen = [(truth(p)[0] + 20, truth(p)[1]) for p in calibrate.POINTS]
    fit = calibrate.fit(calibrate.POINTS, seen, PORTRAIT_OVERSCAN, (FW, FH))
    calibrate.save(tmp_path, fit)
    assert calibrate.load(tmp_path) == fit
    g = ScreenGeometry("auto", "ios")
    g.calibration = calibrate.load(tmp_path)
    g.observe(frame(screen, 1))
    assert g.calibrated() and g.status()["hid_map"]["from"] == "calibration"
    assert g.hid_map().x0 < 0  # to land 20 px further left than the platform's map would
    # The phone turns: another rectangle, the platform's map again (the file stays).
    g.observe(frame(framed(picture(1600, 740), Rect(57, 32, 1805, 1015)), 2))
    assert not g.calibrated() and g.status()["hid_map"]["from"] == "platform"
    calibrate.forget(tmp_path)
    assert calibrate.load(tmp_path) is None
    (tmp_path / calibrate.FILE).write_text("{not json")
    assert calibrate.load(tmp_path) is None


def test_a_moved_cursor_differs_and_noise_does_not() -> None:
    """calibrate_pointer waits for the picture to show each move: on the desktop tier the
    display path showed it 0.4-1.1 s late, and a frame taken at once showed the cursor where
    it had been (each position fitted against the one before)."""
    screen = framed(picture(1170, 2532), PORTRAIT_OVERSCAN)
    here = with_cursor(screen, (700.0, 900.0), round_cursor=False)
    there = with_cursor(screen, (1100.0, 400.0), round_cursor=False)
    assert calibrate.differs(here, there)
    assert not calibrate.differs(here, here.copy())
    noisy = here.copy()
    noisy[10, 10:15] = 255 - noisy[10, 10:15]  # five pixels flipped: noise, not a cursor
    assert not calibrate.differs(here, noisy)
