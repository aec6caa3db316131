"""BoardBackend against FakeConfigfs (a fake of the kernel's configfs, see fake_configfs.py) and
FakeHost below, a FAKE of the UDC and the target: neither can run here. The real proof is the
kernel tier (tests/kernel/guest/test_engine_kernel.py), where the same code drives dummy_udc.

FakeHost plays what the kernel tier showed the real one does: a bind creates a fresh node for
each linked HID function (here a raw pseudo-terminal, so the host reads what the board writes
and writes LED reports back), an unbind removes them, and the UDC state keeps reading
"configured" after the unbind until the host has reset the device ("default") and configured
it again.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import shutil
import threading
import time
import tty
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import structlog.testing

from daemon.board import BoardBackend
from daemon.config import Config, from_mapping
from daemon.engine import InputEngine
from daemon.engine import program as prog
from daemon.engine.program import Point
from gadget import reports
from gadget.configfs import Gadget
from gadget.errors import ConfigfsError, TargetNotAttached
from gadget.profiles import build_profile
from gadget.settings import GadgetSettings
from tests.unit.fake_configfs import FakeConfigfs

UDC = "dummy_udc.0"


class FakeHost(FakeConfigfs):
    """FakeConfigfs plus a FAKE UDC and target that react to (un)binding."""

    def __init__(self, settings: GadgetSettings, *, dip_s: float = 0.03) -> None:
        super().__init__(settings.configfs_root, udcs=[UDC])
        self.settings = settings
        self.dip_s = dip_s  # how long the host takes to reset, then to configure
        self.present = True  # False: a cable that is not in (the state drops and stays down)
        self.unbound = threading.Event()  # set while the gadget is unbound
        self.bind_delay = 0.0  # seconds a bind waits while unbound (to act in between)
        self.states: list[str] = []  # every state written, in order
        self.masters: dict[str, int] = {}  # role -> pty master (the host's end)
        self._slaves: dict[str, int] = {}
        self._timers: list[threading.Timer] = []
        self._closed = False
        self._state_path.write_text("not attached\n")

    @property
    def _state_path(self) -> Path:
        return self.settings.sysfs_root / "class" / "udc" / UDC / "state"

    def state(self) -> str:
        return self._state_path.read_text().strip()

    def _set_state(self, state: str) -> None:
        self._state_path.write_text(state + "\n")
        self.states.append(state)

    def write(self, path: Path, data: bytes) -> None:
        if path.name == "UDC" and data.strip() and self.bind_delay:
            time.sleep(self.bind_delay)
        super().write(path, data)
        if path.name == "UDC":
            if data.strip():
                self._host_attach(Path(path).parent)
            else:
                self._host_detach()

    def _host_attach(self, gadget: Path) -> None:
        self.unbound.clear()
        # f_hid creates its nodes at bind (hidg_bind), one per linked function.
        for link in (gadget / "configs" / "c.1").iterdir():
            if link.is_symlink() and link.name.startswith("hid."):
                self._make_node(gadget, link.name)
        if self.present:
            self._later(self.dip_s, "default", "configured")
        else:
            self._later(self.dip_s, "not attached")

    def _later(self, delay: float, *states: str) -> None:
        """`states` in order, `delay` seconds apart, one timer after the other: two timers
        of their own raced on a loaded machine (the state file read 'default\\ned')."""

        def step() -> None:
            if self._closed:
                return
            self._set_state(states[0])
            if states[1:]:
                self._later(delay, *states[1:])

        timer = threading.Timer(delay, step)
        self._timers.append(timer)
        timer.start()

    def _make_node(self, gadget: Path, instance: str) -> None:
        role = instance.removeprefix("hid.")
        master, slave = os.openpty()
        tty.setraw(slave)  # a transparent byte channel both ways
        os.set_blocking(master, False)
        self.masters[role], self._slaves[role] = master, slave
        dev = (gadget / "functions" / instance / "dev").read_text().strip()
        node = self.settings.dev_root / f"hidg{dev.split(':')[1]}"
        node.symlink_to(os.ttyname(slave))
        entry = self.settings.sysfs_root / "dev" / "char" / dev
        entry.mkdir(parents=True)
        (entry / "uevent").write_text(f"DEVNAME={node.name}\n")

    def _host_detach(self) -> None:
        self.unbound.set()
        # The nodes go; the state keeps reading "configured" (as dummy_udc showed).
        for fd in [*self.masters.values(), *self._slaves.values()]:
            os.close(fd)
        self.masters.clear()
        self._slaves.clear()
        for node in self.settings.dev_root.iterdir():
            node.unlink()
        shutil.rmtree(self.settings.sysfs_root / "dev", ignore_errors=True)

    def received(self, role: str) -> bytes:
        """Everything the board wrote to `role`'s node since the last call."""
        out = b""
        while True:
            try:
                chunk = os.read(self.masters[role], 4096)
            except BlockingIOError:
                return out
            if not chunk:
                return out
            out += chunk

    def close(self) -> None:
        self._closed = True
        for timer in self._timers:
            timer.cancel()
        self._host_detach()


