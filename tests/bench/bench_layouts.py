"""Planning typing on a layout (not part of the test suite).

Planning 5,000 characters of mixed German text (letters, umlauts, AltGr characters, dead-key
accents, digits, punctuation) on the German PC layout, against planning 5,000 characters of US
ASCII on the US layout, measured in the same run in alternating rounds; medians. Targets:
ratio <= 2x, and the German plan under 5 ms. Also printed: loading one layout from the data
file (what the daemon pays once at start). Nothing passes or fails on time.
Run: .venv/bin/python tests/bench/bench_layouts.py
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from gadget import layouts

N, ROUNDS, REPS = 5000, 30, 20
GERMAN = "Grüße aus Zürich: 10 € @ 12:30, {x} [y] é è ô ^ Ä Ö Ü ß ?! Straße; "
ASCII = "The quick brown fox jumps over the lazy dog: 10 $ @ 12:30, {x} [y]! "


def sized(sample: str) -> str:
    return (sample * (N // len(sample) + 1))[:N]


def per_plan_ms(layout: layouts.Layout, text: str) -> float:
    start = time.perf_counter()
    for _ in range(REPS):
        layout.plan(text)
    return (time.perf_counter() - start) * 1000 / REPS


def main() -> None:
    de, us = layouts.load("de", "pc"), layouts.load("us", "pc")
    german, ascii_text = sized(GERMAN), sized(ASCII)
    assert len(german) == len(ascii_text) == N
    per_plan_ms(us, ascii_text), per_plan_ms(de, german)  # warm-up
    base, subj = [], []
    for _ in range(ROUNDS):
        base.append(per_plan_ms(us, ascii_text))
        subj.append(per_plan_ms(de, german))
    ratios = [s / b for b, s in zip(base, subj, strict=True)]
    b, s, r = statistics.median(base), statistics.median(subj), statistics.median(ratios)
    strokes_de, strokes_us = len(de.plan(german)), len(us.plan(ascii_text))
    print(
        f"plan {N} chars: US ASCII {b:.3f} ms ({strokes_us} strokes), German {s:.3f} ms "
        f"({strokes_de} strokes); ratio {r:.2f}x (target <= 2x), German "
        f"{'under' if s < 5 else 'OVER'} 5 ms"
    )
    layouts.load.cache_clear()
    layouts._data.cache_clear()
    start = time.perf_counter()
    layouts.load("de", "apple")
    print(
        f"load one layout from the data file (cold): {(time.perf_counter() - start) * 1000:.1f} ms"
    )


if __name__ == "__main__":
    main()
