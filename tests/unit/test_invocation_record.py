"""What the catalog's observers and replies are told of a call's times: the wall-clock start
(Invocation.started_at, Outcome.called_at) and a duration measured on the monotonic clock, the
same for the call whose client stayed and for the HID call whose client left."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from daemon.catalog import CallContext, Catalog, Invocation, ToolSpec

PAUSE_S = 0.05


async def _wait(args: dict[str, Any], ctx: CallContext) -> Any:
    await asyncio.sleep(PAUSE_S)
    return {"ok": True}


def _catalog(seen: list[Invocation]) -> Catalog:
    catalog = Catalog(
        "ios",
        [
            ToolSpec("wait", "waits", "test", "read", _wait),
            ToolSpec("hid_wait", "waits in the HID flow", "test", "write", _wait, hid=True),
        ],
    )
    catalog.observers.append(seen.append)
    return catalog


async def _observed(seen: list[Invocation], count: int) -> None:
    async with asyncio.timeout(5):
        while len(seen) < count:
            await asyncio.sleep(0.005)


async def test_a_call_is_recorded_with_its_wall_clock_start_and_its_duration() -> None:
    seen: list[Invocation] = []
    catalog = _catalog(seen)
    before = time.time()
    outcome = await catalog.call("wait", {})
    after = time.time()
    await _observed(seen, 1)
    (inv,) = seen
    assert outcome.ok and inv.outcome == "ok" and inv.error_code is None
    # A swapped clock would put the start near the machine's uptime (monotonic), not now.
    assert before <= inv.started_at <= after
    assert inv.started_at == outcome.called_at
    assert PAUSE_S * 1000 <= inv.duration_ms <= (after - before) * 1000 + 1
    assert int(PAUSE_S * 1000) <= outcome.duration_ms <= (after - before) * 1000 + 1


async def test_a_hid_call_whose_client_left_is_recorded_once_at_its_end() -> None:
    seen: list[Invocation] = []
    catalog = _catalog(seen)
    before = time.time()
    client = asyncio.create_task(catalog.call("hid_wait", {}))
    await asyncio.sleep(PAUSE_S / 5)
    client.cancel()  # the client goes; the HID invocation runs on to its end
    with contextlib.suppress(asyncio.CancelledError):
        await client
    await _observed(seen, 1)
    after = time.time()
    (inv,) = seen
    assert inv.client_gone and inv.outcome == "ok" and inv.result == {"ok": True}
    assert before <= inv.started_at <= after
    assert PAUSE_S * 1000 <= inv.duration_ms <= (after - before) * 1000 + 1
