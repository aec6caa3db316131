"""HID report packers and unpackers: pure functions, no I/O.

Each packer writes exactly the layout its descriptor in `gadget.descriptors` declares; the
unit tests decode every packed report with hid-tools' parser to prove it. The unpackers are
the inverse, used by the simulated target and by the writers (keyboard LEDs).

Layouts (little-endian, bit 0 = least significant bit of a byte):

- keyboard, 8 bytes, no report id: modifiers bitmap, reserved 0, six key usages (0 = none).
- keyboard LED output, 1 byte: bit 0 Num Lock, 1 Caps Lock, 2 Scroll Lock, 3 Compose, 4 Kana.
- mouse, 7 bytes, no report id: buttons bitmap (5 buttons), X u16, Y u16, wheel i8, pan i8.
- touchscreen, report id 1, 32 bytes: MAX_CONTACTS contact slots of 6 bytes
  (bit 0 tip switch, bit 1 in range; contact id u8; X u16; Y u16), then the contact count u8.
  Feature report id 2 is Contact Count Maximum (the host reads it; we never write it).
- consumer, 2 bytes, no report id: one usage u16 (0 = nothing pressed).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

ABS_MAX = 32767
"""Largest absolute X/Y value; 0..32767 because some hosts reject negative or 65535 ranges."""

NORM_MAX = 1000
"""Callers give positions normalized to 0..1000 of the screen's width or height."""


def norm_to_abs(v: float) -> int:
    """Normalized 0..1000 -> 0..32767.

    The one rounding rule: clamp v to 0..1000, then round half up of v * 32767 / 1000
    (so 0 -> 0, 500 -> 16384, 1000 -> 32767). Computed exactly (Fraction), so a float that
    lands a hair off a half cannot round the other way.
    """
    if math.isnan(v):
        raise ValueError("normalized coordinate is NaN")
    clamped = min(max(v, 0), NORM_MAX)
    return math.floor(Fraction(clamped) * ABS_MAX / NORM_MAX + Fraction(1, 2))


def abs_to_norm(a: int) -> float:
    """0..32767 -> normalized 0..1000; norm_to_abs(abs_to_norm(a)) == a for every a."""
    _check_range("absolute coordinate", a, 0, ABS_MAX)
    return a * NORM_MAX / ABS_MAX


def _check_range(what: str, value: int, low: int, high: int) -> None:
    if not low <= value <= high:
        raise ValueError(f"{what} {value} outside {low}..{high}")


def _check_length(what: str, report: bytes, length: int) -> None:
    if len(report) != length:
        raise ValueError(f"{what} report must be {length} bytes, got {len(report)}")


# --- keyboard ---------------------------------------------------------------------------------

MOD_LCTRL = 0x01
MOD_LSHIFT = 0x02
MOD_LALT = 0x04
MOD_LMETA = 0x08
MOD_RCTRL = 0x10
MOD_RSHIFT = 0x20
MOD_RALT = 0x40
MOD_RMETA = 0x80

KEYBOARD_REPORT_LENGTH = 8
KEYBOARD_MAX_KEYS = 6
KEYBOARD_USAGE_MAX = 0xFF
"""The key array's usage range is 0..0xFF, wide enough for F13..F24 and the Lang keys."""
MODIFIER_USAGE_FIRST = 0xE0
MODIFIER_USAGE_LAST = 0xE7

KEYBOARD_RELEASE = bytes(KEYBOARD_REPORT_LENGTH)


@dataclass(frozen=True)
class KeyboardState:
    modifiers: int
    keys: tuple[int, ...]


def keyboard(modifiers: int = 0, keys: Sequence[int] = ()) -> bytes:
    """The 8-byte boot keyboard report for these modifier bits and (at most six) key usages.

    Modifier keys travel only as bits, never in the key array: one representation, so an
    unpacked report compares equal to what was packed.
    """
    _check_range("modifier bitmap", modifiers, 0, 0xFF)
    if len(keys) > KEYBOARD_MAX_KEYS:
        raise ValueError(f"a keyboard report holds at most 6 keys, got {len(keys)}")
    if len(set(keys)) != len(keys):
        raise ValueError(f"duplicate key usage in {list(keys)}")
    for usage in keys:
        _check_range("key usage", usage, 1, KEYBOARD_USAGE_MAX)
        if MODIFIER_USAGE_FIRST <= usage <= MODIFIER_USAGE_LAST:
            raise ValueError(f"modifier usage 0x{usage:02X} goes in the modifier bits, not keys")
    padded = [*keys, *([0] * (KEYBOARD_MAX_KEYS - len(keys)))]
    return bytes([modifiers, 0, *padded])


