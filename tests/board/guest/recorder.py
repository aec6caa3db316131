"""The target's side of the cable in the board VM: what the guest's USB host stack makes of our
gadget, as the board test sees it. Run inside the guest with its own python3 (standard
library only).

  recorder.py watch   open every evdev node of a USB device with our vendor id as soon as it
                      appears (usbhid polls a device only while one of its nodes is open, as a
                      phone always does), and print one JSON line per input event and per
                      node opened or gone, until killed
  recorder.py held    print, per evdev node of our devices, the keys and buttons held now
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import select
import struct
import sys
import time

VENDOR = "1d6b"
EVENT = struct.Struct("qqHHi")  # struct input_event on 64-bit: timeval, type, code, value
EV_KEY, EV_REL, EV_ABS = 1, 2, 3
KEY_BYTES = 96  # (KEY_MAX + 1) / 8
EVIOCGKEY = (2 << 30) | (KEY_BYTES << 16) | (ord("E") << 8) | 0x18


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""


def our_nodes() -> dict[str, dict[str, str]]:
    """eventN -> {product, name, interface} for input devices of USB devices with our vendor."""
    found = {}
    for ev in os.listdir("/sys/class/input"):
        if not ev.startswith("event"):
            continue
        dev = os.path.realpath(f"/sys/class/input/{ev}/device")
        usb = dev
        while usb != "/" and not os.path.exists(f"{usb}/idVendor"):
            usb = os.path.dirname(usb)
        if usb == "/" or _read(f"{usb}/idVendor") != VENDOR:
            continue
        iface = next((p for p in dev.split("/") if ":" in p and "-" in p), "")
        found[ev] = {
            "product": _read(f"{usb}/idProduct"),
            "name": _read(f"{dev}/name"),
            "interface": iface.rsplit(".", 1)[-1],
        }
    return found


def emit(**fields: object) -> None:
    print(json.dumps({"t": round(time.monotonic(), 3), **fields}), flush=True)


def watch() -> int:
    open_fds: dict[int, tuple[str, dict[str, str]]] = {}
    opened: set[str] = set()
    emit(ready=True)
    while True:
        for ev, info in our_nodes().items():
            if ev in opened:
                continue
            try:
                fd = os.open(f"/dev/input/{ev}", os.O_RDONLY | os.O_NONBLOCK)
            except OSError:
                continue  # udev has not made the node yet: the next scan tries again
            opened.add(ev)
            open_fds[fd] = (ev, info)
            emit(open=ev, **info)
        ready, _, _ = select.select(list(open_fds), [], [], 0.05)
        for fd in ready:
            ev, info = open_fds[fd]
            try:
                data = os.read(fd, EVENT.size * 64)
            except OSError as exc:
                if exc.errno == errno.EAGAIN:
                    continue
                data = b""
            if not data:  # ENODEV: the device is gone (re-enumeration)
                os.close(fd)
                del open_fds[fd]
                opened.discard(ev)
                emit(gone=ev, product=info["product"])
                continue
            for i in range(0, len(data) - EVENT.size + 1, EVENT.size):
                _, _, typ, code, value = EVENT.unpack_from(data, i)
                if typ in (EV_KEY, EV_REL, EV_ABS):
                    emit(node=ev, product=info["product"], type=typ, code=code, value=value)


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
