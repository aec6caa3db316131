"""The input engine's cost and timing (not part of the test suite).

1. Engine-to-write() overhead per report: the executor writing a program whose deadlines have all
   passed into a HidOutput that does os.write on a pipe, against a bare os.write loop of the same
   reports on the same pipe. Interleaved rounds, medians; target <= 2x.
2. Deadline error of a 24-step swipe (the default swipe: 500 units at 2500 units/s): how late each
   report leaves against its absolute deadline, p50/p99/max over many swipes; target p99 <= 1 ms.
   Printed against plain asyncio.sleep scheduling (no spin) measured in the same run.
Run: .venv/bin/python tests/bench/bench_engine.py
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from daemon.config import InputConfig
from daemon.engine import program as prog
from daemon.engine.executor import Held, execute
from daemon.engine.program import Point, Pointer, Step
from gadget import reports

BATCH, ROUNDS, SWIPES = 4000, 30, 60


class PipeOutput:
    """A HidOutput that writes to a pipe, as the board's writer writes to /dev/hidgN."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    async def write(self, role: str, report: bytes) -> None:
        os.write(self.fd, report)


class StampOutput:
    """A HidOutput that notes when each report left."""

    def __init__(self) -> None:
        self.times: list[float] = []

    async def write(self, role: str, report: bytes) -> None:
        self.times.append(time.monotonic())


def drain(fd: int) -> None:
    while True:
        try:
            os.read(fd, 1 << 16)
        except BlockingIOError:
            return


async def overhead() -> tuple[float, float]:
    r, w = os.pipe()
    os.set_blocking(r, False)
    report = reports.keyboard(0, [4])
    program = [Step(0.0, "keyboard", report)] * BATCH
    out, held = PipeOutput(w), Held("mouse")
    bare, engine = [], []
    try:
        for _ in range(ROUNDS):
            start = time.perf_counter()
            for _ in range(BATCH):
                os.write(w, report)
            bare.append((time.perf_counter() - start) / BATCH)
            drain(r)
            start = time.perf_counter()
            await execute(out, program, held, start=0.0)  # every deadline long past
            engine.append((time.perf_counter() - start) / BATCH)
            drain(r)
    finally:
        os.close(r)
        os.close(w)
    return statistics.median(bare) * 1e6, statistics.median(engine) * 1e6


async def plain_sleep_execute(out: StampOutput, program: list[Step]) -> float:
    """The naive scheduler for comparison: absolute deadlines, asyncio.sleep only."""
    t0 = time.monotonic()
    for at_ms, role, report in program:
        delay = t0 + at_ms / 1000 - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        await out.write(role, report)
    return t0


def percentiles(errors: list[float]) -> tuple[float, float, float]:
    errors = sorted(errors)
    return errors[len(errors) // 2], errors[int(len(errors) * 0.99)], errors[-1]


async def deadline_errors() -> tuple[list[float], list[float], int]:
    cfg = InputConfig()
    swipe = prog.resolve_swipe(Point(500, 800), end=Point(500, 300))
    program = prog.swipe(cfg, Pointer.for_platform("ios", cfg), swipe)
    engine_err: list[float] = []
    plain_err: list[float] = []
    for _ in range(SWIPES):
        for runner, errors in ((None, engine_err), (plain_sleep_execute, plain_err)):
            out = StampOutput()
            if runner is None:
                t0 = await execute(out, program, Held("mouse"))
            else:
                t0 = await runner(out, program)
            errors += [
                (t - (t0 + s.at_ms / 1000)) * 1000 for s, t in zip(program, out.times, strict=True)
            ]
    return engine_err, plain_err, len(program)


async def main() -> None:
    bare_us, engine_us = await overhead()
    print(f"bare os.write on a pipe (baseline)  {bare_us:6.2f} us/report (median of {ROUNDS})")
    print(f"engine execute -> HidOutput.write   {engine_us:6.2f} us/report")
    print(f"ratio engine / bare: {engine_us / bare_us:.2f}x (target <= 2x)")
    engine_err, plain_err, steps = await deadline_errors()
    e50, e99, emax = percentiles(engine_err)
    p50, p99, pmax = percentiles(plain_err)
    print(f"24-step swipe ({steps} reports) x {SWIPES}, lateness against absolute deadlines:")
    print(f"  asyncio.sleep only (baseline)  p50 {p50:.3f} ms  p99 {p99:.3f} ms  max {pmax:.3f} ms")
    print(f"  engine (sleep + spin)          p50 {e50:.3f} ms  p99 {e99:.3f} ms  max {emax:.3f} ms")
    print(
        f"engine p99 deadline error {e99:.3f} ms (target <= 1 ms); p99 ratio to baseline "
        f"{e99 / p99:.2f}x"
    )


if __name__ == "__main__":
    asyncio.run(main())