@pytest.fixture
def settings(tmp_path: Path) -> GadgetSettings:
    (tmp_path / "sys" / "class" / "udc" / UDC).mkdir(parents=True)
    (tmp_path / "dev").mkdir()
    return GadgetSettings(
        configfs_root=tmp_path / "config",
        sysfs_root=tmp_path / "sys",
        dev_root=tmp_path / "dev",
        attach_timeout=5.0,
        settle_delay=0.0,
    )


@pytest.fixture
def host(settings: GadgetSettings) -> Iterator[FakeHost]:
    h = FakeHost(settings)
    yield h
    h.close()


def config(settings: GadgetSettings, device_type: str = "iOS") -> Config:
    base = from_mapping({"device": {"device_type": device_type}})
    return Config(device=base.device, gadget=settings)


def board(settings: GadgetSettings, host: FakeHost, device_type: str = "iOS") -> BoardBackend:
    return BoardBackend(config(settings, device_type), gadget=Gadget(settings, host))


WAIT_S = 10.0  # bounds a failure only; the machine is shared and noisy


async def eventually(check: Callable[[], bool]) -> None:
    """Until `check()` holds (then return) or WAIT_S pass (then return too: the caller's
    assertion says what was missing)."""
    deadline = time.monotonic() + WAIT_S
    while not check() and time.monotonic() < deadline:
        await asyncio.sleep(0.005)


async def drain(host: FakeHost, role: str, size: int, count: int) -> list[bytes]:
    """`count` reports of `size` bytes (or what came) from the host's end of `role`."""
    data = bytearray()

    def enough() -> bool:
        data.extend(host.received(role))
        return len(data) >= size * count

    await eventually(enough)
    return [bytes(data[i : i + size]) for i in range(0, len(data), size)]


# --- reconcile at start --------------------------------------------------------------------


async def test_start_builds_and_binds_full_from_nothing(
    settings: GadgetSettings, host: FakeHost
) -> None:
    b = board(settings, host)
    assert b.profiles.profile == "none"
    assert await b.start() is False  # enumerated afresh: the host holds nothing
    try:
        assert b.profiles.profile == "full"
        assert Gadget(settings, host).live_profile() == "full"
        # It waited for the host to reset and configure, not for the stale reading.
        assert host.states == ["default", "configured"]
        assert b.status()["hid_roles"] == ["consumer", "keyboard", "pointer"]
        await b.hid.write("keyboard", reports.keyboard(0, [0x04]))
        await b.hid.write("pointer", reports.mouse(reports.BUTTON_LEFT, 10, 20))
        await b.hid.write("consumer", reports.consumer(0xE9))
        assert await drain(host, "keyboard", 8, 1) == [reports.keyboard(0, [0x04])]
        assert await drain(host, "pointer", 7, 1) == [reports.mouse(reports.BUTTON_LEFT, 10, 20)]
        assert await drain(host, "consumer", 2, 1) == [reports.consumer(0xE9)]
    finally:
        await b.close()


