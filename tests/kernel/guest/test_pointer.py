"""Pointers as the target reads them: the absolute mouse (iOS and desktops) with exact evdev
positions, buttons, wheel and pan; the touchscreen (Android) with its MT slots."""

from __future__ import annotations

from dataclasses import dataclass, field

import evdev
from board import Board
from evdev import InputEvent, ecodes
from usbhost import describe, frames, open_inputs, read_until

from gadget import reports
from gadget.hidg import HidWriter
from gadget.reports import Contact, norm_to_abs

EV_KEY, EV_REL, EV_ABS = ecodes.EV_KEY, ecodes.EV_REL, ecodes.EV_ABS


def axes(events: list[InputEvent], start: dict[int, int]) -> dict[int, int]:
    """Absolute axis values after `events`, from `start`."""
    state = dict(start)
    for ev in events:
        if ev.type == EV_ABS:
            state[ev.code] = ev.value
    return state


async def send(
    writer: HidWriter, dev: evdev.InputDevice, report: bytes, what: str
) -> list[tuple[int, int, int]]:
    """Write one report and return the evdev frame it produced."""
    await writer.write(report)
    events = await read_until(dev, lambda e: True, what)
    (frame,) = frames(events, EV_KEY, EV_REL, EV_ABS)
    return frame


async def test_absolute_mouse_points_buttons_wheel_pan(board: Board) -> None:
    live = board.up("full", "ios")
    writer = board.writer("pointer")
    with open_inputs([live.input_node("pointer")]) as (mouse,):
        pos = {axis: mouse.absinfo(axis).value for axis in (ecodes.ABS_X, ecodes.ABS_Y)}
        # Corners and centre from normalized 0..1000 coordinates; every step moves an axis.
        for nx, ny in [(500, 500), (0, 0), (1000, 0), (1000, 1000), (0, 1000), (250, 750)]:
            x, y = norm_to_abs(nx), norm_to_abs(ny)
            want = {ecodes.ABS_X: x, ecodes.ABS_Y: y}
            await writer.write(reports.mouse(0, x, y))
            events = await read_until(
                mouse, lambda e, w=want, p=pos: axes(e, p) == w, f"pointer at {(nx, ny)} = {(x, y)}"
            )
            assert {ev.type for ev in events} == {EV_ABS, ecodes.EV_SYN}, describe(events)
            pos = want
        x, y = pos[ecodes.ABS_X], pos[ecodes.ABS_Y]

        buttons = [
            (reports.BUTTON_LEFT, ecodes.BTN_LEFT),
            (reports.BUTTON_RIGHT, ecodes.BTN_RIGHT),
            (reports.BUTTON_MIDDLE, ecodes.BTN_MIDDLE),
            (reports.BUTTON_BACK, ecodes.BTN_SIDE),
            (reports.BUTTON_FORWARD, ecodes.BTN_EXTRA),
        ]
        for bit, btn in buttons:
            name = ecodes.BTN[btn]
            down = await send(writer, mouse, reports.mouse(bit, x, y), f"{name} down")
            assert down == [(EV_KEY, btn, 1)], f"{name}: {down}"
            up = await send(writer, mouse, reports.mouse(0, x, y), f"{name} up")
            assert up == [(EV_KEY, btn, 0)], f"{name}: {up}"

        # Wheel and pan are relative: each report scrolls once; Linux adds 120ths (hi-res).
        for wheel, pan in [(1, 0), (-3, 0), (0, 2), (0, -1), (4, -4)]:
            frame = await send(writer, mouse, reports.mouse(0, x, y, wheel, pan), "scroll")
            want_rel = []
            if wheel:
                want_rel += [(EV_REL, ecodes.REL_WHEEL, wheel)]
                want_rel += [(EV_REL, ecodes.REL_WHEEL_HI_RES, wheel * 120)]
            if pan:
                want_rel += [(EV_REL, ecodes.REL_HWHEEL, pan)]
                want_rel += [(EV_REL, ecodes.REL_HWHEEL_HI_RES, pan * 120)]
            assert sorted(frame) == sorted(want_rel), f"wheel {wheel} pan {pan}: {frame}"
        # The pointer never moved while clicking and scrolling.
        assert (mouse.absinfo(ecodes.ABS_X).value, mouse.absinfo(ecodes.ABS_Y).value) == (x, y)
        # The all-up report at the position sent lifts the buttons and leaves the pointer there.
        await send(writer, mouse, reports.mouse(reports.BUTTON_LEFT, x, y), "BTN_LEFT down")
        release = await send(writer, mouse, reports.mouse_release(x, y), "release")
        assert release == [(EV_KEY, ecodes.BTN_LEFT, 0)]
    writer.close()


