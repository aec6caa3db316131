"""The few V4L2 ioctls an HDMI bridge needs, as ctypes structures (no GPL library).

An HDMI-to-CSI-2 bridge (TC358743) or vivid's HDMI input streams nothing until it has an EDID
and DV timings; it reports the source through VIDIOC_QUERY_DV_TIMINGS's errno (ENOLINK no
signal, ENOLCK no sync, ERANGE out of range) and V4L2_CID_DV_RX_POWER_PRESENT (0 = no cable),
and raises V4L2_EVENT_SOURCE_CHANGE whenever the source changes mode. OpenCV does none of
that, so capture_dv.py drives such devices through this module.

The structures follow <linux/videodev2.h>; their sizes come from ctypes, so the ioctl numbers
(which encode them) are right on 64-bit and 32-bit ARM alike (tests/unit/test_v4l2.py checks
them against the header's values on x86-64). A sub-device (/dev/v4l-subdevN) answers the same
DV-timings and EDID ioctls with the same numbers.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import mmap
import os
from dataclasses import dataclass

c_u8, c_u32, c_s32, c_u64 = ctypes.c_uint8, ctypes.c_uint32, ctypes.c_int32, ctypes.c_uint64

BUF_TYPE_VIDEO_CAPTURE = 1
BUF_TYPE_VIDEO_OUTPUT = 2
MEMORY_MMAP = 1
FIELD_NONE = 1
CAP_VIDEO_CAPTURE = 0x00000001
CAP_STREAMING = 0x04000000
CAP_DEVICE_CAPS = 0x80000000
DV_BT_656_1120 = 0
DV_FL_IS_CE_VIDEO = 1 << 4
CID_DV_RX_POWER_PRESENT = 0x00A00964
EVENT_SOURCE_CHANGE = 5
EVENT_SRC_CH_RESOLUTION = 1


def fourcc(text: str) -> int:
    a, b, c, d = (ord(x) for x in text)
    return a | b << 8 | c << 16 | d << 24


def fourcc_name(code: int) -> str:
    return "".join(chr((code >> (8 * i)) & 0xFF) for i in range(4))


class Capability(ctypes.Structure):
    _fields_ = [
        ("driver", c_u8 * 16),
        ("card", c_u8 * 32),
        ("bus_info", c_u8 * 32),
        ("version", c_u32),
        ("capabilities", c_u32),
        ("device_caps", c_u32),
        ("reserved", c_u32 * 3),
    ]


class PixFormat(ctypes.Structure):
    _fields_ = [
        ("width", c_u32),
        ("height", c_u32),
        ("pixelformat", c_u32),
        ("field", c_u32),
        ("bytesperline", c_u32),
        ("sizeimage", c_u32),
        ("colorspace", c_u32),
        ("priv", c_u32),
        ("flags", c_u32),
        ("ycbcr_enc", c_u32),
        ("quantization", c_u32),
        ("xfer_func", c_u32),
    ]


class _FormatUnion(ctypes.Union):
    # raw_data[200]; the kernel's union also holds pointers (v4l2_window), which align it.
    _fields_ = [("pix", PixFormat), ("raw_data", c_u8 * 200), ("_align", ctypes.c_void_p)]


class Format(ctypes.Structure):
    _fields_ = [("type", c_u32), ("fmt", _FormatUnion)]


class RequestBuffers(ctypes.Structure):
    _fields_ = [
        ("count", c_u32),
        ("type", c_u32),
        ("memory", c_u32),
        ("capabilities", c_u32),
        ("flags", c_u8),
        ("reserved", c_u8 * 3),
    ]


class Timeval(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_usec", ctypes.c_long)]


class Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class Timecode(ctypes.Structure):
    _fields_ = [
        ("type", c_u32),
        ("flags", c_u32),
        ("frames", c_u8),
        ("seconds", c_u8),
        ("minutes", c_u8),
        ("hours", c_u8),
        ("userbits", c_u8 * 4),
    ]


class _BufferM(ctypes.Union):
    _fields_ = [
        ("offset", c_u32),
        ("userptr", ctypes.c_ulong),
        ("planes", ctypes.c_void_p),
        ("fd", c_s32),
    ]


class Buffer(ctypes.Structure):
    _fields_ = [
        ("index", c_u32),
        ("type", c_u32),
        ("bytesused", c_u32),
        ("flags", c_u32),
        ("field", c_u32),
        ("timestamp", Timeval),
        ("timecode", Timecode),
        ("sequence", c_u32),
        ("memory", c_u32),
        ("m", _BufferM),
        ("length", c_u32),
        ("reserved2", c_u32),
        ("request_fd", c_s32),
    ]


class BtTimings(ctypes.Structure):
    _pack_ = 1
    _fields_ = [
        ("width", c_u32),
        ("height", c_u32),
        ("interlaced", c_u32),
        ("polarities", c_u32),
        ("pixelclock", c_u64),
        ("hfrontporch", c_u32),
        ("hsync", c_u32),
        ("hbackporch", c_u32),
        ("vfrontporch", c_u32),
        ("vsync", c_u32),
        ("vbackporch", c_u32),
        ("il_vfrontporch", c_u32),
        ("il_vsync", c_u32),
        ("il_vbackporch", c_u32),
        ("standards", c_u32),
        ("flags", c_u32),
        ("picture_aspect_num", c_u32),
        ("picture_aspect_den", c_u32),
        ("cea861_vic", c_u8),
        ("hdmi_vic", c_u8),
        ("reserved", c_u8 * 46),
    ]


class _DvUnion(ctypes.Union):
    _pack_ = 1
    _fields_ = [("bt", BtTimings), ("reserved", c_u32 * 32)]


class DvTimings(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("type", c_u32), ("u", _DvUnion)]


class Edid(ctypes.Structure):
    _fields_ = [
        ("pad", c_u32),
        ("start_block", c_u32),
        ("blocks", c_u32),
        ("reserved", c_u32 * 5),
        ("edid", ctypes.POINTER(c_u8)),
    ]


class Control(ctypes.Structure):
    _fields_ = [("id", c_u32), ("value", c_s32)]


class EventSubscription(ctypes.Structure):
    _fields_ = [("type", c_u32), ("id", c_u32), ("flags", c_u32), ("reserved", c_u32 * 5)]


class _EventUnion(ctypes.Union):
    _fields_ = [("src_change_changes", c_u32), ("data", c_u64 * 8)]


class Event(ctypes.Structure):
    _fields_ = [
        ("type", c_u32),
        ("u", _EventUnion),
        ("pending", c_u32),
        ("sequence", c_u32),
        ("timestamp", Timespec),
        ("id", c_u32),
        ("reserved", c_u32 * 8),
    ]


_IOC_WRITE, _IOC_READ = 1, 2


def _ioc(direction: int, nr: int, struct: type[ctypes._CData] | None) -> int:
    size = ctypes.sizeof(struct) if struct is not None else 0
    return direction << 30 | size << 16 | ord("V") << 8 | nr


_R, _W, _RW = _IOC_READ, _IOC_WRITE, _IOC_READ | _IOC_WRITE
QUERYCAP = _ioc(_R, 0, Capability)
G_FMT = _ioc(_RW, 4, Format)
S_FMT = _ioc(_RW, 5, Format)
REQBUFS = _ioc(_RW, 8, RequestBuffers)
QUERYBUF = _ioc(_RW, 9, Buffer)
QBUF = _ioc(_RW, 15, Buffer)
DQBUF = _ioc(_RW, 17, Buffer)
STREAMON = _ioc(_W, 18, ctypes.c_int)
STREAMOFF = _ioc(_W, 19, ctypes.c_int)
G_CTRL = _ioc(_RW, 27, Control)
S_CTRL = _ioc(_RW, 28, Control)
G_EDID = _ioc(_RW, 40, Edid)
S_EDID = _ioc(_RW, 41, Edid)
S_DV_TIMINGS = _ioc(_RW, 87, DvTimings)
G_DV_TIMINGS = _ioc(_RW, 88, DvTimings)
DQEVENT = _ioc(_R, 89, Event)
SUBSCRIBE_EVENT = _ioc(_W, 90, EventSubscription)
QUERY_DV_TIMINGS = _ioc(_R, 99, DvTimings)


def ioctl(fd: int, request: int, arg: ctypes._CData | ctypes.Array[ctypes.c_char]) -> None:
    """The ioctl, retried on EINTR; OSError with the driver's errno otherwise."""
    while True:
        try:
            fcntl.ioctl(fd, request, arg, True)
            return
        except InterruptedError:
            continue


