"""The target's side of the cable, inside the guest: what this kernel's USB host stack made of
our gadget. Waits are driven by kernel uevents (pyudev) and evdev reads, always with a timeout
that names what was awaited; no sleeps.

Two harness rules keep the target's side from failing on its own (TCG on a busy 2-core machine
is slow and bursty):
- sysfs is read as it is mid-enumeration: an attribute can be empty, or its device can vanish
  between listing and reading. Such a read is "not settled yet", and waits re-check on the next
  uevent; it is never an error of the product.
- each opened evdev node is drained by a thread of its own, at real-time priority, into an
  unbounded list (see Drain): the kernel's per-client buffer holds only a few dozen events, and
  a reader that shares the vCPU and the event loop with the engine fell behind it. Should the
  kernel still report SYN_DROPPED, the read fails as a HarnessFault naming what was lost, never
  as a wrong character of the product.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import select
import struct
import subprocess
import threading
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


def _slowness() -> float:
    """How much slower this VM is than an idle TCG guest (>= 1), measured once at import: a
    fixed pure-Python workload against the time it took on an idle run of this tier (0.12 s).
    Timeouts only bound failures; scaling them keeps a loaded machine from failing a wait
    that a little more time would have passed."""
    start = time.perf_counter()
    n = 0
    for i in range(300_000):
        n += i & 7
    return max(1.0, (time.perf_counter() - start) / 0.12)


SLOWNESS = float(os.environ.get("FINGERTIP_VM_SLOWNESS") or _slowness())
# Generous, and scaled by SLOWNESS: these only bound failures, nothing waits for them to pass.
ENUMERATION_TIMEOUT = 30.0 * SLOWNESS
EVENT_TIMEOUT = 10.0 * SLOWNESS
# The engine's write limit for tests that stream long programs: TCG under load takes a
# program several times its length (the config's own bound is 60 s).
WRITE_LIMIT_MS = min(60_000.0, 10_000.0 * SLOWNESS)
PROGRESS_CAP = 10  # a stream still arriving is waited for this many times a wait's timeout

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
    def read(cls, sysfs: Path) -> UsbDevice | None:
        """The device as sysfs shows it now; None while it is not settled (an attribute still
        empty, or the device gone between listing and reading)."""

        def attr(name: str, optional: bool = False) -> str:
            p = sysfs / name
            return "" if optional and not p.exists() else p.read_text().strip()

        try:
            return cls(
                sysfs=sysfs,
                vendor=int(attr("idVendor"), 16),
                product=int(attr("idProduct"), 16),
                bcd_device=int(attr("bcdDevice"), 16),
                serial=attr("serial", optional=True),
                product_name=attr("product", optional=True),
                devnum=int(attr("devnum")),
            )
        except (OSError, ValueError):  # ENOENT/ENODEV mid-removal, "" mid-enumeration
            return None

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
    """Our device if it is enumerated and settled now (see UsbDevice.read)."""
    for d in USB_DEVICES.iterdir():
        try:
            vid = (d / "idVendor").read_text().strip()
            if not vid or int(vid, 16) != vendor:
                continue
        except (OSError, ValueError):  # not a device (an interface), or mid-change
            continue
        dev = UsbDevice.read(d)
        if dev is not None and dev.product == product:
            return dev
    return None


class UsbHost:
    """A kernel uevent monitor, started before the action whose effect a test awaits."""

    def __init__(self) -> None:
        self._monitor = pyudev.Monitor.from_netlink(pyudev.Context(), source="kernel")
        self._monitor.start()

    def wait_for(self, check: Callable[[], T | None], what: str, timeout: float) -> T:
        """Re-check `check` on every uevent until it returns a value; fail naming `what`.

        A check that trips over sysfs mid-enumeration (OSError: the device went; ValueError:
        an attribute still empty) is "not yet", not a failure: the next uevent re-checks."""
        deadline = time.monotonic() + timeout
        transient = ""
        while True:
            try:
                value = check()
            except (OSError, ValueError) as e:
                value, transient = None, f" (last transient sysfs state: {e!r})"
            if value is not None and value is not False:
                return value
            left = deadline - time.monotonic()
            if left <= 0:
                why = f"timed out after {timeout:.0f} s waiting for {what}"
                raise AssertionError(why + transient)
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


class HarnessFault(AssertionError):
    """The target-side harness lost what the product sent (the kernel dropped events because
    this reader fell behind): a fault of the test rig, reported as such, never as a product
    failure. The kernel tier's summary counts these separately."""


EVENT = struct.Struct("llHHi")  # struct input_event: timeval (sec, usec), type, code, value
DRAIN_PRIORITY = 50  # SCHED_FIFO: above the engine, so a woken reader runs at once


