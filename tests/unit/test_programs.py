"""The exact report programs (reports and deadlines) the input engine builds from tool arguments."""

from __future__ import annotations

import math

import pytest

from daemon.config import InputConfig
from daemon.engine import program as prog
from daemon.engine.flow import FULL, ISOLATED, required_profile
from daemon.engine.program import Point, Pointer, Step
from daemon.errors import ToolError
from gadget import keymap, reports

# Distinct timing values, so a deadline that used the wrong one shows.
CFG = InputConfig(
    tap_hold_ms=60,
    ios_cursor_settle_ms=80,
    swipe_hold_before_ms=30,
    long_press_ms=1500,
    double_tap_gap_ms=100,
    key_hold_ms=50,
    chord_hold_ms=120,
    key_step_ms=10,
    release_repeats=3,
    release_interval_ms=15,
    typing_rate_cps=100,
    move_interval_ms=16,
    wheel_interval_ms=30,
    scroll_speed=1000,
    scroll_hold_after_ms=120,
)
TOUCH = Pointer("touchscreen", 0.0)
IOS_MOUSE = Pointer("mouse", 80.0)
DESKTOP_MOUSE = Pointer("mouse", 0.0)
A = reports.norm_to_abs


def touch(x: float, y: float, down: bool) -> bytes:
    return reports.touch([reports.Contact(0, A(x), A(y), tip=down)])


def mouse(x: float, y: float, down: bool, wheel: int = 0, pan: int = 0) -> bytes:
    return reports.mouse(reports.BUTTON_LEFT if down else 0, A(x), A(y), wheel, pan)


def beside(x: float, y: float) -> bytes:
    """The hover one absolute unit off (x, y), toward the middle, that a program's first
    placement of the mouse goes by."""
    ax, ay = (a - 1 if a > 0 else a + 1 for a in (A(x), A(y)))
    return reports.mouse(0, ax, ay)


def P(t: float, report: bytes) -> Step:
    return Step(t, "pointer", report)


def K(t: float, mods: int = 0, *keys: int) -> Step:
    return Step(t, "keyboard", reports.keyboard(mods, list(keys)))


def lifts(t: float, report: bytes, role: str = "pointer") -> list[Step]:
    return [Step(t + 15 * i, role, report) for i in range(3)]


def approx_program(program: list[Step]) -> list[tuple[float, str, bytes]]:
    """Deadlines compared to the microsecond (interpolation divides), reports exactly."""
    return [(round(s.at_ms, 3), s.role, s.report) for s in program]


# --- platform pointer --------------------------------------------------------------------------


def test_pointer_per_platform() -> None:
    assert Pointer.for_platform("android", CFG) == TOUCH
    assert Pointer.for_platform("ios", CFG) == IOS_MOUSE
    for desktop in ("macos", "windows", "linux"):
        assert Pointer.for_platform(desktop, CFG) == DESKTOP_MOUSE


# --- tap, double tap, long press ---------------------------------------------------------------


def test_tap_touchscreen() -> None:
    p = Point(250, 750)
    assert prog.tap(CFG, TOUCH, p) == [
        P(0, touch(250, 750, True)),
        *lifts(60, touch(250, 750, False)),
    ]


def test_tap_ios_mouse_moves_settles_then_presses() -> None:
    p = Point(250, 750)
    assert prog.tap(CFG, IOS_MOUSE, p) == [
        P(0, beside(250, 750)),
        P(0, mouse(250, 750, False)),
        P(80, mouse(250, 750, True)),
        *lifts(140, mouse(250, 750, False)),
    ]


def test_a_mouse_press_moves_even_where_the_last_report_left_the_cursor() -> None:
    """The host may have moved its cursor since (its own mouse, a warp) and drops a position
    equal to the last one it got: the press goes by a point one unit off, then settles."""
    p = Point(250, 750)
    assert prog.tap(CFG, IOS_MOUSE, p, at=Point(250.001, 750))[:3] == [
        P(0, beside(250, 750)),
        P(0, mouse(250, 750, False)),
        P(80, mouse(250, 750, True)),
    ]
    # At the edges the point beside is inside the screen.
    assert prog.tap(CFG, DESKTOP_MOUSE, Point(0, 1000))[0] == P(
        0, reports.mouse(0, 1, reports.ABS_MAX - 1)
    )