# ---- what the source is doing -------------------------------------------------------------


@dataclass(frozen=True)
class Timings:
    """The DV timings a bridge detected: size, refresh rate, whether interlaced."""

    width: int
    height: int
    fps: float
    interlaced: bool
    raw: bytes  # the whole struct, to set back as it came

    def label(self) -> str:
        return f"{self.width}x{self.height}{'i' if self.interlaced else 'p'}{self.fps:.2f}"

    def to_dict(self) -> dict[str, object]:
        return {
            "width": self.width,
            "height": self.height,
            "fps": round(self.fps, 2),
            "interlaced": self.interlaced,
        }


def timings_of(dv: DvTimings) -> Timings:
    bt = dv.u.bt
    total_w = bt.width + bt.hfrontporch + bt.hsync + bt.hbackporch
    total_h = bt.height + bt.vfrontporch + bt.vsync + bt.vbackporch
    if bt.interlaced:
        total_h += bt.il_vfrontporch + bt.il_vsync + bt.il_vbackporch
    fps = bt.pixelclock / (total_w * total_h) if total_w and total_h else 0.0
    if bt.interlaced:
        fps *= 2  # fields per second, as a source names 1080i60
    return Timings(bt.width, bt.height, fps, bool(bt.interlaced), bytes(dv))


