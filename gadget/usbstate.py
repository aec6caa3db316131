"""The USB link as the UDC sees it: its state, followed live, and remote wakeup.

The UDC's sysfs `state` is one of the kernel's usb_state_string() names; the daemon needs four:
not_attached, attached (powered, default, addressed: the host is enumerating us), configured
and suspended (the target sleeps or autosuspended us). The UDC core calls sysfs_notify() on
`state` at every change, so a poll(2) for POLLPRI on the open attribute wakes at once; the
watcher also re-reads every `interval` seconds, for a file that never notifies (a plain file
in tests, an old kernel). No busy polling either way.

Many UDC drivers never set `suspended` in `state` (dummy_hcd leaves `configured`, below).
The composite layer shows the suspend itself: its `suspended` attribute on the gadget's
device (gadget.N, or gadget on older kernels, a child of the UDC's parent device:
/sys/class/udc/<udc>/device/gadget.0/suspended) reads 1 from composite_suspend() until the
resume, a bus reset or a disconnect. A `configured` UDC whose gadget reads 1 there is taken as
suspended (`link_state`). Measured in the kernel VM (Debian 6.1.0-57, dummy_hcd, the host's
device runtime-suspended): `state` configured, is_selfpowered 0, gadget.0/suspended 1, and 0
again after the host's resume and after a remote wakeup. The file exists only while a gadget
driver is bound; where it is missing, `state` and is_selfpowered decide as before.
Some kernels' composite_suspend() also marks the gadget self-powered (`is_selfpowered`,
cleared again by composite_resume() for a configuration drawing more than 100 mA, ours draws
max_power, 250 by default); Debian 6.1's does that only for a configuration with the
self-powered bit (bmAttributes 0x40), which ours has not: hence 0 above. A bus-powered
gadget that reads `configured` with is_selfpowered 1 is taken as suspended too. Neither
attribute is notified, hence the watcher's interval re-read (0.1 s by default: three small
reads and a listing of the UDC's parent device).

Remote wakeup: writing "1" to /sys/class/udc/<udc>/srp calls usb_gadget_wakeup(). The UDC core
ignores its result, so whether the UDC can wake at all is decided from its driver: dwc3 (the
RV1106) and dummy_hcd implement the operation; the Raspberry Pi's stock dwc2 does not.
"""

from __future__ import annotations

import errno
import os
import select
import threading
from collections.abc import Callable
from pathlib import Path

import structlog

log = structlog.get_logger("gadget.usbstate")

STATES = ("not_attached", "attached", "configured", "suspended")

# usb_state_string() names per state the daemon tells apart.
_OF_RAW = {
    "not attached": "not_attached",
    "configured": "configured",
    "suspended": "suspended",
}

# UDC drivers (the UDC device's driver name) and whether their gadget ops have `wakeup`.
# Unknown drivers are taken as unable: advertising a wakeup that does not work lets a Linux
# host autosuspend an open keyboard that can then never wake it.
WAKE_DRIVERS = {
    "dwc3": True,
    "dummy_udc": True,
    "dwc2": False,  # stock Raspberry Pi kernels; PiKVM patches it (wakeup_on_write)
}

WAKE_SETTINGS = ("auto", "on", "off")


def normalize(raw: str) -> str:
    """One of STATES for a UDC state string (anything between unplugged and configured is
    `attached`)."""
    return _OF_RAW.get(raw.strip(), "attached" if raw.strip() else "not_attached")


def udc_driver(sysfs_root: Path, udc: str) -> str | None:
    """The driver of the UDC's device (dwc3, dwc2, dummy_udc, ...), None when unknown."""
    try:
        return os.path.basename(
            os.readlink(sysfs_root / "class" / "udc" / udc / "device" / "driver")
        )
    except OSError:
        return None


def wake_capability(driver: str | None, setting: str) -> tuple[bool, str]:
    """(whether to advertise and use remote wakeup, why), from the UDC's driver and the
    [gadget] remote_wakeup setting (auto, on for a patched kernel, off)."""
    if setting == "off":
        return False, 'remote wakeup is off in the config ([gadget] remote_wakeup = "off")'
    if setting == "on":
        return True, f"remote wakeup forced on in the config (UDC driver {driver or 'unknown'})"
    if driver is None:
        return False, "the UDC's driver is unknown, so remote wakeup is not advertised"
    if WAKE_DRIVERS.get(driver, False):
        return True, f"the UDC driver {driver} can signal remote wakeup"
    return False, (
        f"the UDC driver {driver} cannot signal remote wakeup (a patched kernel can: then set "
        '[gadget] remote_wakeup = "on")'
    )