def test_tap_desktop_mouse_has_no_settle() -> None:
    steps = prog.tap(CFG, DESKTOP_MOUSE, Point(10, 20))
    assert steps[:3] == [
        P(0, beside(10, 20)),
        P(0, mouse(10, 20, False)),
        P(0, mouse(10, 20, True)),
    ]
    assert steps[3].at_ms == 60


@pytest.mark.parametrize(
    ("name", "bit"),
    [("right", 0x02), ("middle", 0x04), ("back", 0x08), ("forward", 0x10)],
)
def test_a_click_with_another_mouse_button_holds_only_that_button(name: str, bit: int) -> None:
    x, y = A(10), A(20)
    steps = prog.tap(CFG, DESKTOP_MOUSE, Point(10, 20), button=name)
    assert steps == [
        P(0, beside(10, 20)),
        P(0, mouse(10, 20, False)),
        P(0, reports.mouse(bit, x, y)),
        *lifts(60, mouse(10, 20, False)),
    ]
    double = prog.double_tap(CFG, DESKTOP_MOUSE, Point(10, 20), button=name)
    assert [s.report for s in double].count(reports.mouse(bit, x, y)) == 2
    # Held across a drag: down with the button, moved with it, and lifted to all-up.
    held = prog.drag_start(CFG, DESKTOP_MOUSE, Point(10, 20), Point(210, 20), button=name)
    assert all(reports.unpack_mouse(s.report).buttons == bit for s in held[2:])
    released = prog.drag_release(CFG, DESKTOP_MOUSE, Point(210, 20), Point(300, 20), button=name)
    assert released[0] == P(0, reports.mouse(bit, A(300), A(20)))
    assert released[-1].report == mouse(300, 20, False)
    with pytest.raises(ValueError, match="touchscreen has no right button"):
        prog.tap(CFG, TOUCH, Point(10, 20), button="right")


def test_coordinates_0_and_1000_map_to_the_absolute_ends() -> None:
    steps = prog.tap(CFG, TOUCH, Point(0, 1000))
    c = reports.unpack_touch(steps[0].report)[0]
    assert (c.x, c.y, c.tip) == (0, reports.ABS_MAX, True)
    steps = prog.tap(CFG, TOUCH, Point(1000, 0))
    c = reports.unpack_touch(steps[0].report)[0]
    assert (c.x, c.y) == (reports.ABS_MAX, 0)


def test_double_tap() -> None:
    p = Point(500, 500)
    down, up = touch(500, 500, True), touch(500, 500, False)
    # second tap: 90 (end of first lifts) + 100 gap
    assert prog.double_tap(CFG, TOUCH, p) == [
        P(0, down),
        *lifts(60, up),
        P(190, down),
        *lifts(250, up),
    ]
    # The mouse moves once (by the point beside); the second press needs no move.
    steps = prog.double_tap(CFG, IOS_MOUSE, p)
    assert [s.at_ms for s in steps] == [0, 0, 80, 140, 155, 170, 270, 330, 345, 360]


def test_long_press_default_and_override() -> None:
    p = Point(100, 900)
    assert prog.long_press(CFG, TOUCH, p, None) == [
        P(0, touch(100, 900, True)),
        *lifts(1500, touch(100, 900, False)),
    ]
    assert prog.long_press(CFG, TOUCH, p, 700)[1].at_ms == 700


# --- swipes ------------------------------------------------------------------------------------


def test_swipe_start_end_at_default_speed() -> None:
    s = prog.resolve_swipe(Point(500, 800), end=Point(500, 300))
    assert s.duration_ms == pytest.approx(200)  # 500 units at 2500 units/s
    steps = prog.swipe(CFG, TOUCH, s)
    expected = [P(0, touch(500, 800, True))]
    for i in range(1, 25):
        expected.append(P(30 + 200 * i / 24, touch(500, 800 - 500 * i / 24, True)))
    expected += lifts(230, touch(500, 300, False))
    assert approx_program(steps) == approx_program(expected)
    assert len(steps) == 1 + 24 + 3