# The signal states a bridge reports, by VIDIOC_QUERY_DV_TIMINGS's errno.
SIGNAL_ERRNOS = {
    errno.ENOLINK: "no_signal",
    errno.ENOLCK: "no_sync",
    errno.ERANGE: "out_of_range",
}
# Errnos that say "this node (or its current input) has no DV timings": a plain camera or UVC
# grabber, for the OpenCV path. vivid's webcam input answers ENODATA.
NOT_DV_ERRNOS = (errno.ENOTTY, errno.ENODATA, errno.EINVAL)


def query_dv_timings(fd: int) -> Timings:
    """The source's timings; OSError (see SIGNAL_ERRNOS) when there is no usable signal."""
    dv = DvTimings()
    ioctl(fd, QUERY_DV_TIMINGS, dv)
    return timings_of(dv)


def get_dv_timings(fd: int) -> Timings:
    """The timings the device is set to (VIDIOC_G_DV_TIMINGS)."""
    dv = DvTimings()
    ioctl(fd, G_DV_TIMINGS, dv)
    return timings_of(dv)


def set_dv_timings(fd: int, timings: Timings) -> None:
    dv = DvTimings.from_buffer_copy(timings.raw)
    ioctl(fd, S_DV_TIMINGS, dv)


def power_present(fd: int) -> bool | None:
    """V4L2_CID_DV_RX_POWER_PRESENT: whether a cable brings +5 V (None: not reported)."""
    ctrl = Control(CID_DV_RX_POWER_PRESENT, 0)
    try:
        ioctl(fd, G_CTRL, ctrl)
    except OSError:
        return None
    return bool(ctrl.value != 0)  # a bit mask per input; any set bit is a cable


def get_edid(fd: int, pad: int = 0, max_blocks: int = 4) -> bytes:
    buf = (c_u8 * (128 * max_blocks))()
    edid = Edid(pad=pad, start_block=0, blocks=max_blocks)
    edid.edid = ctypes.cast(buf, ctypes.POINTER(c_u8))
    ioctl(fd, G_EDID, edid)
    return bytes(buf)[: 128 * edid.blocks]


