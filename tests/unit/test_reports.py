"""Packers and unpackers: round trips, refusals, the coordinate rounding rule, releases."""

from __future__ import annotations

import decimal
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gadget import reports
from gadget.reports import ABS_MAX, MAX_CONTACTS, Contact


def reference_norm_to_abs(v: float) -> int:
    """The documented rule worked in decimal: clamp, then round half up of v * 32767 / 1000."""
    with decimal.localcontext() as ctx:
        ctx.prec = 200
        clamped = min(max(decimal.Decimal(v), decimal.Decimal(0)), decimal.Decimal(1000))
        exact = clamped * ABS_MAX / 1000
        return int(exact.quantize(decimal.Decimal(1), rounding=decimal.ROUND_HALF_UP))


# --- coordinates ------------------------------------------------------------------------------


def test_norm_to_abs_edges() -> None:
    assert reports.norm_to_abs(0) == 0
    assert reports.norm_to_abs(1000) == ABS_MAX
    assert reports.norm_to_abs(500) == 16384  # 16383.5 rounds half up
    assert reports.norm_to_abs(-0.1) == 0
    assert reports.norm_to_abs(-math.inf) == 0
    assert reports.norm_to_abs(1000.5) == ABS_MAX
    assert reports.norm_to_abs(math.inf) == ABS_MAX
    with pytest.raises(ValueError, match="NaN"):
        reports.norm_to_abs(math.nan)


@given(v=st.floats(min_value=-50, max_value=1050, allow_nan=False))
def test_norm_to_abs_follows_the_rule(v: float) -> None:
    assert reports.norm_to_abs(v) == reference_norm_to_abs(v)


@given(v=st.integers(0, 1000))
def test_norm_to_abs_integers_follow_the_rule(v: int) -> None:
    assert reports.norm_to_abs(v) == reference_norm_to_abs(v)


def test_abs_to_norm_round_trips_every_value() -> None:
    previous = -1.0
    for a in range(ABS_MAX + 1):
        n = reports.abs_to_norm(a)
        assert 0 <= n <= 1000 and n > previous
        assert reports.norm_to_abs(n) == a
        previous = n
    with pytest.raises(ValueError):
        reports.abs_to_norm(ABS_MAX + 1)


# --- keyboard ---------------------------------------------------------------------------------

key_usages = st.integers(1, 0xFF).filter(lambda u: not 0xE0 <= u <= 0xE7)


@given(modifiers=st.integers(0, 0xFF), keys=st.lists(key_usages, max_size=6, unique=True))
def test_keyboard_round_trip(modifiers: int, keys: list[int]) -> None:
    packed = reports.keyboard(modifiers, keys)
    assert len(packed) == 8 and packed[1] == 0
    assert reports.unpack_keyboard(packed) == reports.KeyboardState(modifiers, tuple(keys))


def test_keyboard_layout() -> None:
    packed = reports.keyboard(reports.MOD_LSHIFT | reports.MOD_RMETA, [0x04, 0x05])
    assert packed == bytes([0x82, 0, 0x04, 0x05, 0, 0, 0, 0])
    assert reports.KEYBOARD_RELEASE == bytes(8) == reports.keyboard()


def test_modifier_bits_are_the_usage_order() -> None:
    bits = [
        reports.MOD_LCTRL,
        reports.MOD_LSHIFT,
        reports.MOD_LALT,
        reports.MOD_LMETA,
        reports.MOD_RCTRL,
        reports.MOD_RSHIFT,
        reports.MOD_RALT,
        reports.MOD_RMETA,
    ]
    assert bits == [1 << i for i in range(8)]


