"""daemon/screen/edid.py: the default EDID is built reproducibly, valid, and what etc/ ships."""

from __future__ import annotations

from pathlib import Path

import pytest

from daemon.screen import edid


def test_the_shipped_file_is_the_builders_output() -> None:
    assert edid.SHIPPED.read_text() == edid.to_hex(edid.build())
    assert edid.load(str(edid.SHIPPED)) == edid.build() == edid.load("")


def test_every_block_sums_to_zero() -> None:
    data = edid.build()
    assert len(data) == 256
    for i in (0, 128):
        assert sum(data[i : i + 128]) % 256 == 0
        assert data[i + 127] == edid.checksum(data[i : i + 128])
    edid.validate(data)


def test_it_says_1080p60_first_then_1080p30_hdmi_and_underscan() -> None:
    data = edid.build()
    assert data[:8] == edid.HEADER
    assert data[54:72] == bytes.fromhex("023a801871382d40582c4500")[:12] + data[66:72]
    assert data[72:74] == bytes.fromhex("011d")  # 74.25 MHz: 1080p30
    cea = data[128:]
    assert cea[0] == 0x02 and cea[3] & 0x80  # CEA-861 with the underscan flag
    assert bytes([0x03, 0x0C, 0x00]) in cea[4 : cea[2]]  # the HDMI OUI
    assert 16 | 0x80 in cea[5:10] and 34 in cea[5:10]  # VIC 16 native, VIC 34
    assert edid.describe(data) == {"name": "Fingertip", "preferred": "1920x1080", "underscan": True}


def test_mode_refresh_rates() -> None:
    assert edid.MODE_1080P60.refresh == pytest.approx(60)
    assert edid.MODE_1080P30.refresh == pytest.approx(30)
    assert edid.MODE_720P60.refresh == pytest.approx(60)


def test_parse_reads_binary_and_hex_text(tmp_path: Path) -> None:
    data = edid.build()
    (tmp_path / "a.bin").write_bytes(data)
    (tmp_path / "b.hex").write_text("0x" + data.hex(" ").replace(" ", ", 0x"))
    assert edid.load(str(tmp_path / "a.bin")) == data
    assert edid.load(str(tmp_path / "b.hex")) == data


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"", "1-4 blocks"),
        (b"\0" * 128, "header"),
        (edid.build()[:128], "extension"),
        (edid.build()[:-1] + b"\0", "checksum"),
        (edid.build() * 3, "1-4 blocks"),
    ],
)
def test_bad_edids_are_refused_with_a_reason(data: bytes, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        edid.validate(data)


def test_a_file_that_is_not_an_edid_is_refused(tmp_path: Path) -> None:
    (tmp_path / "x").write_bytes(b"\xff\xfe not hex")
    with pytest.raises(ValueError):
        edid.load(str(tmp_path / "x"))


def test_same_ignores_only_the_physical_address_a_receiver_rewrites() -> None:
    ours = edid.build()
    at = edid.address_offset(ours)
    assert at is not None and ours[at : at + 2] == bytes([0x10, 0x00])  # 1.0.0.0
    rewritten = bytearray(ours)
    rewritten[at] = 0x20  # 2.0.0.0, and the block's checksum follows
    rewritten[255] = edid.checksum(bytes(rewritten[128:]))
    assert edid.same(bytes(rewritten), ours)
    other = bytearray(ours)
    other[72] ^= 1  # a timing, not the address
    assert not edid.same(bytes(other), ours)
    assert not edid.same(ours[:128], ours)
    assert edid.address_offset(ours[:128]) is None