async def test_start_after_a_crash_mid_isolation_restores_full(
    settings: GadgetSettings, host: FakeHost
) -> None:
    Gadget(settings, host).apply(build_profile("keyboard-isolated", "ios", settings))
    assert Gadget(settings, host).live_profile() == "keyboard-isolated"
    b = board(settings, host)
    await b.start()
    try:
        assert b.profiles.profile == "full"
        assert int((settings.gadget_dir / "idProduct").read_text(), 16) == settings.product_id_full
        await b.hid.write("pointer", reports.mouse(0, 1, 2))
        assert await drain(host, "pointer", 7, 1) == [reports.mouse(0, 1, 2)]
    finally:
        await b.close()


async def test_start_when_full_is_live_changes_nothing_and_the_engine_releases_everything(
    settings: GadgetSettings, host: FakeHost
) -> None:
    Gadget(settings, host).apply(build_profile("full", "android", settings))
    mutations = len(host.ops)
    b = board(settings, host, "Android")
    assert await b.start() is True  # the host kept what it held: a crashed daemon's keys?
    eng = engine(b)
    try:
        assert len(host.ops) == mutations  # not a single configfs write: no re-enumeration
        assert b.profiles.profile == "full"
        # What the daemon's start does then: all-up on every role, three times each.
        assert await eng.release_everything() == ["keyboard", "consumer", "pointer"]
        n = eng.cfg.release_repeats
        assert await drain(host, "keyboard", 8, n) == [reports.KEYBOARD_RELEASE] * n
        assert await drain(host, "consumer", 2, n) == [reports.CONSUMER_RELEASE] * n
        touch = reports.touch_release()
        assert await drain(host, "pointer", len(touch), n) == [touch] * n
    finally:
        await eng.close()
        await b.close()


async def test_start_without_a_target_is_not_fatal(
    settings: GadgetSettings, host: FakeHost
) -> None:
    host.present = False
    b = board(dataclasses.replace(settings, attach_timeout=0.2), host)
    await b.start()
    try:
        assert b.profiles.profile == "full"  # bound and waiting for a cable
    finally:
        await b.close()


# --- switching ------------------------------------------------------------------------------


async def test_switch_waits_for_the_target_and_reopens_the_writers(
    settings: GadgetSettings, host: FakeHost
) -> None:
    b = board(settings, host)
    await b.start()
    try:
        await b.hid.write("keyboard", reports.KEYBOARD_RELEASE)  # a descriptor on the old node
        assert await drain(host, "keyboard", 8, 1) == [reports.KEYBOARD_RELEASE]
        seen = list(host.states)
        assert await b.profiles.switch_profile("keyboard-isolated") is True
        assert b.profiles.profile == "keyboard-isolated"
        # Returned after the host reset and configured the new device, not on the stale
        # "configured" that the unbind left behind.
        assert host.states == [*seen, "default", "configured"]
        # The old node's descriptor is hung up (EIO): only a reopened writer gets through.
        chord = reports.keyboard(reports.MOD_LMETA, [0x04])
        await b.hid.write("keyboard", chord)
        assert await drain(host, "keyboard", 8, 1) == [chord]
        with pytest.raises(TargetNotAttached, match="no pointer function"):
            await b.hid.write("pointer", reports.mouse(0, 1, 1))
        assert b.status()["hid_roles"] == ["consumer", "keyboard"]

        assert await b.profiles.switch_profile("full") is True
        await b.hid.write("pointer", reports.mouse(0, 5, 6))
        assert await drain(host, "pointer", 7, 1) == [reports.mouse(0, 5, 6)]
        before = len(host.ops)
        assert await b.profiles.switch_profile("full") is False
        assert len(host.ops) == before
    finally:
        await b.close()


async def test_a_switch_the_target_never_confirms_fails_but_tracks_what_is_live(
    settings: GadgetSettings, host: FakeHost
) -> None:
    b = board(dataclasses.replace(settings, attach_timeout=0.2), host)
    await b.start()
    try:
        host.present = False
        with pytest.raises(ConfigfsError, match="did not configure"):
            await b.profiles.switch_profile("keyboard-isolated")
        assert b.profiles.profile == "keyboard-isolated"  # configfs has it; the host has not
        assert b.status()["hid_roles"] == ["consumer", "keyboard"]
    finally:
        host.present = True
        await b.close()


