"""The input engine through the real gadget: the engine's report programs (daemon/engine), run by
its serialized flow over the board backend (daemon/board.py) on the VM's dummy UDC, read back as
the target reads them (this kernel's evdev devices).

Each gesture's evdev timeline is compared with its program: the program's reports, folded the
way a host folds them (a report that changes nothing makes no event), must come back as the
same sequence of pointer states: order, positions, button or contacts. Timings are recorded,
not asserted (TCG on a shared machine is noisy).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field

import evdev
import expected
import pytest
from board import Board, Live
from evdev import InputEvent, ecodes
from figures import Record
from usbhost import (
    EVENT_TIMEOUT,
    WRITE_LIMIT_MS,
    UsbHost,
    find_usb,
    frames,
    no_autorepeat,
    open_inputs,
    read_until,
)

from daemon.board import BoardBackend
from daemon.config import Config, DeviceConfig, InputConfig
from daemon.engine import InputEngine
from daemon.engine import program as prog
from daemon.engine.program import Point, Program
from gadget import keymap, reports
from gadget.profiles import build_profile

EV_KEY, EV_ABS = ecodes.EV_KEY, ecodes.EV_ABS
MOUSE_CODES = {(EV_KEY, ecodes.BTN_LEFT), (EV_ABS, ecodes.ABS_X), (EV_ABS, ecodes.ABS_Y)}

# --- the board side: backend + engine ------------------------------------------------------


@dataclass
class Rig:
    backend: BoardBackend
    engine: InputEngine
    live: Live  # the full profile as the target enumerated it

    @property
    def cfg(self) -> InputConfig:
        return self.engine.cfg

    async def invoke(self, tool: str, *programs: Program) -> list[str]:
        """One HID invocation running `programs` in order; returns its profile switches."""
        async with self.engine.invocation(tool) as session:
            for p in programs:
                await session.run(p)
        return session.switches


Start = Callable[..., Awaitable[Rig]]


@pytest.fixture
async def start(board: Board) -> AsyncIterator[Start]:
    """start(device_type, **input_config) -> a started backend and engine, the target enumerated.
    Closed here; the board fixture then tears the gadget down."""
    rigs: list[Rig] = []

    async def make(device_type: str, **timings: float) -> Rig:
        config = Config(device=DeviceConfig(device_type=device_type), gadget=board.settings)
        board.platform = config.platform
        backend = BoardBackend(config, gadget=board.gadget)
        began = time.monotonic()
        await backend.start()
        assert backend.profiles.profile == "full"
        profile = build_profile("full", config.platform, board.settings)
        live = await asyncio.to_thread(board.wait_live, profile, began)
        cfg = InputConfig(**timings)
        engine = InputEngine(backend.hid, backend.profiles, cfg, config.platform)
        rigs.append(Rig(backend, engine, live))
        return rigs[-1]

    yield make
    for rig in rigs:
        await rig.engine.close()
        await rig.backend.close()


# --- the target side: pointer timelines ------------------------------------------------------


def chain(programs: Sequence[Program]) -> Program:
    """Programs run back to back by one invocation, as one program (offsets shifted)."""
    out: Program = []
    t0 = 0.0
    for p in programs:
        out += [step._replace(at_ms=t0 + step.at_ms) for step in p]
        t0 += prog.duration_ms(p)
    return out


def planned(program: Program, start: object, mouse: bool) -> list[tuple[object, float]]:
    """What a host makes of a pointer program: (state, offset ms) for the start and for each
    report that changes the state (a report that changes nothing makes no event)."""
    out: list[tuple[object, float]] = [(start, 0.0)]
    for step in program:
        state: object
        if mouse:
            m = reports.unpack_mouse(step.report)
            state = (bool(m.buttons & reports.BUTTON_LEFT), m.x, m.y)
        else:
            contacts = reports.unpack_touch(step.report)
            state = tuple(sorted((c.x, c.y) for c in contacts if c.tip))
        if state != out[-1][0]:
            out.append((state, step.at_ms))
    return out


def contacts_in(states: Sequence[object], mouse: bool) -> int:
    """How many times a contact begins (button goes down / a finger lands)."""
    down = [bool(s[0]) if mouse else bool(s) for s in states]  # type: ignore[index]
    return sum(1 for a, b in itertools.pairwise(down) if b and not a)


@dataclass
class Timeline:
    """The target's pointer state, fed with evdev events in order (one object per device, so
    multitouch slot values carry over from gesture to gesture as they do in the kernel)."""

    mouse: bool
    values: dict[int, int] = field(default_factory=dict)  # mouse: BTN_LEFT, ABS_X, ABS_Y
    slot: int = 0
    slots: dict[int, dict[int, int]] = field(default_factory=dict)  # touch: slot -> ABS_MT_*
    tracking_ids: list[int] = field(default_factory=list)  # every new contact's id, in order

    @classmethod
    def of(cls, dev: evdev.InputDevice, mouse: bool) -> Timeline:
        if not mouse:
            return cls(False)  # a fresh device: every slot empty
        x, y = (dev.absinfo(axis).value for axis in (ecodes.ABS_X, ecodes.ABS_Y))
        down = ecodes.BTN_LEFT in dev.active_keys()
        return cls(True, {ecodes.BTN_LEFT: int(down), ecodes.ABS_X: x, ecodes.ABS_Y: y})

    def copy(self) -> Timeline:
        slots = {k: dict(v) for k, v in self.slots.items()}
        return Timeline(self.mouse, dict(self.values), self.slot, slots, list(self.tracking_ids))

    @property
    def state(self) -> object:
        if self.mouse:
            v = self.values
            return (bool(v[ecodes.BTN_LEFT]), v[ecodes.ABS_X], v[ecodes.ABS_Y])
        return tuple(
            sorted(
                (s.get(ecodes.ABS_MT_POSITION_X, 0), s.get(ecodes.ABS_MT_POSITION_Y, 0))
                for s in self.slots.values()
                if s.get(ecodes.ABS_MT_TRACKING_ID, -1) >= 0
            )
        )

    def feed(self, events: list[InputEvent]) -> list[tuple[object, float]]:
        """(state, time) after each SYN_REPORT that changed the state."""
        out: list[tuple[object, float]] = []
        for frame in split(events):
            before = self.state
            for ev in frame:
                self._apply(ev)
            if self.state != before:
                out.append((self.state, frame[-1].timestamp()))
        return out

    def _apply(self, ev: InputEvent) -> None:
        if self.mouse:
            if (ev.type, ev.code) in MOUSE_CODES:
                self.values[ev.code] = ev.value
        elif ev.type == EV_ABS and ev.code == ecodes.ABS_MT_SLOT:
            self.slot = ev.value
        elif ev.type == EV_ABS and ev.code >= ecodes.ABS_MT_TOUCH_MAJOR:
            self.slots.setdefault(self.slot, {})[ev.code] = ev.value
            if ev.code == ecodes.ABS_MT_TRACKING_ID and ev.value >= 0:
                self.tracking_ids.append(ev.value)


def split(events: list[InputEvent]) -> list[list[InputEvent]]:
    """Events grouped by SYN_REPORT, each group ending with its SYN_REPORT."""
    out: list[list[InputEvent]] = []
    cur: list[InputEvent] = []
    for ev in events:
        cur.append(ev)
        if ev.type == ecodes.EV_SYN and ev.code == ecodes.SYN_REPORT:
            out.append(cur)
            cur = []
    return out


@dataclass
class Gesture:
    want: list[object]  # states the program should give, from the state before it
    got: list[object]  # states the target showed, from the same start
    planned_ms: float  # program offset from the first state change to the last
    seen_ms: float  # the same span on the target's event timestamps


async def gesture(
    rig: Rig, dev: evdev.InputDevice, t: Timeline, name: str, *programs: Program
) -> Gesture:
    """Run `programs` as one invocation while reading the target; `t` moves on with it."""
    before = t.state
    plan = planned(chain(programs), before, t.mouse)
    want = [state for state, _ in plan]
    probe, changes, fed = t.copy(), 0, 0

    def done(events: list[InputEvent]) -> bool:  # incremental: the vCPU is the engine's too
        nonlocal changes, fed
        changes += len(probe.feed(events[fed:]))
        fed = len(events)
        return changes >= len(want) - 1

    invocation = asyncio.create_task(rig.invoke(name, *programs))
    what = f"{name}: {len(want) - 1} pointer states"
    events = await read_until(dev, done, what, timeout=EVENT_TIMEOUT + 5)
    switches = await invocation
    assert switches == [], f"{name}: a pointer gesture must not switch profiles ({switches})"
    seen = t.feed(events)
    got = [before, *(state for state, _ in seen)]
    seen_ms = (seen[-1][1] - seen[0][1]) * 1000 if seen else 0.0
    return Gesture(want, got, plan[-1][1] - plan[1][1] if len(plan) > 1 else 0.0, seen_ms)


# --- the gestures --------------------------------------------------------------------------


def gestures(cfg: InputConfig, ptr: prog.Pointer) -> list[tuple[str, list[Program]]]:
    """A tap, a swipe (24 interpolated steps at the default speed) and a drag (drag_start's
    hold and 400 ms move, then drag_release to a confirmed point), chained so each starts where
    the pointer is."""
    tap = prog.tap(cfg, ptr, Point(250, 400))
    swipe = prog.swipe(
        cfg, ptr, prog.resolve_swipe(Point(500, 800), end=Point(520, 200)), at=Point(250, 400)
    )
    drag_from = Point(300, 500)
    drag_to = prog.drag_away(drag_from, None)
    drag = [
        prog.drag_start(cfg, ptr, drag_from, drag_to, at=Point(520, 200)),
        prog.drag_release(cfg, ptr, drag_to, Point(700, 300)),
    ]
    return [("tap", [tap]), ("swipe", [swipe]), ("drag", drag)]


@pytest.mark.parametrize("device_type", ["iOS", "Android"])
async def test_tap_swipe_drag_timelines(start: Start, device_type: str, record: Record) -> None:
    rig = await start(device_type)
    mouse = rig.engine.pointer.kind == "mouse"
    assert mouse == (device_type == "iOS")
    node = rig.live.input_node("pointer")
    with open_inputs([node]) as (dev,):
        t = Timeline.of(dev, mouse)
        for name, programs in gestures(rig.cfg, rig.engine.pointer):
            ids_before = len(t.tracking_ids)
            g = await gesture(rig, dev, t, name, *programs)
            want, got = g.want, g.got
            assert got == want, f"{device_type} {name}: the target's timeline differs"
            # Nothing is left down, and the contact count matches the program's.
            assert (not got[-1][0]) if mouse else got[-1] == (), f"{name}: left {got[-1]}"  # type: ignore[index]
            assert contacts_in(got, mouse) == contacts_in(want, mouse) == 1
            if not mouse:  # each contact is one new tracking id on the target
                ids = t.tracking_ids[ids_before:]
                assert len(ids) == 1, f"{name}: tracking ids {ids}"
            record(
                f"{name}_span_ms[{device_type}]", f"{g.seen_ms:.0f} (program {g.planned_ms:.0f})"
            )
        if not mouse:
            assert len(set(t.tracking_ids)) == len(t.tracking_ids) == 3


# --- iOS isolation ---------------------------------------------------------------------------


async def test_isolation_round_trip(start: Start, host: UsbHost, record: Record) -> None:
    """cmd+a on iOS: the engine switches to keyboard-isolated (the pointer's input device goes),
    the chord arrives on the isolated keyboard, and `full` with its pointer comes back at the
    end of the invocation with no key held."""
    rig = await start("iOS")
    s = rig.backend.config.gadget
    full, iso = s.product_id_full, s.product_id_isolated
    chord = prog.chord(rig.cfg, prog.resolve_keys(["cmd", "a"]))
    began = time.monotonic()
    invocation = asyncio.create_task(rig.invoke("keyboard_tap", chord))

    usb = await asyncio.to_thread(host.wait_usb, s.vendor_id, iso, n_hid=2)
    isolated = Live(build_profile("keyboard-isolated", "ios", s), usb, 0.0, 0.0)
    assert find_usb(s.vendor_id, full) is None
    assert rig.live.hid("pointer") not in usb.inputs()  # no pointer device on the target
    with open_inputs([isolated.input_node("keyboard")]) as (kbd,):
        no_autorepeat(kbd)
        opened = time.time()  # evdev stamps events with the realtime clock
        events = await read_until(kbd, key_frames_reach(4), "cmd+a")
    switches = await invocation
    ended = time.monotonic()

    meta, a = ecodes.KEY_LEFTMETA, ecodes.KEY_A
    assert frames(events, EV_KEY) == [
        [(EV_KEY, meta, 1)],
        [(EV_KEY, a, 1)],
        [(EV_KEY, a, 0)],
        [(EV_KEY, meta, 0)],
    ]
    record(
        "isolation_chord_after_keyboard_open_ms", f"{(events[0].timestamp() - opened) * 1000:.0f}"
    )
    record("isolation_round_trip_s", f"{ended - began:.2f}")
    assert switches == ["keyboard-isolated", "full"]
    assert rig.backend.profiles.profile == "full"

    # The full composite is back on the target, with its pointer; the isolated one is gone.
    back = await asyncio.to_thread(host.wait_usb, s.vendor_id, full, n_hid=3)
    await asyncio.to_thread(host.wait_usb_gone, s.vendor_id, iso)
    restored = Live(rig.live.profile, back, 0.0, 0.0)
    nodes = [restored.input_node("keyboard"), restored.input_node("pointer")]
    with open_inputs(nodes) as (kbd, mouse):
        assert kbd.active_keys() == []  # no key held
        # The LED reader followed the keyboard's re-created node: the host's Caps Lock shows.
        kbd.set_led(ecodes.LED_CAPSL, 1)
        await until(lambda: rig.backend.leds.caps_lock, "caps lock on in backend.leds")
        kbd.set_led(ecodes.LED_CAPSL, 0)
        await until(lambda: not rig.backend.leds.caps_lock, "caps lock off in backend.leds")
        # The pointer answers again, through the writers the switch reopened.
        t = Timeline.of(mouse, True)
        move = prog.mouse_move(rig.cfg, rig.engine.pointer, Point(100, 900))
        g = await gesture(rig, mouse, t, "mouse_move", move)
        # From rest: one absolute unit beside the point, then the point (the host's input core
        # drops a value equal to the last one, so a first placement goes by a neighbour).
        assert g.got == g.want and len(g.want) == 3


# --- a restart after a crash ------------------------------------------------------------------


async def test_a_restart_releases_what_a_crashed_daemon_left_down(start: Start) -> None:
    """A daemon dies with a key and the button down; the next one starts on the same live
    `full` (reconciling changes nothing, so the host kept its state) and its engine, knowing
    nothing, lifts every role: the target sees KEY_A and BTN_LEFT up, the cursor at the centre
    (what the daemon's start does when the backend says the host kept its state)."""
    rig = await start("iOS")
    x, y, centre = reports.norm_to_abs(200), reports.norm_to_abs(300), reports.norm_to_abs(500)
    nodes = [rig.live.input_node("keyboard"), rig.live.input_node("pointer")]
    with open_inputs(nodes) as (kbd, mouse):
        no_autorepeat(kbd)
        await rig.backend.hid.write("keyboard", reports.keyboard(0, [keymap.key("a").usage]))
        await rig.backend.hid.write("pointer", reports.mouse(reports.BUTTON_LEFT, x, y))
        await until(
            lambda: ecodes.KEY_A in kbd.active_keys() and ecodes.BTN_LEFT in mouse.active_keys(),
            "KEY_A and BTN_LEFT down",
        )
        rig.backend.writers.close()  # the crash: its descriptors go, the gadget stays bound
        again = BoardBackend(rig.backend.config, gadget=rig.backend.gadget)
        try:
            assert await again.start() is True  # nothing re-enumerated: the host kept its state
            engine = InputEngine(again.hid, again.profiles, rig.cfg, "ios")
            assert await engine.release_everything() == ["keyboard", "consumer", "pointer"]
            await until(
                lambda: kbd.active_keys() == [] and mouse.active_keys() == [], "every key up"
            )
            at = (mouse.absinfo(ecodes.ABS_X).value, mouse.absinfo(ecodes.ABS_Y).value)
            assert at == (centre, centre)  # nothing known of where it was: the centre
            await engine.close()
        finally:
            await again.close()


# --- typing throughput -----------------------------------------------------------------------

# Every printable ASCII character, shifted and unshifted, then repeated characters (each needs
# its own release), plain and shifted.
TEXT = "".join(chr(c) for c in range(0x20, 0x7F)) * 6 + "bookkeeper  ((COFFEE)) !!"
RATE_CPS = 300.0


async def test_typing_throughput(start: Start, record: Record) -> None:
    """keyboard_text's program at RATE_CPS through the kernel: the target decodes exactly the
    text (zero errors). Recorded: the achieved rate, and as the baseline of the same run the
    same reports written back to back with no deadlines (what this VM's kernel path can take
    right now; TCG shares the machine's two cores, so absolute rates vary with its load). The
    engine's whole-program write limit is widened and scaled by the VM's slowness: it bounds a
    failure, and TCG is slower than a board (at slowness 3.8 the kernel path took 595
    characters at about 50 cps, past a fixed 10 s)."""
    rig = await start("iOS", typing_rate_cps=RATE_CPS, write_timeout_ms=WRITE_LIMIT_MS)
    program = prog.typing(rig.cfg, prog.text_strokes(TEXT))

    async def back_to_back() -> list[str]:
        for step in program:
            await rig.backend.hid.write(step.role, step.report)
        return []

    with open_inputs([rig.live.input_node("keyboard")]) as (kbd,):
        no_autorepeat(kbd)
        engine = await typed(kbd, rig.invoke("keyboard_text", program))
        baseline = await typed(kbd, back_to_back())
    record(
        f"engine_typing_cps[rate={RATE_CPS:g}]",
        f"{engine:.0f} (baseline {baseline:.0f}, ratio {engine / baseline:.2f}; {len(TEXT)} chars)",
    )


async def typed(kbd: evdev.InputDevice, typing: Awaitable[list[str]]) -> float:
    """Run `typing` (which types TEXT) while reading the target; check that exactly TEXT came,
    key frame by key frame, and return the characters per second on evdev's timestamps."""
    n_frames = 2 * len(TEXT)
    task = asyncio.ensure_future(typing)
    try:
        events = await read_until(
            kbd,
            key_frames_reach(n_frames),
            f"{n_frames} key frames",
            timeout=EVENT_TIMEOUT + len(TEXT) / RATE_CPS * 4,
        )
    except AssertionError as e:  # say why the typing stopped, when it did
        if task.done() and task.exception() is not None:
            raise AssertionError(f"the typing ended with {task.exception()!r}; {e}") from None
        raise
    assert await task == []  # shift alone never isolates
    got = frames(events, EV_KEY)
    want: list[list[tuple[int, int, int]]] = []
    shift = ecodes.KEY_LEFTSHIFT
    for code, shifted in expected.us_strokes(TEXT):
        want.append([(EV_KEY, shift, 1)] * shifted + [(EV_KEY, code, 1)])
        want.append([(EV_KEY, shift, 0)] * shifted + [(EV_KEY, code, 0)])
    assert got == want
    assert expected.us_decode([(code, value) for f in got for _, code, value in f]) == TEXT
    keys = [e for e in events if e.type == EV_KEY]
    return len(TEXT) / (keys[-1].timestamp() - keys[0].timestamp())


async def until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + EVENT_TIMEOUT
    while not check():
        assert time.monotonic() < deadline, f"timed out after {EVENT_TIMEOUT:.0f} s: {what}"
        await asyncio.sleep(0.01)


def key_frames_reach(n: int) -> Callable[[list[InputEvent]], bool]:
    """read_until's `done` for n frames with key events, counted incrementally: re-scanning
    every event on every frame is quadratic and steals the one vCPU from the engine."""
    seen, frames_with_keys, key_in_frame = 0, 0, False

    def done(events: list[InputEvent]) -> bool:
        nonlocal seen, frames_with_keys, key_in_frame
        for ev in events[seen:]:
            if ev.type == EV_KEY:
                key_in_frame = True
            elif ev.type == ecodes.EV_SYN and ev.code == ecodes.SYN_REPORT and key_in_frame:
                frames_with_keys, key_in_frame = frames_with_keys + 1, False
        seen = len(events)
        return frames_with_keys >= n

    return done