def test_swipe_duration_overrides_timing_for_start_end() -> None:
    s = prog.resolve_swipe(Point(0, 0), end=Point(1000, 1000), duration_ms=1000, steps=4)
    steps = prog.swipe(CFG, TOUCH, s)
    # moves at hold (30) + 250 * i; lifts from the last move
    assert [round(x.at_ms, 3) for x in steps] == [0, 280, 530, 780, 1030, 1030, 1045, 1060]
    assert steps[-4].report == touch(1000, 1000, True)


def test_swipe_hold_before_is_floored_and_hold_after_dwells() -> None:
    s = prog.resolve_swipe(
        Point(500, 500), end=Point(600, 500), duration_ms=100, steps=2, hold_after_ms=250
    )
    steps = prog.swipe(CFG, TOUCH, s)
    # hold_before 0 is floored to swipe_hold_before_ms (30): moves at 80, 130
    assert [x.at_ms for x in steps] == [0, 80, 130, 380, 395, 410]
    s = prog.resolve_swipe(
        Point(500, 500), end=Point(600, 500), duration_ms=100, steps=2, hold_before_ms=400
    )
    assert [x.at_ms for x in prog.swipe(CFG, TOUCH, s)][:3] == [0, 450, 500]


def test_swipe_direction_travels_to_the_edge() -> None:
    s = prog.resolve_swipe(Point(300, 700), direction="up")
    assert (s.end, s.duration_ms) == (Point(300, 0), pytest.approx(700 / 2500 * 1000))
    s = prog.resolve_swipe(Point(1, 500), direction="right")
    assert s.end == Point(1000, 500)


def test_swipe_direction_with_duration_sets_travel() -> None:
    s = prog.resolve_swipe(Point(500, 800), direction="up", speed=1000, duration_ms=300)
    assert s.end == Point(500, 500) and s.duration_ms == pytest.approx(300)
    # The travel stops at the edge and takes the time it needs at that speed.
    s = prog.resolve_swipe(Point(500, 100), direction="up", speed=1000, duration_ms=300)
    assert s.end == Point(500, 0) and s.duration_ms == pytest.approx(100)


def test_zero_length_swipe_holds_in_place() -> None:
    s = prog.resolve_swipe(Point(400, 400), end=Point(400, 400), steps=3)
    steps = prog.swipe(CFG, TOUCH, s)
    down = touch(400, 400, True)
    assert steps == [
        P(0, down),
        P(30, down),
        P(30, down),
        P(30, down),
        *lifts(30, touch(400, 400, False)),
    ]


def test_swipe_steps_1_jumps_to_the_end() -> None:
    s = prog.resolve_swipe(Point(100, 100), end=Point(900, 100), duration_ms=320, steps=1)
    steps = prog.swipe(CFG, IOS_MOUSE, s)
    assert steps == [
        P(0, beside(100, 100)),
        P(0, mouse(100, 100, False)),
        P(80, mouse(100, 100, True)),
        P(80 + 30 + 320, mouse(900, 100, True)),
        *lifts(430, mouse(900, 100, False)),
    ]


def test_swipe_needs_exactly_one_of_end_and_direction() -> None:
    for kw in ({}, {"end": Point(1, 1), "direction": "up"}):
        with pytest.raises(ToolError) as e:
            prog.resolve_swipe(Point(0, 0), **kw)  # type: ignore[arg-type]
        assert e.value.code == "tool_arguments_invalid"


def test_scroll_on_a_phone_drags_the_other_way_and_pauses() -> None:
    steps = prog.scroll(CFG, TOUCH, Point(500, 500), "down", 400, use_wheel=False)
    # down shows what is below: the finger moves up 400 units at 1000 units/s
    assert steps[0] == P(0, touch(500, 500, True))
    assert steps[-4] == P(30 + 400, touch(500, 100, True))
    assert steps[-3:] == lifts(30 + 400 + 120, touch(500, 100, False))