@pytest.mark.parametrize(
    ("modifiers", "keys", "message"),
    [
        (0, [4, 5, 6, 7, 8, 9, 10], "at most 6"),
        (0, [4, 4], "duplicate"),
        (0, [0xE1], "modifier bits"),
        (0, [0], "key usage 0"),
        (0, [0x100], "key usage"),
        (0x100, [], "modifier bitmap"),
        (-1, [], "modifier bitmap"),
    ],
)
def test_keyboard_refuses(modifiers: int, keys: list[int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        reports.keyboard(modifiers, keys)


@pytest.mark.parametrize("bad", [b"", bytes(7), bytes(9)])
def test_unpack_keyboard_refuses_wrong_length(bad: bytes) -> None:
    with pytest.raises(ValueError, match="8 bytes"):
        reports.unpack_keyboard(bad)


@given(bits=st.integers(0, 0x1F))
def test_leds_round_trip(bits: int) -> None:
    state = reports.unpack_leds(bytes([bits]))
    assert reports.leds(state) == bytes([bits])
    assert state.caps_lock == bool(bits & 0x02) and state.kana == bool(bits & 0x10)


def test_leds_ignore_padding_bits_and_refuse_wrong_length() -> None:
    assert reports.unpack_leds(b"\xe1") == reports.Leds(num_lock=True)
    with pytest.raises(ValueError):
        reports.unpack_leds(b"\x00\x00")


# --- mouse ------------------------------------------------------------------------------------


@given(
    buttons=st.integers(0, 0x1F),
    x=st.integers(0, ABS_MAX),
    y=st.integers(0, ABS_MAX),
    wheel=st.integers(-127, 127),
    pan=st.integers(-127, 127),
)
def test_mouse_round_trip(buttons: int, x: int, y: int, wheel: int, pan: int) -> None:
    packed = reports.mouse(buttons, x, y, wheel, pan)
    assert len(packed) == reports.MOUSE_REPORT_LENGTH == 7
    assert reports.unpack_mouse(packed) == reports.MouseState(buttons, x, y, wheel, pan)


def test_mouse_layout() -> None:
    packed = reports.mouse(reports.BUTTON_LEFT | reports.BUTTON_MIDDLE, 0x1234, 0x7FFF, -1, 2)
    assert packed == bytes([0x05, 0x34, 0x12, 0xFF, 0x7F, 0xFF, 0x02])


@pytest.mark.parametrize(
    "args",
    [(0x20, 0, 0), (0, ABS_MAX + 1, 0), (0, 0, -1), (0, 0, 0, 128, 0), (0, 0, 0, 0, -128)],
)
def test_mouse_refuses(args: tuple[int, ...]) -> None:
    with pytest.raises(ValueError):
        reports.mouse(*args)


def test_mouse_release_keeps_position_and_release_report_refuses() -> None:
    assert reports.unpack_mouse(reports.mouse_release(123, 456)) == reports.MouseState(0, 123, 456)
    with pytest.raises(ValueError, match=r"mouse_release\(x, y\)"):
        reports.release_report("mouse")


# --- touchscreen ------------------------------------------------------------------------------

contact_lists = st.lists(
    st.builds(
        Contact,
        id=st.integers(0, MAX_CONTACTS - 1),
        x=st.integers(0, ABS_MAX),
        y=st.integers(0, ABS_MAX),
        tip=st.booleans(),
    ),
    max_size=MAX_CONTACTS,
    unique_by=lambda c: c.id,
)


@given(contacts=contact_lists)
def test_touch_round_trip(contacts: list[Contact]) -> None:
    packed = reports.touch(contacts)
    assert len(packed) == reports.TOUCH_REPORT_LENGTH
    assert packed[0] == reports.TOUCH_REPORT_ID and packed[-1] == len(contacts)
    assert reports.unpack_touch(packed) == tuple(contacts)


def test_touch_layout() -> None:
    packed = reports.touch([Contact(2, 0x0102, 0x0304), Contact(0, 5, 6, tip=False)])
    assert packed[:14] == bytes([1, 0x03, 2, 0x02, 0x01, 0x04, 0x03, 0x00, 0, 5, 0, 6, 0, 0])
    assert packed[-1] == 2 and set(packed[13:-1]) == {0}


@pytest.mark.parametrize(
    ("contacts", "message"),
    [
        ([Contact(i, 0, 0) for i in range(MAX_CONTACTS)] + [Contact(0, 1, 1)], "at most"),
        ([Contact(1, 0, 0), Contact(1, 5, 5)], "duplicate"),
        ([Contact(MAX_CONTACTS, 0, 0)], "contact id"),
        ([Contact(0, ABS_MAX + 1, 0)], "contact x"),
        ([Contact(0, 0, -1)], "contact y"),
    ],
)
def test_touch_refuses(contacts: list[Contact], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        reports.touch(contacts)


def test_unpack_touch_refuses_bad_reports() -> None:
    good = reports.touch([Contact(0, 1, 1)])
    with pytest.raises(ValueError, match="report id"):
        reports.unpack_touch(b"\x02" + good[1:])
    with pytest.raises(ValueError, match="contact count"):
        reports.unpack_touch(good[:-1] + bytes([MAX_CONTACTS + 1]))
    with pytest.raises(ValueError, match="bytes"):
        reports.unpack_touch(good[:-1])


def test_touch_release_lifts_every_possible_contact() -> None:
    lifted = reports.unpack_touch(reports.release_report("touchscreen"))
    assert sorted(c.id for c in lifted) == list(range(MAX_CONTACTS))
    assert not any(c.tip for c in lifted)


# --- consumer and releases --------------------------------------------------------------------


@given(code=st.integers(0, reports.CONSUMER_USAGE_MAX))
def test_consumer_round_trip(code: int) -> None:
    assert reports.unpack_consumer(reports.consumer(code)) == code


def test_consumer_layout_and_refusals() -> None:
    assert reports.consumer(0x223) == b"\x23\x02"
    with pytest.raises(ValueError):
        reports.consumer(0x400)
    with pytest.raises(ValueError):
        reports.unpack_consumer(b"\x00")


def test_release_reports_are_all_up() -> None:
    assert reports.unpack_keyboard(reports.release_report("keyboard")) == reports.KeyboardState(
        0, ()
    )
    assert reports.unpack_consumer(reports.release_report("consumer")) == 0
    assert reports.release_report("consumer") == reports.CONSUMER_RELEASE
    with pytest.raises(ValueError, match="unknown HID role"):
        reports.release_report("joystick")
