"""The EDID an HDMI bridge presents to the target: built here, byte by byte, reproducibly.

A source reads the sink's EDID to choose its output. Ours suits phones and computers alike:
1920x1080 at 60 and at 30 Hz (the first detailed timing is the preferred one), 1280x720 and
the VGA-era modes as fallbacks, HDMI (so phones send video at all), RGB only, and the
CEA-861 flags that say the sink shows the whole picture (underscan), so the source does not
shrink its output for overscan and leave a border the screen detector would have to crop.

etc/edid-1080p.hex is this EDID as text (what `v4l2-ctl --set-edid file=...` reads);
tests/unit/test_edid.py checks that it is the builder's output and that every block's
checksum holds. `python -m daemon.screen.edid` prints it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

BLOCK = 128
HEADER = bytes([0x00, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x00])
SHIPPED = Path(__file__).resolve().parents[2] / "etc" / "edid-1080p.hex"


@dataclass(frozen=True)
class Mode:
    """One detailed timing (CEA-861 / VESA figures)."""

    width: int
    height: int
    pixel_khz: int
    h_front: int
    h_sync: int
    h_blank: int
    v_front: int
    v_sync: int
    v_blank: int

    @property
    def refresh(self) -> float:
        total = (self.width + self.h_blank) * (self.height + self.v_blank)
        return self.pixel_khz * 1000 / total


MODE_1080P60 = Mode(1920, 1080, 148500, 88, 44, 280, 4, 5, 45)
MODE_1080P30 = Mode(1920, 1080, 74250, 88, 44, 280, 4, 5, 45)
MODE_720P60 = Mode(1280, 720, 74250, 110, 40, 370, 5, 5, 30)
# CEA-861 video identification codes: 1080p60 (native), 1080p30, 720p60, 480p, 640x480.
VICS = (16 | 0x80, 34, 4, 3, 1)


def checksum(block: bytes) -> int:
    """The last byte that makes the block's bytes sum to 0 modulo 256."""
    return (-sum(block[: BLOCK - 1])) & 0xFF


def _with_checksum(block: bytearray) -> bytes:
    assert len(block) == BLOCK, len(block)
    block[BLOCK - 1] = checksum(bytes(block))
    return bytes(block)


def detailed_timing(mode: Mode, size_mm: tuple[int, int]) -> bytes:
    clock = mode.pixel_khz // 10
    w, hb, h, vb = mode.width, mode.h_blank, mode.height, mode.v_blank
    hmm, vmm = size_mm
    return bytes(
        [
            clock & 0xFF,
            clock >> 8,
            w & 0xFF,
            hb & 0xFF,
            (w >> 8) << 4 | hb >> 8,
            h & 0xFF,
            vb & 0xFF,
            (h >> 8) << 4 | vb >> 8,
            mode.h_front & 0xFF,
            mode.h_sync & 0xFF,
            (mode.v_front & 0xF) << 4 | mode.v_sync & 0xF,
            (mode.h_front >> 8) << 6
            | (mode.h_sync >> 8) << 4
            | (mode.v_front >> 4) << 2
            | mode.v_sync >> 4,
            hmm & 0xFF,
            vmm & 0xFF,
            (hmm >> 8) << 4 | vmm >> 8,
            0,
            0,
            0x1E,  # digital separate sync, +hsync +vsync
        ]
    )


def _text_descriptor(tag: int, text: str) -> bytes:
    body = text.encode("ascii")[:13]
    if len(body) < 13:
        body += b"\n" + b" " * (12 - len(body))
    return bytes([0, 0, 0, tag, 0]) + body


def _range_limits() -> bytes:
    # 23-76 Hz vertical, 15-83 kHz horizontal, 170 MHz pixel clock: room for 1080p30 and 60.
    return bytes([0, 0, 0, 0xFD, 0, 23, 76, 15, 83, 17, 0, 0x0A]) + b" " * 6


def base_block(name: str, serial: int, size_cm: tuple[int, int]) -> bytes:
    b = bytearray(BLOCK)
    b[0:8] = HEADER
    maker = "FGT"
    packed = sum((ord(c) - 64) << shift for c, shift in zip(maker, (10, 5, 0), strict=True))
    b[8:10] = packed.to_bytes(2, "big")
    b[10:12] = (0x0001).to_bytes(2, "little")  # product code
    b[12:16] = serial.to_bytes(4, "little")
    b[16], b[17] = 1, 2024 - 1990  # week, year of manufacture
    b[18], b[19] = 1, 3  # EDID 1.3: what every source reads
    b[20] = 0x80  # digital input
    b[21], b[22] = size_cm
    b[23] = 120  # gamma 2.2
    b[24] = 0x0A  # RGB colour; the first detailed timing is the preferred mode
    b[25:35] = bytes([0xEE, 0x91, 0xA3, 0x54, 0x4C, 0x99, 0x26, 0x0F, 0x50, 0x54])  # sRGB
    b[35:38] = bytes([0x21, 0x08, 0x00])  # 640x480@60, 800x600@60, 1024x768@60
    standard = [(0x81, 0xC0), (0xD1, 0xC0)]  # 1280x720@60, 1920x1080@60 (16:9)
    standard += [(0x01, 0x01)] * (8 - len(standard))
    b[38:54] = bytes(x for pair in standard for x in pair)
    size_mm = (size_cm[0] * 10, size_cm[1] * 10)
    b[54:72] = detailed_timing(MODE_1080P60, size_mm)
    b[72:90] = detailed_timing(MODE_1080P30, size_mm)
    b[90:108] = _text_descriptor(0xFC, name)
    b[108:126] = _range_limits()
    b[126] = 1  # one extension block
    return _with_checksum(b)


