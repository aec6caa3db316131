"""HidWriter and LedReader against real file descriptors (FIFOs and device nodes). The writer
is a plain writer; what is held and its release are the engine's (tests/unit/test_engine.py,
test_board.py)."""

from __future__ import annotations

import asyncio
import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from gadget import reports
from gadget.errors import GadgetError, TargetNotAttached
from gadget.hidg import NOT_ATTACHED, HidWriter, LedReader, _error


class Fifo:
    """A named pipe standing where /dev/hidgN would: `read()` plays the host."""

    def __init__(self, path: Path) -> None:
        self.path = path
        os.mkfifo(path)
        self.rfd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)

    def read(self) -> bytes:
        try:
            return os.read(self.rfd, 1 << 20)
        except BlockingIOError:
            return b""

    def fill(self) -> None:
        """Fill the pipe so the next write would block, like a host that stopped polling."""
        wfd = os.open(self.path, os.O_WRONLY | os.O_NONBLOCK)
        try:
            while True:
                os.write(wfd, bytes(4096))
        except BlockingIOError:
            pass
        finally:
            os.close(wfd)

    def close(self) -> None:
        os.close(self.rfd)


@pytest.fixture
def fifos(tmp_path: Path) -> Iterator[dict[str, Fifo]]:
    made = {name: Fifo(tmp_path / name) for name in ("hidg0", "hidg1", "hidg2")}
    yield made
    for fifo in made.values():
        fifo.close()


async def test_write_delivers_the_report(fifos: dict[str, Fifo]) -> None:
    writer = HidWriter(fifos["hidg0"].path, "keyboard")
    report = reports.keyboard(reports.MOD_LSHIFT, [0x04])
    await writer.write(report)
    await writer.write(reports.KEYBOARD_RELEASE)
    assert fifos["hidg0"].read() == report + reports.KEYBOARD_RELEASE
    assert writer.is_open
    writer.close()
    assert not writer.is_open


async def test_a_target_that_stops_reading_is_an_error_not_a_success(
    fifos: dict[str, Fifo],
) -> None:
    fifo = fifos["hidg0"]
    writer = HidWriter(fifo.path, "keyboard", timeout=0.05)
    fifo.fill()
    with pytest.raises(TargetNotAttached, match="target not reading reports") as info:
        await writer.write(reports.KEYBOARD_RELEASE)
    assert info.value.code == "target_not_attached"
    assert info.value.retryable is True
    assert not writer.is_open  # the next write reopens
    while fifo.read():
        pass
    await writer.write(reports.keyboard(0, [0x05]))
    assert writer.is_open
    assert fifo.read() == reports.keyboard(0, [0x05])


async def test_a_write_waits_for_the_target_within_its_deadline(fifos: dict[str, Fifo]) -> None:
    fifo = fifos["hidg0"]
    writer = HidWriter(fifo.path, "consumer")
    fifo.fill()

    def drain() -> None:
        while fifo.read():
            pass

    asyncio.get_running_loop().call_later(0.05, drain)
    await writer.write(reports.consumer(0xE9), timeout=30)  # generous: a noisy machine
    assert fifo.read() == reports.consumer(0xE9)


async def test_a_missing_node_is_target_not_attached(tmp_path: Path) -> None:
    writer = HidWriter(tmp_path / "hidg9", "keyboard")
    with pytest.raises(TargetNotAttached, match=r"keyboard: target not attached .*ENOENT"):
        await writer.write(reports.KEYBOARD_RELEASE)
    assert not writer.is_open


async def test_a_node_without_a_driver_is_target_not_attached(tmp_path: Path) -> None:
    # What a stale /dev/hidgN looks like once its function is gone: the number has no driver.
    node = tmp_path / "hidg5"
    try:
        os.mknod(node, stat.S_IFCHR | 0o600, os.makedev(4095, 4095))
    except PermissionError:
        pytest.skip("mknod not permitted here")
    with pytest.raises(TargetNotAttached, match="target not attached"):
        await HidWriter(node, "keyboard").write(reports.KEYBOARD_RELEASE)


