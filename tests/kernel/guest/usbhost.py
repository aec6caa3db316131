"""The target's side of the cable, inside the guest: what this kernel's USB host stack made of
our gadget. Waits are driven by kernel uevents (pyudev) and evdev reads, always with a timeout
that names what was awaited; no sleeps.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import evdev
import pyudev
from evdev import InputEvent, ecodes

T = TypeVar("T")

# Generous: TCG on a shared 2-core machine is slow and noisy; these only bound failures.
ENUMERATION_TIMEOUT = 30.0
EVENT_TIMEOUT = 10.0

USB_DEVICES = Path("/sys/bus/usb/devices")


@dataclass(frozen=True)
class UsbDevice:
    """One enumerated USB device as the host sees it."""

    sysfs: Path
    vendor: int
    product: int
    bcd_device: int
    serial: str
    product_name: str
    devnum: int  # changes on every enumeration: the host's "was it reset?" witness

    @classmethod
    def read(cls, sysfs: Path) -> UsbDevice:
        def attr(name: str) -> str:
            p = sysfs / name
            return p.read_text().strip() if p.exists() else ""

        return cls(
            sysfs=sysfs,
            vendor=int(attr("idVendor"), 16),
            product=int(attr("idProduct"), 16),
            bcd_device=int(attr("bcdDevice"), 16),
            serial=attr("serial"),
            product_name=attr("product"),
            devnum=int(attr("devnum")),
        )

    def interfaces(self) -> list[Path]:
        return sorted(p for p in self.sysfs.glob(f"{self.sysfs.name}:*") if p.is_dir())

    def hid_interfaces(self) -> list[Path]:
        return [i for i in self.interfaces() if (i / "bInterfaceClass").read_text().strip() == "03"]

    def inputs(self) -> dict[bytes, list[str]]:
        """Event nodes per HID report descriptor, as the host read it from the device."""
        out: dict[bytes, list[str]] = {}
        for intf in self.hid_interfaces():
            for hid in intf.glob("0003:*"):
                nodes = sorted(f"/dev/input/{e.name}" for e in hid.glob("input/input*/event*"))
                out.setdefault((hid / "report_descriptor").read_bytes(), []).extend(nodes)
        return out

    def net_interfaces(self, driver: str) -> list[str]:
        """Host-side network interfaces bound to `driver` (cdc_ether, cdc_ncm)."""
        return [
            n.name
            for intf in self.interfaces()
            if (intf / "driver").exists() and (intf / "driver").resolve().name == driver
            for n in (intf / "net").glob("*")
        ]


def find_usb(vendor: int, product: int) -> UsbDevice | None:
    for d in USB_DEVICES.iterdir():
        vid = d / "idVendor"
        if vid.exists() and int(vid.read_text(), 16) == vendor:
            dev = UsbDevice.read(d)
            if dev.product == product:
                return dev
    return None


class UsbHost:
    """A kernel uevent monitor, started before the action whose effect a test awaits."""

    def __init__(self) -> None:
        self._monitor = pyudev.Monitor.from_netlink(pyudev.Context(), source="kernel")
        self._monitor.start()

    def wait_for(self, check: Callable[[], T | None], what: str, timeout: float) -> T:
        """Re-check `check` on every uevent until it returns a value; fail naming `what`."""
        deadline = time.monotonic() + timeout
        while True:
            value = check()
            if value is not None and value is not False:
                return value
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
            self._monitor.poll(timeout=min(left, 1.0))

    def wait_usb(
        self, vendor: int, product: int, *, n_hid: int, timeout: float = ENUMERATION_TIMEOUT
    ) -> UsbDevice:
        """The device is enumerated and each of its `n_hid` HID interfaces has an event node."""

        def ready() -> UsbDevice | None:
            dev = find_usb(vendor, product)
            if dev is None or len(dev.hid_interfaces()) != n_hid:
                return None
            per_intf = [list(i.glob("0003:*/input/input*/event*")) for i in dev.hid_interfaces()]
            return dev if all(per_intf) else None

        return self.wait_for(
            ready, f"USB {vendor:04x}:{product:04x} with {n_hid} HID inputs", timeout
        )

    def wait_usb_gone(
        self, vendor: int, product: int, timeout: float = ENUMERATION_TIMEOUT
    ) -> None:
        self.wait_for(
            lambda: find_usb(vendor, product) is None,
            f"USB {vendor:04x}:{product:04x} to disappear",
            timeout,
        )

    def close(self) -> None:
        # pyudev has no stop(): dropping the monitor unrefs it and closes its netlink socket.
        del self._monitor


@contextmanager
def open_inputs(paths: list[str]) -> Iterator[list[evdev.InputDevice]]:
    """Open evdev nodes (usbhid polls the interrupt endpoint only while one is open)."""
    devs = [evdev.InputDevice(p) for p in paths]
    try:
        yield devs
    finally:
        for d in devs:
            d.close()


def no_autorepeat(dev: evdev.InputDevice) -> None:
    """Push the soft-repeat delay out of reach: a slow TCG scheduler must not add repeats."""
    dev.write(ecodes.EV_REP, ecodes.REP_DELAY, 60_000)


async def read_until(
    dev: evdev.InputDevice,
    done: Callable[[list[InputEvent]], bool],
    what: str,
    timeout: float = EVENT_TIMEOUT,
) -> list[InputEvent]:
    """Collect events until `done(events)` holds after a SYN_REPORT; fail with what was seen."""
    events: list[InputEvent] = []

    async def collect() -> None:
        async for ev in dev.async_read_loop():
            events.append(ev)
            if ev.type == ecodes.EV_SYN and ev.code == ecodes.SYN_REPORT and done(events):
                return

    try:
        await asyncio.wait_for(collect(), timeout)
    except TimeoutError:
        raise AssertionError(
            f"timed out after {timeout:.0f} s on {dev.path} waiting for {what}; "
            f"saw {describe(events)}"
        ) from None
    return events


def describe(events: list[InputEvent]) -> str:
    """Events as compact text for failure messages: KEY_A=1 SYN ABS_X=5 ..."""
    parts = []
    for ev in events:
        if ev.type == ecodes.EV_SYN:
            parts.append("SYN" if ev.code == ecodes.SYN_REPORT else f"SYN{ev.code}")
            continue
        name = ecodes.bytype.get(ev.type, {}).get(ev.code, ev.code)
        if isinstance(name, (list, tuple)):
            name = name[0]
        parts.append(f"{name}={ev.value}")
    return " ".join(parts) if parts else "(nothing)"


def frames(events: list[InputEvent], *types: int) -> list[list[tuple[int, int, int]]]:
    """Split events into SYN_REPORT frames of (type, code, value), keeping only `types`."""
    out: list[list[tuple[int, int, int]]] = []
    cur: list[tuple[int, int, int]] = []
    for ev in events:
        if ev.type == ecodes.EV_SYN and ev.code == ecodes.SYN_REPORT:
            if cur:
                out.append(cur)
            cur = []
        elif ev.type in types:
            cur.append((ev.type, ev.code, ev.value))
    if cur:
        out.append(cur)
    return out


def sh(*cmd: str) -> str:
    """Run a command (ip, ping) and fail with its output when it fails."""
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"{' '.join(cmd)} -> {done.returncode}\n{done.stdout}{done.stderr}"
    return done.stdout
