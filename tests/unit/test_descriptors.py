"""Every descriptor through hid-tools' independent parser, and every packer decoded by it.

hid-tools (the parser the kernel's HID maintainers test hid-multitouch with) reads our
descriptor bytes; the field layout it finds must be the layout the packers write: pack a
report, let hid-tools pull each field's bits out, compare with what we packed.

Run with -s to see each descriptor's layout table and hid-tools' own dump.
"""

from __future__ import annotations

import io
from collections import defaultdict

import pytest
from hidtools.hid import HidField, HidReport, ReportDescriptor
from hypothesis import given
from hypothesis import strategies as st

from gadget import descriptors, reports
from gadget.descriptors import CONSUMER, KEYBOARD, MOUSE, TOUCHSCREEN, HidFunction
from gadget.reports import Contact

ALL = [KEYBOARD, MOUSE, TOUCHSCREEN, CONSUMER]


def usage(page: int, usage_id: int) -> int:
    """hid-tools' 32-bit usage: page in the high half."""
    return page << 16 | usage_id


GD_X, GD_Y, GD_WHEEL = usage(0x01, 0x30), usage(0x01, 0x31), usage(0x01, 0x38)
AC_PAN = usage(0x0C, 0x238)
TIP, IN_RANGE, CONTACT_ID = usage(0x0D, 0x42), usage(0x0D, 0x32), usage(0x0D, 0x51)
CONTACT_COUNT, CONTACT_MAX = usage(0x0D, 0x54), usage(0x0D, 0x55)


def parse(fn: HidFunction) -> ReportDescriptor:
    return ReportDescriptor.from_bytes(list(fn.report_desc))


def only_input(fn: HidFunction) -> HidReport:
    rdesc = parse(fn)
    assert len(rdesc.input_reports) == 1
    return next(iter(rdesc.input_reports.values()))


def data_fields(report: HidReport) -> list[HidField]:
    return [f for f in report if not f.is_const]


def decode(report: HidReport, data: bytes) -> dict[tuple[int, int], list[int]]:
    """hid-tools' reading of a report: (logical collection number, usage) -> values."""
    assert len(data) == report.size, "packed length differs from the parsed report size"
    if report.numbered:
        assert data[0] == report.report_ID
    out: dict[tuple[int, int], list[int]] = defaultdict(list)
    for field in data_fields(report):
        values = field.get_values(list(data))
        assert all(isinstance(v, int) for v in values)
        out[(field.collection[2], field.usage)].extend(int(v) for v in values)
    return out


def layout_lines(report: HidReport) -> list[str]:
    kind = report.type.name.lower()
    rid = f"report id {report.report_ID}" if report.numbered else "no report id"
    lines = [f"  {kind}, {rid}, {report.size} bytes ({report.application_name})"]
    if report.numbered:
        lines.append(f"    bits   0..7   report id = {report.report_ID}")
    for f in report:
        end = f.start + f.size * f.count - 1
        if f.is_const:
            name = "padding (constant)"
        elif f.is_array:
            usages = f.usages or []
            first, last = usages[0] & 0xFFFF, usages[-1] & 0xFFFF
            name = f"array of {f.count} x {f.size}-bit {f.usage_page_name} usages"
            name += f" 0x{first:X}..0x{last:X}"
        else:
            name = f"{f.usage_page_name}: {f.usage_name}"
        rng = "" if f.is_const else f" logical {f.logical_min}..{f.logical_max}"
        rel = " relative" if f.type & 0x04 else ""
        phys = f" physical 0..{f.physical_max} unit 0x{f.unit:X} exp {f.unit_exp}" if f.unit else ""
        lines.append(f"    bits {f.start:3}..{end:<3} {name}{rng}{rel}{phys}")
    return lines


# --- the layout as a whole --------------------------------------------------------------------


