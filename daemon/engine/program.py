"""Report programs: what the target receives, and when, built by pure functions.

A program is a list of steps (deadline offset in ms from the program's start, role, report),
sorted by offset. Roles are the HidOutput roles: keyboard, consumer, pointer. Nothing here does
I/O or reads a clock, so every program can be tested report by report and deadline by deadline.

Positions arrive normalized (0..1000, 0,0 top left) and become 0..32767 through
gadget.reports.norm_to_abs, the one rounding rule. Interpolated moves are computed in normalized
units and rounded per step, so a move ends exactly on its end point.

The pointer is an absolute mouse (contact = left button held; iOS with AssistiveTouch, desktops)
or a touchscreen (Android, contact id 0). A mouse press first moves the cursor there and waits
`settle_ms` (iOS animates its cursor) before the button goes down; a touchscreen touches down
where it is asked to. Every program that ends a contact or a key sends its all-up report
`release_repeats` times, `release_interval_ms` apart (a lost release is the classic stuck key).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from daemon.catalog import validation_error
from daemon.config import InputConfig
from daemon.errors import ToolError
from daemon.screen.geometry import IDENTITY, HidMap
from gadget import keymap, layouts, reports
from gadget.descriptors import pointer_for
from gadget.errors import UnknownKey, UntypableCharacter

# Contract defaults (shared/spec/http-tools-api.txt): swipe speed and interpolation steps, and the
# fixed drag_start / drag_release choreography.
SWIPE_SPEED = 2500.0  # normalized units per second
SWIPE_STEPS = 24
DRAG_HOLD_MS = 500.0
DRAG_TRAVEL = 200.0
DRAG_SPEED = 500.0
DRAG_RELEASE_HOLD_MS = 200.0
SCROLL_DISTANCE = 400.0
WHEEL_UNITS_PER_TICK = 100.0  # a desktop "scroll" gesture turns the wheel once per 100 units
SHIFT_BITS = reports.MOD_LSHIFT | reports.MOD_RSHIFT
US = layouts.load("us", "pc")  # callers that name no layout (tests, tools)

# The bounds of one program (one gesture, chord or text), checked whole before its first report
# (see `bound`), so nothing half-runs and no call holds a contact or key longer than its own
# program says. Two minutes leave room for the longest single wait the tool schemas allow
# (60 s) and the motion around it. 20000 reports cover the longest text (5000 characters, a
# press and a release each) and are a few MB at most (a Step is about 150 bytes).
MAX_PROGRAM_MS = 120_000.0
MAX_PROGRAM_STEPS = 20_000
# The slowest swipe or move the schemas take, in normalized units per second: slower ones hold
# the contact for minutes (a full-screen swipe at 10 units/s takes 100 s).
MIN_SPEED = 10.0

# A computer mouse's buttons by name (the gadget's mouse has five: left, right, middle, and
# back/forward as buttons 4 and 5, evdev BTN_SIDE and BTN_EXTRA, as mice send them).
BUTTONS: dict[str, int] = {
    "left": reports.BUTTON_LEFT,
    "right": reports.BUTTON_RIGHT,
    "middle": reports.BUTTON_MIDDLE,
    "back": reports.BUTTON_BACK,
    "forward": reports.BUTTON_FORWARD,
}

Direction = Literal["up", "down", "left", "right"]
DIRECTIONS: dict[str, tuple[int, int]] = {
    "up": (0, -1),
    "down": (0, 1),
    "left": (-1, 0),
    "right": (1, 0),
}


class Step(NamedTuple):
    at_ms: float  # deadline, ms after the program starts
    role: str  # keyboard | consumer | pointer
    report: bytes


Program = list[Step]


@dataclass(frozen=True)
class Point:
    """A normalized position, 0..1000 on both axes of the target's screen (the Pointer's map
    takes it to the HID's 0..32767)."""

    x: float
    y: float

    def abs(self) -> tuple[int, int]:
        return reports.norm_to_abs(self.x), reports.norm_to_abs(self.y)

    def distance(self, other: Point) -> float:
        return math.hypot(other.x - self.x, other.y - self.y)

    def to_dict(self) -> dict[str, float]:
        return {"x": round(self.x, 3), "y": round(self.y, 3)}