async def test_a_cancelled_switch_still_completes(settings: GadgetSettings, host: FakeHost) -> None:
    b = board(settings, host)
    await b.start()
    try:
        await b.hid.write("keyboard", reports.KEYBOARD_RELEASE)  # a descriptor on the old node
        host.unbound.clear()
        host.bind_delay = 0.2
        task = asyncio.create_task(b.profiles.switch_profile("keyboard-isolated"))
        assert await asyncio.to_thread(host.unbound.wait, 10)
        task.cancel()  # between unbind and bind: nothing is live
        with pytest.raises(asyncio.CancelledError):
            await task
        # The switch runs on to its end and then points the writers at the new nodes.
        await eventually(lambda: b.profiles.profile == "keyboard-isolated")
        assert b.profiles.profile == "keyboard-isolated"
        assert b.status()["hid_roles"] == ["consumer", "keyboard"]
        chord = reports.keyboard(reports.MOD_LMETA, [0x04])
        await b.hid.write("keyboard", chord)
        assert await drain(host, "keyboard", 8, 1) == [chord]
    finally:
        await b.close()


# --- LEDs, roles, close -----------------------------------------------------------------------


async def test_leds_follow_the_hosts_output_reports(
    settings: GadgetSettings, host: FakeHost
) -> None:
    b = board(settings, host)
    await b.start()
    try:
        assert b.leds == reports.Leds()
        os.write(host.masters["keyboard"], reports.leds(reports.Leds(caps_lock=True)))
        await eventually(lambda: b.leds.caps_lock)
        assert b.leds == reports.Leds(caps_lock=True)
        assert b.status()["leds"]["caps_lock"] is True
        # A switch re-creates the node: the reader follows it.
        await b.profiles.switch_profile("keyboard-isolated")
        os.write(host.masters["keyboard"], reports.leds(reports.Leds(num_lock=True)))
        await eventually(lambda: b.leds.num_lock)
        assert b.leds == reports.Leds(num_lock=True)
    finally:
        await b.close()


async def test_an_unknown_role_is_a_programming_error(
    settings: GadgetSettings, host: FakeHost
) -> None:
    b = board(settings, host)
    await b.start()
    try:
        with pytest.raises(ValueError, match="unknown HID role 'mouse'"):
            await b.hid.write("mouse", reports.mouse(0, 0, 0))
    finally:
        await b.close()


async def test_close_leaves_full_bound(settings: GadgetSettings, host: FakeHost) -> None:
    b = board(settings, host)
    await b.start()
    await b.profiles.switch_profile("keyboard-isolated")
    await b.hid.write("keyboard", reports.keyboard(reports.MOD_LMETA, [0x04]))
    assert await drain(host, "keyboard", 8, 1) == [reports.keyboard(reports.MOD_LMETA, [0x04])]
    await b.close()
    assert Gadget(settings, host).live_profile() == "full"  # restored, still bound
    assert Gadget(settings, host).bound_udc() == UDC
    assert b.status()["hid_roles"] == []
    with pytest.raises(TargetNotAttached):
        await b.hid.write("keyboard", reports.KEYBOARD_RELEASE)


# --- releasing: the engine's, through the board's plain writers -------------------------------


def engine(b: BoardBackend) -> InputEngine:
    return InputEngine(b.hid, b.profiles, b.config.input, b.config.platform)