def unpack_keyboard(report: bytes) -> KeyboardState:
    _check_length("keyboard", report, KEYBOARD_REPORT_LENGTH)
    return KeyboardState(modifiers=report[0], keys=tuple(k for k in report[2:] if k))


@dataclass(frozen=True)
class Leds:
    num_lock: bool = False
    caps_lock: bool = False
    scroll_lock: bool = False
    compose: bool = False
    kana: bool = False


LEDS_REPORT_LENGTH = 1


def unpack_leds(report: bytes) -> Leds:
    """The host's LED output report (what /dev/hidgN of the keyboard yields on read)."""
    _check_length("keyboard LED", report, LEDS_REPORT_LENGTH)
    bits = report[0]
    return Leds(
        num_lock=bool(bits & 0x01),
        caps_lock=bool(bits & 0x02),
        scroll_lock=bool(bits & 0x04),
        compose=bool(bits & 0x08),
        kana=bool(bits & 0x10),
    )


def leds(state: Leds) -> bytes:
    """The LED output report a host would send; the simulated target plays the host."""
    bits = (
        state.num_lock
        | state.caps_lock << 1
        | state.scroll_lock << 2
        | state.compose << 3
        | state.kana << 4
    )
    return bytes([bits])


# --- absolute mouse ---------------------------------------------------------------------------

BUTTON_LEFT = 0x01
BUTTON_RIGHT = 0x02
BUTTON_MIDDLE = 0x04
BUTTON_BACK = 0x08  # Button 4, evdev BTN_SIDE
BUTTON_FORWARD = 0x10  # Button 5, evdev BTN_EXTRA
MOUSE_BUTTONS = 5
WHEEL_MAX = 127

_MOUSE = struct.Struct("<BHHbb")
MOUSE_REPORT_LENGTH = _MOUSE.size


@dataclass(frozen=True)
class MouseState:
    buttons: int
    x: int
    y: int
    wheel: int = 0
    pan: int = 0


def mouse(buttons: int, x: int, y: int, wheel: int = 0, pan: int = 0) -> bytes:
    """Absolute mouse report: x, y in 0..32767; wheel (up > 0) and pan (right > 0) in -127..127."""
    _check_range("button bitmap", buttons, 0, (1 << MOUSE_BUTTONS) - 1)
    _check_range("x", x, 0, ABS_MAX)
    _check_range("y", y, 0, ABS_MAX)
    _check_range("wheel", wheel, -WHEEL_MAX, WHEEL_MAX)
    _check_range("pan", pan, -WHEEL_MAX, WHEEL_MAX)
    return _MOUSE.pack(buttons, x, y, wheel, pan)


def mouse_release(x: int, y: int) -> bytes:
    """All buttons up, pointer left at (x, y).

    An absolute report always carries a position, so a release must repeat where the pointer
    is, or the pointer jumps (a corner, on a real screen). Only the stateful writer knows the
    last position it sent; it calls this with it. That is why release_report("mouse") refuses.
    """
    return mouse(0, x, y)


def unpack_mouse(report: bytes) -> MouseState:
    _check_length("mouse", report, MOUSE_REPORT_LENGTH)
    buttons, x, y, wheel, pan = _MOUSE.unpack(report)
    return MouseState(buttons=buttons, x=x, y=y, wheel=wheel, pan=pan)


# --- touchscreen ------------------------------------------------------------------------------

MAX_CONTACTS = 5
"""Contact slots per report, and the Contact Count Maximum the host reads (as logical max)."""
TOUCH_REPORT_ID = 1
CONTACT_MAX_REPORT_ID = 2

