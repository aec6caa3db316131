"""A target that sleeps, on the VM's real USB stack: the host autosuspends our device (as a
sleeping PC or a locked phone suspends its bus) while it holds the HID event nodes open, the
daemon's own link sees it (the gadget's `suspended`), and the input engine, the USB link and
the wake go through dummy_hcd's real suspend, remote wakeup and resume. The host's evdev
events are the truth: after a refused input nothing arrives, then or after the resume (no
press without its release, no autorepeat: the host's soft repeat is pushed out of reach as in
the other keyboard tests, since a slow TCG scheduler adds repeats; a stale press shows as its
key event all the same)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import expected
import pytest
from board import Board
from evdev import InputDevice, InputEvent, ecodes
from figures import Record
from usbhost import (
    EVENT_TIMEOUT,
    SLOWNESS,
    WRITE_LIMIT_MS,
    UsbDevice,
    find_usb,
    frames,
    no_autorepeat,
    open_inputs,
    read_until,
)

from daemon.board import BoardBackend
from daemon.config import Config, DeviceConfig, InputConfig
from daemon.engine import InputEngine
from daemon.engine import program as prog
from daemon.errors import ToolError
from gadget import usbstate
from gadget.keymap import text_strokes
from gadget.profiles import build_profile

SUSPEND_TIMEOUT = 5.0 * SLOWNESS  # Linux suspends an idle device 50 ms after it is allowed
# Once the host has suspended us, how long the UDC may take to show it: ten of the watcher's
# 0.1 s re-reads, scaled (a UDC that shows it does so at its next read).
UDC_GRACE = 1.0 * SLOWNESS
UDC = Path("/sys/class/udc/dummy_udc.0")


@dataclass
class Rig:
    backend: BoardBackend
    engine: InputEngine
    usb: UsbDevice
    keyboard: str  # the target's evdev node of our keyboard
    following: AsyncGenerator[None, None]  # the board's UDC watcher, as the daemon runs it
    record: Record

    async def type(self, text: str, tool: str = "keyboard_text") -> None:
        async with self.engine.invocation(tool) as s:
            await s.run(prog.typing(self.engine.cfg, prog.text_strokes(text)))

    async def chord(self, *keys: str) -> None:
        async with self.engine.invocation("keyboard_tap") as s:
            await s.run(prog.chord(self.engine.cfg, prog.resolve_keys(list(keys))))

    def autosuspend(self) -> None:
        """The host lets our device autosuspend after 50 ms idle (remote wakeup advertised,
        so Linux suspends it even with its keyboard open)."""
        power = self.usb.sysfs / "power"
        (power / "autosuspend_delay_ms").write_text("50")
        (power / "control").write_text("auto")

    def host_resume(self) -> None:
        """The host wakes the device itself (as a PC resuming from standby would)."""
        (self.usb.sysfs / "power" / "control").write_text("on")

    def seen(self) -> str:
        """Both sides, for a failure message."""
        udc = {n: (UDC / n).read_text().strip() for n in ("state", "is_selfpowered")}
        udc["gadget suspended"] = str(usbstate.gadget_suspended(UDC))
        host = (self.usb.sysfs / "power" / "runtime_status").read_text().strip()
        return f"link {self.engine.link.raw!r}, UDC {udc}, host runtime_status {host!r}"

    async def suspended(self) -> None:
        await self._suspended()
        # Asleep now: once woken it stays awake (a PC back from standby), not re-suspended
        # 50 ms later mid-test.
        (self.usb.sysfs / "power" / "autosuspend_delay_ms").write_text("60000")

    async def _suspended(self) -> None:
        """Until the daemon's own link (the board's UDC watcher) shows the host's suspend. The
        host's suspend is awaited first, so a gadget side that does not show it fails after
        UDC_GRACE, not SUSPEND_TIMEOUT. Debian's 6.1 dummy_hcd leaves the UDC `configured`
        (is_selfpowered 0): the composite layer's gadget.0/suspended shows it."""
        host = self.usb.sysfs / "power" / "runtime_status"
        deadline = time.monotonic() + SUSPEND_TIMEOUT
        while host.read_text().strip() != "suspended":
            assert time.monotonic() < deadline, f"no host suspend: {self.seen()}"
            await asyncio.sleep(0.01)
        assert await self.engine.link.wait_for(("suspended",), UDC_GRACE), (
            f"the host suspended us, the link did not show it: {self.seen()}"
        )
        self.record("suspend_seen_by", seen_by())

    async def configured(self) -> None:
        assert await self.engine.link.wait_for(("configured",), SUSPEND_TIMEOUT), (
            f"no resume seen: {self.seen()}"
        )