def _read(path: Path) -> str | None:
    try:
        with open(path, "rb") as f:
            return f.read().decode(errors="replace").strip()
    except OSError:
        return None


def gadget_dir(udc_dir: Path) -> Path | None:
    """The gadget's device folder: the child gadget.N (gadget on older kernels) of the UDC's
    parent device, None when there is none."""
    parent = udc_dir / "device"
    try:
        with os.scandir(parent) as entries:
            for entry in entries:
                if entry.name == "gadget" or entry.name.startswith("gadget."):
                    return parent / entry.name
    except OSError:
        pass
    return None


def gadget_suspended(udc_dir: Path) -> str | None:
    """The composite layer's `suspended` attribute of the UDC's gadget ("1" while the host
    has it suspended), None when there is no such file (no gadget driver bound, or a kernel
    without it)."""
    gadget = gadget_dir(udc_dir)
    return None if gadget is None else _read(gadget / "suspended")


def link_state(state: str, selfpowered: str | None, suspended: str | None = None) -> str:
    """The UDC's state as the link is: `configured` with the gadget's `suspended` 1, or with
    is_selfpowered 1, is a suspended bus-powered gadget (see the module's docstring)."""
    if state == "configured" and "1" in (suspended, selfpowered):
        return "suspended"
    return state


def _link_of(udc_dir: Path, state: str) -> str:
    return link_state(state, _read(udc_dir / "is_selfpowered"), gadget_suspended(udc_dir))


def read_state(udc_dir: Path) -> str:
    """The link state of the UDC at `udc_dir` (link_state), "not attached" when the UDC is
    gone."""
    state = _read(udc_dir / "state")
    if state is None:
        return "not attached"
    return _link_of(udc_dir, state)


def request_wakeup(sysfs_root: Path, udc: str) -> None:
    """Ask the UDC to signal remote wakeup to the host (usb_gadget_wakeup)."""
    path = sysfs_root / "class" / "udc" / udc / "srp"
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        if os.write(fd, b"1") != 1:
            raise OSError(errno.EIO, "short write", str(path))
    finally:
        os.close(fd)


def _same_file(fd: int, path: Path) -> bool:
    try:
        a, b = os.fstat(fd), os.stat(path)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


class StateWatcher:
    """Follows one UDC's link state (read_state) in a thread of its own; `on_change(raw)` is
    called (from that thread) with the first state and with each different one after it."""

    def __init__(
        self, udc_dir: Path, on_change: Callable[[str], None], *, interval: float = 0.1
    ) -> None:
        self.udc_dir = udc_dir
        self.path = udc_dir / "state"
        self.on_change = on_change
        self.interval = interval
        self._stop_r, self._stop_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="udc-state", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            os.write(self._stop_w, b"x")
            self._thread.join(timeout=5)
            self._thread = None
        for fd in (self._stop_r, self._stop_w):
            os.close(fd)

    def _run(self) -> None:
        last: str | None = None
        poller = select.poll()
        poller.register(self._stop_r, select.POLLIN)
        fd: int | None = None
        try:
            while True:
                if fd is None:
                    try:
                        fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
                        poller.register(fd, select.POLLPRI | select.POLLERR)
                    except OSError:
                        fd = None
                raw = "not attached"
                if fd is not None and not _same_file(fd, self.path):  # UDC removed or re-made
                    poller.unregister(fd)
                    os.close(fd)
                    fd = None
                    continue
                if fd is not None:
                    try:  # a sysfs attribute is re-read from offset 0; that also re-arms POLLPRI
                        state = os.pread(fd, 64, 0).decode(errors="replace").strip()
                        raw = _link_of(self.udc_dir, state)
                    except OSError:
                        poller.unregister(fd)
                        os.close(fd)
                        fd = None
                if raw != last:
                    last = raw
                    try:
                        self.on_change(raw)
                    except Exception:  # the loop may have closed under us: keep no thread
                        log.exception("usbstate.callback_failed")
                        return
                events = poller.poll(self.interval * 1000)
                if any(f == self._stop_r for f, _ in events):
                    return
        finally:
            if fd is not None:
                os.close(fd)
