"""The X screen inside a bigger frame, as an HDMI adapter sends it: the feeder scales X's
1024x768 into a 1280x720 frame with black bars (desktop.fitted: 960x720 at x 160). Every other
scenario of the tier runs on that capture, so their taps, drags and tap_text prove the mapping;
here: the daemon finds the screen by itself, and calibration against the real X cursor recovers
the map."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import Desktop, Record
from desktop import FRAME_H, FRAME_W, HEIGHT, WIDTH, Fingertip, decode, fitted, until
from test_pointer import near, show_canvas

# A second size of X's screen (xrandr -s): 16:9, so its picture fills the 16:9 frame, no bars.
RESIZED = (1024, 576)
# calibrate_pointer's HID positions (daemon.screen.calibrate.POINTS), 0..1000 of the pointer.
CALIBRATION_POINTS = ((150, 150), (850, 150), (500, 500), (150, 850), (850, 850))
# X shows an I-beam over them, not the arrow.
TEXT_WIDGETS = ("name", "plain", "term", "notes", "paste")


@pytest.fixture
def ft(desk: Desktop) -> Fingertip:
    return desk.target("linux", "us")


def screen(ft: Fingertip) -> dict[str, Any]:
    out: dict[str, Any] = ft.ok("health_check", {}).output["screen"]
    return out


def rect_of(s: dict[str, Any]) -> tuple[int, int, int, int]:
    r = s["screen"]
    return r["x"], r["y"], r["width"], r["height"]


def close(a: tuple[int, ...], b: tuple[int, ...], px: int = 1) -> bool:
    return all(abs(p - q) <= px for p, q in zip(a, b, strict=True))


def wait_screen(ft: Fingertip, want: tuple[int, int, int, int]) -> dict[str, Any]:
    """health_check's screen once it is `want` (each call takes a frame: the geometry follows
    the frames the daemon takes)."""
    last: list[dict[str, Any]] = []

    def check() -> bool:
        ft.ok("screenshot", {"format": "jpeg"})
        last[:] = [screen(ft)]
        return last[0].get("known", False) and close(rect_of(last[0]), want)

    try:
        until(check, f"the daemon finding the screen at {want}", 60)
    except AssertionError:
        raise AssertionError(f"the screen stayed {last[0]}, want {want}") from None
    return last[0]


def tap_grid(desk: Desktop, ft: Fingertip, size: tuple[int, int], name: str) -> float:
    """Taps at three points across the screen; the worst miss on X, in px."""
    width, height = size
    worst = 0.0
    for nx, ny in ((100, 100), (500, 500), (900, 900)):
        mark = desk.app.mark()
        ft.ok("touch_gesture", {"type": "tap", "point": {"x": nx, "y": ny}})
        (press,) = desk.app.wait_events(mark, "press")
        want = (nx / 1000 * (width - 1), ny / 1000 * (height - 1))
        worst = max(worst, abs(press["x"] - want[0]), abs(press["y"] - want[1]))
        assert near(press, *want), f"{name}: tap at ({nx}, {ny}) want {want}, got {press}"
    return worst


def test_the_daemon_finds_the_x_screen_in_the_padded_frame(ft: Fingertip, record: Record) -> None:
    s = wait_screen(ft, fitted(WIDTH, HEIGHT))
    assert s["source"] == "detected" and s["orientation"] == "landscape", s
    assert (s["frame"]["width"], s["frame"]["height"]) == (FRAME_W, FRAME_H), s
    record("screen_in_frame", f"{rect_of(s)} of {FRAME_W}x{FRAME_H}")
    shot = ft.ok("screenshot", {"format": "png"}).output
    whole = ft.ok("screenshot", {"format": "png", "area": "frame"}).output
    # The screenshot is the screen, no bars; the whole frame on request.
    assert (shot["width"], shot["height"]) == (s["screen"]["width"], s["screen"]["height"])
    assert (whole["width"], whole["height"]) == (FRAME_W, FRAME_H)
    assert decode(whole)[:, : s["screen"]["x"] - 2].max() <= 16, "the bars are not black"


def test_calibration_finds_the_x_cursor_and_taps_use_it(
    desk: Desktop, ft: Fingertip, record: Record
) -> None:
    """On the Form page after a reset: no caret blinks, nothing is drawn under the pointer
    (the Canvas page's hover box moves with it), and X shows its arrow at each point."""
    rects = desk.app.state()["rects"]
    for hx, hy in CALIBRATION_POINTS:
        x, y = hx / 1000 * (WIDTH - 1), hy / 1000 * (HEIGHT - 1)
        for w in TEXT_WIDGETS:
            x0, y0, x1, y1 = rects[w]
            assert not (x0 <= x < x1 and y0 <= y < y1), f"({x}, {y}) is on {w}: an I-beam"
    s = wait_screen(ft, fitted(WIDTH, HEIGHT))
    sx, sy, sw, sh = rect_of(s)
    try:
        reply = ft.ok("calibrate_pointer", {})
        out = reply.output
        record("calibration_residual_px", out["residual_px"])
        assert out["residual_px"] <= 2.0, out
        # Where each seen cursor tip is against X's own mapping of the pointer scaled into the
        # frame: the map recovered, not only a consistent one.
        misses = []
        for p in out["points"]:
            hx, hy = p["hid"]["x"], p["hid"]["y"]
            fx = sx + hx / 1000 * (WIDTH - 1) * (sw / WIDTH)
            fy = sy + hy / 1000 * (HEIGHT - 1) * (sh / HEIGHT)
            misses.append(max(abs(p["seen"]["x"] - fx), abs(p["seen"]["y"] - fy)))
        record("calibration_cursor_vs_x_px", round(max(misses), 1))
        assert max(misses) <= 2.0, out["points"]
        after = screen(ft)
        assert after["hid_map"]["from"] == "calibration" and after["calibration"]["holds"]
        show_canvas(desk, ft)
        worst = tap_grid(desk, ft, (WIDTH, HEIGHT), "calibrated")
        record("calibrated_tap_worst_miss_px", round(worst, 1))
    finally:
        ft.ok("calibrate_pointer", {"forget": True})
    assert screen(ft)["hid_map"]["from"] == "platform"


def test_a_new_screen_size_is_found_by_itself(desk: Desktop, ft: Fingertip, record: Record) -> None:
    """X's screen goes from 1024x768 (pillarboxed: 960x720 at x 160) to 1024x576 (the whole
    frame) as a display setting would change it: the daemon finds the new screen from the
    frames alone, and taps land on X's new screen within 2 px; then back."""
    wait_screen(ft, fitted(WIDTH, HEIGHT))
    show_canvas(desk, ft)  # its tab's place is the 1024x768 screen's (normalized())
    try:
        desk.feeder.resize(*RESIZED)
        s = wait_screen(ft, fitted(*RESIZED))
        assert s["source"] == "detected" and rect_of(s) == (0, 0, FRAME_W, FRAME_H), s
        record("screen_after_resize", f"{rect_of(s)} of {FRAME_W}x{FRAME_H}")
        worst = tap_grid(desk, ft, RESIZED, "resized")
        record("resized_tap_worst_miss_px", round(worst, 1))
    finally:
        desk.feeder.resize(WIDTH, HEIGHT)
    s = wait_screen(ft, fitted(WIDTH, HEIGHT))
    assert s["source"] == "detected", s
