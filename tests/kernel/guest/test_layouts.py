"""Typing on a German (PC) and a French (Apple) target through the real kernel: the engine's
typing program over the board backend, read from the target's evdev node and translated with
xkbcommon for that layout, as a Linux desktop host does (its own keyboard state, Caps Lock and
dead keys included; its Caps Lock LED set from that state, which reaches our LED reader).

The host side grabs the keyboard (open_inputs does), so the console's keyboard handler keeps out
of its Caps Lock.
Byte-exact, with Caps Lock on and off, and Caps Lock left as found. On iOS a text needing
Option runs in one keyboard-isolated phase; its cost is recorded.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import evdev
import pytest
from board import Board, Live
from evdev import InputEvent, ecodes
from usbhost import EVENT_TIMEOUT, WRITE_LIMIT_MS, UsbHost, no_autorepeat, open_inputs, read_until

from daemon.board import BoardBackend
from daemon.config import Config, DeviceConfig, InputConfig
from daemon.engine import InputEngine
from daemon.engine import program as prog
from daemon.sim.xkbtext import XkbText
from gadget import layouts
from gadget.profiles import build_profile

Record = Callable[[str, object], None]
TEXTS = {
    # AltGr (@ € { } [ ] \ | ~), dead keys (é è ô ^ `), digits and punctuation
    "de": "Grüße aus Zürich: 10 € @ 12:30, {x} [y] \\ | ~ é è ô ^ ` Ä Ö Ü ß ?!\n",
    # Option (@ € { } [ ] ~ |), dead keys (ê ï ñ ü), its own keys (é è à ç ù), digits
    "fr": "Où est l'été ? Ça coûte 5 € @ 9h30 : {a} [b] ~ | ê ï ñ ü É à ç ù — «ok» 1234567890\n",
}
CASES = [("linux", "de"), ("macOS", "fr")]
CAPS_CODE = ecodes.KEY_CAPSLOCK


@dataclass
class Rig:
    backend: BoardBackend
    engine: InputEngine
    layout: layouts.Layout
    node: str


@pytest.fixture
async def start(board: Board) -> AsyncIterator[Callable[..., Awaitable[Rig]]]:
    rigs: list[Rig] = []

    async def make(device_type: str, layout: str, **timings: float) -> Rig:
        device = DeviceConfig(device_type=device_type, keyboard_layout=layout)
        config = Config(device=device, gadget=board.settings)
        board.platform = config.platform
        backend = BoardBackend(config, gadget=board.gadget)
        began = time.monotonic()
        await backend.start()
        profile = build_profile("full", config.platform, board.settings)
        live = await asyncio.to_thread(board.wait_live, profile, began)
        cfg = InputConfig(
            **{
                "write_timeout_ms": WRITE_LIMIT_MS,
                "caps_lock_wait_ms": 3000,
                **timings,
            }
        )
        engine = InputEngine(backend.hid, backend.profiles, cfg, config.platform)
        rigs.append(Rig(backend, engine, device.layout, live.input_node("keyboard")))
        return rigs[-1]

    yield make
    for rig in rigs:
        await rig.engine.close()
        await rig.backend.close()


class Host:
    """The target's desktop: an xkbcommon state of its layout fed the keyboard's evdev events,
    its Caps Lock LED set from that state (as a Wayland compositor does)."""

    def __init__(self, kbd: evdev.InputDevice, layout: layouts.Layout) -> None:
        self.kbd = kbd
        self.xkb = XkbText(layout.xkb)
        self.text = ""
        self.seen = 0

    def set_caps(self, on: bool) -> None:
        if self.xkb.caps_lock != on:
            self.xkb.press(CAPS_CODE + 8)
            self.xkb.release(CAPS_CODE + 8)
        self.kbd.set_led(ecodes.LED_CAPSL, int(on))

    def feed(self, events: list[InputEvent]) -> None:
        for ev in events[self.seen :]:
            if ev.type != ecodes.EV_KEY or ev.value == 2:
                continue
            caps = self.xkb.caps_lock
            if ev.value == 1:
                self.text += self.xkb.press(ev.code + 8)
            else:
                self.xkb.release(ev.code + 8)
            if self.xkb.caps_lock != caps:
                self.kbd.set_led(ecodes.LED_CAPSL, int(self.xkb.caps_lock))
        self.seen = len(events)


async def leds_known(rig: Rig, caps: bool) -> None:
    deadline = time.monotonic() + EVENT_TIMEOUT
    while True:
        leds = rig.backend.hid.led_reports()[1]
        if leds is not None and leds.caps_lock == caps:
            return
        assert time.monotonic() < deadline, f"the board saw no Caps Lock {caps} (now {leds})"
        await asyncio.sleep(0.01)


@pytest.mark.parametrize("caps", [False, True], ids=["caps-off", "caps-on"])
@pytest.mark.parametrize(("device_type", "layout"), CASES, ids=["de-pc", "fr-apple"])
async def test_text_arrives_byte_exact(
    start: Callable[..., Awaitable[Rig]],
    device_type: str,
    layout: str,
    caps: bool,
    record_property: Record,
) -> None:
    rig = await start(device_type, layout)
    text = TEXTS[layout]
    program = prog.typing(rig.engine.cfg, prog.text_strokes(text, "$.text", rig.layout))
    with open_inputs([rig.node]) as (kbd,):
        no_autorepeat(kbd)
        host = Host(kbd, rig.layout)
        host.set_caps(caps)
        await leds_known(rig, caps)

        async def typing() -> dict[str, object]:
            async with rig.engine.invocation("keyboard_text") as s:
                return await s.type_text(program, caps_sensitive=True)

        began = time.monotonic()
        task = asyncio.ensure_future(typing())

        def done(events: list[InputEvent]) -> bool:  # the text, then Caps Lock as found
            host.feed(events)
            return len(host.text) >= len(text) and host.xkb.caps_lock is caps

        await read_until(kbd, done, f"{text!r}", timeout=EVENT_TIMEOUT + len(program) / 20)
        info = await task
        elapsed = time.monotonic() - began
    assert host.text == text
    assert host.xkb.caps_lock is caps  # left as found
    assert info == {"caps_lock": "on" if caps else "off", "caps_lock_presses": 2 if caps else 0}
    await leds_known(rig, caps)
    record_property(f"typing_{layout}_{'caps' if caps else 'nocaps'}_s", f"{elapsed:.2f}")


async def test_ios_option_text_is_one_isolated_phase(
    start: Callable[..., Awaitable[Rig]], host: UsbHost, board: Board, record_property: Record
) -> None:
    """A French Apple text with Option characters on iOS: one switch to keyboard-isolated for the
    whole text and one back, whatever number of Option characters. Recorded: the time of the
    switch round trip against the typing itself (a switch per character would cost that
    round trip for each)."""
    # The host polls a keyboard from enumeration on (the console's handler opens it): the
    # engine waits SETTLE after the switch so this side has the isolated node open first.
    settle = 1.5
    rig = await start("iOS", "fr", isolation_settle_ms=settle * 1000)
    text = "@ € { } [ ] ~ | « » ê"
    program = prog.typing(rig.engine.cfg, prog.text_strokes(text, "$.text", rig.layout))
    s = board.settings
    began = time.time()  # evdev stamps events with the realtime clock

    async def typing() -> list[str]:
        # Caps Lock is off and known to be (the test above covers Caps Lock): this one measures
        # the isolation alone.
        async with rig.engine.invocation("keyboard_text") as session:
            await session.type_text(program, caps_sensitive=False)
        return session.switches

    task = asyncio.ensure_future(typing())
    await asyncio.to_thread(host.wait_usb_gone, s.vendor_id, s.product_id_full)
    usb = await asyncio.to_thread(host.wait_usb, s.vendor_id, s.product_id_isolated, n_hid=2)
    isolated = Live(build_profile("keyboard-isolated", "ios", s), usb, 0.0, 0.0)
    with open_inputs([isolated.input_node("keyboard")]) as (kbd,):
        no_autorepeat(kbd)
        target = Host(kbd, rig.layout)

        def done(events: list[InputEvent]) -> bool:
            target.feed(events)
            return len(target.text) >= len(text)

        events = await read_until(kbd, done, f"{text!r}", timeout=EVENT_TIMEOUT + 10)
    switches = await task
    ended = time.time()
    assert target.text == text
    assert switches == ["keyboard-isolated", "full"]
    keys = [e for e in events if e.type == ecodes.EV_KEY]
    first, last = keys[0].timestamp(), keys[-1].timestamp()
    switch_in = first - began - settle  # to the isolated profile, the settle taken out
    switch_back = ended - last  # the release tail, then `full` back and enumerated
    option_chars = sum(1 for c in text if any(m & 0x40 for _, m in rig.layout.plan(c)))
    per_char = option_chars * (switch_in + switch_back)
    for name, value in (
        ("ios_option_switch_to_isolated_s", f"{switch_in:.2f}"),
        ("ios_option_typing_s", f"{last - first:.2f} ({len(text)} chars)"),
        ("ios_option_switch_back_s", f"{switch_back:.2f}"),
        ("ios_option_per_character_switching_would_cost_s", f"{per_char:.1f}"),
    ):
        print(f"measured {name} = {value}")
        record_property(name, value)
