"""The daemon's memory while images stream in (issue 47: "the memory budgets hold during an
upload"), against the small-board budgets of bench_memory.py and fingertip.service.

Prints figures and fails on none (it stops only if an upload goes wrong). The real daemon
(`make run`'s simulated target) on loopback; a client in this process streams each image (1 MB
blocks of known bytes generated as sent, its Content-Length announced, as a file's upload has
it). Figures, in MB, from /proc (bench_memory's in_all: RSS and PSS of the daemon and any
child), sampled every 10 ms:
- idle after start, against the idle budget (64);
- the peak during one upload of SIZE_MB, and during max_uploads at once (the most the daemon
  runs; one more is refused with media_busy), against the working budget (112);
- after the uploads, against the idle figure + 16 (bench_memory's "back within").

Baselines measured in the same run: the idle floor (a bare process importing only the
libraries the daemon holds at idle, bench_memory.idle_floor) and the same bytes written to a
file of the same disk by a bare loop in this process (MB/s): the upload's rate is printed
against it. The page cache the written images fill is the kernel's, not the daemon's RSS; on
a board it counts in the unit's cgroup, where MemoryHigh reclaims it first (the board VM
tier prints the cgroup's figures).

Run: .venv/bin/python tests/bench/bench_media_upload.py  [--size-mb 200]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.bench.bench_memory import (
    BACK_WITHIN,
    IDLE_BUDGET,
    WORKING_BUDGET,
    PeakSampler,
    idle_floor,
    in_all,
    row,
)
from tests.service.daemonproc import DaemonProcess

MB = 1 << 20
MAX_UPLOADS = 2  # [media].max_uploads, the default


async def blocks(size_mb: int, seed: int) -> AsyncIterator[bytes]:
    block = hashlib.sha256(str(seed).encode()).digest() * (MB // 32)
    for _ in range(size_mb):
        yield block


async def upload(
    session: aiohttp.ClientSession, base: str, name: str, size_mb: int, seed: int
) -> tuple[int, dict[str, Any]]:
    # Content-Length announced, as a browser's or curl's upload of a file does: a body without
    # one reserves all the room left, so a second one at once would find none.
    length = {"Content-Length": str(size_mb * MB)}
    url = f"{base}/api/media/images/{name}"
    async with session.put(url, data=blocks(size_mb, seed), headers=length) as r:
        return r.status, dict(await r.json())


def disk_rate(folder: Path, size_mb: int) -> float:
    """MB/s of a bare loop writing the same blocks to a file on the same disk, fsynced."""
    block = hashlib.sha256(b"disk").digest() * (MB // 32)
    path = folder / "disk-baseline"
    start = time.monotonic()
    with path.open("wb") as f:
        for _ in range(size_mb):
            f.write(block)
        f.flush()
        os.fsync(f.fileno())
    took = time.monotonic() - start
    path.unlink()
    return size_mb / took


async def run(size_mb: int) -> None:
    floor = idle_floor()
    with tempfile.TemporaryDirectory() as tmp:
        disk = disk_rate(Path(tmp), size_mb)
        quota = (MAX_UPLOADS + 2) * size_mb + 64
        d = DaemonProcess(
            Path(tmp), {"media": {"quota_mb": quota, "max_uploads": MAX_UPLOADS}}
        ).start()
        try:
            assert d.proc is not None
            pid = d.proc.pid
            timeout = aiohttp.ClientTimeout(total=3600)
            async with aiohttp.ClientSession(timeout=timeout) as session:
                await measure(session, d, pid, size_mb, floor, disk)
        finally:
            d.stop()


async def measure(
    session: aiohttp.ClientSession,
    d: DaemonProcess,
    pid: int,
    size_mb: int,
    floor: dict[str, Any],
    disk: float,
) -> None:
    print(f"media uploads into the daemon (simulated target), {size_mb} MB each:")
    d.health()
    idle = in_all(pid)
    row("idle after start, PSS", idle.pss, IDLE_BUDGET, f"(RSS {idle.rss:.1f})")
    row("  floor: the idle libraries in a bare process, PSS", floor["pss"])

    with PeakSampler(pid) as one:
        start = time.monotonic()
        status, out = await upload(session, d.base, "one.img", size_mb, 1)
        took = time.monotonic() - start
    assert status == 200 and out["size"] == size_mb * MB, out
    row(
        f"peak during one {size_mb} MB upload, PSS",
        one.pss,
        WORKING_BUDGET,
        f"(RSS {one.rss:.1f}; +{one.pss - idle.pss:.1f} over idle)",
    )
    print(
        f"  one upload: {size_mb / took:.0f} MB/s; baseline, a bare loop writing the same to "
        f"the same disk: {disk:.0f} MB/s ({disk * took / size_mb:.1f}x the upload's rate)"
    )

    with PeakSampler(pid) as many:
        start = time.monotonic()
        running = [
            asyncio.create_task(upload(session, d.base, f"many-{i}.img", size_mb, 10 + i))
            for i in range(MAX_UPLOADS)
        ]
        # One more once they all run (each has its temporary file): over [media].max_uploads,
        # refused before any byte lands.
        media = d.state_dir / "media"
        while len(list(media.glob(".upload-*"))) < MAX_UPLOADS:
            assert not any(t.done() for t in running), [t.result() for t in running if t.done()]
            await asyncio.sleep(0.01)
        extra_status, extra = await upload(session, d.base, "extra.img", 1, 99)
        done = await asyncio.gather(*running)
        took = time.monotonic() - start
    assert all(s == 200 and o["size"] == size_mb * MB for s, o in done), done
    row(
        f"peak during {MAX_UPLOADS} uploads at once ([media].max_uploads), PSS",
        many.pss,
        WORKING_BUDGET,
        f"(RSS {many.rss:.1f}; +{many.pss - idle.pss:.1f} over idle)",
    )
    refused = extra.get("error", {}).get("code") if extra_status != 200 else "accepted"
    print(
        f"  {MAX_UPLOADS} at once: {MAX_UPLOADS * size_mb / took:.0f} MB/s in all; "
        f"one more meanwhile: {extra_status} {refused}"
    )

    after = in_all(pid)
    row(
        "after the uploads, PSS",
        after.pss,
        round(idle.pss + BACK_WITHIN, 1),
        f"(RSS {after.rss:.1f}; idle + {BACK_WITHIN})",
    )


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--size-mb", type=int, default=200)
    args = p.parse_args()
    asyncio.run(run(args.size_mb))


if __name__ == "__main__":
    main()
