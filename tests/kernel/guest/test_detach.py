"""Detach: with the UDC unbound a write fails with TargetNotAttached within its deadline, and
after a rebind the same writer works again."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest
from board import Board
from evdev import ecodes
from usbhost import frames, no_autorepeat, open_inputs, read_until

from gadget import reports
from gadget.errors import TargetNotAttached
from gadget.keymap import char_stroke


async def test_unbound_write_fails_then_rebind_recovers(
    board: Board, record_property: Callable[[str, object], None]
) -> None:
    live = board.up("full", "ios")
    s = board.settings
    writer = board.writer("keyboard")
    press = reports.keyboard(0, [char_stroke("z")[0]])

    board.gadget.unbind()
    board.host.wait_usb_gone(s.vendor_id, s.product_id_full)
    deadline = 0.5
    start = time.monotonic()
    with pytest.raises(TargetNotAttached) as failed:
        # The outer bound only turns a hang into a failure; the writer must give up by itself.
        await asyncio.wait_for(writer.write(press, timeout=deadline), deadline * 20)
    record_property("unattached_write_failed_after_s", f"{time.monotonic() - start:.3f}")
    assert failed.value.retryable and failed.value.code == "target_not_attached"
    assert not writer.is_open  # a failed write drops the descriptor; the next one reopens

    start = time.monotonic()
    board.gadget.bind()
    board.gadget.wait_configured(s.attach_timeout)
    again = board.wait_live(live.profile, start, time.monotonic() - start)
    record_property("time_to_configured_after_bind_s", f"{again.configured_s:.2f}")
    record_property("time_to_inputs_after_bind_s", f"{again.enumerated_s:.2f}")
    assert again.usb.devnum != live.usb.devnum  # really a new enumeration

    with open_inputs([again.input_node("keyboard")]) as (kbd,):
        no_autorepeat(kbd)
        await writer.write(press)
        await writer.write(reports.KEYBOARD_RELEASE)
        events = await read_until(kbd, lambda e: len(frames(e, ecodes.EV_KEY)) == 2, "'z'")
    writer.close()
    assert frames(events, ecodes.EV_KEY) == [
        [(ecodes.EV_KEY, ecodes.KEY_Z, 1)],
        [(ecodes.EV_KEY, ecodes.KEY_Z, 0)],
    ]
