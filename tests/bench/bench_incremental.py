"""Reading the screen at the cost of what changed (issue 37): prints, never asserts.

For each edit of the set (tests/ocr_screens.edits: typing into a field, a switch flipped, a
one-row scroll, the on-screen keyboard appearing, another app opened), on the simulated
target's 1080x1920 phone screens, with the real engine on one thread as the OCR worker runs it:
- how much of the frame changed: the structural detector's changed blocks (its 40x80 grid below
  the status bar) and the changed pixels' bounding box, as shares of the frame; the target
  applies where the bounding box is at most 10 % of the frame;
- the CPU time (this process, user + system) of the read that follows the edit's before frame
  (incremental), against a fresh engine's full read of the same after frame in the same run,
  medians of RUNS; the target is <= 0.25x where the change covers <= 10 % of the frame;
- whether the two results are identical (the same lines, words, boxes), and what was read
  again: bands detected and lines recognized, of all;
- the full read's own time, beside a JPEG encode of the same frame (the machine's pace), to
  compare across runs: it must not grow.

Run: .venv/bin/python tests/bench/bench_incremental.py
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path
from typing import Any

import cv2
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from daemon.memory import map_large_blocks
from daemon.screen.detector import compare, signature
from daemon.screen.ocr_engine import RapidEngine
from tests.ocr_screens import edits

RUNS = 5


def cpu(fn: Any) -> tuple[Any, float]:
    start = time.process_time()
    out = fn()
    return out, time.process_time() - start


def forget(engine: RapidEngine) -> None:
    """A fresh engine's state: nothing kept from an earlier read."""
    engine._lines, engine._ocr.text_det._bands = {}, {}


def changed_share(before: np.ndarray, after: np.ndarray) -> tuple[float, float]:
    blocks = compare(signature(before), signature(after), 2.0).changed_fraction
    ys, xs = np.nonzero(np.any(before != after, axis=2))
    if not len(xs):
        return blocks, 0.0
    box = (xs.max() - xs.min() + 1) * (ys.max() - ys.min() + 1)
    return blocks, float(box / (before.shape[0] * before.shape[1]))


def main() -> None:
    map_large_blocks()  # as the OCR worker does
    engine = RapidEngine()
    print(f"{engine.version}, one thread; medians of {RUNS} runs, CPU seconds of this process")
    header = (
        f"{'platform':8s} {'edit':22s} {'blocks':>7s} {'bbox':>6s} {'incr s':>7s} {'full s':>7s} "
        f"{'ratio':>6s} {'same':>5s} {'bands':>6s} {'lines':>6s}  verdict"
    )
    print(header)
    fulls: list[float] = []
    jpegs: list[float] = []
    for platform in ("ios", "android"):
        for edit in edits(platform):
            blocks, bbox = changed_share(edit.before, edit.after)
            incr_s, full_s, same = [], [], True
            for _ in range(RUNS):
                forget(engine)
                engine.read(edit.before)
                det0 = dict(engine._ocr.text_det.counts)
                rec0 = dict(engine.counts)
                incremental, took = cpu(lambda e=edit: engine.read(e.after))
                incr_s.append(took)
                bands = engine._ocr.text_det.counts["bands_detected"] - det0["bands_detected"]
                of_bands = engine._ocr.text_det.counts["bands"] - det0["bands"]
                lines = engine.counts["recognized"] - rec0["recognized"]
                of_lines = engine.counts["lines"] - rec0["lines"]
                forget(engine)
                full, took = cpu(lambda e=edit: engine.read(e.after))
                full_s.append(took)
                same = same and incremental == full
                jpegs.append(cpu(lambda e=edit: cv2.imencode(".jpg", e.after))[1])
            incr, whole = statistics.median(incr_s), statistics.median(full_s)
            fulls.append(whole)
            ratio = incr / whole
            small = bbox <= 0.10  # the changed pixels' extent: a change in two corners is big
            verdict = (
                ("met" if ratio <= 0.25 else "MISSED") + " (target <= 0.25x)"
                if small
                else "over 10 %: no target"
            )
            print(
                f"{platform:8s} {edit.name:22s} {blocks:7.1%} {bbox:6.1%} {incr:7.3f} {whole:7.3f} "
                f"{ratio:5.2f}x {'yes' if same else 'NO':>5s} {bands:>2d}/{of_bands:<3d} "
                f"{lines:>2d}/{of_lines:<3d}  {verdict}",
                flush=True,
            )
    print(
        f"full read: median {statistics.median(fulls):.3f} s of CPU per 1080x1920 frame; "
        f"a JPEG encode of the same frames {statistics.median(jpegs) * 1000:.1f} ms "
        f"(ratio {statistics.median(fulls) / statistics.median(jpegs):.0f}x: compare it "
        "across runs, not the seconds)"
    )


if __name__ == "__main__":
    main()