@pytest.mark.parametrize("fn", ALL, ids=lambda f: f.role)
def test_fields_tile_each_report_and_input_length_matches(fn: HidFunction) -> None:
    """No gaps, no overlaps; the longest input report is report_length bytes."""
    rdesc = parse(fn)
    assert rdesc.size == len(fn.report_desc)
    dump = io.StringIO()
    rdesc.dump(dump)
    print(f"\n===== {fn.role}: {len(fn.report_desc)} bytes, report_length {fn.report_length}")
    for reports_of_type in (rdesc.input_reports, rdesc.output_reports, rdesc.feature_reports):
        for report in reports_of_type.values():
            bit = 8 if report.numbered else 0
            for f in report:
                assert f.start == bit, f"field {f.usage_name} starts at {f.start}, expected {bit}"
                bit += f.size * f.count
            assert bit == report.size * 8, "a report must end on a byte boundary"
            print("\n".join(layout_lines(report)))
    print("  hid-tools dump:")
    print(dump.getvalue().rstrip())
    assert max(r.size for r in rdesc.input_reports.values()) == fn.report_length


@pytest.mark.parametrize("fn", ALL, ids=lambda f: f.role)
def test_hosts_read_every_maximum_as_hid_tools_does(fn: HidFunction) -> None:
    """hid-tools reads Logical/Physical Maximum unsigned; Linux and Windows read them signed.

    They agree only if the sign bit of the encoded data is clear (the classic bug: 0x25 0xFF
    meant as 255 is -1 to the kernel).
    """
    for it in parse(fn).rdesc_items:
        if it.item in ("Logical Maximum", "Physical Maximum"):
            assert it.raw_value[-1] & 0x80 == 0, f"{it.item} {it.value} reads as negative"
    for reports_of_type in parse(fn).input_reports, parse(fn).feature_reports:
        for report in reports_of_type.values():
            for f in data_fields(report):
                assert f.logical_min < f.logical_max


def test_encoder_picks_sizes_hosts_read_back() -> None:
    assert descriptors.item(descriptors.LOGICAL_MAX, 255) == bytes([0x26, 0xFF, 0x00])
    assert descriptors.item(descriptors.LOGICAL_MIN, -127) == bytes([0x15, 0x81])
    assert descriptors.item(descriptors.USAGE_MAX, 255) == bytes([0x29, 0xFF])
    assert descriptors.item(descriptors.USAGE, 0x238) == bytes([0x0A, 0x38, 0x02])
    assert descriptors.item(descriptors.END_COLLECTION) == bytes([0xC0])
    with pytest.raises(ValueError):
        descriptors.item(descriptors.USAGE, 1 << 32)


def test_pointer_for_platforms() -> None:
    assert descriptors.pointer_for("android") is TOUCHSCREEN
    for platform in ("ios", "macos", "windows", "linux", "iOS", "macOS"):
        assert descriptors.pointer_for(platform) is MOUSE
    with pytest.raises(ValueError, match="android"):
        descriptors.pointer_for("symbian")


# --- keyboard ---------------------------------------------------------------------------------


def test_keyboard_is_a_boot_keyboard() -> None:
    """The boot protocol fixes the layout: modifiers, reserved byte, six keys; no report id."""
    assert (KEYBOARD.subclass, KEYBOARD.protocol) == (1, 1)
    rdesc = parse(KEYBOARD)
    assert list(rdesc.input_reports) == [-1] and list(rdesc.output_reports) == [-1]
    report = rdesc.input_reports[-1]
    assert report.application == usage(0x01, 0x06)
    fields = list(report)
    assert [(f.start, f.size, f.usage) for f in fields[:8]] == [
        (i, 1, usage(0x07, 0xE0 + i)) for i in range(8)
    ]
    assert fields[8].is_const and (fields[8].start, fields[8].size) == (8, 8)
    keys = fields[9]
    assert keys.is_array and (keys.start, keys.size, keys.count) == (16, 8, 6)
    assert (keys.logical_min, keys.logical_max) == (0, 0xFF)
    leds = rdesc.output_reports[-1]
    assert [(f.start, f.usage) for f in data_fields(leds)] == [
        (i, usage(0x08, i + 1)) for i in range(5)
    ]
    assert leds.size == 1


