"""Issue 35's attacks, measured (not part of the test suite): the figures before and after.

Run it from a checkout: it starts that checkout's daemon (simulated target) on loopback, so
the same script measures the old code from a checkout of main and the new one from this
branch (copy it, with tests/service/test_hostile_trail.py and daemonproc.py, into the old tree):

    .venv/bin/python tests/bench/bench_trace_attacks.py

1. a full trail read: 300 records with the issue's 192 KB arguments and 150 as large as the
   bounded recorder writes them (64 KiB of arguments and of result, two 360 px images), as a
   version-1 file; then GET /api/trace?limit=1000 (and its next pages, where there are) and
   GET /api/trace/export?limit=5000, each on a fresh daemon: peak RSS growth (VmHWM), the
   RSS it settles at, the largest reply, health_check latency meanwhile (probed every 50 ms);
2. strangers: 14 keyboard_tap with the token, then 600 tokenless health_check calls with
   64,000 "€" of junk (and 100 tokenless calls that ran) under a 1 MiB cap: taps evicted, the
   file's size, whether the junk reached the file, health_check latency meanwhile;
3. pruning: a 10 MB file under a 0.25 MiB cap: the file and its free pages once pruned;
4. readers that stop: two clients fill [ipc] / [server].max_connections (2) with requests
   they never read: how long until a third is served;
5. a body over [server].max_body_bytes on each route: the refusal's content type.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import socket
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
from daemon.config import ServerConfig  # noqa: E402
from tests.service.daemonproc import DaemonProcess  # noqa: E402
from tests.service.test_hostile_trail import (  # noqa: E402
    JUNK,
    fill_trail,
    health_ms,
    read_pages,
    tcp_reader,
)
from tests.service.test_input_tools import FAST  # noqa: E402
from tests.service.test_ipc_cli import send_frame  # noqa: E402

DB = "trace.db"
HAS_SEND_TIMEOUT = "send_timeout_s" in ServerConfig.__dataclass_fields__
WAIT_S = 20.0  # how long a stalled reader's slot is waited for


def mib(kib: int) -> str:
    return f"{kib / 1024:7.1f} MiB"


class Prober:
    """health_check every 50 ms while an attack runs: its latencies."""

    def __init__(self, d: DaemonProcess, s: aiohttp.ClientSession, token: str | None = None):
        self.d, self.s, self.token = d, s, token
        self.latencies: list[float] = []
        self._task: asyncio.Task[None] | None = None
        self._on = False

    async def _run(self) -> None:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        while self._on:
            started = time.monotonic()
            async with self.s.post(
                f"{self.d.base}/api/tools/health_check", json={"input": {}}, headers=headers
            ) as r:
                await r.read()
            self.latencies.append((time.monotonic() - started) * 1000)
            await asyncio.sleep(0.05)

    def __enter__(self) -> Prober:
        self._on = True
        self._task = asyncio.create_task(self._run())
        return self

    def __exit__(self, *exc: object) -> None:
        self._on = False

    async def done(self) -> str:
        if self._task is not None:
            await self._task
        lat = self.latencies or [0.0]
        return f"health_check p50 {statistics.median(lat):6.0f} ms, max {max(lat):6.0f} ms"


async def idle(root: Path) -> None:
    folder = root / "idle"
    folder.mkdir()
    d = DaemonProcess(folder, {"log": {"level": "info"}}).start()
    try:
        await asyncio.sleep(2)
        print(f"0. the idle daemon (simulated target): RSS {mib(d.memory_kib('VmRSS'))}")
    finally:
        d.kill()


async def full_trail(template: Path, root: Path) -> None:
    print("1. a full trail (300 x 192 KB arguments + 150 largest bounded records), read")
    for what in ("list", "export"):
        folder = root / f"read-{what}"
        (folder / "state").mkdir(parents=True)
        shutil.copy(template, folder / "state" / DB)
        d = DaemonProcess(folder, {"input": dict(FAST), "log": {"level": "info"}}).start()
        try:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=900)) as s:
                async with s.get(f"{d.base}/api/trace?limit=1") as r:
                    await r.read()
                await health_ms(d, s)
                before = d.memory_kib("VmHWM")
                rss0 = d.memory_kib("VmRSS")
                started = time.monotonic()
                with Prober(d, s) as probe:
                    if what == "list":
                        _, sizes = await read_pages(d, s)
                        largest, total, pages = max(sizes), sum(sizes), len(sizes)
                    else:
                        total = 0
                        async with s.get(f"{d.base}/api/trace/export?limit=5000") as r:
                            async for chunk in r.content.iter_chunked(1 << 16):
                                total += len(chunk)
                        largest, pages = total, 1
                took = time.monotonic() - started
                latency = await probe.done()
                await asyncio.sleep(1)
                grown = d.memory_kib("VmHWM") - before
                settled = d.memory_kib("VmRSS") - rss0
            name = "GET /api/trace?limit=1000" if what == "list" else "GET /api/trace/export"
            print(f"   {name:28} peak RSS +{mib(grown)}, settled +{mib(settled)}")
            print(
                f"   {'':28} {pages} repl{'y' if pages == 1 else 'ies'}, largest "
                f"{largest / 1e6:7.1f} MB, {total / 1e6:7.1f} MB in all, {took:5.1f} s; {latency}"
            )
        finally:
            d.kill()


async def strangers(root: Path) -> None:
    print("2. strangers: 600 tokenless calls with 192 KB of junk (+100 that ran), 1 MiB cap")
    folder = root / "strangers"
    folder.mkdir()
    d = DaemonProcess(
        folder,
        {
            "auth": {"require_on_loopback": True},
            "trace": {"max_size_mb": 1.0},
            "input": dict(FAST),
            "log": {"level": "info"},
        },
    ).start()
    auth = {"Authorization": f"Bearer {d.token}"}
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=900)) as s:
            for _ in range(14):
                async with s.post(
                    f"{d.base}/api/tools/keyboard_tap", json={"input": {"keys": "a"}}, headers=auth
                ) as r:
                    assert (await r.json())["is_error"] is False
            taps = await _taps(d, s, auth, 14)
            junk = json.dumps({"input": {"junk": JUNK}}, ensure_ascii=False).encode()
            slots = asyncio.Semaphore(8)

            async def one(body: bytes) -> None:
                async with (
                    slots,
                    s.post(
                        f"{d.base}/api/tools/health_check",
                        data=body,
                        headers={"Content-Type": "application/json"},
                    ) as r,
                ):
                    await r.read()

            started = time.monotonic()
            with Prober(d, s, d.token) as probe:
                await asyncio.gather(*(one(junk) for _ in range(600)))
                await asyncio.gather(*(one(b'{"input":{}}') for _ in range(100)))
            took = time.monotonic() - started
            latency = await probe.done()
            deadline = time.monotonic() + 30  # the writer settles
            kept: set[str] = set()
            while time.monotonic() < deadline:
                kept = {r["id"] for r in await _taps(d, s, auth, 0)}
                await asyncio.sleep(0.5)
        d.stop()
        state = folder / "state"
        files = sum(p.stat().st_size for p in state.glob(f"{DB}*"))
        with contextlib.closing(sqlite3.connect(state / DB)) as conn:
            count, widest = conn.execute(
                "SELECT count(*), max(length(CAST(args AS BLOB))) FROM invocations"
            ).fetchone()
        evicted = len({r["id"] for r in taps} - kept)
        print(f"   sent 135 MB in {took:5.1f} s; {latency}")
        print(
            f"   taps evicted {evicted} of 14; {count} records on file, the widest arguments "
            f"{widest} bytes; the file {files / 1e6:.2f} MB"
        )
    finally:
        d.kill()


async def _taps(
    d: DaemonProcess, s: aiohttp.ClientSession, auth: dict[str, str], count: int
) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 30
    while True:
        async with s.get(f"{d.base}/api/trace?tool=keyboard_tap&limit=100", headers=auth) as r:
            rows: list[dict[str, Any]] = (await r.json())["invocations"]
        if len(rows) >= count or time.monotonic() > deadline:
            return rows
        await asyncio.sleep(0.05)


async def pruning(root: Path) -> None:
    print("3. pruning: a 10 MB file under a 0.25 MiB cap")
    folder = root / "prune"
    fill_trail(folder / "state" / DB, 0, 40)
    d = DaemonProcess(folder, {"trace": {"max_size_mb": 0.25, "prune_interval_s": 0.2}}).start()
    db = folder / "state" / DB
    try:
        before = db.stat().st_size
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and db.stat().st_size > 0.25 * (1 << 20):
            await asyncio.sleep(0.2)
        with contextlib.closing(sqlite3.connect(db)) as conn:
            free = conn.execute("PRAGMA freelist_count").fetchone()[0]
            pages = conn.execute("PRAGMA page_count").fetchone()[0]
        print(
            f"   file {before / 1e6:.2f} MB -> {db.stat().st_size / 1e6:.2f} MB (15 s at most); "
            f"{free} of {pages} pages free"
        )
    finally:
        d.kill()


async def stalled_readers(root: Path) -> None:
    print(f"4. readers that stop (send_timeout_s {'1 s' if HAS_SEND_TIMEOUT else 'absent'})")
    for kind in ("ipc", "http"):
        folder = root / f"stall-{kind}"
        folder.mkdir()
        table: dict[str, Any] = {"max_connections": 2}
        if HAS_SEND_TIMEOUT:
            table["send_timeout_s"] = 1.0
        if kind == "ipc":
            table["idle_timeout_s"] = 600.0
        d = DaemonProcess(folder, {"ipc" if kind == "ipc" else "server": table}).start()
        socks: list[socket.socket] = []
        try:
            for _ in range(2):
                if kind == "ipc":
                    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                    s.connect(str(folder / "ipc.sock"))
                    for n in range(40):
                        send_frame(s, {"id": n, "op": "call", "tool": "screenshot"})
                else:
                    s = tcp_reader(d)
                    s.sendall(b"GET /api/tools HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" * 200)
                socks.append(s)
            started = time.monotonic()
            served = None
            while time.monotonic() - started < WAIT_S:
                if await asyncio.to_thread(_served, d, kind):
                    served = time.monotonic() - started
                    break
                await asyncio.sleep(0.2)
            said = f"after {served:4.1f} s" if served is not None else f"not within {WAIT_S:g} s"
            print(f"   {kind.upper():5} a third client served {said}")
        finally:
            for s in socks:
                s.close()
            d.kill()


def _served(d: DaemonProcess, kind: str) -> bool:
    try:
        if kind == "ipc":
            from tests.service.test_hostile_trail import served_over_ipc

            return served_over_ipc(d)
        with socket.create_connection(("127.0.0.1", d.port), timeout=5) as s:
            s.sendall(b"GET /api/tools HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            return s.recv(64).split()[1] == b"200"
    except (OSError, EOFError, IndexError):
        return False


async def oversized(root: Path) -> None:
    print("5. a body over [server].max_body_bytes (1024)")
    folder = root / "413"
    folder.mkdir()
    d = DaemonProcess(folder, {"server": {"max_body_bytes": 1024}}).start()
    try:
        async with aiohttp.ClientSession() as s:
            for path in ("/api/tools/health_check", "/mcp", "/api/trace/replay", "/api/sim/unplug"):
                async with s.post(
                    d.base + path,
                    data=b"{" + b" " * 4000 + b"}",
                    headers={"Content-Type": "application/json", "Accept": "application/json"},
                ) as r:
                    print(f"   {path:24} {r.status} {r.content_type}")
    finally:
        d.kill()


def main() -> None:
    print(f"code under test: {REPO}")
    with tempfile.TemporaryDirectory(prefix="ft-bench-attacks-") as tmp:
        root = Path(tmp)
        template = root / "template.db"
        fill_trail(template, 300, 150)
        print(f"   the trail file: {template.stat().st_size / 1e6:.0f} MB")
        asyncio.run(idle(root))
        asyncio.run(full_trail(template, root))
        asyncio.run(strangers(root))
        asyncio.run(pruning(root))
        asyncio.run(stalled_readers(root))
        asyncio.run(oversized(root))


if __name__ == "__main__":
    main()
