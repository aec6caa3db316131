"""gadget.configfs against FakeConfigfs (a fake of the kernel's configfs, see fake_configfs.py)
and a plain temporary sysfs/dev tree. The real kernel proof is the kernel tier."""

from __future__ import annotations

import errno
import json
import os
import stat
import threading
from pathlib import Path

import pytest

from gadget import descriptors
from gadget.configfs import Gadget, Medium
from gadget.errors import ConfigfsError, EndpointBudgetExceeded, GadgetError
from gadget.profiles import Profile, build_profile
from gadget.settings import GadgetSettings
from tests.unit.fake_configfs import FakeConfigfs

UDC = "dummy_udc.0"
FULL_ORDER = ["hid.keyboard", "hid.consumer", "ecm.usb0", "hid.pointer"]


@pytest.fixture
def settings(tmp_path: Path) -> GadgetSettings:
    sysfs = tmp_path / "sys"
    (sysfs / "class" / "udc" / UDC).mkdir(parents=True)
    (sysfs / "class" / "udc" / UDC / "state").write_text("not attached\n")
    (tmp_path / "dev").mkdir()
    return GadgetSettings(
        configfs_root=tmp_path / "config", sysfs_root=sysfs, dev_root=tmp_path / "dev"
    )


@pytest.fixture
def fake(settings: GadgetSettings) -> FakeConfigfs:
    return FakeConfigfs(settings.configfs_root, udcs=[UDC])


@pytest.fixture
def gadget(settings: GadgetSettings, fake: FakeConfigfs) -> Gadget:
    return Gadget(settings, fake)


def full(s: GadgetSettings, platform: str = "ios") -> Profile:
    return build_profile("full", platform, s)


def isolated(s: GadgetSettings) -> Profile:
    return build_profile("keyboard-isolated", "ios", s)


def ops_of(fake: FakeConfigfs, kind: str) -> list[str]:
    return [path for op, path, _ in fake.ops if op == kind]


def written(fake: FakeConfigfs) -> set[str]:
    return {path.removeprefix("fingertip/") for path in ops_of(fake, "write")}


def test_first_apply_builds_the_whole_profile(gadget: Gadget, fake: FakeConfigfs) -> None:
    s = gadget.settings
    assert gadget.apply(full(s)) is True
    g = s.gadget_dir
    assert (g / "idVendor").read_text() == "0x1d6b\n"
    assert (g / "idProduct").read_text() == "0x0104\n"
    assert (g / "bcdUSB").read_text() == "0x0200\n"
    assert (g / "strings/0x409/serialnumber").read_text() == "fingertip-0001\n"
    assert (g / "strings/0x409/manufacturer").read_text() == "Fingertip\n"
    assert (g / "configs/c.1/MaxPower").read_text() == "250\n"
    kb = g / "functions/hid.keyboard"
    assert (kb / "report_desc").read_bytes() == descriptors.KEYBOARD.report_desc
    assert (kb / "protocol").read_text() == "1\n"
    assert (kb / "no_out_endpoint").read_text() == "1\n"
    assert (g / "functions/hid.pointer/report_desc").read_bytes() == descriptors.MOUSE.report_desc
    assert (g / "functions/ecm.usb0/host_addr").read_text() == s.host_mac + "\0\n"
    assert (g / "functions/ecm.usb0/dev_addr").read_text() == s.dev_mac + "\0\n"
    # Links in order, then the bind as the very last step.
    assert [p.rsplit("/", 1)[1] for p in ops_of(fake, "symlink")] == FULL_ORDER
    assert fake.ops[-1] == ("write", "fingertip/UDC", UDC.encode())
    assert gadget.linked() == FULL_ORDER
    assert gadget.bound_udc() == UDC
    assert gadget.live_profile() == "full"


def test_second_apply_writes_nothing(gadget: Gadget, fake: FakeConfigfs) -> None:
    gadget.apply(full(gadget.settings))
    fake.ops.clear()
    assert gadget.apply(full(gadget.settings)) is False
    assert fake.ops == []
    # A new process (the CLI after the daemon) sees the same: nothing to do.
    assert Gadget(gadget.settings, fake).apply(full(gadget.settings)) is False
    assert fake.ops == []