def set_edid(fd: int, data: bytes, pad: int = 0) -> None:
    """Load an EDID (whole 128-byte blocks; empty clears it, and the bridge pulls HPD low)."""
    if len(data) % 128:
        raise ValueError(f"an EDID is whole 128-byte blocks, got {len(data)} bytes")
    buf = (c_u8 * max(len(data), 1)).from_buffer_copy(data or b"\0")
    edid = Edid(pad=pad, start_block=0, blocks=len(data) // 128)
    edid.edid = ctypes.cast(buf, ctypes.POINTER(c_u8))
    ioctl(fd, S_EDID, edid)


def subscribe_source_change(fd: int) -> None:
    ioctl(fd, SUBSCRIBE_EVENT, EventSubscription(type=EVENT_SOURCE_CHANGE))


def dequeue_events(fd: int) -> list[int]:
    """Every pending event's type (the fd polls POLLPRI while one waits)."""
    out: list[int] = []
    while True:
        ev = Event()
        try:
            ioctl(fd, DQEVENT, ev)
        except OSError as e:
            if e.errno == errno.ENOENT:  # none left
                return out
            raise
        out.append(int(ev.type))
        if ev.pending == 0:
            return out


def querycap(fd: int) -> Capability:
    cap = Capability()
    ioctl(fd, QUERYCAP, cap)
    return cap


def device_caps(cap: Capability) -> int:
    return int(cap.device_caps if cap.capabilities & CAP_DEVICE_CAPS else cap.capabilities)


def set_format(
    fd: int, width: int, height: int, pixelformat: int, buf_type: int = BUF_TYPE_VIDEO_CAPTURE
) -> PixFormat:
    """S_FMT; returns what the driver settled on (it may change the pixel format)."""
    fmt = Format(type=buf_type)
    ioctl(fd, G_FMT, fmt)
    fmt.fmt.pix.width, fmt.fmt.pix.height = width, height
    fmt.fmt.pix.pixelformat, fmt.fmt.pix.field = pixelformat, FIELD_NONE
    ioctl(fd, S_FMT, fmt)
    pix: PixFormat = fmt.fmt.pix
    return pix


class Buffers:
    """The driver's mmap buffers of one streaming session (VIDIOC_REQBUFS ... STREAMOFF).

    Capture buffers are queued empty; output buffers (a test's source) are queued holding
    `fill`, the picture to send."""

    def __init__(
        self, fd: int, count: int, buf_type: int = BUF_TYPE_VIDEO_CAPTURE, fill: bytes = b""
    ) -> None:
        self.fd, self.type = fd, buf_type
        req = RequestBuffers(count=count, type=buf_type, memory=MEMORY_MMAP)
        ioctl(fd, REQBUFS, req)
        if req.count < 1:
            raise OSError(errno.ENOMEM, "the driver gave no buffers")
        self.maps: list[mmap.mmap] = []
        prot = mmap.PROT_READ | (mmap.PROT_WRITE if fill else 0)
        try:
            for i in range(req.count):
                buf = Buffer(index=i, type=buf_type, memory=MEMORY_MMAP)
                ioctl(fd, QUERYBUF, buf)
                m = mmap.mmap(fd, buf.length, mmap.MAP_SHARED, prot, offset=buf.m.offset)
                self.maps.append(m)
                if fill:
                    m[: len(fill)] = fill
                    buf.bytesused = len(fill)
                ioctl(fd, QBUF, buf)
        except OSError:
            self.close()
            raise

    def start(self) -> None:
        ioctl(self.fd, STREAMON, ctypes.c_int(self.type))

    def dequeue(self) -> Buffer:
        buf = Buffer(type=self.type, memory=MEMORY_MMAP)
        ioctl(self.fd, DQBUF, buf)
        return buf

    def data(self, buf: Buffer) -> bytes:
        """A copy of the buffer's bytes (the driver reuses it once queued again)."""
        return bytes(self.maps[buf.index][: buf.bytesused or buf.length])

    def requeue(self, buf: Buffer) -> None:
        ioctl(self.fd, QBUF, buf)

    def close(self) -> None:
        """STREAMOFF, unmap, free the driver's buffers; each step best effort (the device may
        be gone)."""
        with contextlib.suppress(OSError):
            ioctl(self.fd, STREAMOFF, ctypes.c_int(self.type))
        for m in self.maps:
            m.close()
        self.maps = []
        with contextlib.suppress(OSError):
            ioctl(self.fd, REQBUFS, RequestBuffers(count=0, type=self.type, memory=MEMORY_MMAP))


def open_node(path: str) -> int:
    return os.open(path, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
