"""HID report descriptors as data: one HidFunction per role, built from readable items.

The layouts match the packers in `gadget.reports` (the tests decode packed reports with
hid-tools to prove it). Choices that hosts care about:

- keyboard: boot interface (subclass 1, protocol 1), no report id, so BIOS/UEFI and every
  OS read it; key array usages 0..0xFF (F13..F24 and the Lang keys fit).
- mouse: absolute X/Y 0..32767 in a Pointer *Physical* collection inside the Mouse
  application (iOS wants that), five buttons, Wheel and AC Pan as relative items (evdev
  REL_WHEEL, REL_HWHEEL). Not a boot interface: a boot mouse is relative.
- touchscreen: a Digitizers Touch Screen that Linux's hid-multitouch (the path every Android
  kernel takes) drives: Contact Identifier makes hid-core put it in the multitouch group;
  the contact count is in the input report; Contact Count Maximum is a feature report whose
  logical maximum equals MAX_CONTACTS, because f_hid answers GET_REPORT with zeros and
  hid-multitouch then falls back to that logical maximum.
- consumer: one 16-bit array usage, 0..0x3FF, no report id.
"""

from __future__ import annotations

from dataclasses import dataclass

from gadget import reports


@dataclass(frozen=True)
class HidFunction:
    """What configfs needs to create one f_hid function."""

    role: str  # "keyboard" | "mouse" | "touchscreen" | "consumer"
    protocol: int  # bInterfaceProtocol: 1 keyboard, 2 mouse, 0 none
    subclass: int  # bInterfaceSubClass: 1 boot interface, 0 none
    report_length: int  # bytes of the longest input report, report id included
    report_desc: bytes


# --- the item encoder -------------------------------------------------------------------------
# Short items (HID 1.11, 6.2.2.2): a prefix byte (tag, type, size code) and 0, 1, 2 or 4 data
# bytes, little-endian. Constants below are prefixes with the size bits cleared.

INPUT, OUTPUT, FEATURE, COLLECTION, END_COLLECTION = 0x80, 0x90, 0xB0, 0xA0, 0xC0
USAGE_PAGE, LOGICAL_MIN, LOGICAL_MAX, PHYSICAL_MIN, PHYSICAL_MAX = 0x04, 0x14, 0x24, 0x34, 0x44
UNIT_EXPONENT, UNIT, REPORT_SIZE, REPORT_ID, REPORT_COUNT = 0x54, 0x64, 0x74, 0x84, 0x94
USAGE, USAGE_MIN, USAGE_MAX = 0x08, 0x18, 0x28

# Hosts read these four as signed: 255 must be encoded in two bytes (00FF), not as FF (= -1).
_SIGNED = frozenset({LOGICAL_MIN, LOGICAL_MAX, PHYSICAL_MIN, PHYSICAL_MAX})
_SIZE_CODE = {0: 0, 1: 1, 2: 2, 4: 3}

# Main item data bits.
DATA_ARRAY_ABS = 0x00
CONST = 0x01
DATA_VAR_ABS = 0x02
DATA_VAR_REL = 0x06

# Collection types.
PHYSICAL, APPLICATION, LOGICAL = 0x00, 0x01, 0x02

# Usage pages and usages used below (HID Usage Tables 1.4).
PAGE_GENERIC_DESKTOP, PAGE_KEYBOARD, PAGE_LED, PAGE_BUTTON = 0x01, 0x07, 0x08, 0x09
PAGE_CONSUMER, PAGE_DIGITIZER = 0x0C, 0x0D
GD_POINTER, GD_MOUSE, GD_KEYBOARD, GD_X, GD_Y, GD_WHEEL = 0x01, 0x02, 0x06, 0x30, 0x31, 0x38
CONSUMER_CONTROL, AC_PAN = 0x0001, 0x0238
DG_TOUCH_SCREEN, DG_FINGER, DG_IN_RANGE, DG_TIP_SWITCH = 0x04, 0x22, 0x32, 0x42
DG_CONTACT_ID, DG_CONTACT_COUNT, DG_CONTACT_COUNT_MAX = 0x51, 0x54, 0x55

UNIT_SI_CENTIMETER = 0x11  # SI Linear system, length exponent 1
UNIT_EXPONENT_MINUS_1 = 0x0F  # the 4-bit two's complement both Linux and Windows read


def item(prefix: int, value: int | None = None) -> bytes:
    """One short item, data in the fewest bytes that hold `value`; None = no data."""
    if value is None:
        return bytes([prefix])
    signed = prefix in _SIGNED
    for size in (1, 2, 4):
        try:
            data = value.to_bytes(size, "little", signed=signed)
        except OverflowError:
            continue
        return bytes([prefix | _SIZE_CODE[size]]) + data
    raise ValueError(f"item 0x{prefix:02X} value {value} does not fit in 4 bytes")


