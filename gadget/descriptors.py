"""HID report descriptors as data. Filled in by the descriptors work; the shape is fixed here."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class HidFunction:
    """What configfs needs to create one f_hid function."""

    role: str  # "keyboard" | "mouse" | "touchscreen" | "consumer"
    protocol: int  # bInterfaceProtocol: 1 keyboard, 2 mouse, 0 none
    subclass: int  # bInterfaceSubClass: 1 boot interface, 0 none
    report_length: int  # bytes of the longest input report, report id included
    report_desc: bytes
