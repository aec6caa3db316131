"""The board side inside the guest: our gadget package on the VM's dummy UDC."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from usbhost import UsbDevice, UsbHost

from gadget.configfs import Gadget
from gadget.descriptors import pointer_for
from gadget.hidg import HidWriter
from gadget.profiles import Profile, build_profile
from gadget.settings import GadgetSettings


@dataclass
class Live:
    """A profile the board made live and the target enumerated."""

    profile: Profile
    usb: UsbDevice
    # Seconds from the start of apply/bind until the UDC read "configured" (0 when not asked;
    # right after an unbind that state can be stale) and until every HID interface had its
    # event node on the target (the host-side truth).
    configured_s: float
    enumerated_s: float

    def hid(self, role: str) -> bytes:
        """Our report descriptor for a function role (keyboard, consumer, pointer)."""
        for fn in self.profile.functions:
            if fn.role == role and fn.hid is not None:
                return fn.hid.report_desc
        raise KeyError(f"profile {self.profile.name} has no HID function {role!r}")

    def input_node(self, role: str) -> str:
        """The target's one evdev node for our function `role`, found by its descriptor."""
        nodes = self.usb.inputs().get(self.hid(role), [])
        assert len(nodes) == 1, f"{role}: expected one input device, the target made {nodes}"
        return nodes[0]


class Board:
    """The board side: our Gadget on the VM's dummy UDC, and writers for its /dev/hidgN."""

    def __init__(self, settings: GadgetSettings, host: UsbHost) -> None:
        self.settings = settings
        self.gadget = Gadget(settings)
        self.host = host
        self.platform = "ios"

    def up(self, name: str = "full", platform: str | None = None) -> Live:
        """Apply a profile and wait until the target has every input device of it."""
        self.platform = platform or self.platform
        profile = build_profile(name, self.platform, self.settings)
        start = time.monotonic()
        self.gadget.apply(profile)
        self.gadget.wait_configured(self.settings.attach_timeout)
        return self.wait_live(profile, start, time.monotonic() - start)

    def wait_live(self, profile: Profile, start: float, configured: float = 0.0) -> Live:
        ident = profile.identity
        n_hid = sum(fn.hid is not None for fn in profile.functions)
        usb = self.host.wait_usb(ident.id_vendor, ident.id_product, n_hid=n_hid)
        return Live(profile, usb, configured, time.monotonic() - start)

    def writer(self, role: str) -> HidWriter:
        """A writer for function `role`; the pointer's writer role is mouse or touchscreen."""
        node = self.gadget.device_nodes()[role]
        hid_role = pointer_for(self.platform).role if role == "pointer" else role
        return HidWriter(Path(node), hid_role, timeout=self.settings.write_timeout)

    def down(self) -> None:
        ident = build_profile("full", self.platform, self.settings).identity
        iso = build_profile("keyboard-isolated", self.platform, self.settings).identity
        self.gadget.teardown()
        for pid in (ident.id_product, iso.id_product):
            self.host.wait_usb_gone(ident.id_vendor, pid)