def items(*pairs: tuple[int, int | None] | tuple[int]) -> bytes:
    """Items written as (prefix, value) or (prefix,) tuples, concatenated."""
    return b"".join(item(*pair) for pair in pairs)


# --- keyboard ---------------------------------------------------------------------------------

_KEYBOARD_DESC = items(
    (USAGE_PAGE, PAGE_GENERIC_DESKTOP),
    (USAGE, GD_KEYBOARD),
    (COLLECTION, APPLICATION),
    # byte 0: eight modifier bits, LeftControl (0xE0) .. Right GUI (0xE7)
    (USAGE_PAGE, PAGE_KEYBOARD),
    (USAGE_MIN, reports.MODIFIER_USAGE_FIRST),
    (USAGE_MAX, reports.MODIFIER_USAGE_LAST),
    (LOGICAL_MIN, 0),
    (LOGICAL_MAX, 1),
    (REPORT_SIZE, 1),
    (REPORT_COUNT, 8),
    (INPUT, DATA_VAR_ABS),
    # byte 1: reserved
    (REPORT_SIZE, 8),
    (REPORT_COUNT, 1),
    (INPUT, CONST),
    # output byte: five LEDs, Num Lock .. Kana, then three padding bits
    (USAGE_PAGE, PAGE_LED),
    (USAGE_MIN, 1),
    (USAGE_MAX, 5),
    (REPORT_SIZE, 1),
    (REPORT_COUNT, 5),
    (OUTPUT, DATA_VAR_ABS),
    (REPORT_SIZE, 3),
    (REPORT_COUNT, 1),
    (OUTPUT, CONST),
    # bytes 2..7: six key usages, 0 = none
    (USAGE_PAGE, PAGE_KEYBOARD),
    (USAGE_MIN, 0),
    (USAGE_MAX, reports.KEYBOARD_USAGE_MAX),
    (LOGICAL_MIN, 0),
    (LOGICAL_MAX, reports.KEYBOARD_USAGE_MAX),
    (REPORT_SIZE, 8),
    (REPORT_COUNT, reports.KEYBOARD_MAX_KEYS),
    (INPUT, DATA_ARRAY_ABS),
    (END_COLLECTION,),
)

KEYBOARD = HidFunction(
    role="keyboard",
    protocol=1,
    subclass=1,
    report_length=reports.KEYBOARD_REPORT_LENGTH,
    report_desc=_KEYBOARD_DESC,
)

# --- absolute mouse ---------------------------------------------------------------------------

_MOUSE_DESC = items(
    (USAGE_PAGE, PAGE_GENERIC_DESKTOP),
    (USAGE, GD_MOUSE),
    (COLLECTION, APPLICATION),
    (USAGE, GD_POINTER),
    (COLLECTION, PHYSICAL),
    # byte 0: buttons 1..5, then three padding bits
    (USAGE_PAGE, PAGE_BUTTON),
    (USAGE_MIN, 1),
    (USAGE_MAX, reports.MOUSE_BUTTONS),
    (LOGICAL_MIN, 0),
    (LOGICAL_MAX, 1),
    (REPORT_SIZE, 1),
    (REPORT_COUNT, reports.MOUSE_BUTTONS),
    (INPUT, DATA_VAR_ABS),
    (REPORT_SIZE, 8 - reports.MOUSE_BUTTONS),
    (REPORT_COUNT, 1),
    (INPUT, CONST),
    # bytes 1..4: X, Y absolute
    (USAGE_PAGE, PAGE_GENERIC_DESKTOP),
    (USAGE, GD_X),
    (USAGE, GD_Y),
    (LOGICAL_MIN, 0),
    (LOGICAL_MAX, reports.ABS_MAX),
    (REPORT_SIZE, 16),
    (REPORT_COUNT, 2),
    (INPUT, DATA_VAR_ABS),
    # byte 5: vertical wheel, byte 6: horizontal pan, both relative
    (USAGE, GD_WHEEL),
    (LOGICAL_MIN, -reports.WHEEL_MAX),
    (LOGICAL_MAX, reports.WHEEL_MAX),
    (REPORT_SIZE, 8),
    (REPORT_COUNT, 1),
    (INPUT, DATA_VAR_REL),
    (USAGE_PAGE, PAGE_CONSUMER),
    (USAGE, AC_PAN),
    (REPORT_COUNT, 1),
    (INPUT, DATA_VAR_REL),
    (END_COLLECTION,),
    (END_COLLECTION,),
)

MOUSE = HidFunction(
    role="mouse",
    protocol=0,  # bInterfaceProtocol means something only on a boot interface
    subclass=0,
    report_length=reports.MOUSE_REPORT_LENGTH,
    report_desc=_MOUSE_DESC,
)

# --- touchscreen ------------------------------------------------------------------------------

# Physical extents of a nominal 6.5-inch phone panel, in millimetres (cm with exponent -1).
# Hosts derive a resolution from them; Android maps the logical range onto the display anyway.
TOUCH_WIDTH_MM = 70
TOUCH_HEIGHT_MM = 150


