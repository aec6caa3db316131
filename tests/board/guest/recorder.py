"""The target's side of the cable in the board VM: what the guest's USB host stack makes of our
gadget, as the board test sees it. Run inside the guest with its own python3 (standard
library only).

  recorder.py watch   open every evdev node of a USB device with our vendor id as soon as it
                      appears (usbhid polls a device only while one of its nodes is open, as a
                      phone always does), and print one JSON line per input event, per node
                      opened or gone, and per fault it met, until killed
  recorder.py held    print, per evdev node of our devices, the keys and buttons held now

`watch` follows every enumeration by the kernel's own uevents (a netlink socket): an evdev node
that lives for a fraction of a second, as the keyboard-isolated profile's does, is opened the
moment it is announced, where a periodic scan could miss it. A full scan of /sys/class/input
runs only at start and after a netlink overrun: idle, it costs nothing (a scan a second cost
a tenth of the guest's one vCPU under TCG, taken from udev and the daemon). Nothing it meets
ends it: a fault is a JSON line ({"fault": ...}) and the loop goes on. The board test runs it
as a systemd unit at real-time priority, so a busy daemon cannot starve it.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import select
import socket
import struct
import sys
import time

VENDOR = "1d6b"
EVENT = struct.Struct("qqHHi")  # struct input_event on 64-bit: timeval, type, code, value
EV_SYN, EV_KEY, EV_REL, EV_ABS = 0, 1, 2, 3
SYN_DROPPED = 3
KEY_BYTES = 96  # (KEY_MAX + 1) / 8
EVIOCGKEY = (2 << 30) | (KEY_BYTES << 16) | (ord("E") << 8) | 0x18
NETLINK_KOBJECT_UEVENT = 15


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""


def node_info(ev: str) -> dict[str, str] | None:
    """{product, name, interface} of input node `ev` if it belongs to a USB device with our
    vendor id, else None (also when it vanished while being looked at)."""
    dev = os.path.realpath(f"/sys/class/input/{ev}/device")
    usb = dev
    while usb != "/" and not os.path.exists(f"{usb}/idVendor"):
        usb = os.path.dirname(usb)
    if usb == "/" or _read(f"{usb}/idVendor") != VENDOR:
        return None
    iface = next((p for p in dev.split("/") if ":" in p and "-" in p), "")
    product = _read(f"{usb}/idProduct")
    if not product:  # mid-removal
        return None
    return {"product": product, "name": _read(f"{dev}/name"), "interface": iface.rsplit(".", 1)[-1]}


def our_nodes() -> dict[str, dict[str, str]]:
    """eventN -> node_info for every input node of our devices now."""
    try:
        names = os.listdir("/sys/class/input")
    except OSError:
        return {}
    found = {}
    for ev in names:
        if ev.startswith("event"):
            info = node_info(ev)
            if info is not None:
                found[ev] = info
    return found


def emit(**fields: object) -> None:
    print(json.dumps({"t": round(time.monotonic(), 3), **fields}), flush=True)


def uevent_socket() -> socket.socket:
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_KOBJECT_UEVENT)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    sock.bind((0, 1))  # the kernel's multicast group
    sock.setblocking(False)
    return sock


def announced_nodes(data: bytes) -> list[str]:
    """eventN named by an "add" uevent of the input subsystem (NUL-separated KEY=VALUE)."""
    fields = data.split(b"\0")
    if not fields[0].startswith(b"add@"):
        return []
    env = dict(f.split(b"=", 1) for f in fields[1:] if b"=" in f)
    name = env.get(b"DEVNAME", b"").decode(errors="replace")
    if env.get(b"SUBSYSTEM") == b"input" and name.startswith("input/event"):
        return [name.removeprefix("input/")]
    return []


class Recorder:
    def __init__(self) -> None:
        self.open_fds: dict[int, tuple[str, dict[str, str]]] = {}
        self.opened: set[str] = set()
        self.retry: set[str] = set()  # announced nodes that could not be opened yet

    def open(self, ev: str, info: dict[str, str] | None = None) -> None:
        if ev in self.opened:
            return
        info = info or node_info(ev)
        if info is None:
            return
        try:
            fd = os.open(f"/dev/input/{ev}", os.O_RDONLY | os.O_NONBLOCK)
        except OSError as e:  # gone already, or the node not made yet: retried shortly
            emit(fault="open", node=ev, product=info["product"], error=str(e))
            if e.errno == errno.ENOENT:
                self.retry.add(ev)
            return
        self.retry.discard(ev)
        self.opened.add(ev)
        self.open_fds[fd] = (ev, info)
        emit(open=ev, **info)

    def scan(self) -> None:
        for ev, info in our_nodes().items():
            self.open(ev, info)

    def read(self, fd: int) -> None:
        ev, info = self.open_fds[fd]
        try:
            data = os.read(fd, EVENT.size * 256)
        except OSError as exc:
            if exc.errno == errno.EAGAIN:
                return
            data = b""
        if not data:  # ENODEV: the device is gone (re-enumeration)
            os.close(fd)
            del self.open_fds[fd]
            self.opened.discard(ev)
            emit(gone=ev, product=info["product"])
            return
        for i in range(0, len(data) - EVENT.size + 1, EVENT.size):
            _, _, typ, code, value = EVENT.unpack_from(data, i)
            if typ in (EV_KEY, EV_REL, EV_ABS):
                emit(node=ev, product=info["product"], type=typ, code=code, value=value)
            elif typ == EV_SYN and code == SYN_DROPPED:
                emit(fault="SYN_DROPPED", node=ev, product=info["product"])


def watch() -> int:
    rec = Recorder()
    uevents = uevent_socket()  # before the first scan: a node made in between is not missed
    rec.scan()
    emit(ready=True)
    while True:
        try:
            timeout = 0.1 if rec.retry else None
            ready, _, _ = select.select([uevents, *rec.open_fds], [], [], timeout)
            for ev in list(rec.retry):
                if os.path.exists(f"/sys/class/input/{ev}"):
                    rec.open(ev)
                else:  # it went before it could be opened
                    rec.retry.discard(ev)
            for fd in ready:
                if fd is uevents:
                    try:
                        while True:
                            for ev in announced_nodes(uevents.recv(1 << 16)):
                                rec.open(ev)
                    except BlockingIOError:
                        pass
                    except OSError as e:  # ENOBUFS: uevents were lost; the scan finds them
                        emit(fault="uevents", error=str(e))
                        rec.scan()
                else:
                    rec.read(fd)
        except Exception as e:  # a fault is reported, never the end of the recording
            emit(fault="loop", error=repr(e))
            time.sleep(0.1)  # at real-time priority, a fault that repeats must not spin


def held() -> int:
    out = []
    for ev, info in sorted(our_nodes().items()):
        try:
            fd = os.open(f"/dev/input/{ev}", os.O_RDONLY | os.O_NONBLOCK)
        except OSError:
            continue
        try:
            bits = bytearray(KEY_BYTES)
            fcntl.ioctl(fd, EVIOCGKEY, bits)
        finally:
            os.close(fd)
        codes = [i * 8 + b for i, byte in enumerate(bits) for b in range(8) if byte >> b & 1]
        out.append({"node": ev, **info, "held": codes})
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(watch() if sys.argv[1:] == ["watch"] else held())
