"""The touchscreen digitizer of an Android target (device_type android) on the desktop: X.Org's
libinput driver takes it as a direct-touch device and Tk sees its emulated pointer. Taps land
where the normalized coordinates say, a long press is held for its time, a swipe draws its
path from start to end."""

from __future__ import annotations

import pytest
from conftest import Desktop
from desktop import HEIGHT, WIDTH, Fingertip, assert_shows, evidence, normalized
from test_pointer import MARK_BGR, near, show_canvas

STROKE_BGR = (68, 158, 47)  # the path the app draws while a contact moves, #2f9e44


@pytest.fixture
def ft(desk: Desktop) -> Fingertip:
    return desk.target("Android", "us")


def test_touch_taps_land_where_asked(desk: Desktop, ft: Fingertip) -> None:
    show_canvas(desk, ft)
    ft.screenshot("touch-taps-before")
    for nx, ny in ((150, 200), (500, 500), (850, 900)):
        mark = desk.app.mark()
        reply = ft.ok("touch_gesture", {"type": "tap", "point": {"x": nx, "y": ny}})
        press, release = (desk.app.wait_events(mark, k)[0] for k in ("press", "release"))
        want = (nx / 1000 * (WIDTH - 1), ny / 1000 * (HEIGHT - 1))
        assert near(press, *want), f"touch at ({nx}, {ny}): want {want}, got {press}"
        assert near(release, *want), release
        assert len(desk.app.events(mark, "press")) == 1
        x, y = press["x"], press["y"]
        assert_shows(reply, (x - 8, y - 8, x + 8, y + 8), MARK_BGR, f"the touch at {want}")
        evidence(reply, f"touch-tap-{nx}-{ny}-after")


def test_long_press_holds_for_its_time(desk: Desktop, ft: Fingertip) -> None:
    show_canvas(desk, ft)
    x, y = 700, 550
    mark = desk.app.mark()
    reply = ft.ok("touch_gesture", {"type": "long_press", "point": normalized(x, y)})
    press, release = (desk.app.wait_events(mark, k)[0] for k in ("press", "release"))
    assert near(press, x, y) and near(release, x, y), (press, release)
    held_ms = release["xtime"] - press["xtime"]  # the X server's own event times
    assert 1400 <= held_ms <= 3000, f"held {held_ms} ms for a 1500 ms long press"
    evidence(reply, "touch-long-press-after")


def test_swipe_draws_its_path(desk: Desktop, ft: Fingertip) -> None:
    show_canvas(desk, ft)
    start, end = (200, 600), (800, 450)
    mark = desk.app.mark()
    reply = ft.ok(
        "touch_gesture",
        {"type": "swipe", "start": normalized(*start), "end": normalized(*end)},
    )
    press, release = (desk.app.wait_events(mark, k)[0] for k in ("press", "release"))
    assert near(press, *start), press
    assert near(release, *end), release
    path = desk.app.events(mark, "drag_motion")
    xs = [p["x"] for p in path]
    # A path, not a jump: the contact was seen between its ends. How many motion events Tk
    # reports depends on the load (it merges the motion events queued while it was busy: 4
    # with the machine busy, more idle), so the check is where they lie, not how many.
    between = [x for x in xs if start[0] + 100 <= x <= end[0] - 100]
    assert between, f"no motion seen between the swipe's ends: {xs}"
    assert xs == sorted(xs), "the path went back and forth"
    evidence(reply, "touch-swipe-after")
    mx, my = (start[0] + end[0]) / 2, (start[1] + end[1]) / 2
    assert_shows(reply, (mx - 2, my - 2, mx + 2, my + 2), STROKE_BGR, "the swipe's path")