def invalid(path: str, message: str, code: str = "value_invalid") -> ToolError:
    """An argument error found after the schema (cross-field rules), in the catalog's shape."""
    return validation_error([{"path": path, "code": code, "message": message}])


def bound(total_ms: float, steps: int, path: str = "$", what: str = "the program") -> None:
    """Refuse a program (or the part of it about to be built) over the bounds: `total_ms` is
    its end, `steps` its report count. The one rule; builders call it before they grow."""
    if not total_ms <= MAX_PROGRAM_MS:  # also NaN and infinity (a speed near zero)
        took = f"{round(total_ms) / 1000:g} s" if math.isfinite(total_ms) else "forever"
        raise invalid(
            path,
            f"{what} would take {took}; one call's program takes at most "
            f"{MAX_PROGRAM_MS / 1000:g} s: use a higher speed or shorter durations",
            "maximum_invalid",
        )
    if steps > MAX_PROGRAM_STEPS:
        raise invalid(
            path,
            f"{what} would send {steps} reports; one call sends at most {MAX_PROGRAM_STEPS}",
            "maximum_invalid",
        )


def checked(program: Program) -> Program:
    """`program` if it is within the bounds (see `bound`), else the refusal."""
    bound(duration_ms(program), len(program))
    return program


def normalize(x: float, y: float, path: str, size: tuple[int, int] | None = None) -> Point:
    """A tool's coordinates as a normalized Point: already normalized (checked against 1000),
    or pixels of a `size` (width, height) capture, checked against its edges and scaled."""
    if size is not None:
        w, h = size
        for value, limit, axis in ((x, w - 1, "x"), (y, h - 1, "y")):
            if value > limit:
                raise invalid(
                    f"{path}.{axis}",
                    f"{value:g} is outside the capture's 0..{limit} pixels",
                    "maximum_invalid",
                )
        return Point(x * 1000 / max(1, w - 1), y * 1000 / max(1, h - 1))
    for value, axis in ((x, "x"), (y, "y")):
        if value > 1000:
            raise invalid(
                f"{path}.{axis}",
                f"{value:g} is greater than the maximum of 1000",
                "maximum_invalid",
            )
    return Point(x, y)


# --- pointer ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pointer:
    """How contacts are expressed to this target, and where its 0..32767 lands."""

    kind: Literal["mouse", "touchscreen"]
    settle_ms: float  # mouse: between moving the cursor and pressing
    map: HidMap = IDENTITY  # screen-normalized -> HID (daemon.screen.geometry)

    def abs(self, p: Point) -> tuple[int, int]:
        return self.map.to_abs(p.x, p.y)

    @staticmethod
    def for_platform(platform: str, cfg: InputConfig) -> Pointer:
        if pointer_for(platform).role == "touchscreen":
            return Pointer("touchscreen", 0.0)
        return Pointer("mouse", cfg.ios_cursor_settle_ms if platform == "ios" else 0.0)

    def report(
        self,
        x: int,
        y: int,
        down: bool,
        wheel: int = 0,
        pan: int = 0,
        button: int = reports.BUTTON_LEFT,
    ) -> bytes:
        """The report of a contact at (x, y); a mouse's contact is `button` held."""
        if self.kind == "mouse":
            return reports.mouse(button if down else 0, x, y, wheel, pan)
        return reports.touch([reports.Contact(id=0, x=x, y=y, tip=down)])


def pointer_held(kind: str, report: bytes) -> bool:
    """Whether this pointer report leaves a button or contact down."""
    if kind == "mouse":
        return reports.unpack_mouse(report).buttons != 0
    return any(c.tip for c in reports.unpack_touch(report))


def pointer_release(kind: str, last: bytes | None) -> bytes:
    """The all-up pointer report; a mouse stays where its last report put it."""
    if kind == "touchscreen":
        return reports.touch_release()
    if last is None:  # nothing sent yet: the centre, where hosts usually start the cursor
        centre = reports.norm_to_abs(500)
        return reports.mouse_release(centre, centre)
    m = reports.unpack_mouse(last)
    return reports.mouse_release(m.x, m.y)


