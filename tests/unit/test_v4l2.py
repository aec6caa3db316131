"""daemon/screen/v4l2.py: the ctypes structures match <linux/videodev2.h>.

The expected figures are the x86-64 header's (printed by a C program with sizeof and the
VIDIOC_* macros); an ioctl number encodes its structure's size, so a wrong field shifts it.
"""

from __future__ import annotations

import ctypes
import errno
import platform

import pytest

from daemon.screen import v4l2

X86_64 = platform.machine() == "x86_64"

HEADER_IOCTLS = {
    "QUERYCAP": 0x80685600,
    "G_FMT": 0xC0D05604,
    "S_FMT": 0xC0D05605,
    "REQBUFS": 0xC0145608,
    "QUERYBUF": 0xC0585609,
    "QBUF": 0xC058560F,
    "DQBUF": 0xC0585611,
    "STREAMON": 0x40045612,
    "STREAMOFF": 0x40045613,
    "QUERY_DV_TIMINGS": 0x80845663,
    "S_DV_TIMINGS": 0xC0845657,
    "G_DV_TIMINGS": 0xC0845658,
    "G_EDID": 0xC0285628,
    "S_EDID": 0xC0285629,
    "G_CTRL": 0xC008561B,
    "S_CTRL": 0xC008561C,
    "SUBSCRIBE_EVENT": 0x4020565A,
    "DQEVENT": 0x80885659,
}


@pytest.mark.skipif(not X86_64, reason="the figures are x86-64's")
@pytest.mark.parametrize(("name", "number"), sorted(HEADER_IOCTLS.items()))
def test_ioctl_numbers_match_the_header(name: str, number: int) -> None:
    assert getattr(v4l2, name) == number


@pytest.mark.skipif(not X86_64, reason="the figures are x86-64's")
def test_structure_sizes_and_offsets_match_the_header() -> None:
    sizes = {
        v4l2.Capability: 104,
        v4l2.Format: 208,
        v4l2.PixFormat: 48,
        v4l2.RequestBuffers: 20,
        v4l2.Buffer: 88,
        v4l2.BtTimings: 124,
        v4l2.DvTimings: 132,
        v4l2.Edid: 40,
        v4l2.Control: 8,
        v4l2.EventSubscription: 32,
        v4l2.Event: 136,
    }
    assert {s.__name__: ctypes.sizeof(s) for s in sizes} == {
        s.__name__: n for s, n in sizes.items()
    }
    assert (v4l2.Buffer.timestamp.offset, v4l2.Buffer.m.offset, v4l2.Buffer.length.offset) == (
        24,
        64,
        72,
    )
    assert (v4l2.Event.sequence.offset, v4l2.Event.id.offset) == (76, 96)
    assert (v4l2.BtTimings.pixelclock.offset, v4l2.BtTimings.flags.offset) == (16, 64)
    assert v4l2.Format.fmt.offset == 8


def test_the_same_sizes_hold_whatever_the_word_size() -> None:
    # The packed timing structures do not depend on the ABI; the others grow with pointers.
    assert ctypes.sizeof(v4l2.DvTimings) == 132
    assert ctypes.sizeof(v4l2.Format) == 4 + 200 + (ctypes.sizeof(ctypes.c_void_p) - 4)


def _dv(
    width: int, height: int, clock: int, hb: int, vb: int, interlaced: int = 0
) -> v4l2.DvTimings:
    dv = v4l2.DvTimings(type=v4l2.DV_BT_656_1120)
    bt = dv.u.bt
    bt.width, bt.height, bt.pixelclock, bt.interlaced = width, height, clock, interlaced
    bt.hfrontporch, bt.hsync, bt.hbackporch = 88, 44, hb - 132
    bt.vfrontporch, bt.vsync, bt.vbackporch = 4, 5, vb - 9
    return dv


def test_timings_give_size_and_refresh_rate() -> None:
    t = v4l2.timings_of(_dv(1920, 1080, 148_500_000, 280, 45))
    assert (t.width, t.height, t.interlaced) == (1920, 1080, False)
    assert t.fps == pytest.approx(60.0)
    assert t.label() == "1920x1080p60.00"
    assert t.to_dict() == {"width": 1920, "height": 1080, "fps": 60.0, "interlaced": False}
    # The struct round-trips: S_DV_TIMINGS sets back exactly what QUERY_DV_TIMINGS gave.
    assert v4l2.DvTimings.from_buffer_copy(t.raw).u.bt.pixelclock == 148_500_000
    thirty = v4l2.timings_of(_dv(1920, 1080, 74_250_000, 280, 45))
    assert thirty.fps == pytest.approx(30.0)


def test_empty_timings_have_no_rate_instead_of_dividing_by_zero() -> None:
    assert v4l2.timings_of(v4l2.DvTimings()).fps == 0.0


def test_signal_errnos_and_fourccs() -> None:
    assert v4l2.SIGNAL_ERRNOS == {
        errno.ENOLINK: "no_signal",
        errno.ENOLCK: "no_sync",
        errno.ERANGE: "out_of_range",
    }
    assert errno.ENOTTY in v4l2.NOT_DV_ERRNOS
    assert v4l2.fourcc("YUYV") == 0x56595559
    assert v4l2.fourcc_name(v4l2.fourcc("UYVY")) == "UYVY"


def test_set_edid_refuses_partial_blocks() -> None:
    with pytest.raises(ValueError, match="128-byte"):
        v4l2.set_edid(-1, b"\0" * 100)