def seen_by() -> str:
    """Which of the UDC's attributes shows the suspend (gadget.usbstate.link_state)."""
    if (UDC / "state").read_text().strip() == "suspended":
        return "udc state"
    if usbstate.gadget_suspended(UDC) == "1":
        return "gadget suspended"
    return "udc is_selfpowered"


Start = Callable[..., Awaitable[Rig]]


@pytest.fixture
async def start(board: Board, record: Record) -> AsyncIterator[Start]:
    rigs: list[Rig] = []

    async def make(**timings: object) -> Rig:
        config = Config(device=DeviceConfig(device_type="Linux"), gadget=board.settings)
        board.platform = config.platform
        backend = BoardBackend(config, gadget=board.gadget)
        began = time.monotonic()
        await backend.start()
        following = backend.follow_link()  # the daemon's "usb link" part
        await anext(following)
        assert backend.link.can_wake, backend.link.wake_reason  # dummy_udc implements wakeup
        profile = build_profile("full", config.platform, board.settings, remote_wakeup=True)
        live = await asyncio.to_thread(board.wait_live, profile, began)
        # The write limit of the other keyboard tests: a loaded TCG guest (slowness 8) took
        # longer than the default 750 ms for a chord's first write.
        cfg = InputConfig(
            wake_timeout_s=max(1.0, SLOWNESS), write_timeout_ms=WRITE_LIMIT_MS, **timings
        )
        engine = InputEngine(backend.hid, backend.profiles, cfg, config.platform, link=backend.link)
        rigs.append(Rig(backend, engine, live.usb, live.input_node("keyboard"), following, record))
        return rigs[-1]

    yield make
    for rig in rigs:
        if find_usb(rig.usb.vendor, rig.usb.product) is not None:
            rig.host_resume()
        await rig.engine.close()
        await anext(rig.following, None)  # the watcher stops before the backend closes
        await rig.backend.close()


def keys_of(events: list[InputEvent]) -> list[tuple[int, int]]:
    return [(c, v) for f in frames(events, ecodes.EV_KEY) for _, c, v in f]


async def typed_text(kbd: InputDevice, text: str) -> str:
    """Read the key events of `text` (and nothing else may come first) as text."""
    n = 2 * len(text_strokes(text))  # a press frame and a release frame per character
    events = await read_until(
        kbd, lambda e: len(frames(e, ecodes.EV_KEY)) >= n, f"{text!r} typed", EVENT_TIMEOUT
    )
    return expected.us_decode(keys_of(events))


async def test_input_while_asleep_is_refused_and_nothing_arrives(
    start: Start, record: Record
) -> None:
    rig = await start()
    with open_inputs([rig.keyboard]) as (kbd,):
        no_autorepeat(kbd)  # TCG's scheduler must not add repeats: a stale press still shows
        rig.autosuspend()
        await rig.suspended()
        t0 = time.monotonic()
        with pytest.raises(ToolError) as err:
            await rig.type("z")
        refused_ms = (time.monotonic() - t0) * 1000
        assert err.value.code == "target_suspended" and err.value.retryable
        assert err.value.details is not None and "wake_target" in err.value.details["remediation"]
        assert refused_ms < 100
        record("suspended_refusal_ms", f"{refused_ms:.1f}")
        rig.host_resume()
        await rig.configured()
        # Whatever came since the suspend arrives before this text: only the text may come.
        reading = asyncio.create_task(typed_text(kbd, "ok"))
        await rig.type("ok")
        assert await reading == "ok"