def cea_block(size_cm: tuple[int, int]) -> bytes:
    video = bytes([2 << 5 | len(VICS), *VICS])
    # HDMI vendor-specific block (IEEE OUI 00-0C-03), physical address 1.0.0.0: a phone sends
    # video only to an HDMI sink.
    hdmi = bytes([3 << 5 | 5, 0x03, 0x0C, 0x00, 0x10, 0x00])
    # Video capability block: CE, IT and preferred formats are all "always underscanned".
    capability = bytes([7 << 5 | 2, 0x00, 0b0010_1010])
    blocks = video + hdmi + capability
    b = bytearray(BLOCK)
    b[0], b[1] = 0x02, 0x03  # CEA-861 extension, revision 3
    b[2] = 4 + len(blocks)  # where the detailed timings start
    b[3] = 0x80 | 1  # underscan: the sink shows the whole picture; one native timing
    b[4 : 4 + len(blocks)] = blocks
    dtd = 4 + len(blocks)
    b[dtd : dtd + 18] = detailed_timing(MODE_720P60, (size_cm[0] * 10, size_cm[1] * 10))
    return _with_checksum(b)


def build(name: str = "Fingertip", serial: int = 1, size_cm: tuple[int, int] = (53, 30)) -> bytes:
    """The default EDID: a base block and a CEA-861 extension, 256 bytes."""
    return base_block(name, serial, size_cm) + cea_block(size_cm)


def to_hex(edid: bytes) -> str:
    """16 bytes a line, lower-case hex: the text form v4l2-ctl and kvmd read."""
    return "".join(edid[i : i + 16].hex() + "\n" for i in range(0, len(edid), 16))


def parse(data: bytes) -> bytes:
    """An EDID file's bytes: binary, or hex text (whitespace and 0x prefixes ignored)."""
    if data[:8] != HEADER and data.isascii() and not any(b < 9 for b in data):
        text = data.decode("ascii").replace("0x", " ").replace(",", " ")
        data = bytes.fromhex("".join(text.split()))
    validate(data)
    return data


def validate(edid: bytes) -> None:
    """ValueError unless `edid` is whole blocks with a base header and good checksums."""
    if not edid or len(edid) % BLOCK or len(edid) > 4 * BLOCK:
        raise ValueError(f"an EDID is 1-4 blocks of 128 bytes, got {len(edid)} bytes")
    if edid[:8] != HEADER:
        raise ValueError("the EDID does not start with the 00 FF FF FF FF FF FF 00 header")
    for i in range(0, len(edid), BLOCK):
        if sum(edid[i : i + BLOCK]) & 0xFF:
            raise ValueError(f"EDID block {i // BLOCK} has a bad checksum")
    if len(edid) != BLOCK * (1 + edid[126]):
        raise ValueError(f"the EDID says {edid[126]} extension blocks, the file has another count")


def address_offset(edid: bytes) -> int | None:
    """Where the HDMI physical address (2 bytes) sits in the CEA-861 block, if there is one.

    A receiver may rewrite it (vivid does, as a CEC repeater would): it is the one part of an
    EDID that is not ours to compare."""
    if len(edid) < 2 * BLOCK or edid[BLOCK] != 0x02:
        return None
    end = BLOCK + min(edid[BLOCK + 2], BLOCK - 1)
    at = BLOCK + 4
    while at < end:
        tag, length = edid[at] >> 5, edid[at] & 0x1F
        if tag == 3 and length >= 5 and edid[at + 1 : at + 4] == bytes([0x03, 0x0C, 0x00]):
            return at + 4
        at += 1 + length
    return None


def same(a: bytes, b: bytes) -> bool:
    """Whether two EDIDs are the same apart from the physical address (and so the checksum of
    the block that holds it)."""
    if len(a) != len(b):
        return False
    at = address_offset(a)
    if at is None or address_offset(b) != at:
        return a == b
    skip = {at, at + 1, BLOCK + BLOCK - 1}
    return all(x == y for i, (x, y) in enumerate(zip(a, b, strict=True)) if i not in skip)


def load(path: str) -> bytes:
    """The EDID `[capture].edid` names ('' = the shipped default)."""
    return parse(Path(path).read_bytes()) if path else build()


def describe(edid: bytes) -> dict[str, object]:
    """What health_check shows of an EDID: its name and preferred mode."""
    name = ""
    for off in (54, 72, 90, 108):
        if edid[off : off + 4] == bytes([0, 0, 0, 0xFC]):
            name = edid[off + 5 : off + 18].split(b"\n")[0].decode("ascii", "replace").strip()
    d = edid[54:72]
    width = d[2] | (d[4] >> 4) << 8
    height = d[5] | (d[7] >> 4) << 8
    underscan = len(edid) >= 2 * BLOCK and edid[BLOCK] == 0x02 and bool(edid[BLOCK + 3] & 0x80)
    return {"name": name, "preferred": f"{width}x{height}", "underscan": underscan}


if __name__ == "__main__":
    print(to_hex(build()), end="")
