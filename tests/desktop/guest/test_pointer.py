"""The absolute pointer of a Linux target (device_type linux): where taps land on the real
screen, double clicks, dragging a real canvas item, hovering, and the wheel on a real list.
Each HID tool's evidence screenshot must show what the application reports it did."""

from __future__ import annotations

import pytest
from conftest import Desktop, Record
from desktop import (
    HEIGHT,
    WIDTH,
    Fingertip,
    assert_shows,
    centre,
    evidence,
    normalized,
)

MARK_BGR = (12, 89, 232)  # the app's press mark, #e8590c
DOUBLE_BGR = (232, 72, 112)  # its double-click ring, #7048e8
CARD_BGR = (180, 119, 31)  # the draggable card, #1f77b4
DROPPED_BGR = (68, 158, 47)  # the card once it is in the bin, #2f9e44
HOVER_BGR = (173, 152, 16)  # the box that follows the pointer, #1098ad
LINES_PER_NOTCH = 3  # the app's wheel binding (app.py)
GRID = (100, 500, 900)
TOLERANCE_PX = 2


@pytest.fixture
def ft(desk: Desktop) -> Fingertip:
    return desk.target("linux", "us")


def show_canvas(desk: Desktop, ft: Fingertip) -> None:
    """Switch the app to its Canvas page by tapping the tab, as a user would."""
    tab = desk.app.state()["rects"]["tab_canvas"]
    ft.ok("touch_gesture", {"type": "tap", "point": normalized(*centre(tab))})
    assert desk.app.state()["page"] == "Canvas"


def near(event: dict[str, float], x: float, y: float) -> bool:
    return max(abs(event["x"] - x), abs(event["y"] - y)) <= TOLERANCE_PX


def test_taps_land_on_a_3x3_grid(desk: Desktop, ft: Fingertip, record: Record) -> None:
    show_canvas(desk, ft)
    ft.screenshot("pointer-grid-before")
    worst = 0.0
    for ny in GRID:
        for nx in GRID:
            mark = desk.app.mark()
            reply = ft.ok("touch_gesture", {"type": "tap", "point": {"x": nx, "y": ny}})
            press, release = (desk.app.wait_events(mark, k)[0] for k in ("press", "release"))
            want = (nx / 1000 * (WIDTH - 1), ny / 1000 * (HEIGHT - 1))
            worst = max(worst, abs(press["x"] - want[0]), abs(press["y"] - want[1]))
            where = f"tap at ({nx}, {ny}): want {want}, the app got ({press['x']}, {press['y']})"
            assert near(press, *want), where
            assert press["button"] == 1 and press["widget"].endswith("canvas"), where
            assert (release["x"], release["y"]) == (press["x"], press["y"]), where
            assert len(desk.app.events(mark, "press")) == 1, f"{where}: more than one press"
            x, y = press["x"], press["y"]
            assert_shows(reply, (x - 8, y - 8, x + 8, y + 8), MARK_BGR, f"the mark of {where}")
            evidence(reply, f"pointer-grid-{nx}-{ny}-after")
    record("pointer_grid_worst_miss_px", round(worst, 1))


def test_tap_lands_after_the_desktop_moved_its_pointer(desk: Desktop, ft: Fingertip) -> None:
    """The desktop's own mouse moves the pointer between two taps at the same spot. The
    host's input layer drops an absolute position equal to the last one it got, so the second
    tap must make its position change to be seen, or it clicks wherever the pointer went."""
    show_canvas(desk, ft)
    x, y = 450, 300
    ft.ok("touch_gesture", {"type": "tap", "point": normalized(x, y)})
    desk.app.warp(800, 650)
    mark = desk.app.mark()
    reply = ft.ok("touch_gesture", {"type": "tap", "point": normalized(x, y)})
    (press,) = desk.app.wait_events(mark, "press")
    assert near(press, x, y), f"the tap at ({x}, {y}) clicked at ({press['x']}, {press['y']})"
    evidence(reply, "pointer-tap-after-warp-after")


def test_double_tap_is_one_double_click(desk: Desktop, ft: Fingertip) -> None:
    show_canvas(desk, ft)
    ft.screenshot("pointer-double-tap-before")
    x, y = 300, 650  # an empty part of the canvas
    mark = desk.app.mark()
    reply = ft.ok("touch_gesture", {"type": "double_tap", "point": normalized(x, y)})
    (double,) = desk.app.wait_events(mark, "double")
    assert len(desk.app.events(mark, "press")) == 2
    assert near(double, x, y), double
    evidence(reply, "pointer-double-tap-after")
    ring = (x - 33, y - 4, x - 27, y + 4)  # the left side of the app's double-click ring
    assert_shows(reply, ring, DOUBLE_BGR, "the double-click ring")


def test_drag_moves_the_card_into_the_bin(desk: Desktop, ft: Fingertip) -> None:
    show_canvas(desk, ft)
    ft.screenshot("pointer-drag-before")
    state = desk.app.state()
    card, canvas = state["card"], state["rects"]["canvas"]
    mark = desk.app.mark()
    start = ft.ok("drag_start", {"point": normalized(*card)})
    assert start.output["screen_stable"] is True, start.output
    assert desk.app.events(mark, "drag_motion"), "the card never moved with the contact"
    evidence(start, "pointer-drag-held")
    hx, hy = desk.app.state()["card"]  # where the held contact has the card now
    assert hx > card[0] + 100, (card, (hx, hy))
    assert_shows(start, (hx - 60, hy - 30, hx - 45, hy + 30), CARD_BGR, "the card, held")
    target = (canvas[0] + 750, canvas[1] + 200)  # inside the app's "Drop here" bin
    done = ft.ok("drag_release", {"point": normalized(*target)})
    (dropped,) = desk.app.wait_events(mark, "dropped")
    assert dropped["in_bin"] is True, dropped
    x, y = desk.app.state()["card"]
    assert near({"x": x, "y": y}, *target), (x, y)
    evidence(done, "pointer-drag-after")
    assert_shows(done, (x - 60, y - 30, x - 45, y + 30), DROPPED_BGR, "the card in the bin")