class PointerTimeline:
    """Builds one pointer program step by step; `t` is the running deadline offset."""

    def __init__(
        self,
        cfg: InputConfig,
        pointer: Pointer,
        at: Point | None = None,
        *,
        down: bool = False,
        button: str = "left",
    ):
        if button != "left" and pointer.kind != "mouse":
            raise ValueError(f"a touchscreen has no {button} button")
        self.cfg = cfg
        self.pointer = pointer
        self.button = BUTTONS[button]  # the mouse button a contact holds
        self.t = 0.0
        self.at = at  # where the pointer was last sent (None: unknown)
        self.down = down
        self.placed = False  # whether this program has put the mouse cursor somewhere yet
        self.steps: Program = []

    def is_at(self, p: Point) -> bool:
        """Whether the pointer already sits on p's absolute position."""
        return self.at is not None and self.pointer.abs(self.at) == self.pointer.abs(p)

    def _emit(self, p: Point) -> None:
        x, y = self.pointer.abs(p)
        report = self.pointer.report(x, y, self.down, button=self.button)
        self.steps.append(Step(self.t, "pointer", report))
        self.at = p

    def _emit_beside(self, p: Point) -> None:
        """A report one absolute unit off p on both axes (toward the middle): imperceptible,
        but a change the host cannot drop (see hover)."""
        x, y = self.pointer.abs(p)
        nx, ny = (v - 1 if v > 0 else v + 1 for v in (x, y))
        report = self.pointer.report(nx, ny, self.down, button=self.button)
        self.steps.append(Step(self.t, "pointer", report))

    def wait(self, ms: float) -> PointerTimeline:
        bound(self.t + ms, len(self.steps))
        self.t += max(0.0, ms)
        return self

    def hover(self, p: Point) -> PointerTimeline:
        """Move without contact (mouse only: a touchscreen has no hover).

        The first placement of a program goes by way of a point one unit off. Why: a host
        drops an absolute position equal to the last one it got (Linux's input core does), and
        its cursor may have moved since our last report (its own mouse, a warp, a fresh
        enumeration at 0,0): a report at the same position would then leave the cursor where
        it is, and the click land there.
        """
        if self.pointer.kind != "mouse":
            raise ValueError("a touchscreen cannot move without contact")
        if not self.placed:
            self._emit_beside(p)
            self.placed = True
        self._emit(p)
        return self

    def press(self, p: Point) -> PointerTimeline:
        if self.down:
            raise ValueError("contact is already down")
        if self.pointer.kind == "mouse" and not (self.placed and self.is_at(p)):
            self.hover(p)
            self.wait(self.pointer.settle_ms)
        self.down = True
        self._emit(p)
        return self

    def move(self, p: Point, duration_ms: float = 0.0, steps: int = 1) -> PointerTimeline:
        """Move the contact to p: `steps` reports evenly over `duration_ms`, the last at p."""
        if not self.down:
            raise ValueError("move needs the contact down")
        if self.at is None:
            raise ValueError("move needs a known start")
        a, t0, n = self.at, self.t, max(1, steps)
        bound(t0 + duration_ms, len(self.steps) + n)  # before a single step is built
        for i in range(1, n + 1):
            f = i / n
            self.t = t0 + duration_ms * f
            self._emit(Point(a.x + (p.x - a.x) * f, a.y + (p.y - a.y) * f))
        return self

    def timed_move(self, p: Point, duration_ms: float) -> PointerTimeline:
        """A move at the configured report interval (atomic move_to, drag)."""
        bound(self.t + duration_ms, len(self.steps))  # an infinite duration has no step count
        steps = max(1, math.ceil(duration_ms / self.cfg.move_interval_ms - 1e-9))
        return self.move(p, duration_ms, steps if duration_ms > 0 else 1)

    def release(self) -> PointerTimeline:
        if not self.down or self.at is None:
            raise ValueError("release needs the contact down")
        self.down = False
        for i in range(self.cfg.release_repeats):
            if i:
                self.wait(self.cfg.release_interval_ms)
            self._emit(self.at)
        return self

    def wheel(self, ticks: int, horizontal: bool = False) -> PointerTimeline:
        """Wheel (or pan) ticks, one report each, at the pointer's position (mouse only)."""
        if self.pointer.kind != "mouse" or self.at is None:
            raise ValueError("the wheel needs a mouse at a known position")
        x, y = self.pointer.abs(self.at)
        sign = 1 if ticks > 0 else -1
        buttons = self.button if self.down else 0
        for i in range(abs(ticks)):
            if i:
                self.wait(self.cfg.wheel_interval_ms)
            wheel, pan = (0, sign) if horizontal else (sign, 0)
            self.steps.append(Step(self.t, "pointer", reports.mouse(buttons, x, y, wheel, pan)))
        return self


