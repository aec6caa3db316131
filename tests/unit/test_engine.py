"""The executor and the serialized HID flow: order, completeness, cleanup, isolation, drags.

RecordingTarget is a recording fake of HidOutput + ProfileControl (no real target can run in a
unit test); it keeps one timeline of writes and profile switches. Where the real simulated target
can run (isolation actually mattering), it is used instead.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Any

import pytest
import structlog.testing

from daemon.catalog import CallContext, Catalog, Guard, ToolSpec
from daemon.config import InputConfig
from daemon.engine import program as prog
from daemon.engine.executor import Held, execute
from daemon.engine.flow import FULL, ISOLATED, InputEngine
from daemon.engine.program import Point
from daemon.errors import ToolError
from daemon.sim.layout import make_layout
from daemon.sim.target import SimTarget
from gadget import keymap, reports
from gadget.errors import TargetNotAttached

FAST = InputConfig(
    tap_hold_ms=5,
    ios_cursor_settle_ms=5,
    swipe_hold_before_ms=5,
    long_press_ms=5000,
    key_hold_ms=5,
    chord_hold_ms=5,
    key_step_ms=1,
    release_interval_ms=1,
    typing_rate_cps=500,
    isolation_settle_ms=0,
    drag_limit_s=60,
)


class RecordingTarget:
    """Recording fake of HidOutput and ProfileControl: one ordered timeline of what arrived."""

    def __init__(self, *, fail_writes: int = 0, fail_from: int = -1) -> None:
        self.events: list[tuple[Any, ...]] = []
        self.profile = FULL
        self.written = asyncio.Event()
        self.fail_from = fail_from  # the write index from which `fail_writes` writes fail
        self.fail_writes = fail_writes
        self._n = 0

    async def write(self, role: str, report: bytes) -> None:
        n, self._n = self._n, self._n + 1
        if self.fail_from >= 0 and self.fail_from <= n < self.fail_from + self.fail_writes:
            raise TargetNotAttached("recording fake: not listening")
        self.events.append(("write", role, report, time.monotonic(), self.profile))
        self.written.set()

    async def switch_profile(self, name: str) -> bool:
        if name == self.profile:
            return False
        self.profile = name
        self.events.append(("switch", name))
        return True

    def writes(self) -> list[tuple[str, bytes]]:
        return [(e[1], e[2]) for e in self.events if e[0] == "write"]

    def shape(self) -> list[str]:
        """The timeline as runs: 'switch:<name>' and one '<role>' per run of writes."""
        out: list[str] = []
        for e in self.events:
            label = f"switch:{e[1]}" if e[0] == "switch" else e[1]
            if not out or out[-1] != label or label.startswith("switch"):
                out.append(label)
        return out


def engine(
    platform: str = "android", cfg: InputConfig = FAST, **kw: Any
) -> tuple[InputEngine, RecordingTarget]:
    target = RecordingTarget(**kw)
    return InputEngine(target, target, cfg, platform), target


# --- the executor ------------------------------------------------------------------------------


async def test_executor_writes_every_step_in_order_never_early() -> None:
    target = RecordingTarget()
    s = prog.resolve_swipe(Point(100, 900), end=Point(100, 100), duration_ms=60, steps=24)
    program = prog.swipe(FAST, prog.Pointer("touchscreen", 0), s)
    held = Held("touchscreen")
    t0 = await execute(target, program, held)
    assert target.writes() == [(st.role, st.report) for st in program]
    # Absolute deadlines: no report goes out before its deadline (a lower bound, not a timing
    # assertion: the loop may be late on a busy machine, never early).
    for st, ev in zip(program, target.events, strict=True):
        assert ev[3] >= t0 + st.at_ms / 1000
    assert held.holding() == []  # the program lifted its contact


async def test_held_tracks_unsure_writes() -> None:
    target = RecordingTarget(fail_writes=1, fail_from=0)
    held = Held("mouse")
    with pytest.raises(TargetNotAttached):
        await execute(target, [prog.Step(0, "keyboard", reports.KEYBOARD_RELEASE)], held)
    # Even a release whose write failed leaves the role "maybe held": release it again.
    assert held.holding() == ["keyboard"]


# --- cleanup: whatever ends an invocation --------------------------------------------------------


async def long_press(eng: InputEngine) -> None:
    async with eng.invocation("touch_gesture") as s:
        await s.run(prog.long_press(FAST, eng.pointer, Point(300, 300), None))


async def test_cancellation_releases_everything() -> None:
    eng, target = engine("android")
    task = asyncio.create_task(long_press(eng))
    await target.written.wait()
    assert eng.held.holding() == ["pointer"]
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert target.writes()[-3:] == [("pointer", reports.touch_release())] * 3
    assert eng.held.holding() == [] and not eng.busy


async def test_the_hid_limit_releases_everything() -> None:
    """The catalog's server-side limit (hid_timeout_s) cancels the invocation: released."""
    eng, target = engine("ios")

    async def handler(args: dict[str, Any], ctx: CallContext) -> Any:
        async with eng.invocation("hold") as s:
            await s.run(prog.chord(FAST, prog.resolve_keys(["cmd", "a"])))  # isolated phase
            await s.run(prog.long_press(FAST, eng.pointer, Point(500, 500), None))
        return {}

    catalog = Catalog(
        "ios", [ToolSpec("hold", "", "input", "write", handler, hid=True)], hid_timeout_s=0.3
    )
    out = await catalog.call("hold", {}, guard=Guard.preset("full-access"), ctx=CallContext("test"))
    assert out.error is not None and out.error.code == "tool_timeout"
    last = reports.unpack_mouse(target.writes()[-1][1])
    assert last.buttons == 0 and (last.x, last.y) == (16384, 16384)
    assert eng.held.holding() == [] and target.profile == FULL
    assert target.shape() == ["switch:keyboard-isolated", "keyboard", "switch:full", "pointer"]


