"""The three backends a daemon runs on, one interface each.

board:     gadget writers (/dev/hidgN), gadget configfs profiles, V4L2 capture.
simulated: the simulated target (daemon.sim), which stands where the kernel and the phone are.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Protocol

from daemon.frames import FrameSource
from daemon.usb import UsbLink
from gadget import reports

ROLES = ("keyboard", "consumer", "pointer")


class HidOutput(Protocol):
    """Where HID reports go. `role` is keyboard, consumer or pointer (mouse or touchscreen)."""

    async def write(self, role: str, report: bytes) -> None:
        """Deliver one report; raises gadget.errors.TargetNotAttached when nobody listens."""
        ...

    def led_reports(self) -> tuple[int, reports.Leds | None]:
        """(LED output reports the target sent since it enumerated, the state the last one
        set); the state is None while the count is 0: not known yet, not "all off"."""
        ...

    async def wait_led_report(self, after: int, timeout: float) -> reports.Leds | None:
        """The LED state once report `after` + 1 has come, None if none came within timeout."""
        ...


class ProfileControl(Protocol):
    """Switches the composite between the `full` and `keyboard-isolated` profiles."""

    @property
    def profile(self) -> str: ...

    async def switch_profile(self, name: str) -> bool:
        """Make `name` live (re-enumerating when it changes); True when something changed.
        Returns once the target has enumerated the new composite."""
        ...


class Backend(Protocol):
    """One backend: HID output, profile control and frames together, and the USB link's
    state (suspended while the target sleeps)."""

    hid: HidOutput
    profiles: ProfileControl
    frames: FrameSource
    link: UsbLink

    async def start(self) -> bool:
        """Bring the backend up. True when the target may still hold keys, buttons or contacts
        from before this daemon (it was not re-enumerated): the engine then releases them."""
        ...

    def follow_link(self) -> AsyncGenerator[None, None]:
        """Follow the USB link's state from after start() (the daemon's "usb link" part):
        set up, yield, stop."""
        ...

    async def close(self) -> None: ...