def tap(
    cfg: InputConfig, ptr: Pointer, p: Point, at: Point | None = None, button: str = "left"
) -> Program:
    """A tap; on a mouse a click of `button`."""
    tl = PointerTimeline(cfg, ptr, at, button=button)
    return tl.press(p).wait(cfg.tap_hold_ms).release().steps


def double_tap(
    cfg: InputConfig, ptr: Pointer, p: Point, at: Point | None = None, button: str = "left"
) -> Program:
    tl = PointerTimeline(cfg, ptr, at, button=button).press(p).wait(cfg.tap_hold_ms).release()
    tl.wait(cfg.double_tap_gap_ms).press(p).wait(cfg.tap_hold_ms).release()
    return tl.steps


def long_press(
    cfg: InputConfig, ptr: Pointer, p: Point, duration_ms: float | None, at: Point | None = None
) -> Program:
    hold = cfg.long_press_ms if duration_ms is None else duration_ms
    return PointerTimeline(cfg, ptr, at).press(p).wait(hold).release().steps


@dataclass(frozen=True)
class Swipe:
    """A resolved swipe: where it goes and how long the motion takes."""

    start: Point
    end: Point
    duration_ms: float
    hold_before_ms: float
    hold_after_ms: float
    steps: int


def resolve_swipe(
    start: Point,
    *,
    end: Point | None = None,
    direction: str | None = None,
    speed: float = SWIPE_SPEED,
    duration_ms: float | None = None,
    hold_before_ms: float = 0.0,
    hold_after_ms: float = 0.0,
    steps: int = SWIPE_STEPS,
) -> Swipe:
    """The contract's swipe rules.

    start+end: duration_ms, or the distance at `speed`. start+direction: travel is
    speed * duration_ms / 1000 when duration_ms is given, else to the edge; the travel stops at
    the edge and takes the time it needs at `speed`.
    """
    if (end is None) == (direction is None):
        raise invalid("$", "a swipe needs start plus exactly one of end or direction")
    if speed <= 0:
        raise invalid("$.speed", "speed must be positive")
    if end is not None:
        ms = duration_ms if duration_ms is not None else start.distance(end) / speed * 1000
        return _bounded(Swipe(start, end, ms, hold_before_ms, hold_after_ms, steps), duration_ms)
    dx, dy = DIRECTIONS[str(direction)]
    travel = math.inf if duration_ms is None else speed * duration_ms / 1000
    room = (
        (1000 - start.x if dx > 0 else start.x) if dx else (1000 - start.y if dy > 0 else start.y)
    )
    travel = min(travel, room)
    stop = Point(start.x + dx * travel, start.y + dy * travel)
    ms = travel / speed * 1000
    return _bounded(Swipe(start, stop, ms, hold_before_ms, hold_after_ms, steps), duration_ms)


def _bounded(s: Swipe, duration_ms: float | None) -> Swipe:
    """The swipe, if its motion and dwells fit one program; the refusal names what set them."""
    param = "$.speed" if duration_ms is None else "$.duration_ms"
    total = s.hold_before_ms + s.duration_ms + s.hold_after_ms
    bound(total, s.steps, param, f"the swipe ({s.duration_ms / 1000:.1f} s of motion)")
    return s


def swipe(
    cfg: InputConfig, ptr: Pointer, s: Swipe, at: Point | None = None, button: str = "left"
) -> Program:
    """Touch down (on a mouse: `button` down), dwell (at least swipe_hold_before_ms), move in
    steps, dwell, lift."""
    tl = PointerTimeline(cfg, ptr, at, button=button).press(s.start)
    tl.wait(max(s.hold_before_ms, cfg.swipe_hold_before_ms))
    tl.move(s.end, s.duration_ms, s.steps)
    return tl.wait(s.hold_after_ms).release().steps