def test_switching_profiles_unbinds_relinks_and_writes_only_what_differs(
    gadget: Gadget, fake: FakeConfigfs
) -> None:
    s = gadget.settings
    gadget.apply(full(s))
    fake.ops.clear()
    assert gadget.apply(isolated(s)) is True
    assert fake.ops[0] == ("write", "fingertip/UDC", b"\n")  # unbind first
    assert [p.rsplit("/", 1)[1] for p in ops_of(fake, "unlink")] == FULL_ORDER[::-1]
    assert written(fake) == {
        "UDC",
        "idProduct",
        "bcdDevice",
        "strings/0x409/serialnumber",
        "strings/0x409/product",
        "configs/c.1/strings/0x409/configuration",
    }
    assert [p.rsplit("/", 1)[1] for p in ops_of(fake, "symlink")] == FULL_ORDER[:3]
    assert fake.ops[-1] == ("write", "fingertip/UDC", UDC.encode())
    assert gadget.live_profile() == "keyboard-isolated"
    assert gadget.linked() == FULL_ORDER[:3]
    assert (s.gadget_dir / "idProduct").read_text() == f"0x{s.product_id_isolated:04x}\n"

    fake.ops.clear()
    assert gadget.apply(full(s)) is True
    assert [p.rsplit("/", 1)[1] for p in ops_of(fake, "symlink")] == FULL_ORDER
    assert not any("functions/" in p for p in written(fake))  # the pointer was kept, unlinked
    assert gadget.live_profile() == "full"


def test_platform_switch_rewrites_only_the_pointer(gadget: Gadget, fake: FakeConfigfs) -> None:
    s = gadget.settings
    gadget.apply(full(s, "ios"))
    fake.ops.clear()
    assert gadget.apply(full(s, "android")) is True
    changed = written(fake) - {"UDC"}
    assert "functions/hid.pointer/report_desc" in changed
    assert all(p.startswith("functions/hid.pointer/") for p in changed)
    pointer = s.gadget_dir / "functions/hid.pointer/report_desc"
    assert pointer.read_bytes() == descriptors.TOUCHSCREEN.report_desc


def test_function_order_setting_changes_the_links(
    settings: GadgetSettings, fake: FakeConfigfs
) -> None:
    Gadget(settings, fake).apply(full(settings))
    fake.ops.clear()
    reordered = GadgetSettings(
        configfs_root=settings.configfs_root,
        sysfs_root=settings.sysfs_root,
        function_order=("keyboard", "pointer", "consumer", "ecm"),
    )
    gadget = Gadget(reordered, fake)
    assert gadget.apply(full(reordered)) is True
    order = ["hid.keyboard", "hid.pointer", "hid.consumer", "ecm.usb0"]
    assert [p.rsplit("/", 1)[1] for p in ops_of(fake, "symlink")] == order
    assert gadget.linked() == order


def test_optional_attribute_is_skipped_where_the_kernel_lacks_it(
    settings: GadgetSettings,
) -> None:
    fake = FakeConfigfs(settings.configfs_root, udcs=[UDC], no_out_endpoint=False)
    gadget = Gadget(settings, fake)
    assert gadget.apply(full(settings)) is True
    assert not any(p.endswith("no_out_endpoint") for p in ops_of(fake, "write"))
    fake.ops.clear()
    assert gadget.apply(full(settings)) is False
    assert fake.ops == []


def test_an_external_change_is_repaired(gadget: Gadget, fake: FakeConfigfs) -> None:
    s = gadget.settings
    gadget.apply(full(s))
    fake.write(s.gadget_dir / "idProduct", b"0x1234")  # someone at the shell
    fake.ops.clear()
    assert gadget.apply(full(s)) is True
    assert written(fake) == {"UDC", "idProduct"}
    assert (s.gadget_dir / "idProduct").read_text() == "0x0104\n"


def test_an_unbound_gadget_is_rebound_with_links_recreated(
    gadget: Gadget, fake: FakeConfigfs
) -> None:
    s = gadget.settings
    gadget.apply(full(s))
    gadget.unbind()
    assert gadget.live_profile() is None
    fake.ops.clear()
    assert gadget.apply(full(s)) is True
    assert [op for op, _, _ in fake.ops] == ["unlink"] * 4 + ["symlink"] * 4 + ["write"]
    assert gadget.live_profile() == "full"


