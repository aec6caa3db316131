"""daemon.media's drive over gadget.configfs (against FakeConfigfs, a FAKE of the kernel's
configfs: the real one is the kernel tier): errors become tool errors with their codes, and a
change between CD-ROM and disk re-enumerates the composite, since a target reads a drive's type
only when it enumerates."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from daemon import config as cfg
from daemon.errors import ToolError
from daemon.media import GadgetDrive, MediaStore, SimulatedDrive, drive_for
from gadget.configfs import Gadget
from gadget.profiles import build_profile
from tests.unit.fake_configfs import FakeConfigfs

UDC = "dummy_udc.0"


@pytest.fixture
def setup(tmp_path: Path) -> tuple[MediaStore, FakeConfigfs, list[str]]:
    sysfs = tmp_path / "sys"
    (sysfs / "class" / "udc" / UDC).mkdir(parents=True)
    (sysfs / "class" / "udc" / UDC / "state").write_text("configured\n")
    config = cfg.from_mapping(
        {
            "state": {"dir": str(tmp_path / "state")},
            "gadget": {
                "mass_storage": True,
                "ecm": False,
                "configfs_root": str(tmp_path / "config"),
                "sysfs_root": str(sysfs),
            },
        }
    )
    fake = FakeConfigfs(config.gadget.configfs_root, udcs=[UDC])
    gadget = Gadget(config.gadget, fake)
    gadget.apply(build_profile("full", "ios", config.gadget))
    rebinds: list[str] = []

    async def reenumerate() -> None:
        rebinds.append("rebind")

    backend = SimpleNamespace(
        gadget=gadget, board_profiles=SimpleNamespace(reenumerate=reenumerate)
    )
    drive = drive_for(config, backend)
    assert isinstance(drive, GadgetDrive)
    store = MediaStore(config, drive)
    for name in ("a.img", "b.iso"):
        (store.dir / name).write_bytes(b"\0" * 4096)
    return store, fake, rebinds


async def test_a_mode_change_reenumerates_and_errors_keep_their_codes(
    setup: tuple[MediaStore, FakeConfigfs, list[str]],
) -> None:
    store, fake, rebinds = setup
    await store.attach("a.img", cdrom=False, read_only=False)
    assert rebinds == []  # a disk, as the target enumerated it
    assert store.status()["attached"] == {"name": "a.img", "mode": "flash", "read_only": False}
    with pytest.raises(ToolError) as busy:
        await store.attach("b.iso", cdrom=True, read_only=True)
    assert busy.value.code == "media_busy"
    fake.locked = True
    with pytest.raises(ToolError) as locked:
        await store.detach(forced=False)
    assert locked.value.code == "media_locked" and locked.value.retryable
    assert (await store.detach(forced=True))["detached"] == "a.img"
    await store.attach("b.iso", cdrom=True, read_only=False)
    assert rebinds == ["rebind"]  # disk -> CD-ROM: the target must look again
    assert store.status()["attached"] == {"name": "b.iso", "mode": "cdrom", "read_only": True}
    fake.locked = False
    await store.detach(forced=False)
    await store.attach("b.iso", cdrom=True, read_only=True)
    assert rebinds == ["rebind"]


async def test_the_simulated_drive_is_a_recorder(tmp_path: Path) -> None:
    config = cfg.from_mapping({"state": {"dir": str(tmp_path)}, "backend": {"kind": "simulated"}})
    drive = drive_for(config, None)
    assert isinstance(drive, SimulatedDrive)
    store = MediaStore(config, drive)
    (store.dir / "x.img").write_bytes(b"x")
    await store.attach("x.img", cdrom=False, read_only=True)
    drive.locked = True
    with pytest.raises(ToolError) as locked:
        await store.detach(forced=False)
    assert locked.value.code == "media_locked"
    assert (await store.detach(forced=True))["detached"] == "x.img"


def test_no_drive_without_mass_storage_on_a_board(tmp_path: Path) -> None:
    config = cfg.from_mapping({"state": {"dir": str(tmp_path)}})
    assert drive_for(config, None) is None
    assert MediaStore(config, None).status()["drive"] is False


async def test_uploads_running_together_share_the_quota(tmp_path: Path) -> None:
    config = cfg.from_mapping(
        {
            "state": {"dir": str(tmp_path)},
            "backend": {"kind": "simulated"},
            "media": {"quota_mb": 1},
        }
    )
    store = MediaStore(config, SimulatedDrive())
    release = asyncio.Event()

    async def slow() -> AsyncIterator[bytes]:
        yield b"a" * 1000
        await release.wait()

    first = asyncio.ensure_future(store.upload("one.img", slow(), 600_000))
    while "one.img" not in store._uploading:
        await asyncio.sleep(0)
    with pytest.raises(ToolError) as refused:
        await store.upload("two.img", _once(b"b" * 600_000), 600_000)
    assert refused.value.code == "media_quota_exceeded"
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    assert sorted(p.name for p in store.dir.iterdir()) == []  # the cut one left nothing
    made = await store.upload("two.img", _once(b"b" * 600_000), 600_000)
    assert made.size == 600_000


async def _once(data: bytes) -> AsyncIterator[bytes]:
    yield data