def scroll(
    cfg: InputConfig,
    ptr: Pointer,
    p: Point,
    direction: str,
    distance: float,
    *,
    use_wheel: bool,
    at: Point | None = None,
) -> Program:
    """Scroll the view so content further `direction` comes into view.

    With the wheel (desktops) the cursor goes to p and the wheel turns; otherwise (phones) the
    finger drags the other way at scroll_speed and pauses before lifting, so nothing flings.
    """
    dx, dy = DIRECTIONS[direction]
    if use_wheel:
        ticks = max(1, math.ceil(distance / WHEEL_UNITS_PER_TICK - 1e-9))
        tl = PointerTimeline(cfg, ptr, at).hover(p).wait(ptr.settle_ms)
        # Wheel up (> 0) shows what is above; pan right (> 0) shows what is to the right.
        sign = -dy if dy else dx
        return tl.wheel(sign * ticks, horizontal=bool(dx)).steps
    opposite = {"up": "down", "down": "up", "left": "right", "right": "left"}[direction]
    s = resolve_swipe(
        p,
        direction=opposite,
        speed=cfg.scroll_speed,
        duration_ms=distance / cfg.scroll_speed * 1000,
        hold_after_ms=cfg.scroll_hold_after_ms,
    )
    return swipe(cfg, ptr, s, at)


# --- atomic actions ----------------------------------------------------------------------------


def atomic(
    cfg: InputConfig, ptr: Pointer, actions: Sequence[dict[str, Any]], at: Point | None = None
) -> Program:
    """touch_down / move_to / wait / touch_up as one contact-preserving program.

    Checked whole before anything is sent: a touch_down must be closed by a touch_up, and
    move_to / touch_up need the contact down. Coordinates must already be normalized.
    """
    tl = PointerTimeline(cfg, ptr, at)
    for i, a in enumerate(actions):
        kind, path = a["action"], f"$.actions[{i}]"
        if kind == "touch_down":
            if tl.down:
                raise invalid(path, "touch_down while the contact is already down")
            tl.press(Point(a["x"], a["y"]))
        elif kind == "move_to":
            if not tl.down:
                raise invalid(path, "move_to needs a touch_down before it")
            p = Point(a["x"], a["y"])
            assert tl.at is not None
            if a.get("duration_ms") is not None:
                ms, where = float(a["duration_ms"]), f"{path}.duration_ms"
            elif a.get("speed") is not None:
                ms, where = tl.at.distance(p) / float(a["speed"]) * 1000, f"{path}.speed"
            else:
                ms, where = 0.0, path
            bound(tl.t + ms, len(tl.steps), where, f"the program up to action {i}")
            tl.timed_move(p, ms)
        elif kind == "wait":
            ms = float(a["duration_ms"])
            bound(tl.t + ms, len(tl.steps), f"{path}.duration_ms", f"the program up to action {i}")
            tl.wait(ms)
        elif kind == "touch_up":
            if not tl.down:
                raise invalid(path, "touch_up without a touch_down before it")
            tl.release()
        else:  # the schema lists the kinds; this is a guard for direct callers
            raise invalid(path, f"unknown action {kind!r}")
    if tl.down:
        raise invalid("$.actions", "a program that starts touch_down must end with touch_up")
    if not tl.steps:
        raise invalid("$.actions", "the actions send nothing: add touch_down ... touch_up")
    return tl.steps


# --- drag ----------------------------------------------------------------------------------------


def drag_away(start: Point, direction: str | None) -> Point:
    """Where drag_start moves to: DRAG_TRAVEL units `direction`, by default toward the horizontal
    centre (so the point stays on screen), clamped to the screen."""
    if direction is None:
        direction = "right" if start.x <= 500 else "left"
    dx, dy = DIRECTIONS[direction]
    return Point(_clamp(start.x + dx * DRAG_TRAVEL), _clamp(start.y + dy * DRAG_TRAVEL))