def _finger() -> bytes:
    """One contact slot: a Finger logical collection, 6 bytes."""
    return items(
        (USAGE_PAGE, PAGE_DIGITIZER),
        (USAGE, DG_FINGER),
        (COLLECTION, LOGICAL),
        # bit 0 tip switch, bit 1 in range, six padding bits
        (USAGE, DG_TIP_SWITCH),
        (USAGE, DG_IN_RANGE),
        (LOGICAL_MIN, 0),
        (LOGICAL_MAX, 1),
        (REPORT_SIZE, 1),
        (REPORT_COUNT, 2),
        (INPUT, DATA_VAR_ABS),
        (REPORT_SIZE, 6),
        (REPORT_COUNT, 1),
        (INPUT, CONST),
        # contact identifier
        (USAGE, DG_CONTACT_ID),
        (LOGICAL_MAX, reports.MAX_CONTACTS - 1),
        (REPORT_SIZE, 8),
        (INPUT, DATA_VAR_ABS),
        # X, Y with physical extents; unit and extents are reset after so they stay on X/Y
        (USAGE_PAGE, PAGE_GENERIC_DESKTOP),
        (LOGICAL_MAX, reports.ABS_MAX),
        (REPORT_SIZE, 16),
        (UNIT, UNIT_SI_CENTIMETER),
        (UNIT_EXPONENT, UNIT_EXPONENT_MINUS_1),
        (PHYSICAL_MIN, 0),
        (PHYSICAL_MAX, TOUCH_WIDTH_MM),
        (USAGE, GD_X),
        (INPUT, DATA_VAR_ABS),
        (PHYSICAL_MAX, TOUCH_HEIGHT_MM),
        (USAGE, GD_Y),
        (INPUT, DATA_VAR_ABS),
        (PHYSICAL_MAX, 0),
        (UNIT, 0),
        (UNIT_EXPONENT, 0),
        (END_COLLECTION,),
    )


_TOUCHSCREEN_DESC = (
    items(
        (USAGE_PAGE, PAGE_DIGITIZER),
        (USAGE, DG_TOUCH_SCREEN),
        (COLLECTION, APPLICATION),
        (REPORT_ID, reports.TOUCH_REPORT_ID),
    )
    + _finger() * reports.MAX_CONTACTS
    + items(
        # last byte of the input report: how many of the slots are valid
        (USAGE_PAGE, PAGE_DIGITIZER),
        (USAGE, DG_CONTACT_COUNT),
        (LOGICAL_MIN, 0),
        (LOGICAL_MAX, reports.MAX_CONTACTS),
        (REPORT_SIZE, 8),
        (REPORT_COUNT, 1),
        (INPUT, DATA_VAR_ABS),
        # feature report: the host learns the slot count from the logical maximum
        (REPORT_ID, reports.CONTACT_MAX_REPORT_ID),
        (USAGE, DG_CONTACT_COUNT_MAX),
        (FEATURE, DATA_VAR_ABS),
        (END_COLLECTION,),
    )
)

TOUCHSCREEN = HidFunction(
    role="touchscreen",
    protocol=0,
    subclass=0,
    report_length=reports.TOUCH_REPORT_LENGTH,
    report_desc=_TOUCHSCREEN_DESC,
)

# --- consumer control -------------------------------------------------------------------------

_CONSUMER_DESC = items(
    (USAGE_PAGE, PAGE_CONSUMER),
    (USAGE, CONSUMER_CONTROL),
    (COLLECTION, APPLICATION),
    (USAGE_MIN, 0),
    (USAGE_MAX, reports.CONSUMER_USAGE_MAX),
    (LOGICAL_MIN, 0),
    (LOGICAL_MAX, reports.CONSUMER_USAGE_MAX),
    (REPORT_SIZE, 16),
    (REPORT_COUNT, 1),
    (INPUT, DATA_ARRAY_ABS),
    (END_COLLECTION,),
)

CONSUMER = HidFunction(
    role="consumer",
    protocol=0,
    subclass=0,
    report_length=reports.CONSUMER_REPORT_LENGTH,
    report_desc=_CONSUMER_DESC,
)

FUNCTIONS: dict[str, HidFunction] = {f.role: f for f in (KEYBOARD, MOUSE, TOUCHSCREEN, CONSUMER)}

_POINTERS = {
    "android": TOUCHSCREEN,
    "ios": MOUSE,
    "macos": MOUSE,
    "windows": MOUSE,
    "linux": MOUSE,
}


def pointer_for(platform: str) -> HidFunction:
    """The pointer a target platform follows reliably: Android a touchscreen, the rest a mouse.

    (Absolute mice are erratic on several Android devices; iOS ignores digitizers.)
    """
    try:
        return _POINTERS[platform.lower()]
    except KeyError:
        raise ValueError(
            f"unknown platform {platform!r}; expected one of {', '.join(_POINTERS)}"
        ) from None