async def test_the_engines_stop_lifts_a_held_drag_where_it_is_and_every_key(
    settings: GadgetSettings, host: FakeHost
) -> None:
    b = board(settings, host)
    await b.start()
    eng = engine(b)
    start, at = Point(100, 100), Point(300, 400)
    drag = prog.drag_start(eng.cfg, eng.pointer, start, at)
    async with eng.invocation("drag_start", drag="start") as s:
        await s.run(drag)
        s.keep_contact(start, at)
    x, y = at.abs()
    assert await drain(host, "pointer", 7, len(drag)) == [step.report for step in drag]
    assert reports.unpack_mouse(drag[-1].report) == reports.MouseState(reports.BUTTON_LEFT, x, y)
    await eng.close()
    await b.close()
    n = eng.cfg.release_repeats
    # The button goes up where the pointer was, not at the centre; keys and media keys too.
    assert await drain(host, "pointer", 7, n) == [reports.mouse_release(x, y)] * n
    assert await drain(host, "keyboard", 8, n) == [reports.KEYBOARD_RELEASE] * n
    assert await drain(host, "consumer", 2, n) == [reports.CONSUMER_RELEASE] * n


async def test_a_release_goes_on_past_a_role_whose_node_is_gone(
    settings: GadgetSettings, host: FakeHost
) -> None:
    b = board(settings, host)
    await b.start()
    eng = engine(b)
    try:
        b.gadget.device_nodes()["consumer"].unlink()  # ENOENT: that function's node went away
        with structlog.testing.capture_logs() as logs:
            assert await eng.release_everything() == ["keyboard", "consumer", "pointer"]
        n = eng.cfg.release_repeats
        assert await drain(host, "keyboard", 8, n) == [reports.KEYBOARD_RELEASE] * n
        centre = reports.norm_to_abs(500)
        assert await drain(host, "pointer", 7, n) == [reports.mouse_release(centre, centre)] * n
        failed = [(e["role"], e["code"]) for e in logs if e["event"] == "release_write_failed"]
        assert failed == [("consumer", "target_not_attached")]
        assert eng.held.holding() == []
    finally:
        await eng.close()
        await b.close()


async def test_a_release_goes_on_past_a_role_whose_host_stopped_reading(
    settings: GadgetSettings, host: FakeHost
) -> None:
    """The write timeout: the keyboard's host end takes nothing more; each of its releases
    fails at the writer's limit, and the other roles' releases arrive all the same."""
    b = board(dataclasses.replace(settings, write_timeout=0.05), host)
    await b.start()
    eng = engine(b)
    # The keyboard's node becomes a full pipe nobody reads (a pty drains its buffer
    # asynchronously, so it cannot be kept full).
    node = b.gadget.device_nodes()["keyboard"]
    node.unlink()
    os.mkfifo(node)
    reader = os.open(node, os.O_RDONLY | os.O_NONBLOCK)
    filler = os.open(node, os.O_WRONLY | os.O_NONBLOCK)
    try:
        for size in (4096, 1):  # to the last byte
            with contextlib.suppress(BlockingIOError):
                while True:
                    os.write(filler, bytes(size))
        with structlog.testing.capture_logs() as logs:
            await eng.release_everything()
        n = eng.cfg.release_repeats
        assert await drain(host, "consumer", 2, n) == [reports.CONSUMER_RELEASE] * n
        failed = [e for e in logs if e["event"] == "release_write_failed"]
        assert [(e["role"], e["delivered"], e["code"]) for e in failed] == [
            ("keyboard", 0, "target_not_attached")
        ]
        assert "not reading reports" in failed[0]["reason"]
    finally:
        await eng.close()
        await b.close()
        os.close(filler)
        os.close(reader)


async def test_the_usb_link_part_follows_the_udc_between_start_and_close(
    settings: GadgetSettings, host: FakeHost
) -> None:
    """start() reads the UDC's state once; follow_link (the daemon's "usb link" part) follows
    it with its watcher thread until it is stopped, before the backend closes."""
    b = board(settings, host)
    await b.start()
    try:
        assert b.link.state == "configured"
        following = b.follow_link()
        await anext(following)
        host._set_state("suspended")  # the FAKE UDC: a plain file, read at the watcher's interval
        await eventually(lambda: b.link.state == "suspended")
        assert b.link.state == "suspended" and b.link.suspended.is_set()
        host._set_state("configured")
        await eventually(lambda: b.link.state == "configured")
        assert b.link.state == "configured"
        assert await anext(following, None) is None  # the part stops: the watcher is gone
        assert not any(t.name == "udc-state" for t in threading.enumerate())
    finally:
        await b.close()