def _clamp(v: float) -> float:
    return min(max(v, 0.0), 1000.0)


def drag_start(
    cfg: InputConfig,
    ptr: Pointer,
    start: Point,
    to: Point,
    at: Point | None = None,
    button: str = "left",
) -> Program:
    """Press (`button` on a mouse), hold 500 ms, move to `to` at 500 units/s; the contact
    stays down."""
    tl = PointerTimeline(cfg, ptr, at, button=button).press(start).wait(DRAG_HOLD_MS)
    return tl.timed_move(to, start.distance(to) / DRAG_SPEED * 1000).steps


def drag_cancel(
    cfg: InputConfig, ptr: Pointer, at: Point, start: Point, button: str = "left"
) -> Program:
    """Undo a drag: move back to where it started at drag speed, then lift."""
    tl = PointerTimeline(cfg, ptr, at, down=True, button=button)
    return tl.timed_move(start, at.distance(start) / DRAG_SPEED * 1000).release().steps


def drag_release(
    cfg: InputConfig, ptr: Pointer, at: Point, to: Point, button: str = "left"
) -> Program:
    """Move straight to the confirmed point, hold 200 ms, lift."""
    tl = PointerTimeline(cfg, ptr, at, down=True, button=button)
    return tl.move(to).wait(DRAG_RELEASE_HOLD_MS).release().steps


# --- mouse only ------------------------------------------------------------------------------


def mouse_move(cfg: InputConfig, ptr: Pointer, p: Point) -> Program:
    return PointerTimeline(cfg, ptr).hover(p).steps


def mouse_scroll(
    cfg: InputConfig, ptr: Pointer, at: Point, delta: int, horizontal: bool
) -> Program:
    """`delta` wheel ticks (> 0 up, or right when horizontal) where the pointer is."""
    return PointerTimeline(cfg, ptr, at).wheel(delta, horizontal).steps


# --- keyboard and consumer -----------------------------------------------------------------------


def resolve_keys(names: Iterable[str], layout: layouts.Layout = US) -> list[keymap.Key]:
    """Key names to keys; an unknown one is a tool error with the closest names.

    A one-character name is the key that types that character unmodified on the target's
    layout (on a German target "z" is the key US calls y, and "ü" a key), so ctrl+z is undo
    everywhere; one the layout types only with modifiers keeps its US key. Other names
    (enter, f5, cmd, volume_up, KEYCODE_*) are the same keys on every layout.
    """
    out = []
    for i, name in enumerate(names):
        usage = layout.key_usage(name.lower()) if len(name) == 1 else None
        if usage is not None:
            out.append(keymap.Key(name.lower(), "keyboard", usage, 0))
            continue
        try:
            out.append(keymap.key(name))
        except UnknownKey as e:
            raise ToolError(
                "unknown_key",
                e.message,
                details={"path": f"$.keys[{i}]", "key": name, "suggestions": e.suggestions},
            ) from None
    return out


def chord_states(keys: Sequence[keymap.Key]) -> list[bytes]:
    """The keyboard report after each key of a chord goes down, in order; releasing in reverse
    walks them back (then all-up)."""
    states: list[bytes] = []
    mods, held = 0, []
    for k in keys:
        if k.modifier:
            mods |= k.modifier
        else:
            held.append(k.usage)
        states.append(reports.keyboard(mods, held))
    return states


def _release_tail(t: float, role: str, report: bytes, cfg: InputConfig) -> Program:
    return [Step(t + i * cfg.release_interval_ms, role, report) for i in range(cfg.release_repeats)]


def release_program(cfg: InputConfig, releases: dict[str, bytes]) -> Program:
    """Each role's all-up report (role -> report), sent release_repeats times
    release_interval_ms apart, every role on the same deadlines: the release of whatever may be
    held when an invocation ends, at a start that inherits the host's state, and at stop."""
    steps = [s for role, report in releases.items() for s in _release_tail(0.0, role, report, cfg)]
    return sorted(steps, key=lambda s: s.at_ms)