class Drain:
    """Every event of one evdev node, read by a thread of its own into an unbounded list.

    The thread blocks in poll() and read() (both release the GIL), runs at real-time priority
    where the kernel allows it, and grabs the node (no other reader inside the guest shares its
    events). Readers on the event loop wait for `changed`, set from the thread. A SYN_DROPPED
    from the kernel is kept with the index where it happened (see HarnessFault)."""

    def __init__(self, dev: evdev.InputDevice) -> None:
        self.dev = dev
        self.events: list[InputEvent] = []
        self.dropped_at: list[int] = []  # indices into events where the kernel dropped some
        self.consumed = 0  # read_until's cursor: events before it were handed out already
        self.error: OSError | None = None
        self._lock = threading.Lock()
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []
        self._stop_r, self._stop_w = os.pipe()
        with contextlib.suppress(OSError):
            dev.grab()
        self._thread = threading.Thread(target=self._run, name=f"drain {dev.path}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        with contextlib.suppress(OSError, PermissionError):  # best effort: root in the VM
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(DRAIN_PRIORITY))
        poller = select.poll()
        poller.register(self.dev.fd, select.POLLIN)
        poller.register(self._stop_r, select.POLLIN)
        while True:
            ready = {fd for fd, _ in poller.poll()}
            if self._stop_r in ready:
                return
            try:
                data = os.read(self.dev.fd, EVENT.size * 1024)
            except OSError as e:
                if e.errno == errno.EAGAIN:
                    continue
                self.error = e  # ENODEV: the device went (a re-enumeration)
                self._notify()
                return
            with self._lock:
                for sec, usec, typ, code, value in EVENT.iter_unpack(data):
                    if typ == ecodes.EV_SYN and code == ecodes.SYN_DROPPED:
                        self.dropped_at.append(len(self.events))
                    self.events.append(InputEvent(sec, usec, typ, code, value))
            self._notify()

    def _notify(self) -> None:
        with self._lock:
            waiters = list(self._waiters)
        for loop, event in waiters:
            with contextlib.suppress(RuntimeError):  # that loop has closed
                loop.call_soon_threadsafe(event.set)

    @contextmanager
    def watching(self) -> Iterator[asyncio.Event]:
        """An event the thread sets whenever events (or an error) arrive; clear it before
        looking at `events`, then wait on it, and nothing that arrives between is missed."""
        entry = (asyncio.get_running_loop(), asyncio.Event())
        with self._lock:
            self._waiters.append(entry)
        try:
            yield entry[1]
        finally:
            with self._lock:
                self._waiters.remove(entry)

    def close(self) -> None:
        os.write(self._stop_w, b"x")
        self._thread.join(5)
        os.close(self._stop_r)
        os.close(self._stop_w)


_drains: dict[int, Drain] = {}  # id(InputDevice) -> its drain, for read_until


@contextmanager
def open_inputs(paths: list[str]) -> Iterator[list[evdev.InputDevice]]:
    """Open evdev nodes (usbhid polls the interrupt endpoint only while one is open), each
    drained from the moment it opens (see Drain)."""
    devs = [evdev.InputDevice(p) for p in paths]
    for d in devs:
        _drains[id(d)] = Drain(d)
    try:
        yield devs
    finally:
        for d in devs:
            _drains.pop(id(d)).close()
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
    """The events since the last read_until on `dev`, up to the SYN_REPORT after which
    `done(events)` holds; fail with what was seen. Later events stay for the next call.

    `timeout` bounds a wait that makes no progress. While events keep arriving the wait goes on
    (each one allows EVENT_TIMEOUT more, up to PROGRESS_CAP times `timeout` in all): a slowed VM
    delivers a long stream late, and only a stalled one is a failure."""
    drain = _drains[id(dev)]
    began = time.monotonic()
    deadline, cap = began + timeout, began + timeout * PROGRESS_CAP
    start = drain.consumed
    events: list[InputEvent] = []  # one growing list: `done` may count incrementally
    with drain.watching() as arrived:
        while True:
            arrived.clear()
            with drain._lock:
                error = drain.error  # set after the thread's last append: read it first
                available = len(drain.events)
                drops = [i for i in drain.dropped_at if i >= start]
            if drops:
                lost = drain.events[start : drops[0]]
                raise HarnessFault(
                    f"harness fault on {dev.path}: the kernel dropped events (SYN_DROPPED) "
                    f"after {len(lost)} events while waiting for {what}; the target-side "
                    f"reader fell behind (not a product failure). Before the drop: "
                    f"{describe(lost[-40:])}"
                )
            if available > start + len(events):  # progress: the stream is still coming
                deadline = max(deadline, min(cap, time.monotonic() + EVENT_TIMEOUT))
            for ev in drain.events[start + len(events) : available]:
                events.append(ev)
                if ev.type == ecodes.EV_SYN and ev.code == ecodes.SYN_REPORT and done(events):
                    drain.consumed = start + len(events)
                    return events
            now = time.monotonic()
            left = deadline - now
            if error is not None or left <= 0:
                why = f"the node failed ({error!r})" if error else "timed out"
                raise AssertionError(
                    f"{why} after {now - began:.0f} s on {dev.path} waiting for {what} (the "
                    f"last {min(timeout, EVENT_TIMEOUT):.0f} s or more without a new event); "
                    f"saw {len(events)} events: {describe(events)}"
                )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(arrived.wait(), left)


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
