"""The keyboard as the target reads it: every printable ASCII character typed through our
keymap and writer comes back from evdev exactly; the host's Caps Lock reaches our LedReader."""

from __future__ import annotations

import asyncio
import string
import time
from collections.abc import Callable

import expected
import pytest
from board import Board
from evdev import ecodes
from usbhost import EVENT_TIMEOUT, frames, no_autorepeat, open_inputs, read_until

from gadget import reports
from gadget.hidg import LedReader
from gadget.keymap import text_strokes

PRINTABLE = "".join(chr(c) for c in range(0x20, 0x7F))
assert len(PRINTABLE) == 95 and set(string.printable) > set(PRINTABLE)


async def test_every_printable_ascii_character_round_trips(
    board: Board, record_property: Callable[[str, object], None]
) -> None:
    live = board.up("full", "ios")
    writer = board.writer("keyboard")
    strokes = text_strokes(PRINTABLE)
    with open_inputs([live.input_node("keyboard")]) as (kbd,):
        no_autorepeat(kbd)
        n_frames = 2 * len(PRINTABLE)  # one press report and one release report per character
        reading = asyncio.create_task(
            read_until(
                kbd,
                lambda e: len(frames(e, ecodes.EV_KEY)) >= n_frames,
                f"{n_frames} key frames",
                timeout=EVENT_TIMEOUT + len(PRINTABLE) * 0.5,
            )
        )
        start = time.monotonic()
        for usage, mods in strokes:
            await writer.write(reports.keyboard(mods, [usage]))
            await writer.write(reports.KEYBOARD_RELEASE)
        events = await reading
        elapsed = time.monotonic() - start
    writer.close()

    got = frames(events, ecodes.EV_KEY)
    want: list[list[tuple[int, int, int]]] = []
    shift = ecodes.KEY_LEFTSHIFT
    for code, shifted in expected.us_strokes(PRINTABLE):
        # hid-input reports the modifier byte before the key array, in both reports.
        want.append([(ecodes.EV_KEY, shift, 1)] * shifted + [(ecodes.EV_KEY, code, 1)])
        want.append([(ecodes.EV_KEY, shift, 0)] * shifted + [(ecodes.EV_KEY, code, 0)])
    assert got == want
    key_events = [(code, value) for f in got for _, code, value in f]
    assert expected.us_decode(key_events) == PRINTABLE
    record_property("typing_chars_per_s", f"{len(PRINTABLE) / elapsed:.0f}")


async def test_host_caps_lock_reaches_our_led_reader(board: Board) -> None:
    live = board.up("full", "ios")
    leds = LedReader(board.gadget.device_nodes()["keyboard"])
    leds.start()
    try:
        with open_inputs([live.input_node("keyboard")]) as (kbd,):
            # The host's first output report (all off) after enumeration changes nothing.
            assert leds.leds == reports.Leds()
            kbd.set_led(ecodes.LED_CAPSL, 1)
            state = await leds.wait_change(EVENT_TIMEOUT)
            assert state == reports.Leds(caps_lock=True)
            kbd.set_led(ecodes.LED_NUML, 1)
            state = await leds.wait_change(EVENT_TIMEOUT)
            assert state == reports.Leds(caps_lock=True, num_lock=True)
            kbd.set_led(ecodes.LED_CAPSL, 0)
            kbd.set_led(ecodes.LED_NUML, 0)
            while leds.leds != reports.Leds():
                await leds.wait_change(EVENT_TIMEOUT)
    except TimeoutError:
        pytest.fail(f"LedReader saw no change within {EVENT_TIMEOUT} s (now {leds.leds})")
    finally:
        leds.close()