def chord(cfg: InputConfig, keys: Sequence[keymap.Key], repeat: int = 1) -> Program:
    """Press the keys in order, hold, release in reverse order; `repeat` times.

    A lone media/system key is a consumer tap; consumer keys do not chord with others.
    """
    if not keys:
        raise invalid("$.keys", "no keys given")
    if any(k.page == "consumer" for k in keys):
        if len(keys) > 1:
            raise ToolError(
                "chord_invalid",
                f"{next(k.name for k in keys if k.page == 'consumer')} is a media/system key: "
                "it cannot be chorded with other keys; send it alone",
            )
        return consumer_tap(cfg, keys[0].usage, repeat)
    names = [k.name for k in keys]
    if len(set(names)) != len(names):
        raise ToolError("chord_invalid", f"a key appears twice in {names}")
    if sum(1 for k in keys if not k.modifier) > reports.KEYBOARD_MAX_KEYS:
        raise ToolError("chord_invalid", "a chord holds at most 6 non-modifier keys")
    states = chord_states(keys)
    hold = cfg.chord_hold_ms if len(keys) > 1 else cfg.key_hold_ms
    steps: Program = []
    t = 0.0
    for r in range(repeat):
        if r:
            t += cfg.key_step_ms
        for i, state in enumerate(states):
            steps.append(Step(t, "keyboard", state))
            if i < len(states) - 1:
                t += cfg.key_step_ms
        t += hold
        for state in reversed(states[:-1]):
            steps.append(Step(t, "keyboard", state))
            t += cfg.key_step_ms
        tail = _release_tail(t, "keyboard", reports.KEYBOARD_RELEASE, cfg)
        steps += tail
        t = tail[-1].at_ms
    return checked(steps)


def consumer_tap(cfg: InputConfig, usage: int, repeat: int = 1) -> Program:
    steps: Program = []
    t = 0.0
    for r in range(repeat):
        if r:
            t += cfg.key_step_ms
        steps.append(Step(t, "consumer", reports.consumer(usage)))
        tail = _release_tail(t + cfg.key_hold_ms, "consumer", reports.CONSUMER_RELEASE, cfg)
        steps += tail
        t = tail[-1].at_ms
    return steps


def text_strokes(
    text: str, path: str = "$.text", layout: layouts.Layout = US
) -> list[tuple[int, int]]:
    """All strokes of `text` on the target's layout (Caps Lock off), or a tool error naming the
    first character it cannot type (checked whole, before anything is sent)."""
    try:
        return layout.plan(text)
    except UntypableCharacter as e:
        raise ToolError(
            "untypable_character",
            f"{e.message}; nothing was typed",
            details={"path": path, "character": e.char, "index": e.index, "layout": e.layout},
        ) from None


def caps_lock_tap(cfg: InputConfig) -> Program:
    """One Caps Lock press, held caps_lock_hold_ms (macOS ignores a short one), then all-up."""
    usage = keymap.key("capslock").usage
    steps = [Step(0.0, "keyboard", reports.keyboard(0, [usage]))]
    return steps + _release_tail(cfg.caps_lock_hold_ms, "keyboard", reports.KEYBOARD_RELEASE, cfg)


def typing(cfg: InputConfig, strokes: Sequence[tuple[int, int]]) -> Program:
    """One press and one release per character at typing_rate_cps.

    Each character's modifiers travel with its key and go up with it, so shift never leaks into
    the next character, and a repeated character is two distinct presses.
    """
    period = 1000.0 / cfg.typing_rate_cps
    steps: Program = []
    for i, (usage, mods) in enumerate(strokes):
        t = i * period
        steps.append(Step(t, "keyboard", reports.keyboard(mods, [usage])))
        steps.append(Step(t + period / 2, "keyboard", reports.KEYBOARD_RELEASE))
    if steps:
        last = steps[-1].at_ms
        steps += _release_tail(last, "keyboard", reports.KEYBOARD_RELEASE, cfg)[1:]
    return checked(steps)  # refused before the invocation, so a tool typing it runs nothing


def program_modifiers(program: Sequence[Step]) -> int:
    """The modifier bits any keyboard report of the program holds."""
    bits = 0
    for step in program:
        if step.role == "keyboard":
            bits |= step.report[0]
    return bits


def duration_ms(program: Sequence[Step]) -> float:
    return program[-1].at_ms if program else 0.0