@dataclass
class Touches:
    """The target's multitouch state (type B protocol), fed with evdev events."""

    slot: int = 0
    slots: dict[int, dict[int, int]] = field(default_factory=dict)  # slot -> {ABS_MT_*: v}
    keys: dict[int, int] = field(default_factory=dict)

    def copy(self) -> Touches:
        return Touches(self.slot, {k: dict(v) for k, v in self.slots.items()}, dict(self.keys))

    def feed(self, events: list[InputEvent]) -> Touches:
        for ev in events:
            if ev.type == EV_ABS and ev.code == ecodes.ABS_MT_SLOT:
                self.slot = ev.value
            elif ev.type == EV_ABS and ev.code >= ecodes.ABS_MT_TOUCH_MAJOR:
                self.slots.setdefault(self.slot, {})[ev.code] = ev.value
            elif ev.type == EV_KEY:
                self.keys[ev.code] = ev.value
        return self

    def fingers(self) -> dict[int, tuple[int, int, int]]:
        """slot -> (tracking id, x, y) for every slot with a finger down."""
        return {
            slot: (
                s[ecodes.ABS_MT_TRACKING_ID],
                s.get(ecodes.ABS_MT_POSITION_X, -1),
                s.get(ecodes.ABS_MT_POSITION_Y, -1),
            )
            for slot, s in self.slots.items()
            if s.get(ecodes.ABS_MT_TRACKING_ID, -1) >= 0
        }

    def touching(self) -> bool:
        return self.keys.get(ecodes.BTN_TOUCH, 0) == 1


async def touch(
    writer: HidWriter, dev: evdev.InputDevice, t: Touches, contacts: list[Contact]
) -> Touches:
    """Send one touchscreen report; the state once the target has applied it all."""
    await writer.write(reports.touch(contacts))
    want = sorted((c.x, c.y) for c in contacts if c.tip)

    def applied(events: list[InputEvent]) -> bool:
        return sorted(f[1:] for f in t.copy().feed(events).fingers().values()) == want

    events = await read_until(dev, applied, f"fingers at {want}")
    return t.feed(events)


async def test_touchscreen_tap_and_two_finger_gesture(board: Board) -> None:
    live = board.up("full", "android")
    writer = board.writer("pointer")
    assert writer.role == "touchscreen"
    with open_inputs([live.input_node("pointer")]) as (ts,):
        t = Touches()
        # One-finger tap at the centre.
        c = norm_to_abs(500)
        t = await touch(writer, ts, t, [Contact(0, c, c)])
        assert t.touching()
        ((slot, (tid, x, y)),) = t.fingers().items()
        assert (x, y) == (c, c) and tid >= 0
        t = await touch(writer, ts, t, [Contact(0, c, c, tip=False)])
        assert t.fingers() == {} and not t.touching()
        assert t.slots[slot][ecodes.ABS_MT_TRACKING_ID] == -1

        # Two fingers down, spread apart, first one lifts, then the second.
        a0, b0 = (norm_to_abs(400), norm_to_abs(400)), (norm_to_abs(600), norm_to_abs(600))
        a1, b1 = (norm_to_abs(200), norm_to_abs(200)), (norm_to_abs(800), norm_to_abs(900))
        t = await touch(writer, ts, t, [Contact(0, *a0), Contact(1, *b0)])
        down = t.fingers()
        assert len(down) == 2 and t.touching()
        ids = {(x, y): tid2 for tid2, x, y in down.values()}
        slot_of = {(x, y): s for s, (_, x, y) in down.items()}
        assert set(ids) == {a0, b0} and len(set(ids.values())) == 2
        assert tid not in ids.values()  # a new touch gets a new tracking id

        t = await touch(writer, ts, t, [Contact(0, *a1), Contact(1, *b1)])
        moved = t.fingers()
        # Each finger stays in its slot with its tracking id while it moves.
        assert moved[slot_of[a0]] == (ids[a0], *a1)
        assert moved[slot_of[b0]] == (ids[b0], *b1)

        t = await touch(writer, ts, t, [Contact(0, *a1, tip=False), Contact(1, *b1)])
        assert t.fingers() == {slot_of[b0]: (ids[b0], *b1)} and t.touching()
        t = await touch(writer, ts, t, [Contact(1, *b1, tip=False)])
        assert t.fingers() == {} and not t.touching()
    writer.close()