def test_scroll_on_a_desktop_turns_the_wheel() -> None:
    steps = prog.scroll(CFG, DESKTOP_MOUSE, Point(500, 500), "down", 250, use_wheel=True)
    assert steps == [
        P(0, beside(500, 500)),
        P(0, mouse(500, 500, False)),
        P(0, mouse(500, 500, False, wheel=-1)),
        P(30, mouse(500, 500, False, wheel=-1)),
        P(60, mouse(500, 500, False, wheel=-1)),
    ]
    # Even where the last report left it: the wheel turns at the point, not where the host's
    # cursor went meanwhile.
    steps = prog.scroll(
        CFG, DESKTOP_MOUSE, Point(500, 500), "right", 100, use_wheel=True, at=Point(500, 500)
    )
    assert steps == [
        P(0, beside(500, 500)),
        P(0, mouse(500, 500, False)),
        P(0, mouse(500, 500, False, pan=1)),
    ]


# --- atomic actions ------------------------------------------------------------------------------


def test_atomic_program() -> None:
    actions = [
        {"action": "touch_down", "x": 100, "y": 100},
        {"action": "move_to", "x": 100, "y": 148, "speed": 1000},  # 48 ms: 3 reports
        {"action": "move_to", "x": 200, "y": 148, "speed": 1, "duration_ms": 16},  # duration wins
        {"action": "wait", "duration_ms": 100},
        {"action": "move_to", "x": 300, "y": 300},  # immediate
        {"action": "touch_up"},
    ]
    steps = prog.atomic(CFG, TOUCH, actions)
    assert approx_program(steps) == approx_program(
        [
            P(0, touch(100, 100, True)),
            P(16, touch(100, 116, True)),
            P(32, touch(100, 132, True)),
            P(48, touch(100, 148, True)),
            P(64, touch(200, 148, True)),
            P(164, touch(300, 300, True)),
            *lifts(164, touch(300, 300, False)),
        ]
    )


@pytest.mark.parametrize(
    ("actions", "path"),
    [
        ([{"action": "touch_down", "x": 1, "y": 1}], "$.actions"),
        ([{"action": "move_to", "x": 1, "y": 1}], "$.actions[0]"),
        ([{"action": "touch_up"}], "$.actions[0]"),
        (
            [{"action": "touch_down", "x": 1, "y": 1}, {"action": "touch_down", "x": 1, "y": 1}],
            "$.actions[1]",
        ),
        ([{"action": "wait", "duration_ms": 10}], "$.actions"),
    ],
)
def test_atomic_programs_are_checked_whole(actions: list[dict[str, object]], path: str) -> None:
    with pytest.raises(ToolError) as e:
        prog.atomic(CFG, TOUCH, actions)
    assert e.value.code == "tool_arguments_invalid"
    assert e.value.details is not None and e.value.details["errors"][0]["path"] == path


# --- bounds --------------------------------------------------------------------------------------


def _refused_at(path: str, build: object) -> str:
    with pytest.raises(ToolError) as e:
        build()  # type: ignore[operator]
    assert e.value.code == "tool_arguments_invalid"
    assert e.value.details is not None
    error = e.value.details["errors"][0]
    assert error["path"] == path and error["code"] == "maximum_invalid", error
    return str(error["message"])


@pytest.mark.parametrize("speed", [1e-3, 1e-320, 5e-324])
def test_a_crawling_move_is_refused_before_any_step_is_built(speed: float) -> None:
    """speed 0.001 over 200 units once built 12 million steps; 1e-320 overflowed to inf."""
    actions = [
        {"action": "touch_down", "x": 500, "y": 500},
        {"action": "move_to", "x": 700, "y": 500, "speed": speed},
        {"action": "touch_up"},
    ]
    message = _refused_at("$.actions[1].speed", lambda: prog.atomic(CFG, TOUCH, actions))
    assert "at most 120 s" in message


def test_an_atomic_program_is_bounded_as_a_whole() -> None:
    waits = [{"action": "wait", "duration_ms": 59000}] * 2
    down, up = {"action": "touch_down", "x": 1, "y": 1}, {"action": "touch_up"}
    program = prog.atomic(CFG, TOUCH, [down, *waits, up])  # 118 s and the release: within
    assert 118000 < prog.duration_ms(program) <= prog.MAX_PROGRAM_MS
    _refused_at("$.actions[3].duration_ms", lambda: prog.atomic(CFG, TOUCH, [down, *waits, *waits]))