async def test_other_io_errors_are_not_called_not_attached(tmp_path: Path) -> None:
    with pytest.raises(GadgetError) as info:
        await HidWriter(tmp_path, "keyboard").write(reports.KEYBOARD_RELEASE)  # a directory
    assert not isinstance(info.value, TargetNotAttached)
    assert info.value.code == "hid_io_failed"
    assert "EISDIR" in info.value.message


@pytest.mark.parametrize("code", sorted(NOT_ATTACHED))
def test_not_attached_errnos_map_to_target_not_attached(code: int) -> None:
    err = _error(OSError(code, os.strerror(code)), "mouse", Path("/dev/hidg1"), "writing")
    assert isinstance(err, TargetNotAttached)
    assert errno.errorcode[code] in err.message
    assert err.message.startswith("mouse: target not attached (writing /dev/hidg1")


def test_eshutdown_is_covered() -> None:
    # f_hid's answer when the host is gone; the field's most common case.
    assert {errno.ESHUTDOWN, errno.ENODEV, errno.EPIPE, errno.ENOENT} <= NOT_ATTACHED


async def test_reopen_follows_a_new_node(tmp_path: Path) -> None:
    first = Fifo(tmp_path / "hidg0")
    writer = HidWriter(first.path, "consumer")
    await writer.write(reports.consumer(0xCD))
    assert first.read() == reports.consumer(0xCD)
    # Re-enumeration: the node is replaced; the old descriptor points at the old one.
    first.close()
    os.unlink(first.path)
    second = Fifo(tmp_path / "hidg0")
    writer.reopen()
    await writer.write(reports.consumer(0xB5))
    assert second.read() == reports.consumer(0xB5)
    second.close()


class HostEnd:
    """The host side of the keyboard node: writes LED output reports into the FIFO."""

    def __init__(self, path: Path) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)

    def send(self, data: bytes) -> None:
        os.write(self.fd, data)

    def close(self) -> None:
        os.close(self.fd)


async def test_led_reader_tracks_the_output_reports(tmp_path: Path) -> None:
    path = tmp_path / "hidg0"
    os.mkfifo(path)
    reader = LedReader(path)
    reader.start()
    host = HostEnd(path)
    try:
        assert reader.leds == reports.Leds()
        host.send(reports.leds(reports.Leds(caps_lock=True)))
        assert await reader.wait_change(10) == reports.Leds(caps_lock=True)
        assert reader.leds.caps_lock

        host.send(reports.leds(reports.Leds(caps_lock=True)))  # the same state: no change
        with pytest.raises(TimeoutError):
            await reader.wait_change(0.05)
        host.send(reports.leds(reports.Leds(num_lock=True, caps_lock=True)))
        assert await reader.wait_change(10) == reports.Leds(num_lock=True, caps_lock=True)

        # Several reports read at once (a pipe joins them): the last one wins.
        host.send(b"\x01\x04")
        assert await reader.wait_change(10) == reports.Leds(scroll_lock=True)
    finally:
        host.close()
        reader.close()


async def test_led_reader_stops_when_the_node_goes_and_reopens(tmp_path: Path) -> None:
    path = tmp_path / "hidg0"
    os.mkfifo(path)
    reader = LedReader(path)
    reader.start()
    host = HostEnd(path)
    host.send(b"\x02")
    await reader.wait_change(10)
    host.close()  # end of file: the reader lets go of the descriptor
    for _ in range(500):
        if not reader.is_open:
            break
        await asyncio.sleep(0.01)
    assert not reader.is_open
    assert reader.leds == reports.Leds(caps_lock=True)  # the last known state stays
    reader.reopen()
    assert reader.is_open
    host = HostEnd(path)
    host.send(b"\x00")
    assert await reader.wait_change(10) == reports.Leds()
    host.close()
    reader.close()


async def test_led_reader_on_a_missing_node(tmp_path: Path) -> None:
    with pytest.raises(TargetNotAttached):
        LedReader(tmp_path / "hidg0").start()