@given(
    modifiers=st.integers(0, 0xFF),
    keys=st.lists(
        st.integers(1, 0xFF).filter(lambda u: not 0xE0 <= u <= 0xE7),
        max_size=6,
        unique=True,
    ),
)
def test_keyboard_report_decodes_through_hid_tools(modifiers: int, keys: list[int]) -> None:
    report = only_input(KEYBOARD)
    values = decode(report, reports.keyboard(modifiers, keys))
    bits = sum(values[(0, usage(0x07, 0xE0 + i))][0] << i for i in range(8))
    assert bits == modifiers
    (array,) = [f for f in data_fields(report) if f.is_array]
    assert [v for v in array.get_values(list(reports.keyboard(modifiers, keys))) if v] == keys


@given(num=st.booleans(), caps=st.booleans(), scroll=st.booleans(), comp=st.booleans())
def test_led_report_decodes_through_hid_tools(
    num: bool, caps: bool, scroll: bool, comp: bool
) -> None:
    state = reports.Leds(num_lock=num, caps_lock=caps, scroll_lock=scroll, compose=comp)
    out = parse(KEYBOARD).output_reports[-1]
    values = decode(out, reports.leds(state))
    got = [values[(0, usage(0x08, i))][0] for i in range(1, 6)]
    assert got == [num, caps, scroll, comp, False]


def test_caps_lock_output_report_is_what_the_kernel_sends() -> None:
    """Seen on the kernel tier: setting LED_CAPSL through evdev writes 02 to /dev/hidg0."""
    assert reports.unpack_leds(b"\x02") == reports.Leds(caps_lock=True)


# --- mouse ------------------------------------------------------------------------------------


def test_mouse_has_pointer_physical_collection_in_mouse_application() -> None:
    report = only_input(MOUSE)
    assert not report.numbered
    for f in data_fields(report):
        assert f.application == usage(0x01, 0x02)
        assert f.physical == usage(0x01, 0x01), f"{f.usage_name} outside the Pointer collection"
    by_usage = {f.usage: f for f in data_fields(report)}
    for axis in (GD_X, GD_Y):
        f = by_usage[axis]
        assert (f.logical_min, f.logical_max, f.size) == (0, reports.ABS_MAX, 16)
        assert not f.type & 0x04, "X/Y must be absolute"
    for rel in (GD_WHEEL, AC_PAN):
        f = by_usage[rel]
        assert (f.logical_min, f.logical_max, f.size) == (-127, 127, 8)
        assert f.type & 0x04, "wheel and pan must be relative"
    buttons = [u for u in by_usage if u >> 16 == 0x09]
    assert buttons == [usage(0x09, i) for i in range(1, reports.MOUSE_BUTTONS + 1)]


@given(
    buttons=st.integers(0, 0x1F),
    x=st.integers(0, reports.ABS_MAX),
    y=st.integers(0, reports.ABS_MAX),
    wheel=st.integers(-127, 127),
    pan=st.integers(-127, 127),
)
def test_mouse_report_decodes_through_hid_tools(
    buttons: int, x: int, y: int, wheel: int, pan: int
) -> None:
    values = decode(only_input(MOUSE), reports.mouse(buttons, x, y, wheel, pan))
    got_buttons = sum(values[(0, usage(0x09, i + 1))][0] << i for i in range(5))
    assert got_buttons == buttons
    assert values[(0, GD_X)] == [x] and values[(0, GD_Y)] == [y]
    assert values[(0, GD_WHEEL)] == [wheel] and values[(0, AC_PAN)] == [pan]


# --- touchscreen ------------------------------------------------------------------------------