async def test_wake_target_wakes_within_a_second_and_text_arrives_exactly(
    start: Start, record: Record
) -> None:
    rig = await start()
    with open_inputs([rig.keyboard]) as (kbd,):
        no_autorepeat(kbd)  # TCG's scheduler must not add repeats: a stale press still shows
        rig.autosuspend()
        await rig.suspended()
        async with rig.engine.invocation("wake_target", asleep_ok=True):
            woke = await rig.engine.wake()
        assert woke["woke"] is True and rig.engine.link.state == "configured"
        record("wake_ms", woke["waited_ms"])
        assert woke["waited_ms"] <= 1000 * max(1.0, SLOWNESS)
        text = "Wake up, 42!"
        task = asyncio.create_task(typed_text(kbd, text))
        await rig.type(text)
        assert await task == text


async def test_wake_first_types_exactly_once(start: Start) -> None:
    rig = await start(wake_first=True)
    with open_inputs([rig.keyboard]) as (kbd,):
        no_autorepeat(kbd)  # TCG's scheduler must not add repeats: a stale press still shows
        rig.autosuspend()
        await rig.suspended()
        reading = asyncio.create_task(typed_text(kbd, "once."))
        await rig.type("once")
        await rig.type(".")  # the next input: nothing of the first may come after it
        assert await reading == "once."


async def test_a_wake_the_host_did_not_enable_is_answered_not_hung(start: Start) -> None:
    """No driver holds our HID interfaces open: the host autosuspends the device without
    enabling remote wakeup (nothing needs it), so dummy_hcd refuses the wakeup."""
    rig = await start()
    usbhid = Path("/sys/bus/usb/drivers/usbhid")
    for intf in rig.usb.hid_interfaces():
        if (intf / "driver").exists():
            (usbhid / "unbind").write_text(intf.name)
    rig.autosuspend()
    await rig.suspended()
    limit = rig.engine.cfg.wake_timeout_s
    t0 = time.monotonic()
    with pytest.raises(ToolError) as err:
        async with rig.engine.invocation("wake_target", asleep_ok=True):
            await rig.engine.wake()
    assert err.value.code == "wakeup_not_enabled"
    assert time.monotonic() - t0 < limit + 5 * SLOWNESS
    assert rig.engine.link.state == "suspended" and not rig.engine.busy


CTRL_A = [
    (ecodes.KEY_LEFTCTRL, 1),
    (ecodes.KEY_A, 1),
    (ecodes.KEY_A, 0),
    (ecodes.KEY_LEFTCTRL, 0),
]


async def chord_seen(rig: Rig, kbd: InputDevice) -> list[tuple[int, int]]:
    no_autorepeat(kbd)  # a loaded TCG guest may hold A past the repeat delay
    reading = asyncio.create_task(
        read_until(kbd, lambda e: (ecodes.KEY_LEFTCTRL, 0) in keys_of(e), "Ctrl+A")
    )
    await rig.chord("ctrl", "a")
    return keys_of(await reading)


async def test_a_chord_works_after_a_re_enumeration(start: Start, board: Board) -> None:
    """Modifiers through descriptors opened after the target enumerated us again (stale
    /dev/hidgN descriptors broke them in another product)."""
    rig = await start()
    with open_inputs([rig.keyboard]) as (kbd,):
        assert await chord_seen(rig, kbd) == CTRL_A
    assert await rig.engine.wake() == {  # awake: nothing to do, nothing released
        "woke": False,
        "usb_state": "configured",
        "waited_ms": 0,
        "released": [],
    }
    await rig.backend.profiles.switch_profile("keyboard-isolated")
    await rig.backend.profiles.switch_profile("full")
    rig.engine.held.forget()
    profile = build_profile("full", "linux", board.settings, remote_wakeup=True)
    live = await asyncio.to_thread(board.wait_live, profile, time.monotonic())
    assert live.usb.devnum != rig.usb.devnum  # really enumerated again
    with open_inputs([live.input_node("keyboard")]) as (kbd,):
        assert await chord_seen(rig, kbd) == CTRL_A


async def test_a_chord_works_after_a_sleep(start: Start) -> None:
    rig = await start()
    with open_inputs([rig.keyboard]) as (kbd,):
        no_autorepeat(kbd)  # TCG's scheduler must not add repeats: a stale press still shows
        rig.autosuspend()
        await rig.suspended()
        async with rig.engine.invocation("wake_target", asleep_ok=True):
            await rig.engine.wake()
        rig.host_resume()  # no second sleep mid-chord
        assert await chord_seen(rig, kbd) == CTRL_A