async def test_write_failure_is_a_tool_error_and_still_releases() -> None:
    eng, target = engine("windows", fail_writes=2, fail_from=2)
    program = prog.chord(FAST, prog.resolve_keys(["ctrl", "shift", "esc"]))
    with pytest.raises(ToolError) as e:
        async with eng.invocation("keyboard_tap") as s:
            await s.run(program)
    assert e.value.code == "target_not_attached" and e.value.retryable
    # ctrl, ctrl+shift arrived; esc failed; the end sent the all-up report.
    assert target.writes()[:2] == [(r.role, r.report) for r in program[:2]]
    assert target.writes()[-1] == ("keyboard", reports.KEYBOARD_RELEASE)
    assert eng.held.holding() == []


async def test_a_failed_cleanup_write_does_not_hide_the_error() -> None:
    eng, _ = engine("android", fail_writes=100, fail_from=1)
    with pytest.raises(ToolError) as e:
        async with eng.invocation("touch_gesture") as s:
            await s.run(prog.tap(FAST, eng.pointer, Point(1, 1)))
    assert e.value.code == "target_not_attached"
    assert eng.held.holding() == [] and not eng.busy


# --- serialization -----------------------------------------------------------------------------


async def type_text(eng: InputEngine, text: str) -> None:
    async with eng.invocation("keyboard_text") as s:
        await s.run(prog.typing(FAST, prog.text_strokes(text)))


async def tap(eng: InputEngine, p: Point) -> None:
    async with eng.invocation("touch_gesture") as s:
        await s.run(prog.tap(FAST, eng.pointer, p))


def typed(writes: list[tuple[str, bytes]]) -> str:
    by_usage = {keymap.key(c).usage: c for c in "abc"}
    out = []
    for role, report in writes:
        if role == "keyboard" and (state := reports.unpack_keyboard(report)).keys:
            out.append(by_usage[state.keys[0]])
    return "".join(out)


async def test_concurrent_invocations_are_serialized_never_interleaved() -> None:
    eng, target = engine("android")
    await asyncio.gather(
        type_text(eng, "a" * 20),
        tap(eng, Point(10, 10)),
        type_text(eng, "b" * 20),
        tap(eng, Point(20, 20)),
        type_text(eng, "c" * 20),
    )
    # First come, first served, and each one whole.
    assert typed(target.writes()) == "a" * 20 + "b" * 20 + "c" * 20
    assert target.shape() == ["keyboard", "pointer", "keyboard", "pointer", "keyboard"]