def test_bind_recreates_the_links_in_order(gadget: Gadget, fake: FakeConfigfs) -> None:
    gadget.apply(full(gadget.settings))
    gadget.unbind()
    fake.ops.clear()
    gadget.bind()
    assert [p.rsplit("/", 1)[1] for p in ops_of(fake, "symlink")] == FULL_ORDER
    assert fake.ops[-1] == ("write", "fingertip/UDC", UDC.encode())
    fake.ops.clear()
    gadget.bind()  # already bound: nothing
    assert fake.ops == []


def _snapshot(root: Path) -> dict[str, bytes | str]:
    out: dict[str, bytes | str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = str(p.relative_to(root))
            if p.is_symlink():
                out[rel] = "-> " + os.readlink(p)
            elif p.is_file():
                out[rel] = p.read_bytes()
            else:
                out[rel] = "dir"
    return out


@pytest.mark.parametrize(
    "where",
    [
        ("write", "idProduct"),
        ("write", "configuration"),
        ("symlink", "ecm.usb0"),
        ("write", "UDC"),  # the bind itself
    ],
)
def test_failed_switch_rolls_back_to_the_previous_profile(
    gadget: Gadget, fake: FakeConfigfs, where: tuple[str, str]
) -> None:
    s = gadget.settings
    gadget.apply(full(s))
    before = _snapshot(s.gadget_dir)

    fired: list[Path] = []

    def fail(op: str, path: Path, data: bytes | None) -> bool:
        # Once: a kernel that refuses a step once, so that the rollback itself can succeed.
        if fired or (op, path.name) != where or data == b"\n":
            return False
        fired.append(path)
        return True

    fake.fail = fail
    with pytest.raises(ConfigfsError, match="previous state restored") as info:
        gadget.apply(isolated(s))
    assert info.value.code == "gadget_configfs_failed"
    assert fired
    assert _snapshot(s.gadget_dir) == before
    assert gadget.live_profile() == "full"
    assert gadget.linked() == FULL_ORDER
    fake.ops.clear()
    assert gadget.apply(full(s)) is False  # exactly the previous state, bound
    assert fake.ops == []


def test_failed_first_apply_leaves_no_gadget(gadget: Gadget, fake: FakeConfigfs) -> None:
    fake.fail = lambda op, path, data: (op, path.name) == ("symlink", "hid.pointer")
    with pytest.raises(ConfigfsError, match="applying profile 'full' failed"):
        gadget.apply(full(gadget.settings))
    assert not gadget.exists()
    assert list(fake.top.iterdir()) == []


def test_a_failed_rollback_is_reported(gadget: Gadget, fake: FakeConfigfs) -> None:
    s = gadget.settings
    gadget.apply(isolated(s))
    fake.fail = lambda op, path, data: (op, path.name) == ("symlink", "ecm.usb0")
    with pytest.raises(ConfigfsError, match="rollback failed too: undoing unlink"):
        gadget.apply(full(s))


def test_a_kernel_refusal_is_a_configfs_error(settings: GadgetSettings) -> None:
    # A UDC name the fake kernel does not know: the bind fails with ENODEV, nothing remains.
    fake = FakeConfigfs(settings.configfs_root, udcs=["other_udc"])
    gadget = Gadget(settings, fake)
    with pytest.raises(ConfigfsError, match=os.strerror(errno.ENODEV)):
        gadget.apply(full(settings))
    assert not gadget.exists()


def test_teardown_order(gadget: Gadget, fake: FakeConfigfs) -> None:
    s = gadget.settings
    gadget.apply(full(s))
    gadget.apply(isolated(s))  # leaves hid.pointer unlinked: teardown removes it too
    fake.ops.clear()
    assert gadget.teardown() is True
    ops = [(op, path.removeprefix("fingertip/")) for op, path, _ in fake.ops]
    assert ops[0] == ("write", "UDC")
    assert ops[-1] == ("rmdir", "fingertip")
    index = {entry: i for i, entry in enumerate(ops)}
    last_unlink = max(i for i, (op, _) in enumerate(ops) if op == "unlink")
    first_function = min(i for i, (_, p) in enumerate(ops) if p.startswith("functions/"))
    assert last_unlink < first_function
    assert index[("rmdir", "configs/c.1/strings/0x409")] < index[("rmdir", "configs/c.1")]
    assert {p for op, p in ops if op == "rmdir" and p.startswith("functions/")} == {
        f"functions/{i}" for i in FULL_ORDER
    }
    assert list(fake.top.iterdir()) == []
    fake.ops.clear()
    assert gadget.teardown() is False
    assert fake.ops == []


def test_the_fake_refuses_what_configfs_refuses(gadget: Gadget, fake: FakeConfigfs) -> None:
    # If these did not fail, the ordering tests above would prove nothing.
    s = gadget.settings
    gadget.apply(full(s))
    g = s.gadget_dir
    with pytest.raises(OSError) as busy:
        fake.write(g / "functions/hid.keyboard/protocol", b"0")
    assert busy.value.errno == errno.EBUSY
    with pytest.raises(OSError) as linked:
        fake.rmdir(g / "functions/hid.keyboard")
    assert linked.value.errno == errno.EBUSY
    with pytest.raises(OSError) as populated:
        fake.rmdir(g)
    assert populated.value.errno == errno.ENOTEMPTY
    with pytest.raises(OSError) as bound:
        fake.write(g / "UDC", UDC.encode())
    assert bound.value.errno == errno.EBUSY


def test_no_configfs_is_a_clear_error(tmp_path: Path, settings: GadgetSettings) -> None:
    gadget = Gadget(settings)  # the real ops, and no usb_gadget directory
    with pytest.raises(ConfigfsError, match="is configfs mounted and libcomposite loaded"):
        gadget.apply(full(settings))


def test_find_udc(tmp_path: Path, settings: GadgetSettings) -> None:
    udcs = settings.sysfs_root / "class" / "udc"
    assert Gadget(settings).find_udc() == UDC
    named = GadgetSettings(sysfs_root=settings.sysfs_root, udc="fe980000.usb")
    with pytest.raises(ConfigfsError, match=r"UDC 'fe980000.usb' not found .*present: dummy_udc"):
        Gadget(named).find_udc()
    (udcs / "fe980000.usb").mkdir()
    assert Gadget(named).find_udc() == "fe980000.usb"
    with pytest.raises(ConfigfsError, match=r"several UDCs .*set gadget.udc"):
        Gadget(settings).find_udc()
    empty = GadgetSettings(sysfs_root=tmp_path / "nosys")
    with pytest.raises(ConfigfsError, match="no USB device controller under"):
        Gadget(empty).find_udc()


def test_wait_configured(gadget: Gadget) -> None:
    state = gadget.settings.sysfs_root / "class" / "udc" / UDC / "state"
    with pytest.raises(ConfigfsError, match=r"within 0.05 s .*UDC state: 'not attached'"):
        gadget.wait_configured(0.05)
    timer = threading.Timer(0.05, state.write_text, args=("configured\n",))
    timer.start()
    try:
        assert gadget.wait_configured(30) >= 0
    finally:
        timer.join()
    assert gadget.udc_state() == "configured"


def _later(*steps: tuple[float, Path, str]) -> threading.Thread:
    """Play the host: write UDC states at the given delays, in a thread."""

    def play() -> None:
        for delay, path, text in steps:
            threading.Event().wait(delay)
            path.write_text(text)

    thread = threading.Thread(target=play)
    thread.start()
    return thread


def test_a_stale_configured_after_our_bind_is_not_trusted(gadget: Gadget) -> None:
    # The kernel VM showed it: right after a rebind, dummy_udc still reads "configured" until
    # the host resets the port, then default -> addressed -> configured.
    state = gadget.settings.sysfs_root / "class" / "udc" / UDC / "state"
    state.write_text("configured\n")
    gadget.reenumeration_grace = 600  # this test is about the transition, not the fallback
    gadget.apply(full(gadget.settings))
    with pytest.raises(ConfigfsError, match="UDC state: 'configured'"):
        gadget.wait_configured(0.05)
    host = _later((0.05, state, "default\n"), (0.05, state, "configured\n"))
    try:
        assert gadget.wait_configured(30) >= 0
    finally:
        host.join()
    assert gadget.wait_configured(0) >= 0  # confirmed: no more waiting


def test_after_the_grace_a_steady_configured_counts(gadget: Gadget) -> None:
    state = gadget.settings.sysfs_root / "class" / "udc" / UDC / "state"
    state.write_text("configured\n")
    gadget.apply(full(gadget.settings))
    gadget.reenumeration_grace = 0  # a UDC that never shows the reset
    assert gadget.wait_configured(0) >= 0


def _publish_nodes(s: GadgetSettings, names: dict[str, str]) -> None:
    """Play udev/sysfs: /sys/dev/char/MAJ:MIN/uevent for each function's `dev`."""
    for instance, node in names.items():
        dev = (s.gadget_dir / "functions" / instance / "dev").read_text().strip()
        entry = s.sysfs_root / "dev" / "char" / dev
        entry.mkdir(parents=True)
        entry.joinpath("uevent").write_text(f"MAJOR={dev.split(':')[0]}\nDEVNAME={node}\n")


def test_device_nodes_follow_the_dev_attribute(gadget: Gadget) -> None:
    s = gadget.settings
    gadget.apply(full(s))
    # Deliberately not in creation order: the mapping must come from `dev`, not guesses.
    _publish_nodes(s, {"hid.keyboard": "hidg2", "hid.consumer": "hidg0", "hid.pointer": "hidg1"})
    assert gadget.device_nodes() == {
        "keyboard": s.dev_root / "hidg2",
        "consumer": s.dev_root / "hidg0",
        "pointer": s.dev_root / "hidg1",
    }
    gadget.apply(isolated(s))  # the pointer is no longer linked: no node for it
    assert set(gadget.device_nodes()) == {"keyboard", "consumer"}


def test_device_nodes_fall_back_to_scanning_dev(gadget: Gadget) -> None:
    s = gadget.settings
    gadget.apply(full(s))
    dev = (s.gadget_dir / "functions/hid.consumer/dev").read_text().strip()
    major, minor = (int(x) for x in dev.split(":"))
    try:
        os.mknod(s.dev_root / "hidg7", stat.S_IFCHR | 0o600, os.makedev(major, minor))
    except PermissionError:
        pytest.skip("mknod not permitted here")
    (s.dev_root / "hidg7.txt").write_text("not a device")
    assert gadget.device_nodes() == {"consumer": s.dev_root / "hidg7"}


def test_status(gadget: Gadget) -> None:
    s = gadget.settings
    absent = gadget.status()
    assert absent["exists"] is False
    assert absent["profile"] is None
    assert absent["state"] == "not attached"
    gadget.apply(full(s))
    _publish_nodes(s, {"hid.keyboard": "hidg0"})
    st = gadget.status()
    json.dumps(st)  # JSON-ready
    assert st["profile"] == "full"
    assert st["udc"] == UDC
    assert st["identity"]["id_product"] == "0x0104"
    assert st["identity"]["serial"] == "fingertip-0001"
    assert [f["role"] for f in st["functions"]] == ["keyboard", "consumer", "ecm", "pointer"]
    assert st["device_nodes"] == {"keyboard": str(s.dev_root / "hidg0")}


# --- the drive and the endpoint budget ---------------------------------------------------------


def with_drive(s: GadgetSettings, **keys: object) -> GadgetSettings:
    table = {"configfs_root": str(s.configfs_root), "sysfs_root": str(s.sysfs_root)}
    return GadgetSettings.from_table({**table, "mass_storage": True, **keys})


def test_a_composite_over_the_udcs_endpoints_is_refused_before_anything_changes(
    gadget: Gadget, fake: FakeConfigfs
) -> None:
    s = gadget.settings
    gadget.apply(full(s))
    fake.ops.clear()
    every = Gadget(with_drive(s), fake)  # 1 + keyboard, consumer, pointer 1 each + ECM 3 + drive 2
    with pytest.raises(EndpointBudgetExceeded) as refused:
        every.apply(full(every.settings))
    assert refused.value.code == "gadget_endpoint_budget"
    message = refused.value.message
    assert "needs 9 endpoints" in message and "the UDC has 8" in message
    assert "drop ecm (3, gadget.ecm = false) or mass_storage (2, gadget.mass_storage = false)" in (
        message
    )
    assert fake.ops == []  # not a write: the previous composite stays bound as it was
    assert gadget.linked() == FULL_ORDER and gadget.bound_udc() == UDC


def test_without_the_network_link_the_drive_fits_and_is_last_in_both_profiles(
    settings: GadgetSettings, fake: FakeConfigfs
) -> None:
    g = Gadget(with_drive(settings, ecm=False), fake)
    for name in ("full", "keyboard-isolated"):
        profile = build_profile(name, "ios", g.settings)
        assert profile.roles()[-1] == "mass_storage" and "ecm" not in profile.roles()
        g.apply(profile)
        assert g.linked()[-1] == "mass_storage.usb0"
    assert build_profile("full", "ios", g.settings).endpoints() == 6
    lun = g.settings.gadget_dir / "functions/mass_storage.usb0/lun.0"
    assert (lun / "removable").read_text() == "1\n"
    assert (lun / "inquiry_string").read_text() == "FingertpVirtual Drive   1.00\n"
    fake.ops.clear()
    assert g.apply(build_profile("keyboard-isolated", "ios", g.settings)) is False  # read back
    # On a UDC with more endpoints, everything fits.
    roomy = Gadget(with_drive(settings, udc_endpoints=16), fake)
    assert roomy.apply(full(roomy.settings)) is True
    assert roomy.linked() == [*FULL_ORDER, "mass_storage.usb0"]


def test_a_medium_is_attached_and_ejected_while_bound(
    settings: GadgetSettings, fake: FakeConfigfs, tmp_path: Path
) -> None:
    g = Gadget(with_drive(settings, ecm=False), fake)
    g.apply(full(g.settings))
    image = tmp_path / "disk.img"
    image.write_bytes(b"\0" * 4096)
    assert g.medium() is None
    g.attach_medium(Medium(image, cdrom=True, read_only=True))
    assert g.medium() == Medium(image, cdrom=True, read_only=True)
    assert g.bound_udc() == UDC  # no re-enumeration
    with pytest.raises(GadgetError) as busy:
        g.attach_medium(Medium(image))
    assert busy.value.code == "media_busy"
    assert g.apply(full(g.settings)) is False  # the medium is no part of the desired state
    assert g.medium() is not None
    assert g.eject_medium(forced=False) is True
    assert g.medium() is None and g.eject_medium(forced=False) is False
    # Flash and writable, then the target locks it: only a forced eject takes it away.
    g.attach_medium(Medium(image))
    assert g.medium() == Medium(image, cdrom=False, read_only=False)
    fake.locked = True
    with pytest.raises(GadgetError) as locked:
        g.eject_medium(forced=False)
    assert locked.value.code == "media_locked" and g.medium() is not None
    assert g.eject_medium(forced=True) is True
    assert g.medium() is None


def test_a_failed_attach_restores_the_mode(
    settings: GadgetSettings, fake: FakeConfigfs, tmp_path: Path
) -> None:
    g = Gadget(with_drive(settings, ecm=False), fake)
    g.apply(full(g.settings))
    lun = g.settings.gadget_dir / "functions/mass_storage.usb0/lun.0"
    with pytest.raises(ConfigfsError):
        g.attach_medium(Medium(tmp_path / "absent.img", cdrom=True, read_only=True))
    assert (lun / "cdrom").read_text() == "0\n" and (lun / "ro").read_text() == "0\n"
    assert g.medium() is None


def test_no_drive_in_the_composite_is_a_clear_error(gadget: Gadget, tmp_path: Path) -> None:
    gadget.apply(full(gadget.settings))
    with pytest.raises(GadgetError) as refused:
        gadget.attach_medium(Medium(tmp_path / "x.img"))
    assert refused.value.code == "media_unavailable"
    assert "gadget.mass_storage = true" in refused.value.message
