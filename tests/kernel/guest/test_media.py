"""Virtual media on a real host: the mass-storage function seen by this kernel's usb-storage,
sd and sr drivers. The drive's size and bytes as the host reads them, a file drop mounted as
vfat, a file the host writes read back by the board without mounting, a forced eject while the
host holds the drive open, and the endpoint budget refusing a composite before it binds."""

from __future__ import annotations

import errno
import hashlib
import mmap
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from board import Board
from usbhost import EVENT_TIMEOUT, UsbDevice, UsbHost, find_usb

from daemon import fat
from gadget.configfs import Gadget, Medium
from gadget.errors import EndpointBudgetExceeded, GadgetError
from gadget.profiles import build_profile
from gadget.settings import GadgetSettings

MB = 1 << 20


@pytest.fixture
def drive_board(host: UsbHost) -> Iterator[Board]:
    """The composite with the drive in place of the network link (what fits a Pi's 8)."""
    b = Board(GadgetSettings(mass_storage=True, ecm=False), host)
    b.gadget.teardown()
    yield b
    b.gadget.teardown()


def pattern(size: int) -> bytes:
    return hashlib.sha256(str(size).encode()).digest() * (size // 32)


def read_all(dev: str) -> bytes:
    with open(f"/dev/{dev}", "rb", buffering=0) as f:
        return f.read()


def test_the_host_reads_a_flash_image_byte_exact_and_sees_it_go(
    drive_board: Board, tmp_path: Path
) -> None:
    live = drive_board.up("full")
    classes = [(i / "bInterfaceClass").read_text().strip() for i in live.usb.interfaces()]
    assert classes[-1] == "08"  # mass storage, last
    image = tmp_path / "known.img"
    data = pattern(4 * MB)
    image.write_bytes(data)
    drive_board.gadget.attach_medium(Medium(image, read_only=True))
    # The host polls a removable drive only while something has it open: open it to look.
    dev = drive_board.host.wait_for(
        lambda: _opened_block(live.usb, "sd"), "the medium on sd", EVENT_TIMEOUT * 3
    )
    assert int(Path(f"/sys/block/{dev}/size").read_text()) * 512 == len(data)
    assert hashlib.sha256(read_all(dev)).hexdigest() == hashlib.sha256(data).hexdigest()
    assert drive_board.gadget.eject_medium(forced=False) is True
    drive_board.host.wait_for(lambda: _gone(dev), "the medium gone from the host", EVENT_TIMEOUT)


def _opened_block(usb: UsbDevice, kind: str) -> str | None:
    for block in usb.sysfs.resolve().glob("*:*/host*/target*/*/block/*"):
        if block.name.startswith(kind):
            try:  # opening makes the host check for a medium (sd's revalidate)
                os.close(os.open(f"/dev/{block.name}", os.O_RDONLY | os.O_NONBLOCK))
            except OSError:
                return None
            if int((block / "size").read_text()) > 0:
                return block.name
    return None


def _gone(dev: str) -> bool:
    try:
        os.close(os.open(f"/dev/{dev}", os.O_RDONLY))
    except OSError as exc:
        return exc.errno in (errno.ENOMEDIUM, errno.ENXIO, errno.ENOENT)
    return int(Path(f"/sys/block/{dev}/size").read_text()) == 0


def test_a_cdrom_image_is_an_sr_device(drive_board: Board, tmp_path: Path) -> None:
    """A CD-ROM's device type is read at enumeration: the mode is set, then the target
    enumerates (a re-bind), and it sees sr with the image's bytes."""
    drive_board.up("full")
    image = tmp_path / "disc.iso"
    data = pattern(2 * MB)  # a whole number of 2048-byte sectors
    image.write_bytes(data)
    drive_board.gadget.attach_medium(Medium(image, cdrom=True, read_only=True))
    drive_board.gadget.unbind()
    drive_board.gadget.bind()
    usb = drive_board.host.wait_for(
        lambda: _find(drive_board), "the device after the re-bind", EVENT_TIMEOUT * 3
    )
    dev = drive_board.host.wait_for(
        lambda: _opened_block(usb, "sr"), "an sr device", EVENT_TIMEOUT * 3
    )
    assert int(Path(f"/sys/block/{dev}/size").read_text()) * 512 == len(data)
    assert hashlib.sha256(read_all(dev)).digest() == hashlib.sha256(data).digest()


def _find(board: Board) -> UsbDevice | None:
    s = board.settings
    return find_usb(s.vendor_id, s.product_id_full)


def test_a_file_drop_mounts_with_exactly_its_files_and_a_file_written_comes_back(
    drive_board: Board, tmp_path: Path
) -> None:
    live = drive_board.up("full")
    files = [fat.DropFile("Hello World.txt", b"hello\n"), fat.DropFile("photo.jpg", pattern(MB))]
    image = tmp_path / "drop.img"
    fat.build(image, files, fat.image_size(files, 4 * MB))
    drive_board.gadget.attach_medium(Medium(image))
    dev = drive_board.host.wait_for(
        lambda: _opened_block(live.usb, "sd"), "the drop on sd", EVENT_TIMEOUT * 3
    )
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "vfat", f"/dev/{dev}", str(mnt)], check=True)
    try:
        assert sorted(os.listdir(mnt)) == ["Hello World.txt", "photo.jpg"]
        assert (mnt / "photo.jpg").read_bytes() == files[1].data
        written = pattern(300_000) + b"from the target"
        (mnt / "saved.bin").write_bytes(written)
    finally:
        subprocess.run(["umount", str(mnt)], check=True)
    assert drive_board.gadget.eject_medium(forced=False) is True
    listed = {f["path"]: f["size"] for f in fat.list_files(image)}
    assert listed == {"/Hello World.txt": 6, "/photo.jpg": MB, "/saved.bin": len(written)}
    data, digest = fat.read_file(image, "saved.bin", 4 * MB)
    assert data == written and digest == hashlib.sha256(written).hexdigest()


