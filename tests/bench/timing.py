"""Shared by the benchmarks: per-call timing and baseline/subject pairs in alternating rounds,
so machine noise hits both alike. Ratios, never absolute pass/fail."""

from __future__ import annotations

import statistics
import time
from collections.abc import Awaitable, Callable


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