_SLOT = struct.Struct("<BBHH")
TOUCH_REPORT_LENGTH = 1 + MAX_CONTACTS * _SLOT.size + 1


@dataclass(frozen=True)
class Contact:
    """One finger. id is the contact (finger) identifier, 0..MAX_CONTACTS-1."""

    id: int
    x: int
    y: int
    tip: bool = True


def touch(contacts: Sequence[Contact]) -> bytes:
    """One touchscreen frame with every listed contact; the contact count is len(contacts).

    A finger that lifts must be listed once more with tip=False (in range is cleared with it,
    so hosts that track hovering release it too); Linux hid-multitouch releases a slot only
    when it sees that. Contacts not listed are left alone by the host, and a zero count does
    not reset its expectations, so lifting everything is release_report("touchscreen"), not
    touch([]).
    """
    if len(contacts) > MAX_CONTACTS:
        raise ValueError(f"at most {MAX_CONTACTS} contacts per report, got {len(contacts)}")
    ids = [c.id for c in contacts]
    if len(set(ids)) != len(ids):
        raise ValueError(f"duplicate contact id in {ids}")
    slots = bytearray()
    for c in contacts:
        _check_range("contact id", c.id, 0, MAX_CONTACTS - 1)
        _check_range("contact x", c.x, 0, ABS_MAX)
        _check_range("contact y", c.y, 0, ABS_MAX)
        state = 0x03 if c.tip else 0x00  # tip switch and in range together
        slots += _SLOT.pack(state, c.id, c.x, c.y)
    slots += bytes(_SLOT.size * (MAX_CONTACTS - len(contacts)))
    return bytes([TOUCH_REPORT_ID]) + bytes(slots) + bytes([len(contacts)])


def unpack_touch(report: bytes) -> tuple[Contact, ...]:
    """The counted contacts of a touchscreen report (lifted ones included, tip=False)."""
    _check_length("touchscreen", report, TOUCH_REPORT_LENGTH)
    if report[0] != TOUCH_REPORT_ID:
        raise ValueError(f"touchscreen report id must be {TOUCH_REPORT_ID}, got {report[0]}")
    count = report[-1]
    _check_range("contact count", count, 0, MAX_CONTACTS)
    contacts = []
    for i in range(count):
        state, contact_id, x, y = _SLOT.unpack_from(report, 1 + i * _SLOT.size)
        contacts.append(Contact(id=contact_id, x=x, y=y, tip=bool(state & 0x01)))
    return tuple(contacts)


def touch_release() -> bytes:
    """Every possible contact id lifted: releases whatever fingers the host still holds."""
    return touch([Contact(id=i, x=0, y=0, tip=False) for i in range(MAX_CONTACTS)])


# --- consumer control -------------------------------------------------------------------------

CONSUMER_USAGE_MAX = 0x3FF
CONSUMER_REPORT_LENGTH = 2
CONSUMER_RELEASE = bytes(CONSUMER_REPORT_LENGTH)


def consumer(usage: int) -> bytes:
    """One consumer usage held down (0 = nothing)."""
    _check_range("consumer usage", usage, 0, CONSUMER_USAGE_MAX)
    return usage.to_bytes(CONSUMER_REPORT_LENGTH, "little")


def unpack_consumer(report: bytes) -> int:
    _check_length("consumer", report, CONSUMER_REPORT_LENGTH)
    return int.from_bytes(report, "little")


# --- release ----------------------------------------------------------------------------------


def release_report(role: str) -> bytes:
    """The all-up report for keyboard, touchscreen or consumer.

    The mouse has none without a position: use mouse_release(x, y) with the last position.
    """
    if role == "keyboard":
        return KEYBOARD_RELEASE
    if role == "touchscreen":
        return touch_release()
    if role == "consumer":
        return CONSUMER_RELEASE
    if role == "mouse":
        raise ValueError(
            "an absolute mouse release must keep the pointer where it is: "
            "call mouse_release(x, y) with the last position sent"
        )
    raise ValueError(f"unknown HID role {role!r}; expected keyboard, mouse, touchscreen, consumer")
