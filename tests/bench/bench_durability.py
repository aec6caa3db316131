"""What a power cut may cost the flight recorder's trail, against what each record costs to
keep: SQLite's `synchronous` NORMAL against FULL, in WAL, measured in the same run on the same
disk (not part of the test suite).

1. Cost per record: the recorder's real batches (store.insert, one transaction per batch) of 1
   record (one call per BATCH_WINDOW_S, a person or an agent at its pace) and of 16 (a burst),
   into two real files, NORMAL and FULL, in alternating rounds: ms per batch and per record.
2. The loss window. FULL fsyncs the WAL at every commit: a cut loses at most the batch being
   gathered (BATCH_WINDOW_S) and the one being written (its p99 commit time). NORMAL fsyncs it
   only at a checkpoint: a cut may lose every commit since the last one, up to
   wal_autocheckpoint pages; printed as records and as seconds at one call a second.
The board VM's power-cut test (tests/board/power_cut.py) checks the FULL window for real.
Run: .venv/bin/python tests/bench/bench_durability.py
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from daemon.trace import store
from daemon.trace.recorder import BATCH_WINDOW_S

ROUNDS = 9
BATCHES = 40  # per round and setting
MAX_BYTES = 256 << 20  # [trace].max_size_mb's default


def rows(start: int, n: int) -> list[store.Row]:
    """Input invocations as the recorder keeps them: arguments, a result, an 8 KB thumbnail."""
    now = time.time()
    out = []
    for i in range(start, start + n):
        values = (f"{i:032x}", now, now, 12.5, "http", "127.0.0.1", "pairing", "tap", "write", 1)
        values += ('{"x":100,"y":200}', "ok", None, 0, "[]", "[]", '{"tapped":[100,200]}')
        jpeg = os.urandom(8000)
        out.append(store.Row(values, (store.Image("after", 320, 180, jpeg),)))
    return out


def run(conn: sqlite3.Connection, start: int, size: int) -> list[float]:
    """ms per batch for BATCHES batches of `size`."""
    times = []
    for b in range(BATCHES):
        batch = rows(start + b * size, size)
        t0 = time.perf_counter()
        store.insert(conn, batch)
        times.append((time.perf_counter() - t0) * 1000)
    return times


def main() -> None:
    with tempfile.TemporaryDirectory(dir=Path(__file__).resolve().parents[2]) as folder:
        conns = {}
        for mode in ("NORMAL", "FULL"):
            conn = store.open_writer(Path(folder) / f"{mode}.db", MAX_BYTES)
            conn.execute(f"PRAGMA synchronous = {mode}")
            conns[mode] = conn
        print(
            f"disk: {folder} ({os.statvfs(folder).f_bsize}-byte blocks), "
            f"SQLite {sqlite3.sqlite_version}"
        )
        print(
            f"medians of {ROUNDS} alternating rounds of {BATCHES} batches each, same disk, same run"
        )
        counter = 0
        for size in (1, 16):
            per = {"NORMAL": [], "FULL": []}
            p99 = {"NORMAL": [], "FULL": []}
            for _ in range(ROUNDS):
                for mode, conn in conns.items():
                    times = run(conn, counter, size)
                    counter += BATCHES * size
                    per[mode].append(statistics.median(times))
                    p99[mode].append(sorted(times)[int(len(times) * 0.99) - 1])
            normal, full = statistics.median(per["NORMAL"]), statistics.median(per["FULL"])
            print(
                f"batches of {size:2d}: NORMAL (baseline) {normal:7.3f} ms/batch "
                f"{normal / size:7.3f} ms/record | FULL {full:7.3f} ms/batch "
                f"{full / size:7.3f} ms/record | FULL/NORMAL {full / normal:5.2f}x"
            )
            if size == 1:
                commit_p99 = max(p99["FULL"])
        wal_pages = conns["FULL"].execute("PRAGMA wal_autocheckpoint").fetchone()[0]
        page = conns["FULL"].execute("PRAGMA page_size").fetchone()[0]
        per_record = sum(r.size() for r in rows(0, 16)) / 16
        records = wal_pages * page / per_record
        print(
            f"loss window, FULL: the batch being gathered ({BATCH_WINDOW_S * 1000:.0f} ms) and "
            f"the one being written (p99 {commit_p99:.1f} ms here): "
            f"{BATCH_WINDOW_S * 1000 + commit_p99:.0f} ms after its reply"
        )
        print(
            f"loss window, NORMAL: every commit since the last checkpoint, up to {wal_pages} "
            f"pages of {page} B: ~{records:.0f} records of {per_record:.0f} B, "
            f"{records:.0f} s of the trail at one call a second"
        )
        for conn in conns.values():
            with contextlib.suppress(sqlite3.Error):
                conn.close()


if __name__ == "__main__":
    main()