# --- iOS isolation -----------------------------------------------------------------------------


def chord(*names: str) -> list[prog.Step]:
    return prog.chord(FAST, prog.resolve_keys(list(names)))


async def test_isolation_scope_in_one_invocation() -> None:
    eng, target = engine("ios")
    async with eng.invocation("composite") as s:
        await s.run(chord("cmd", "a"))
        await s.run(chord("cmd", "c"))  # shares the pointer-free phase
        await s.run(prog.typing(FAST, prog.text_strokes("Hi")))  # shift only: stays
        await s.run(chord("volume_up"))  # consumer: stays
        await s.run(prog.tap(FAST, eng.pointer, Point(500, 500)))  # restores full first
        await s.run(chord("cmd", "v"))
    assert target.shape() == [
        "switch:keyboard-isolated",
        "keyboard",
        "consumer",
        "switch:full",
        "pointer",
        "switch:keyboard-isolated",
        "keyboard",
        "switch:full",
    ]
    for e in target.events:
        if e[0] == "write" and e[1] == "pointer":
            assert e[4] == FULL
        if e[0] == "write" and e[1] == "keyboard" and e[2][0] & reports.MOD_LMETA:
            assert e[4] == ISOLATED


async def test_separate_invocations_manage_their_own_scope() -> None:
    eng, target = engine("ios")
    for _ in range(2):
        async with eng.invocation("keyboard_tap") as s:
            await s.run(chord("cmd", "h"))
    assert [e[1] for e in target.events if e[0] == "switch"] == [ISOLATED, FULL, ISOLATED, FULL]


async def test_no_isolation_off_ios_and_none_without_modifiers() -> None:
    eng, target = engine("macos")
    async with eng.invocation("keyboard_tap") as s:
        await s.run(chord("cmd", "space"))
    eng2, target2 = engine("ios")
    async with eng2.invocation("keyboard_text") as s:
        await s.run(prog.typing(FAST, prog.text_strokes("Hello World")))
    assert not any(e[0] == "switch" for e in target.events + target2.events)


async def test_cancelled_in_the_isolated_phase_restores_full() -> None:
    eng, target = engine("ios", cfg=InputConfig(chord_hold_ms=5000, isolation_settle_ms=0))

    async def hold_chord() -> None:
        async with eng.invocation("keyboard_tap") as s:
            await s.run(chord("cmd", "a"))

    task = asyncio.create_task(hold_chord())
    while len(target.writes()) < 2:  # cmd, cmd+a down
        await target.written.wait()
        target.written.clear()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert target.events[-1] == ("switch", FULL)
    assert target.writes()[-1] == ("keyboard", reports.KEYBOARD_RELEASE)
    assert eng.held.holding() == []


async def test_isolation_is_what_makes_cmd_a_work_on_the_simulated_ios() -> None:
    """The real simulated target swallows Cmd shortcuts while the pointer is present."""

    async def select_all(isolate: bool) -> dict[str, Any]:
        sim = SimTarget("ios", reenumerate_s=0.01)
        eng = InputEngine(sim, sim, FAST, "ios")
        eng.isolates = isolate
        tile = make_layout("ios", 1080, 1920).tiles[0]
        icon = tile.icon
        async with eng.invocation("setup") as s:
            await s.run(
                prog.tap(FAST, eng.pointer, Point((icon.x0 + icon.x1) / 2, (icon.y0 + icon.y1) / 2))
            )
            await s.run(prog.tap(FAST, eng.pointer, Point(500, 140)))  # the text field
            await s.run(prog.typing(FAST, prog.text_strokes("hello")))
        async with eng.invocation("keyboard_tap") as s:
            await s.run(chord("cmd", "a"))
        state = sim.state()
        assert state["app"] == tile.name and state["field_text"] == "hello"
        return state

    isolated = await select_all(True)
    assert isolated["selected"] is True and isolated["swallowed"] == []
    assert isolated["switches"] == [ISOLATED, FULL] and isolated["profile"] == FULL
    plain = await select_all(False)
    assert plain["selected"] is False and plain["swallowed"] == ["cmd+a"]


# --- drags -------------------------------------------------------------------------------------


