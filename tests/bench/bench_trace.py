"""The flight recorder's cost (not part of the test suite).

1. POST /api/tools/health_check on two real daemons (simulated target), recording on and off
   ([trace].enabled), driven in alternating rounds by one keep-alive client; target <= 1.05x.
2. The input engine's deadline error (the default 24-step swipe, as bench_engine.py) in a
   process whose recorder's writer thread is busy (an input invocation with two full-size
   frames handed to it every 50 ms: JPEG reductions and SQLite batches), against the same
   swipes with no recorder, in alternating rounds; target: p99 unchanged.
3. Database size per 1,000 input invocations with their before/after screenshots: 200 real
   taps and quick actions on the daemon's simulated target, the live data measured, scaled.
Run: .venv/bin/python tests/bench/bench_trace.py
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from daemon.catalog import Catalog, Invocation, ToolSpec
from daemon.config import InputConfig, TraceConfig
from daemon.engine import program as prog
from daemon.engine.executor import Held, execute
from daemon.engine.program import Point, Pointer
from daemon.frames import Frame
from daemon.trace import store
from daemon.trace.recorder import Recorder
from tests.bench.bench_engine import StampOutput, percentiles
from tests.bench.timing import paired
from tests.service.daemonproc import DaemonProcess

ROUNDS, N = 15, 200
SWIPES = 60
SIZE_CALLS = 200
FAST = {"evidence_stable_ms": 200, "enter_text_delay_ms": 100, "isolation_settle_ms": 50}


async def latency(on: DaemonProcess, off: DaemonProcess) -> None:
    body = json.dumps({"input": {}})
    async with aiohttp.ClientSession() as session:

        async def post(d: DaemonProcess) -> object:
            async with session.post(
                f"{d.base}/api/tools/health_check",
                data=body,
                headers={"Content-Type": "application/json"},
            ) as resp:
                return await resp.json()

        base, subject, ratio = await paired(lambda: post(off), lambda: post(on), ROUNDS, N)
    print(f"1. health_check over HTTP, medians of {ROUNDS} alternating rounds of {N} requests")
    print(f"   recording off (baseline)  {base:7.3f} ms")
    print(f"   recording on              {subject:7.3f} ms  {ratio:6.3f}x  (target <= 1.05x)")


async def _noop(args: object, ctx: object) -> object:
    return {}


async def deadlines(tmp: Path) -> None:
    catalog = Catalog("ios", [ToolSpec("tap", "", "input", "write", _noop, hid=True)])
    recorder = Recorder(catalog, tmp, TraceConfig())
    recorder.start()
    rng = np.random.default_rng(1)
    frames = [
        Frame(rng.integers(0, 255, (1920, 1080, 3), dtype=np.uint8), i, 0.0, time.time())
        for i in range(4)
    ]
    cfg = InputConfig()
    swipe = prog.resolve_swipe(Point(500, 800), end=Point(500, 300))
    program = prog.swipe(cfg, Pointer.for_platform("ios", cfg), swipe)
    busy = asyncio.Event()

    async def feed() -> None:
        n = 0
        while True:
            await busy.wait()
            n += 1
            shots = (("before", frames[n % 4]), ("after", frames[(n + 1) % 4]))
            recorder.observe(
                Invocation(
                    id=f"{n:032x}", tool="tap", transport="http", client="127.0.0.1",
                    args={"x": n}, started_at=time.time(), duration_ms=300.0, outcome="ok",
                    error_code=None, result={"ok": True}, evidence=shots,
                )
            )  # fmt: skip
            await asyncio.sleep(0.05)

    feeder = asyncio.create_task(feed())
    errors: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(SWIPES):
        for recording in (False, True):
            if recording:
                busy.set()
                await asyncio.sleep(0.06)  # the writer has work in hand
            out = StampOutput()
            t0 = await execute(out, program, Held("mouse"))
            errors[recording] += [
                (t - (t0 + s.at_ms / 1000)) * 1000 for s, t in zip(program, out.times, strict=True)
            ]
            busy.clear()
    feeder.cancel()
    await asyncio.to_thread(recorder.stop)
    o50, o99, omax = percentiles(errors[False])
    r50, r99, rmax = percentiles(errors[True])
    print(f"2. 24-step swipe x {SWIPES}, lateness against absolute deadlines")
    print(f"   no recorder (baseline)     p50 {o50:.3f} ms  p99 {o99:.3f} ms  max {omax:.3f} ms")
    print(f"   recorder writing           p50 {r50:.3f} ms  p99 {r99:.3f} ms  max {rmax:.3f} ms")
    print(f"   p99 ratio {r99 / o99:.2f}x (target: unchanged); {recorder.recorded} recorded")


async def size(d: DaemonProcess) -> None:
    async with aiohttp.ClientSession() as session:

        async def call(tool: str, args: object) -> None:
            async with session.post(f"{d.base}/api/tools/{tool}", json={"input": args}) as r:
                body = await r.json()
                assert body["is_error"] is False, body

        for n in range(SIZE_CALLS // 2):
            await call(
                "touch_gesture", {"type": "tap", "point": {"x": 250 + n % 3 * 250, "y": 300}}
            )
            await call("quick_action", {"action": "home"})
    d.stop()  # the writer flushes at stop
    db = d.state_dir / store.DB_NAME
    with sqlite3.connect(db) as conn:
        count = conn.execute("SELECT count(*) FROM invocations WHERE hid = 1").fetchone()[0]
        images = conn.execute("SELECT count(*), sum(length(jpeg)) FROM images").fetchone()
        used = store.used_bytes(conn)
    per_1000 = used / count * 1000 / (1 << 20)
    each = images[1] / images[0] / 1024
    print(f"3. {count} input invocations with {images[0]} images ({each:.1f} KiB each)")
    print(
        f"   live data {used / (1 << 20):.2f} MiB: {per_1000:.1f} MiB per 1,000 input invocations"
    )
    print(f"   the default bound (256 MiB) holds about {256 / per_1000 * 1000:,.0f} of them")


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="ft-bench-trace-") as tmp:
        root = Path(tmp)
        (root / "on").mkdir(), (root / "off").mkdir(), (root / "size").mkdir()
        log = {"log": {"level": "info"}}
        on = DaemonProcess(root / "on", log).start()
        off = DaemonProcess(root / "off", {**log, "trace": {"enabled": False}}).start()
        try:
            asyncio.run(latency(on, off))
        finally:
            on.stop(), off.stop()
        asyncio.run(deadlines(root))
        d = DaemonProcess(root / "size", {**log, "input": FAST}).start()
        try:
            asyncio.run(size(d))
        finally:
            d.kill()


if __name__ == "__main__":
    main()