def test_wheel_scrolls_the_list_by_its_lines_once(desk: Desktop, ft: Fingertip) -> None:
    fruits = desk.app.state()["rects"]["fruits"]
    ft.ok("mouse_move", normalized(*centre(fruits)))
    before = ft.screenshot("pointer-wheel-before")
    for delta, top in ((-3, 3 * LINES_PER_NOTCH), (2, LINES_PER_NOTCH)):
        mark = desk.app.mark()
        reply = ft.ok("mouse_scroll", {"delta": delta})
        wheel = desk.app.wait_events(mark, "wheel", abs(delta))
        # The reply came after the screen had settled: nothing more is on its way.
        assert len(desk.app.events(mark, "wheel")) == abs(delta), "a notch arrived twice"
        assert all(w["notches"] == (-1 if delta > 0 else 1) for w in wheel), wheel
        assert desk.app.state()["list_top"] == top
        after = evidence(reply, f"pointer-wheel-{delta:+d}-after")
        x0, y0, x1, y1 = fruits
        assert (before[y0:y1, x0:x1] != after[y0:y1, x0:x1]).any(), "the list looks the same"
        assert reply.output["screen_changed"] is True, reply.output.get("captured_at")
        before = after


def test_mouse_move_hovers_without_pressing(desk: Desktop, ft: Fingertip) -> None:
    show_canvas(desk, ft)
    ft.screenshot("pointer-hover-before")
    x, y = 400, 600
    mark = desk.app.mark()
    reply = ft.ok("mouse_move", normalized(x, y))
    hover = desk.app.wait_events(mark, "hover")[-1]
    assert near(hover, x, y), hover
    assert not desk.app.events(mark, "press"), "hovering pressed a button"
    evidence(reply, "pointer-hover-after")
    edge = (x - 26, y - 10, x - 22, y + 10)  # the left side of the app's hover box
    assert_shows(reply, edge, HOVER_BGR, "the hover box")


RIGHT_BGR = (201, 62, 174)  # the app's right-press mark, #ae3ec9
MIDDLE_BGR = (120, 166, 12)  # its middle-press mark, #0ca678
# X's button numbers for the gadget's mouse buttons (libinput: BTN_SIDE 8, BTN_EXTRA 9).
X_BUTTONS = {"right": 3, "middle": 2, "back": 8, "forward": 9}


def test_other_mouse_buttons_click_and_hold(desk: Desktop, ft: Fingertip) -> None:
    """Issue 49: right and middle clicks (a context menu's press, middle-click paste), the
    side buttons, and a drag holding the right button, each where asked and let go."""
    show_canvas(desk, ft)
    canvas = desk.app.state()["rects"]["canvas"]
    for i, (button, number) in enumerate(X_BUTTONS.items()):
        x, y = canvas[0] + 200 + 150 * i, canvas[1] + 450
        mark = desk.app.mark()
        reply = ft.ok("touch_gesture", {"type": "tap", "point": normalized(x, y), "button": button})
        press, release = (desk.app.wait_events(mark, k)[0] for k in ("press", "release"))
        where = f"{button} click at ({x}, {y}): the app got {press}"
        assert press["button"] == number and near(press, x, y), where
        assert release["button"] == number and len(desk.app.events(mark, "press")) == 1, where
        colour = {"right": RIGHT_BGR, "middle": MIDDLE_BGR}.get(button)
        if colour is not None:
            evidence(reply, f"pointer-{button}-click")
            assert_shows(reply, (x - 8, y - 8, x + 8, y + 8), colour, f"the {button} mark")
    # Press and hold: drag_start holds the right button, drag_release lets it go elsewhere.
    start, end = (canvas[0] + 300, canvas[1] + 550), (canvas[0] + 700, canvas[1] + 600)
    mark = desk.app.mark()
    held = ft.ok("drag_start", {"point": normalized(*start), "button": "right"})
    assert held.output["screen_stable"] is True and held.output["drag"]["button"] == "right"
    ft.ok("drag_release", {"point": normalized(*end)})
    (press,) = desk.app.wait_events(mark, "press")
    (release,) = desk.app.wait_events(mark, "release")
    assert press["button"] == 3 and near(press, *start), press
    assert release["button"] == 3 and near(release, *end), release


def test_middle_click_pastes_the_selection(desk: Desktop, ft: Fingertip) -> None:
    """X's middle-click paste: a word selected by a double click in the Name field, then a
    middle click into the Paste box pastes it there."""
    rects = desk.app.state()["rects"]
    ft.ok("enter_text", {"point": normalized(*centre(rects["name"])), "text": "Tangerine"})
    desk.app.wait_state("name", "Tangerine")
    x0, y0, _, y1 = rects["name"]
    ft.ok("touch_gesture", {"type": "double_tap", "point": normalized(x0 + 30, (y0 + y1) / 2)})
    paste = normalized(*centre(rects["paste"]))
    ft.ok("touch_gesture", {"type": "tap", "point": paste, "button": "middle"})
    desk.app.wait_state("paste", "Tangerine")
    assert desk.app.state()["name"] == "Tangerine"