async def start_drag(eng: InputEngine, start: Point, to: Point) -> None:
    async with eng.invocation("drag_start", drag="start") as s:
        await s.run(prog.drag_start(FAST, eng.pointer, start, to))
        s.keep_contact(start, to)


async def test_a_confirmed_drag_outlives_its_invocation_until_drag_release() -> None:
    eng, target = engine("android")
    await start_drag(eng, Point(100, 100), Point(300, 100))
    assert eng.held.holding() == ["pointer"] and eng.drag is not None
    with pytest.raises(ToolError) as e:
        await tap(eng, Point(1, 1))
    assert e.value.code == "drag_in_progress"
    with pytest.raises(ToolError) as e:
        await start_drag(eng, Point(1, 1), Point(2, 2))
    assert e.value.code == "drag_already_in_progress"
    async with eng.invocation("drag_release", drag="release") as s:
        await s.run(prog.drag_release(FAST, eng.pointer, Point(300, 100), Point(800, 800)))
    assert eng.drag is None and eng.held.holding() == []
    assert target.writes()[-1] == (
        "pointer",
        reports.touch([reports.Contact(0, 26214, 26214, tip=False)]),
    )
    with pytest.raises(ToolError) as e:
        async with eng.invocation("drag_release", drag="release"):
            pass
    assert e.value.code == "drag_not_in_progress"


async def test_a_drag_left_alone_is_undone_after_the_limit() -> None:
    eng, target = engine(
        "ios", cfg=InputConfig(drag_limit_s=0.05, isolation_settle_ms=0, move_interval_ms=5)
    )
    await start_drag(eng, Point(100, 100), Point(300, 100))
    n = len(target.writes())
    while eng.drag is not None or eng.busy:
        await asyncio.sleep(0.01)
    undo = target.writes()[n:]
    assert reports.unpack_mouse(undo[-4][1]) == reports.MouseState(1, 3277, 3277)  # back at start
    assert reports.unpack_mouse(undo[-1][1]) == reports.MouseState(0, 3277, 3277)
    assert eng.held.holding() == []


async def test_close_releases_a_drag_restores_full_and_refuses_more() -> None:
    eng, target = engine("ios")
    await start_drag(eng, Point(100, 100), Point(300, 100))
    target.profile = ISOLATED  # as if a switch had been left half done
    await eng.close()
    assert eng.held.holding() == [] and target.profile == FULL
    last_pointer = [r for role, r in target.writes() if role == "pointer"][-1]
    assert reports.unpack_mouse(last_pointer) == reports.MouseState(0, 9830, 3277)  # where it was
    with pytest.raises(ToolError) as e:
        await tap(eng, Point(1, 1))
    assert e.value.code == "input_engine_stopped"


async def test_after_a_switch_the_cursor_position_is_unknown() -> None:
    eng, target = engine("ios")
    p = Point(400, 600)
    async with eng.invocation("composite") as s:
        await s.run(prog.tap(FAST, eng.pointer, p, s.pointer_at))
        assert s.pointer_at is not None and s.pointer_at.abs() == p.abs()
        await s.run(chord("cmd", "a"))
        assert s.pointer_at is None  # the host re-enumerated
        await s.run(prog.tap(FAST, eng.pointer, p, s.pointer_at))
    buttons = [reports.unpack_mouse(r).buttons for role, r in target.writes() if role == "pointer"]
    # beside, move, press, 3 lifts | beside, move again, press, 3 lifts
    assert buttons == [0, 0, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0]


class LateSwitchTarget(RecordingTarget):
    """A board's profile control, slow: a switch runs to its end under a lock whatever its
    caller does (as daemon.board's does), and only then is its profile live."""

    def __init__(self, delay_s: float) -> None:
        super().__init__()
        self.delay_s = delay_s
        self.lock = asyncio.Lock()
        self.switched = asyncio.Event()
        self.begun = asyncio.Event()

    async def switch_profile(self, name: str) -> bool:
        async def switch() -> bool:
            async with self.lock:
                if name == self.profile:
                    return False
                self.begun.set()
                await asyncio.sleep(self.delay_s)
                self.profile = name
                self.events.append(("switch", name))
                self.switched.set()
                return True

        return await asyncio.shield(asyncio.ensure_future(switch()))


