"""What a Prometheus scrape costs (not part of the test suite).

- GET /metrics vs POST /api/tools/health_check (the cheapest tool) on the same daemon
  (simulated target), one keep-alive client, alternating rounds: a scrape should cost about
  what a read call costs;
- a HID invocation (keyboard_tap "a") alone vs with a client scraping /metrics back to back the
  whole time, alternating rounds: scrapes should not slow the HID flow (about 1x).
Run: .venv/bin/python tests/bench/bench_metrics.py
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.bench.timing import paired
from tests.service.daemonproc import DaemonProcess

ROUNDS, N = 11, 100
HID_ROUNDS, HID_N = 7, 5
TAP = {"input": {"keys": ["a"]}}


async def run(d: DaemonProcess) -> None:
    async with aiohttp.ClientSession() as session:

        async def scrape() -> object:
            async with session.get(f"{d.base}/metrics") as resp:
                assert resp.status == 200
                return await resp.read()

        async def health() -> object:
            async with session.post(f"{d.base}/api/tools/health_check", json={}) as resp:
                return await resp.json()

        size = len(await scrape())  # type: ignore[arg-type]
        base, subj, ratio = await paired(health, scrape, ROUNDS, N)
        print(f"medians of {ROUNDS} alternating rounds of {N} requests (loopback, keep-alive)")
        print(f"  POST /api/tools/health_check     {base:7.3f} ms  baseline")
        print(f"  GET /metrics ({size} bytes)     {subj:7.3f} ms  {ratio:6.2f}x")

        async def tap_ms() -> float:
            start = time.perf_counter()
            async with session.post(f"{d.base}/api/tools/keyboard_tap", json=TAP) as resp:
                body = await resp.json()
            assert body["is_error"] is False, body
            return (time.perf_counter() - start) * 1000

        async def scraper(stop: asyncio.Event) -> int:
            n = 0
            async with aiohttp.ClientSession() as other:
                while not stop.is_set():
                    async with other.get(f"{d.base}/metrics") as resp:
                        await resp.read()
                    n += 1
            return n

        alone, loaded, ratios, scrapes = [], [], [], 0
        await tap_ms()  # warm-up
        for _ in range(HID_ROUNDS):
            a = statistics.median([await tap_ms() for _ in range(HID_N)])
            stop = asyncio.Event()
            task = asyncio.create_task(scraper(stop))
            b = statistics.median([await tap_ms() for _ in range(HID_N)])
            stop.set()
            scrapes += await task
            alone.append(a)
            loaded.append(b)
            ratios.append(b / a)
        print(f"keyboard_tap 'a', medians of {HID_ROUNDS} alternating rounds of {HID_N} calls")
        print(f"  no scraper                       {statistics.median(alone):7.1f} ms  baseline")
        print(
            f"  scraping back to back            {statistics.median(loaded):7.1f} ms  "
            f"{statistics.median(ratios):6.2f}x  (about 1x expected; {scrapes} scrapes meanwhile)"
        )


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="ft-bench-") as tmp:
        d = DaemonProcess(
            Path(tmp), {"log": {"level": "info"}, "input": {"evidence_stable_ms": 0}}
        ).start()
        try:
            with contextlib.suppress(KeyboardInterrupt):
                asyncio.run(run(d))
        finally:
            d.stop()


if __name__ == "__main__":
    main()
