"""Where one tool call's time goes inside the daemon, in-process (not part of the test suite).

The round-trip benchmarks (bench_http, bench_ws) say how much slower a call is than a bare
server; this one says what the catalog spends it on, without sockets, client or scheduling
noise: the real daemon built from a config (simulated target) and started in this process, its
catalog called for health_check in a loop, and each piece of a call timed alone the same way.
The baseline is the handler alone; every other line is printed as a multiple of it.

- catalog.call: every rule of a call (visibility, token rule, guard, availability, argument and
  result checks, the limit, the invocation record), with its log line and observers (metrics,
  flight recorder) written after it as they are in the daemon;
- the pieces: the edge rule's walk of the result, the schema checks, the limit, the log line,
  the observers; and what the WebSocket transport adds per request, its task.
Run: .venv/bin/python tests/bench/bench_catalog.py
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import structlog

from daemon import service, wire
from daemon.catalog import CALLER_KINDS, CallContext, Caller, Guard, Invocation, schema_errors
from daemon.config import load
from gadget.log import configure_logging
from tests.service.daemonproc import DaemonProcess

N, ROUNDS = 2000, 9


async def per_call_us(fn: Callable[[], Awaitable[Any]]) -> float:
    """Median over rounds of N calls, with the loop turned once per round so that what a call
    left for the loop (its log line, its observers) runs and is counted in its round."""
    rounds = []
    for _ in range(ROUNDS + 1):  # the first round warms up
        start = time.perf_counter()
        for _ in range(N):
            await fn()
        await asyncio.sleep(0)
        rounds.append((time.perf_counter() - start) * 1e6 / N)
    return statistics.median(rounds[1:])


async def run(tmp: Path) -> None:
    config = load(DaemonProcess(tmp, {"log": {"level": "info"}}).config_path)
    with open(os.devnull, "w") as devnull:
        configure_logging("info", "json", devnull)  # the board's level and format
        wire.use_orjson()  # as serve() does
        daemon = service.build(config)
        await daemon.start()
        try:
            await measure(daemon)
        finally:
            await daemon.stop()


async def measure(daemon: service.Daemon) -> None:
    catalog = daemon.catalog
    spec = catalog.get("health_check")
    caller = Caller("ws", Guard.preset("full-access"), authenticated=True, **CALLER_KINDS["ws"])
    ctx = CallContext("bench")
    result = await spec.handler({}, ctx)
    log = structlog.get_logger("daemon.catalog")

    async def handler() -> Any:
        return await spec.handler({}, ctx)

    async def call() -> Any:
        return await catalog.call("health_check", {}, caller)

    async def edge_rule() -> None:
        wire.check(result)

    async def schemas() -> None:
        catalog.validate_arguments(spec, {})
        schema_errors(spec.result_schema, result)

    async def limit() -> None:
        async with asyncio.timeout(60):
            pass

    async def log_line() -> None:
        log.info("tool_invocation", tool="health_check", transport="ws", duration_ms=0.1)

    seen: list[Invocation] = []
    catalog.observers.append(seen.append)
    await call()
    await asyncio.sleep(0)  # the observers are told after the call, in the next loop turn
    catalog.observers.remove(seen.append)
    record = seen[0]

    async def observers() -> None:
        for observer in catalog.observers:
            observer(record)

    async def nothing() -> None:
        pass

    async def task() -> None:
        await asyncio.create_task(nothing())

    base = await per_call_us(handler)
    print(f"in-process, median of {ROUNDS} rounds of {N} calls of health_check")
    print(f"  the handler alone                    {base:7.1f} us  baseline")
    for name, fn in (
        ("catalog.call, log and observers", call),
        ("  the edge rule's result walk", edge_rule),
        ("  argument and result schemas", schemas),
        ("  the limit (asyncio.timeout)", limit),
        ("  the log line", log_line),
        ("  the observers (metrics, recorder)", observers),
        ("a task per request (WebSocket)", task),
    ):
        us = await per_call_us(fn)
        print(f"  {name:36s} {us:7.1f} us  {us / base:6.2f}x")


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="ft-bench-") as tmp:
        asyncio.run(run(Path(tmp)))


if __name__ == "__main__":
    main()