@pytest.mark.parametrize(
    ("kw", "path"),
    [({"speed": 1.0}, "$.speed"), ({"duration_ms": 121000}, "$.duration_ms")],
)
def test_a_swipe_over_the_bound_names_what_set_its_time(kw: dict[str, float], path: str) -> None:
    _refused_at(path, lambda: prog.resolve_swipe(Point(500, 900), end=Point(500, 100), **kw))
    if "speed" in kw:  # with a direction, duration_ms sets the travel (to the edge at most)
        _refused_at(path, lambda: prog.resolve_swipe(Point(500, 900), direction="up", **kw))


def test_typing_and_timelines_are_checked_when_built() -> None:
    slow = InputConfig(typing_rate_cps=1)
    _refused_at("$", lambda: prog.typing(slow, [(4, 0)] * 200))  # 200 s of typing
    tl = prog.PointerTimeline(CFG, TOUCH).press(Point(1, 1))
    _refused_at("$", lambda: tl.move(Point(2, 2), 1000, prog.MAX_PROGRAM_STEPS + 1))
    assert tl.steps == [P(0, touch(1, 1, True))]  # nothing was appended
    _refused_at("$", lambda: tl.wait(math.nan))
    assert prog.checked(prog.tap(CFG, TOUCH, Point(1, 1)))


# --- drag ----------------------------------------------------------------------------------------


def test_drag_away_defaults_toward_the_centre() -> None:
    assert prog.drag_away(Point(100, 300), None) == Point(300, 300)
    assert prog.drag_away(Point(900, 300), None) == Point(700, 300)
    assert prog.drag_away(Point(500, 100), "up") == Point(500, 0)  # clamped


def test_drag_start_holds_then_moves_400ms_without_release() -> None:
    steps = prog.drag_start(CFG, TOUCH, Point(100, 300), Point(300, 300))
    assert steps[0] == P(0, touch(100, 300, True))
    moves = steps[1:]
    assert len(moves) == 25  # ceil(400 / 16)
    assert [round(s.at_ms, 3) for s in moves] == [
        round(500 + 400 * i / 25, 3) for i in range(1, 26)
    ]
    assert moves[-1] == P(900, touch(300, 300, True))
    assert all(prog.pointer_held("touchscreen", s.report) for s in steps)


def test_drag_cancel_moves_back_then_releases() -> None:
    steps = prog.drag_cancel(CFG, IOS_MOUSE, Point(300, 300), Point(100, 300))
    assert steps[-4] == P(400, mouse(100, 300, True))
    assert steps[-3:] == lifts(400, mouse(100, 300, False))


def test_drag_release_moves_directly_holds_200_releases() -> None:
    steps = prog.drag_release(CFG, TOUCH, Point(300, 300), Point(800, 600))
    assert steps == [P(0, touch(800, 600, True)), *lifts(200, touch(800, 600, False))]


# --- keyboard ----------------------------------------------------------------------------------


def test_chord_presses_in_order_releases_in_reverse() -> None:
    keys = prog.resolve_keys(["ctrl", "shift", "t"])
    ctrl, shift = reports.MOD_LCTRL, reports.MOD_LSHIFT
    t = keymap.key("t").usage
    assert prog.chord(CFG, keys) == [
        K(0, ctrl),
        K(10, ctrl | shift),
        K(20, ctrl | shift, t),
        K(140, ctrl | shift),
        K(150, ctrl),
        *lifts(160, reports.KEYBOARD_RELEASE, "keyboard"),
    ]


def test_single_key_and_repeat() -> None:
    enter = keymap.key("enter").usage
    steps = prog.chord(CFG, prog.resolve_keys(["enter"]), repeat=2)
    release = reports.KEYBOARD_RELEASE
    assert steps == [
        K(0, 0, enter),
        *lifts(50, release, "keyboard"),
        K(90, 0, enter),
        *lifts(140, release, "keyboard"),
    ]


