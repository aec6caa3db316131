"""A target that sleeps: the UDC state followed live, remote wakeup decided and asked, and the
input engine refusing, cutting and releasing around a suspend (on the real simulated target)."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from daemon.config import InputConfig
from daemon.engine import program as prog
from daemon.engine.flow import InputEngine
from daemon.engine.program import Point
from daemon.errors import ToolError
from daemon.sim.layout import make_layout
from daemon.sim.target import SimTarget
from daemon.usb import UsbLink
from gadget import usbstate
from gadget.profiles import build_profile
from gadget.settings import GadgetSettings

FAST = InputConfig(
    tap_hold_ms=5,
    key_hold_ms=5,
    chord_hold_ms=5,
    key_step_ms=1,
    release_interval_ms=1,
    typing_rate_cps=200,
    isolation_settle_ms=0,
    wake_timeout_s=0.3,
)


# --- the pure parts ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "state"),
    [
        ("not attached", "not_attached"),
        ("", "not_attached"),
        ("powered", "attached"),
        ("default", "attached"),
        ("addressed", "attached"),
        ("configured\n", "configured"),
        ("suspended", "suspended"),
    ],
)
def test_udc_states_map_onto_four(raw: str, state: str) -> None:
    assert usbstate.normalize(raw) == state


def test_remote_wakeup_only_where_the_udc_can() -> None:
    assert usbstate.wake_capability("dwc3", "auto")[0] is True
    assert usbstate.wake_capability("dummy_udc", "auto")[0] is True
    can, why = usbstate.wake_capability("dwc2", "auto")
    assert can is False and "remote_wakeup" in why  # says how a patched kernel turns it on
    assert usbstate.wake_capability(None, "auto")[0] is False
    assert usbstate.wake_capability("somethingelse", "auto")[0] is False
    assert usbstate.wake_capability("dwc2", "on")[0] is True  # a patched kernel
    assert usbstate.wake_capability("dwc3", "off")[0] is False


def test_the_configuration_advertises_wakeup_only_when_asked() -> None:
    s = GadgetSettings()
    assert build_profile("full", "ios", s).bm_attributes == 0x80
    assert build_profile("full", "ios", s, remote_wakeup=True).bm_attributes == 0xA0
    with pytest.raises(ValueError, match="remote_wakeup"):
        GadgetSettings.from_table({"remote_wakeup": "yes"})
    assert GadgetSettings.from_table({"remote_wakeup": "on"}).remote_wakeup == "on"


def test_udc_driver_and_wakeup_request_in_a_sysfs_tree(tmp_path: Path) -> None:
    udc = tmp_path / "class" / "udc" / "fe800000.usb"
    udc.mkdir(parents=True)
    (tmp_path / "drivers" / "dwc3").mkdir(parents=True)
    (udc / "device").mkdir()
    os.symlink(tmp_path / "drivers" / "dwc3", udc / "device" / "driver")
    (udc / "srp").write_bytes(b"")
    assert usbstate.udc_driver(tmp_path, "fe800000.usb") == "dwc3"
    assert usbstate.udc_driver(tmp_path, "absent") is None
    usbstate.request_wakeup(tmp_path, "fe800000.usb")
    assert (udc / "srp").read_bytes() == b"1"


def test_a_configured_gadget_marked_self_powered_is_suspended(tmp_path: Path) -> None:
    """composite_suspend() marks the gadget self-powered; most UDCs leave `configured`."""
    assert usbstate.link_state("configured", "1") == "suspended"
    assert usbstate.link_state("configured", "0") == "configured"
    assert usbstate.link_state("configured", None) == "configured"  # no such attribute
    assert usbstate.link_state("suspended", "0") == "suspended"  # a UDC that says it
    assert usbstate.link_state("addressed", "1") == "addressed"
    (tmp_path / "state").write_text("configured\n")
    (tmp_path / "is_selfpowered").write_text("1\n")
    assert usbstate.read_state(tmp_path) == "suspended"
    assert usbstate.read_state(tmp_path / "gone") == "not attached"


def udc_tree(root: Path, gadget: str = "gadget.0") -> tuple[Path, Path]:
    """A UDC's class folder and its gadget's device folder, laid out as sysfs has them: the
    UDC's `device` is its parent device, whose children are the UDC and the gadget."""
    parent = root / "devices" / "platform" / "dummy_udc.0"
    udc = root / "class" / "udc" / "dummy_udc.0"
    for folder in (parent / "udc" / "dummy_udc.0", parent / "power", parent / gadget, udc):
        folder.mkdir(parents=True, exist_ok=True)
    os.symlink(parent, udc / "device")
    (udc / "state").write_text("configured\n")
    (udc / "is_selfpowered").write_text("0\n")
    return udc, parent / gadget


