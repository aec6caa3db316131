"""Consumer control as the target reads it: every documented name gives its evdev key."""

from __future__ import annotations

import expected
from board import Board
from evdev import ecodes
from usbhost import frames, open_inputs, read_until

from gadget import reports
from gadget.keymap import CONSUMER_USAGES, key


def test_every_consumer_name_is_documented_here() -> None:
    # A new consumer name needs its expected evdev key below, or it goes untested.
    assert set(CONSUMER_USAGES) == set(expected.CONSUMER_KEYS)


async def test_each_consumer_name_gives_its_evdev_key(board: Board) -> None:
    live = board.up("full", "android")
    writer = board.writer("consumer")
    wrong = {}
    with open_inputs([live.input_node("consumer")]) as (dev,):
        for name, evdev_name in expected.CONSUMER_KEYS.items():
            k = key(name)
            assert k.page == "consumer", name
            await writer.write(reports.consumer(k.usage))
            await writer.write(reports.CONSUMER_RELEASE)
            events = await read_until(
                dev, lambda e: len(frames(e, ecodes.EV_KEY)) == 2, f"{name} press and release"
            )
            code = ecodes.ecodes[evdev_name]
            got = frames(events, ecodes.EV_KEY)
            if got != [[(ecodes.EV_KEY, code, 1)], [(ecodes.EV_KEY, code, 0)]]:
                wrong[name] = f"expected {evdev_name}, got {got}"
            # The host saw our usage on the consumer page (MSC_SCAN 0x000C00uu).
            scans = [ev.value for ev in events if ev.type == ecodes.EV_MSC]
            assert scans[:1] == [0x000C0000 | k.usage], name
    writer.close()
    assert not wrong