def test_media_key_is_a_consumer_tap() -> None:
    steps = prog.chord(CFG, prog.resolve_keys(["KEYCODE_VOLUME_UP"]))
    assert steps == [
        Step(0, "consumer", reports.consumer(0x00E9)),
        *lifts(50, reports.CONSUMER_RELEASE, "consumer"),
    ]


def test_bad_chords() -> None:
    with pytest.raises(ToolError) as e:
        prog.chord(CFG, prog.resolve_keys(["ctrl", "volume_up"]))
    assert e.value.code == "chord_invalid"
    with pytest.raises(ToolError) as e:
        prog.chord(CFG, prog.resolve_keys(["a", "A"]))
    assert e.value.code == "chord_invalid"
    with pytest.raises(ToolError) as e:
        prog.resolve_keys(["ctrl", "kontrol"])
    assert e.value.code == "unknown_key" and e.value.details
    assert e.value.details["path"] == "$.keys[1]"


def test_typing_shift_and_repeated_characters() -> None:
    steps = prog.typing(CFG, prog.text_strokes("Al!l"))
    a, ll, one = keymap.key("a").usage, keymap.key("l").usage, keymap.key("1").usage
    shift = reports.MOD_LSHIFT
    up = reports.KEYBOARD_RELEASE
    assert steps == [
        K(0, shift, a),
        Step(5, "keyboard", up),
        K(10, 0, ll),
        Step(15, "keyboard", up),
        K(20, shift, one),
        Step(25, "keyboard", up),
        K(30, 0, ll),
        Step(35, "keyboard", up),
        Step(50, "keyboard", up),
        Step(65, "keyboard", up),
    ]


def test_untypable_text_is_refused_whole() -> None:
    with pytest.raises(ToolError) as e:
        prog.text_strokes("héllo")
    assert e.value.code == "untypable_character"
    assert e.value.details == {
        "path": "$.text",
        "character": "é",
        "index": 1,
        "layout": "English US (PC, us)",
    }


# --- which profile a program needs ---------------------------------------------------------------


def test_release_program_sends_every_roles_all_up_on_the_same_deadlines() -> None:
    kb, up = reports.KEYBOARD_RELEASE, mouse(300, 400, False)
    program = prog.release_program(CFG, {"keyboard": kb, "pointer": up})
    assert program == [
        Step(0, "keyboard", kb),
        Step(0, "pointer", up),
        Step(15, "keyboard", kb),
        Step(15, "pointer", up),
        Step(30, "keyboard", kb),
        Step(30, "pointer", up),
    ]
    once = InputConfig(release_repeats=1)
    assert prog.release_program(once, {"consumer": reports.CONSUMER_RELEASE}) == [
        Step(0, "consumer", reports.CONSUMER_RELEASE)
    ]
    assert prog.release_program(CFG, {}) == []


def test_required_profile() -> None:
    cmd_a = prog.chord(CFG, prog.resolve_keys(["cmd", "a"]))
    shift_a = prog.chord(CFG, prog.resolve_keys(["shift", "a"]))
    text = prog.typing(CFG, prog.text_strokes("Hi!"))
    tap = prog.tap(CFG, IOS_MOUSE, Point(1, 1))
    volume = prog.chord(CFG, prog.resolve_keys(["volume_up"]))
    assert required_profile(cmd_a, isolate=True) == ISOLATED
    assert required_profile(cmd_a, isolate=False) is None
    assert required_profile(shift_a, isolate=True) is None
    assert required_profile(text, isolate=True) is None
    assert required_profile(volume, isolate=True) is None
    assert required_profile(tap, isolate=True) == FULL
    assert required_profile(tap, isolate=False) == FULL


def test_normalize_checks_bounds_and_scales_pixels() -> None:
    assert prog.normalize(250, 1000, "$.point") == Point(250, 1000)
    assert prog.normalize(639, 0, "$.point", (640, 480)) == Point(1000, 0)
    for args, path in (((0, 1001, "$.p"), "$.p.y"), ((640, 0, "$.p", (640, 480)), "$.p.x")):
        with pytest.raises(ToolError) as e:
            prog.normalize(*args)
        assert e.value.details["errors"][0]["path"] == path