async def test_a_switch_past_its_limit_still_ends_on_full() -> None:
    """The switch to keyboard-isolated outlives its limit and lands afterwards: the engine
    waits it out and brings `full` back, with nothing held, although no invocation follows."""
    target = LateSwitchTarget(delay_s=0.3)
    cfg = dataclasses.replace(FAST, profile_switch_timeout_s=0.1)
    eng = InputEngine(target, target, cfg, "ios")
    with pytest.raises(ToolError) as e:
        async with eng.invocation("keyboard_tap") as s:
            await s.run(chord("cmd", "a"))
    assert e.value.code == "profile_switch_failed"
    while [ev[1] for ev in target.events if ev[0] == "switch"] != [ISOLATED, FULL]:
        target.switched.clear()
        await asyncio.wait_for(target.switched.wait(), 10)
    assert target.profile == FULL and eng.held.holding() == []
    assert not [w for w in target.writes() if w[1] != reports.KEYBOARD_RELEASE]  # no chord sent
    target.delay_s = 0.0  # the target answers in time again: the next one runs as usual
    async with eng.invocation("keyboard_tap") as s:
        await s.run(chord("cmd", "a"))
    assert target.profile == FULL and target.events[-1] == ("switch", FULL)


async def test_a_switch_whose_invocation_is_cancelled_still_ends_on_full() -> None:
    """Cancelled (the client gone at the HID limit, the stop's drain) while the switch to
    keyboard-isolated runs: the switch goes on and lands, and the engine brings `full` back."""
    target = LateSwitchTarget(delay_s=0.3)
    eng = InputEngine(target, target, FAST, "ios")

    async def chord_tap() -> None:
        async with eng.invocation("keyboard_tap") as s:
            await s.run(chord("cmd", "a"))

    task = asyncio.create_task(chord_tap())
    await asyncio.wait_for(target.begun.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    while [ev[1] for ev in target.events if ev[0] == "switch"] != [ISOLATED, FULL]:
        target.switched.clear()
        await asyncio.wait_for(target.switched.wait(), 10)
    assert target.profile == FULL and eng.held.holding() == []


# --- release: the engine is the one place that knows what is held ------------------------------

CENTRE = reports.norm_to_abs(500)


def releases(target: RecordingTarget, since: int = 0) -> dict[str, list[bytes]]:
    """The reports each role received from write number `since` on."""
    out: dict[str, list[bytes]] = {}
    for role, report in target.writes()[since:]:
        out.setdefault(role, []).append(report)
    return out


async def test_release_everything_with_nothing_known_lifts_every_role_mouse_at_centre() -> None:
    """A start that inherits the host's state: nothing is known of what a crashed daemon left,
    so every role gets its all-up report, three times, the mouse's at the centre."""
    eng, target = engine("ios")
    assert eng.held.holding() == []
    assert await eng.release_everything() == ["keyboard", "consumer", "pointer"]
    assert releases(target) == {
        "keyboard": [reports.KEYBOARD_RELEASE] * 3,
        "consumer": [reports.CONSUMER_RELEASE] * 3,
        "pointer": [reports.mouse_release(CENTRE, CENTRE)] * 3,
    }
    assert eng.held.holding() == []
    at = eng.pointer_at  # the host was told where the cursor is
    assert at is not None and at.abs() == (CENTRE, CENTRE)


async def test_a_release_after_a_re_enumeration_keeps_the_mouse_where_it_was_sent() -> None:
    eng, target = engine("ios")
    async with eng.invocation("composite") as s:
        await s.run(prog.tap(FAST, eng.pointer, Point(400, 600)))
        await s.run(chord("cmd", "a"))  # the switch: the host re-enumerated
    assert eng.pointer_at is None
    n = len(target.writes())
    await eng.close()
    x, y = Point(400, 600).abs()
    assert releases(target, n)["pointer"] == [reports.mouse_release(x, y)] * 3  # not the centre


async def test_release_everything_skips_the_pointer_the_isolated_profile_has_not() -> None:
    eng, target = engine("ios")
    target.profile = ISOLATED
    assert await eng.release_everything() == ["keyboard", "consumer"]
    assert set(releases(target)) == {"keyboard", "consumer"}


class StallingTarget(RecordingTarget):
    """A target that stops taking reports on some roles: their writes never complete."""

    def __init__(self, stalled: set[str]) -> None:
        super().__init__()
        self.stalled = stalled
        self.attempts: dict[str, int] = {}

    async def write(self, role: str, report: bytes) -> None:
        self.attempts[role] = self.attempts.get(role, 0) + 1
        if role in self.stalled:
            await asyncio.Event().wait()  # until the engine's write limit cancels it
        await super().write(role, report)


async def test_a_stalled_role_delays_no_other_release_and_each_write_is_bounded() -> None:
    target = StallingTarget({"keyboard"})
    cfg = dataclasses.replace(FAST, write_timeout_ms=50)
    eng = InputEngine(target, target, cfg, "android")
    with structlog.testing.capture_logs() as logs:
        released = await asyncio.wait_for(eng.release_everything(), 10)
    assert released == ["keyboard", "consumer", "pointer"]
    assert releases(target) == {
        "consumer": [reports.CONSUMER_RELEASE] * 3,
        "pointer": [reports.touch_release()] * 3,
    }
    assert target.attempts["keyboard"] == 3  # every repeat tried, each cut at its own limit
    failed = [e for e in logs if e["event"] == "release_write_failed"]
    assert [(e["role"], e["delivered"], e["code"]) for e in failed] == [
        ("keyboard", 0, "hid_write_timeout")
    ]
    # A host that does not listen holds nothing: the next write starts from a clean state.
    assert eng.held.holding() == []


async def test_whatever_is_held_is_released_before_a_profile_switch() -> None:
    eng, target = engine("ios")
    a = keymap.key("a").usage
    async with eng.invocation("composite") as s:
        await s.run([prog.Step(0, "keyboard", reports.keyboard(0, [a]))])  # left down
        await s.run(chord("cmd", "c"))
    switch = target.events.index(("switch", ISOLATED))
    before = [(e[1], e[2]) for e in target.events[:switch]]
    assert (
        before
        == [("keyboard", reports.keyboard(0, [a]))] + [("keyboard", reports.KEYBOARD_RELEASE)] * 3
    )
    assert eng.held.holding() == [] and target.profile == FULL


class WaitingTarget(RecordingTarget):
    """The keyboard takes a report only once the other roles have had all their releases: a
    release that played the roles one after the other could never finish the keyboard's."""

    async def write(self, role: str, report: bytes) -> None:
        if role == "keyboard":
            while sum(1 for r, _ in self.writes() if r != "keyboard") < 6:
                self.written.clear()
                await self.written.wait()
        await super().write(role, report)


async def test_the_roles_are_released_side_by_side() -> None:
    target = WaitingTarget()
    eng = InputEngine(target, target, dataclasses.replace(FAST, write_timeout_ms=5000), "android")
    with structlog.testing.capture_logs() as logs:
        await asyncio.wait_for(eng.release_everything(), 10)
    assert not [e for e in logs if e["event"] == "release_write_failed"]
    assert [r for r, _ in target.writes()][-3:] == ["keyboard"] * 3


async def test_a_right_button_drag_left_alone_is_undone_with_its_button() -> None:
    """A drag that holds the right button (a computer's press-and-hold) moves back holding that
    button when the limit passes, and then lets every button go."""
    eng, target = engine(
        "linux", cfg=InputConfig(drag_limit_s=0.05, isolation_settle_ms=0, move_interval_ms=5)
    )
    start, to = Point(100, 100), Point(300, 100)
    async with eng.invocation("drag_start", drag="start") as s:
        await s.run(prog.drag_start(FAST, eng.pointer, start, to, button="right"))
        s.keep_contact(start, to, "right")
    assert eng.drag_dict()["button"] == "right" and eng.held.holding() == ["pointer"]
    n = len(target.writes())
    while eng.drag is not None or eng.busy:
        await asyncio.sleep(0.01)
    undo = target.writes()[n:]
    assert reports.unpack_mouse(undo[-4][1]) == reports.MouseState(2, 3277, 3277)  # right held
    assert reports.unpack_mouse(undo[-1][1]) == reports.MouseState(0, 3277, 3277)
    assert eng.held.holding() == []
