"""Shared by the benchmarks: per-call timing and baseline/subject pairs in alternating rounds,
so machine noise hits both alike. Ratios, never absolute pass/fail."""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Awaitable, Callable
from pathlib import Path


async def per_call_ms(fn: Callable[[], Awaitable[object]], n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        await fn()
    return (time.perf_counter() - start) * 1000 / n


async def paired(
    baseline: Callable[[], Awaitable[object]],
    subject: Callable[[], Awaitable[object]],
    rounds: int,
    n: int,
) -> tuple[float, float, float]:
    """(baseline ms, subject ms, median of per-round ratios subject/baseline)."""
    await per_call_ms(baseline, n), await per_call_ms(subject, n)  # warm-up
    base, subj = [], []
    for _ in range(rounds):
        base.append(await per_call_ms(baseline, n))
        subj.append(await per_call_ms(subject, n))
    ratios = [s / b for b, s in zip(base, subj, strict=True)]
    return statistics.median(base), statistics.median(subj), statistics.median(ratios)


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds a process has used so far (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def paired_with_cpu(
    baseline: Callable[[], Awaitable[object]],
    subject: Callable[[], Awaitable[object]],
    pids: tuple[int, int],
    rounds: int,
    n: int,
) -> tuple[tuple[float, float, float], tuple[float, float, float]]:
    """paired()'s round trips, and over the same rounds each server's CPU per call in
    microseconds (baseline, subject, subject/baseline): what a server spends is less exposed
    to a shared machine's scheduling than a round trip is, and holds no client time."""
    before = [process_cpu_s(pid) for pid in pids]
    trips = await paired(baseline, subject, rounds, n)
    calls = (rounds + 1) * n  # paired() warms each side up with one extra round
    used = [(process_cpu_s(pid) - b) / calls * 1e6 for pid, b in zip(pids, before, strict=True)]
    return trips, (used[0], used[1], used[1] / used[0])