def test_the_composite_layers_suspended_attribute_marks_a_configured_gadget_suspended(
    tmp_path: Path,
) -> None:
    """Debian 6.1's dummy_hcd (measured): UDC `configured`, is_selfpowered 0, the gadget's
    `suspended` 1 while the host has it suspended."""
    assert usbstate.link_state("configured", "0", "1") == "suspended"
    assert usbstate.link_state("configured", "0", "0") == "configured"
    assert usbstate.link_state("configured", "0", None) == "configured"  # no such attribute
    assert usbstate.link_state("addressed", "0", "1") == "addressed"  # enumerating again
    assert usbstate.link_state("not attached", None, "1") == "not attached"
    udc, gadget = udc_tree(tmp_path)
    assert usbstate.gadget_dir(udc) == udc / "device" / "gadget.0"
    assert usbstate.gadget_suspended(udc) is None  # no gadget driver bound: unknown
    assert usbstate.read_state(udc) == "configured"  # ... and what `state` says, as before
    (gadget / "suspended").write_text("1\n")
    assert usbstate.gadget_suspended(udc) == "1"
    assert usbstate.read_state(udc) == "suspended"
    (udc / "state").write_text("default\n")  # a bus reset: the kernel clears it, but not yet
    assert usbstate.read_state(udc) == "default"
    (udc / "state").write_text("configured\n")
    (gadget / "suspended").write_text("0\n")
    assert usbstate.read_state(udc) == "configured"


def test_an_older_kernels_gadget_folder_is_found_and_none_is_unknown(tmp_path: Path) -> None:
    udc, gadget = udc_tree(tmp_path / "old", gadget="gadget")  # before gadget.N names
    (gadget / "suspended").write_text("1\n")
    assert usbstate.read_state(udc) == "suspended"
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "state").write_text("configured\n")  # no device link at all (a plain tree)
    assert usbstate.gadget_dir(bare) is None and usbstate.read_state(bare) == "configured"


class Seen:
    """The states a StateWatcher reported (from its thread), and a wait for a condition on them."""

    def __init__(self) -> None:
        self.states: list[str] = []
        self._got = threading.Condition()

    def changed(self, raw: str) -> None:
        with self._got:
            self.states.append(raw)
            self._got.notify_all()

    def until(self, check: Callable[[list[str]], bool]) -> None:
        with self._got:
            assert self._got.wait_for(lambda: check(self.states), timeout=5), self.states


def test_the_watcher_sees_the_gadget_suspend_by_its_re_read(tmp_path: Path) -> None:
    udc, gadget = udc_tree(tmp_path)
    (gadget / "suspended").write_text("0\n")
    seen = Seen()
    watcher = usbstate.StateWatcher(udc, seen.changed, interval=0.02)
    watcher.start()
    try:
        seen.until(lambda s: s == ["configured"])
        (gadget / "suspended").write_text("1\n")  # never notified: the re-read sees it
        seen.until(lambda s: s == ["configured", "suspended"])
        (gadget / "suspended").unlink()  # the gadget driver unbound: unknown, `state` rules
        seen.until(lambda s: len(s) == 3)
    finally:
        watcher.stop()
    assert seen.states == ["configured", "suspended", "configured"]


