"""What a WebSocket batch attack costs the daemon in memory (issue 44, finding 2).

Prints, never asserts. One authenticated host sends 32 `tool.batch` messages of 32 `screenshot`
calls each (inline JPEG, quality 100) on one socket, as fast as it can, and reads every reply.
The figure is the peak of the daemon's process tree (the daemon and its children, from /proc:
RSS summed, PSS summed; sampled every 10 ms), and what it holds 5 s after the last reply.

Baseline, in the same run and the same daemon: the same 32 x 32 screenshots asked one call
at a time (the least any client can make the daemon hold for that work). Then the attack
again from four sockets of the same host at once.

The simulated target renders 1080x1920 frames (a phone), where the board's capture would be.
Run: .venv/bin/python tests/bench/bench_ws_batches.py
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.bench.bench_memory import PeakSampler, in_all
from tests.service.daemonproc import DaemonProcess

BATCHES, CALLS = 32, 32
SHOT = {"toolId": "screenshot", "arguments": {"quality": 100}, "deliveryMode": "inline"}


def envelope(kind: str, n: int, payload: Any) -> str:
    return json.dumps(
        {
            "type": kind,
            "id": f"r{n}",
            "sentAt": "2026-01-01T00:00:00Z",
            "capability": "tool.exec",
            "payload": payload,
        }
    )


async def replies(ws: aiohttp.ClientWebSocketResponse, count: int) -> dict[str, int]:
    """Read `count` text replies; how many of each type (ASFT frames are not expected)."""
    kinds: dict[str, int] = {}
    while count:
        msg = await ws.receive(timeout=600)
        assert msg.type is aiohttp.WSMsgType.TEXT, msg
        kind = json.loads(msg.data)["type"]
        kinds[kind] = kinds.get(kind, 0) + 1
        count -= 1
    return kinds


async def singles(ws: aiohttp.ClientWebSocketResponse) -> dict[str, int]:
    kinds: dict[str, int] = {}
    for n in range(BATCHES * CALLS):
        await ws.send_str(envelope("tool.call", n, SHOT))
        for k, v in (await replies(ws, 1)).items():
            kinds[k] = kinds.get(k, 0) + v
    return kinds


async def attack(ws: aiohttp.ClientWebSocketResponse) -> dict[str, int]:
    for n in range(BATCHES):
        await ws.send_str(envelope("tool.batch", n, {"calls": [SHOT] * CALLS}))
    return await replies(ws, BATCHES)


async def measure(d: DaemonProcess, name: str, work: Any, sockets: int = 1) -> None:
    """`work` on `sockets` sockets at once (each does all of it); the tree's figures."""
    assert d.proc is not None
    url = f"{d.base}/api/ws"
    auth = {"Authorization": f"Bearer {d.token}"}
    async with aiohttp.ClientSession() as session:
        wss = [await session.ws_connect(url, headers=auth, max_msg_size=0) for _ in range(sockets)]
        before = in_all(d.proc.pid)
        started = time.monotonic()
        with PeakSampler(d.proc.pid) as peak:
            done = await asyncio.gather(*(work(ws) for ws in wss))
        took = time.monotonic() - started
        for ws in wss:
            await ws.close()
    kinds: dict[str, int] = {}
    for one in done:
        for k, v in one.items():
            kinds[k] = kinds.get(k, 0) + v
    await asyncio.sleep(5)
    after = in_all(d.proc.pid)
    print(
        f"  {name:34s} before {before.rss:6.1f} MB RSS {before.pss:6.1f} PSS | "
        f"peak {peak.rss:6.1f} RSS {peak.pss:6.1f} PSS (+{peak.rss - before.rss:.1f}) | "
        f"5 s after {after.rss:6.1f} RSS | {took:5.1f} s | replies {kinds}",
        flush=True,
    )


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        d = DaemonProcess(Path(tmp), {"backend": {"sim_width": 1080, "sim_height": 1920}})
        d.start()
        try:
            assert d.proc is not None
            idle = in_all(d.proc.pid)
            print(f"daemon at start: {idle.rss:.1f} MB RSS, {idle.pss:.1f} MB PSS", flush=True)
            # Warm: the first screenshots load the encoder and the renderer's caches.
            await measure(d, "warm-up (3 x 32 single calls)", _warm)
            await measure(d, f"baseline: {BATCHES * CALLS} single calls", singles)
            await measure(d, f"attack: {BATCHES} batches x {CALLS}", attack)
            await measure(d, f"attack on 4 sockets: 4 x {BATCHES} x {CALLS}", attack, 4)
        finally:
            d.stop()


async def _warm(ws: aiohttp.ClientWebSocketResponse) -> dict[str, int]:
    kinds: dict[str, int] = {}
    for n in range(3 * CALLS):
        await ws.send_str(envelope("tool.call", n, SHOT))
        for k, v in (await replies(ws, 1)).items():
            kinds[k] = kinds.get(k, 0) + v
    return kinds


if __name__ == "__main__":
    asyncio.run(main())