def test_touchscreen_is_what_hid_multitouch_wants() -> None:
    rdesc = parse(TOUCHSCREEN)
    assert list(rdesc.input_reports) == [reports.TOUCH_REPORT_ID]
    report = rdesc.input_reports[reports.TOUCH_REPORT_ID]
    assert report.application == usage(0x0D, 0x04)  # Touch Screen: evdev INPUT_PROP_DIRECT
    fingers: dict[int, list[int]] = defaultdict(list)
    for f in data_fields(report):
        if f.usage != CONTACT_COUNT:
            assert f.logical == usage(0x0D, 0x22), "contact fields belong in a Finger collection"
            fingers[f.collection[2]].append(f.usage)
    assert len(fingers) == reports.MAX_CONTACTS >= 5
    assert all(u == [TIP, IN_RANGE, CONTACT_ID, GD_X, GD_Y] for u in fingers.values())
    by_usage = {f.usage: f for f in data_fields(report)}
    for axis in (GD_X, GD_Y):
        f = by_usage[axis]
        assert (f.logical_min, f.logical_max) == (0, reports.ABS_MAX)
        assert f.unit == 0x11 and f.unit_exp == -1 and f.physical_max > 0
    assert by_usage[CONTACT_ID].logical_max == reports.MAX_CONTACTS - 1
    assert by_usage[CONTACT_COUNT].logical_max == reports.MAX_CONTACTS
    # f_hid answers GET_REPORT with zeros; hid-multitouch then takes the logical maximum.
    (feature,) = rdesc.feature_reports.values()
    assert feature.report_ID == reports.CONTACT_MAX_REPORT_ID != reports.TOUCH_REPORT_ID
    (cmax,) = data_fields(feature)
    assert cmax.usage == CONTACT_MAX
    assert (cmax.logical_min, cmax.logical_max) == (0, reports.MAX_CONTACTS)


contact_lists = st.lists(
    st.builds(
        Contact,
        id=st.integers(0, reports.MAX_CONTACTS - 1),
        x=st.integers(0, reports.ABS_MAX),
        y=st.integers(0, reports.ABS_MAX),
        tip=st.booleans(),
    ),
    max_size=reports.MAX_CONTACTS,
    unique_by=lambda c: c.id,
)


@given(contacts=contact_lists)
def test_touch_report_decodes_through_hid_tools(contacts: list[Contact]) -> None:
    report = only_input(TOUCHSCREEN)
    values = decode(report, reports.touch(contacts))
    logical_numbers = sorted({n for n, u in values if u == CONTACT_ID})
    counted = logical_numbers[: values[(logical_numbers[-1], CONTACT_COUNT)][0]]
    got = [
        Contact(
            id=values[(n, CONTACT_ID)][0],
            x=values[(n, GD_X)][0],
            y=values[(n, GD_Y)][0],
            tip=bool(values[(n, TIP)][0]),
        )
        for n in counted
    ]
    assert got == contacts
    # in range travels with tip, so hosts that track hovering release a lifted finger too
    assert [values[(n, IN_RANGE)][0] for n in counted] == [int(c.tip) for c in contacts]


# --- consumer ---------------------------------------------------------------------------------


def test_consumer_is_one_16_bit_array_usage() -> None:
    report = only_input(CONSUMER)
    assert not report.numbered and report.application == usage(0x0C, 0x01)
    (f,) = list(report)
    assert f.is_array and (f.size, f.count) == (16, 1)
    assert (f.logical_min, f.logical_max) == (0, reports.CONSUMER_USAGE_MAX)
    assert f.usages == [usage(0x0C, u) for u in range(reports.CONSUMER_USAGE_MAX + 1)]


@given(code=st.integers(0, reports.CONSUMER_USAGE_MAX))
def test_consumer_report_decodes_through_hid_tools(code: int) -> None:
    report = only_input(CONSUMER)
    (f,) = list(report)
    (value,) = f.get_values(list(reports.consumer(code)))
    assert f.usages is not None and f.usages[value] == usage(0x0C, code)


def test_hid_tools_names_the_android_buttons() -> None:
    report = only_input(CONSUMER)
    names = {
        code: report.format_report(list(reports.consumer(code))) for code in (0x223, 0x224, 0x29F)
    }
    assert "AC Home" in names[0x223] and "AC Back" in names[0x224]
    assert "AC Desktop Show All Windows" in names[0x29F]