def test_a_forced_eject_takes_the_drive_from_a_host_that_holds_it(
    drive_board: Board, tmp_path: Path
) -> None:
    live = drive_board.up("full")
    image = tmp_path / "held.img"
    image.write_bytes(pattern(8 * MB))
    drive_board.gadget.attach_medium(Medium(image))
    dev = drive_board.host.wait_for(
        lambda: _opened_block(live.usb, "sd"), "the medium on sd", EVENT_TIMEOUT * 3
    )
    stop, errors, reads = threading.Event(), list[int](), [0]

    def reader() -> None:
        """Holds the device open (sd then locks a removable medium) and reads it with O_DIRECT,
        each read from the drive, not the host's page cache. A failed or empty read ends it."""
        fd = os.open(f"/dev/{dev}", os.O_RDONLY | os.O_DIRECT)
        buf = mmap.mmap(-1, 64 << 10)  # page-aligned, as O_DIRECT needs
        offset = 0
        try:
            while not stop.is_set():
                try:
                    got = os.preadv(fd, [buf], offset)
                except OSError as exc:
                    errors.append(exc.errno)
                    return
                if got == 0:
                    errors.append(0)  # the medium is gone: nothing more to read
                    return
                reads[0] += 1
                offset = (offset + got) % (8 * MB)
        finally:
            os.close(fd)

    t = threading.Thread(target=reader)
    t.start()
    try:
        drive_board.host.wait_for(lambda: reads[0] > 2 or None, "the host reading", EVENT_TIMEOUT)
        with pytest.raises(GadgetError) as locked:
            drive_board.gadget.eject_medium(forced=False)
        assert locked.value.code == "media_locked"
        start = time.monotonic()
        assert drive_board.gadget.eject_medium(forced=True) is True
        took = time.monotonic() - start
        assert drive_board.gadget.medium() is None
        assert took < 1.0, took  # the bound for an eject
        drive_board.host.wait_for(lambda: errors or None, "the host's read failing", EVENT_TIMEOUT)
    finally:
        stop.set()
        t.join()
    print(f"forced eject while the host read: {took * 1000:.1f} ms, errno {errors}")


def test_a_composite_over_eight_endpoints_is_refused_and_the_live_one_stays(
    board: Board,
) -> None:
    live = board.up("full")
    every = Gadget(GadgetSettings(mass_storage=True))  # keyboard, media, pointer, ECM, drive
    with pytest.raises(EndpointBudgetExceeded) as refused:
        every.apply(build_profile("full", "ios", every.settings))
    assert "needs 9 endpoints" in refused.value.message
    assert "drop ecm" in refused.value.message
    still = _find(board)
    assert still is not None and still.devnum == live.usb.devnum  # not re-enumerated
    assert "mass_storage.usb0" not in board.gadget.linked()