def test_the_watcher_reports_each_change_and_stops_at_once(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.write_text("configured\n")
    powered = tmp_path / "is_selfpowered"
    powered.write_text("0\n")
    seen = Seen()
    # A plain file never notifies: the interval re-read is what sees its change here.
    watcher = usbstate.StateWatcher(tmp_path, seen.changed, interval=0.02)
    watcher.start()
    try:
        seen.until(lambda s: s == ["configured"])
        powered.write_text("1\n")  # suspended, as a composite_suspend() marking it shows it
        seen.until(lambda s: s == ["configured", "suspended"])
        powered.write_text("0\n")
        seen.until(lambda s: s[-1] == "configured")
        state.unlink()  # the UDC went away
        seen.until(lambda s: s[-1] == "not attached")
    finally:
        t0 = time.monotonic()
        watcher.stop()
        assert time.monotonic() - t0 < 1  # the stop pipe wakes it, not its interval
    assert seen.states == ["configured", "suspended", "configured", "not attached"]


# --- the link and the wake -----------------------------------------------------------------------


def sim_link(sim: SimTarget) -> UsbLink:
    link = UsbLink(can_wake=True, wake_reason="sim", wakeup=sim.remote_wakeup, state="configured")
    sim.on_usb_state = link.set
    return link


async def test_wake_outcomes() -> None:
    sim = SimTarget("android")
    link = sim_link(sim)
    assert await link.wake(0.3) == {"woke": False, "usb_state": "configured", "waited_ms": 0}
    sim.suspend(wakeup=True)
    assert link.state == "suspended" and link.suspended.is_set()
    result = await link.wake(1.0)
    assert result["woke"] is True and link.state == "configured"
    sim.suspend(wakeup=False)  # the host did not enable remote wakeup
    t0 = time.monotonic()
    with pytest.raises(ToolError) as err:
        await link.wake(0.2)
    assert err.value.code == "wakeup_not_enabled" and not err.value.retryable
    assert time.monotonic() - t0 < 1 and link.state == "suspended"
    unable = UsbLink(can_wake=False, wake_reason="the UDC driver dwc2 cannot", state="suspended")
    with pytest.raises(ToolError) as err:
        await unable.wake(0.2)
    assert err.value.code == "wake_unsupported" and "dwc2" in err.value.message
    sim.unplug()
    with pytest.raises(ToolError) as err:
        await link.wake(0.2)
    assert err.value.code == "target_not_attached"
    assert link.changes == 4  # suspended, configured, suspended, not_attached


# --- the engine around a sleep -------------------------------------------------------------------


async def focused_engine(cfg: InputConfig = FAST) -> tuple[InputEngine, SimTarget, UsbLink]:
    sim = SimTarget("android")
    link = sim_link(sim)
    eng = InputEngine(sim, sim, cfg, "android", link=link)
    icon = make_layout("android", 1080, 1920).tiles[0].icon
    async with eng.invocation("setup") as s:
        await s.run(
            prog.tap(cfg, eng.pointer, Point((icon.x0 + icon.x1) / 2, (icon.y0 + icon.y1) / 2))
        )
        await s.run(prog.tap(cfg, eng.pointer, Point(500, 140)))  # the app's text field
    assert sim.state()["focused"] is not None
    return eng, sim, link


async def type_text(eng: InputEngine, text: str, tool: str = "keyboard_text") -> None:
    async with eng.invocation(tool) as s:
        await s.run(prog.typing(eng.cfg, prog.text_strokes(text)))


async def test_input_while_asleep_is_refused_at_once_and_sends_nothing() -> None:
    eng, sim, _ = await focused_engine()
    before = dict(sim.state()["reports"])
    sim.suspend()
    t0 = time.monotonic()
    with pytest.raises(ToolError) as err:
        await type_text(eng, "z")
    assert time.monotonic() - t0 < 0.1
    assert err.value.code == "target_suspended" and err.value.retryable
    assert err.value.details is not None and "wake_target" in err.value.details["remediation"]
    sim.resume()
    await asyncio.sleep(0)
    state = sim.state()
    assert state["reports"] == before and state["field_text"] == ""


async def test_a_program_the_target_falls_asleep_under_is_cut_and_released_at_resume() -> None:
    eng, sim, _ = await focused_engine()
    task = asyncio.create_task(type_text(eng, "abcdefghijklmnopqrstuvwxyz" * 4))
    while len(sim.state()["field_text"] or "") < 3:
        await asyncio.sleep(0.005)
    sim.suspend()
    t0 = time.monotonic()
    with pytest.raises(ToolError) as err:
        await task
    assert err.value.code == "target_suspended" and time.monotonic() - t0 < 0.1
    typed_at_suspend = sim.state()["field_text"]
    sim.resume()  # whatever waited in the gadget arrives, then the engine's release
    for _ in range(200):
        state = sim.state()
        if not eng.held.holding() and not state["keys_down"]:
            break
        await asyncio.sleep(0.005)
    state = sim.state()
    assert state["keys_down"] == [] and state["modifiers_down"] == []
    assert eng.held.holding() == [] and not eng.busy
    # At most the one report that waited in the gadget arrived late: a whole key, no more.
    assert len(state["field_text"]) - len(typed_at_suspend) <= 1
    await type_text(eng, "!")
    assert sim.state()["field_text"].endswith("!")


async def test_wake_first_wakes_then_types_exactly_once() -> None:
    eng, sim, link = await focused_engine(InputConfig(**{**FAST.__dict__, "wake_first": True}))
    sim.suspend(wakeup=True)
    await type_text(eng, "hi")
    assert link.state == "configured" and sim.state()["field_text"] == "hi"
    sim.suspend(wakeup=False)
    with pytest.raises(ToolError) as err:
        await type_text(eng, "no")
    assert err.value.code == "wakeup_not_enabled"
    sim.resume()
    assert sim.state()["field_text"] == "hi" and not eng.busy


async def test_a_drag_whose_limit_passes_in_a_sleep_is_let_go_at_the_resume() -> None:
    """The drag limit passes while the target sleeps: its undo cannot be written then, so the
    drag ends and the resume's release lifts its button (it must not stay down for good)."""
    cfg = InputConfig(**{**FAST.__dict__, "drag_limit_s": 0.05, "move_interval_ms": 5})
    sim = SimTarget("android")
    link = sim_link(sim)
    eng = InputEngine(sim, sim, cfg, "android", link=link)
    start, to = Point(500, 600), Point(500, 400)
    async with eng.invocation("drag_start", drag="start") as s:
        await s.run(prog.drag_start(cfg, eng.pointer, start, to))
        s.keep_contact(start, to, "left")
    assert eng.held.holding() == ["pointer"] and sim.state()["contacts_down"]
    sim.suspend()
    for _ in range(300):  # the limit passes; its undo is refused (asleep)
        if eng.drag is None and not eng.busy:
            break
        await asyncio.sleep(0.01)
    assert eng.drag is None, "the drag outlived its limit in the sleep"
    assert eng.held.holding() == ["pointer"]  # still down on the host: nothing was written
    sim.resume()
    for _ in range(200):
        if not eng.held.holding() and not eng.busy:
            break
        await asyncio.sleep(0.005)
    assert eng.held.holding() == [] and sim.state()["contacts_down"] == []
