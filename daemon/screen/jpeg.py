"""Where an MJPEG device's JPEG ends inside its buffer (pure; no decoding).

A driver's `bytesused` is not always the JPEG's length. Some grabbers pad a frame with zeros
after its EOI marker (ustreamer accepts a buffer ending in 00 00 or D9 00 for this reason), and
v4l2loopback (0.12.7, the kernel tier's MJPEG source) resets every buffer's `bytesused` to the
whole buffer when a reader requests buffers, so a frame written before that comes back followed
by whatever the buffer held: the tail of an older, longer frame, EOI included. Passthrough must
serve the JPEG alone, so the end is found by walking the markers: the segments' lengths up to
the scan, the scan's entropy-coded data up to its first real marker (a 0xFF there is followed
by a stuffed 0x00 or is a restart marker), and so on to the EOI. Searching for the last
FF D9 would take the older frame's EOI, the first one could be an EXIF thumbnail's.
"""

from __future__ import annotations

SOI = b"\xff\xd8"
EOI = 0xD9
SOS = 0xDA
RST0, RST7 = 0xD0, 0xD7
TEM = 0x01  # a marker without a length, like the restarts


def jpeg_length(data: bytes) -> int | None:
    """The length of the JPEG at the start of `data`, through its EOI marker; None when
    `data` does not begin with a complete one (not a JPEG, or truncated)."""
    n = len(data)
    if data[:2] != SOI:
        return None
    i = 2  # at a marker's 0xFF
    while True:
        if i + 1 >= n or data[i] != 0xFF:
            return None
        while data[i + 1] == 0xFF:  # fill bytes before a marker
            i += 1
            if i + 1 >= n:
                return None
        marker = data[i + 1]
        if marker == EOI:
            return i + 2
        if RST0 <= marker <= RST7 or marker == TEM:
            i += 2
            continue
        if i + 3 >= n:
            return None
        length = (data[i + 2] << 8) | data[i + 3]  # counts itself, not the marker
        if length < 2:
            return None
        i += 2 + length
        if marker == SOS:
            scan_end = _scan_end(data, i)
            if scan_end is None:
                return None
            i = scan_end


def _scan_end(data: bytes, i: int) -> int | None:
    """Where the entropy-coded data starting at `i` ends: the 0xFF of the next marker that is
    neither a stuffed 0xFF 0x00 nor a restart (those belong to the scan)."""
    n = len(data)
    while True:
        i = data.find(b"\xff", i)
        if i < 0 or i + 1 >= n:
            return None
        following = data[i + 1]
        if following == 0x00 or RST0 <= following <= RST7:
            i += 2
        elif following == 0xFF:  # a fill byte: the marker is further on
            i += 1
        else:
            return i
