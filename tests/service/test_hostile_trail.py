"""Issue 35's attacks on loopback against the real daemon (simulated target), each named after
what it replaced, with the figures seen before the fix: reading a full trail, strangers erasing
it, pruning that kept the disk, readers that stop reading, and plain-text 413s. Each asserts on
the daemon's memory (VmHWM, /proc), the trail's contents (the API and the SQLite file itself)
and the target's state afterwards. tests/bench/bench_trace_attacks.py prints the figures.

Every wait is on a condition with a bound, never a fixed sleep.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import io
import json
import socket
import sqlite3
import tarfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import cv2
import numpy as np
import pytest

from daemon.trace import store
from tests.service.daemonproc import DaemonProcess, eventually
from tests.service.test_input_tools import FAST
from tests.service.test_ipc_cli import cli, recv_frame, send_frame
from tests.service.test_mcp import mcp_client
from tests.service.test_ws import connect as ws_connect

Make = Callable[..., DaemonProcess]
NOTHING_HELD = {"keys_down": [], "modifiers_down": [], "buttons_down": [], "contacts_down": []}
# What reading a full trail (pages, an export) may add to the daemon's peak RSS: a page
# (store.PAGE_BYTES) and its reply, one record and its images, the export's compressor, the
# reader's page cache, the reader thread's malloc arena. Measured on the fixed code: +7-10 MiB
# for pages and an export at once; on the old code, see the figures in the test below.
TRACE_READ_KIB = 24 * 1024
JUNK = "€" * 64_000  # the argument: 64,000 characters, 192 KB in UTF-8


# -- a trail full of the largest records ---------------------------------------------------


def noise_jpeg(seed: int, width: int = 360, height: int = 780) -> bytes:
    """A reduced screenshot as large as the recorder makes one (noise: JPEG cannot shrink it)."""
    pixels = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    ok, data = cv2.imencode(".jpg", pixels, [cv2.IMWRITE_JPEG_QUALITY, 60])
    assert ok
    return bytes(data)


def fill_trail(path: Path, old: int, largest: int) -> list[str]:
    """A trail of schema version 1 (as an older daemon left it, which any daemon opens):
    `old` records whose arguments are the issue's 192 KB (what the old recorder kept whole),
    then `largest` records as large as the bounded recorder writes them: 64 KiB of arguments
    and of result, a before and an after image. Returns their ids, oldest first."""
    path.parent.mkdir(parents=True, exist_ok=True)
    big_args = json.dumps({"junk": JUNK}, ensure_ascii=False)
    max_args = json.dumps({"text": "€" * 21_000}, ensure_ascii=False)  # just under 64 KiB
    max_result = json.dumps({"action_output": {"t": "x" * 65_000}})
    shots = [noise_jpeg(n) for n in range(4)]
    ids, now = [], time.time() - 600
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
        conn.executescript(store.MIGRATIONS[0])
        conn.execute("PRAGMA user_version = 1")
        for n in range(old + largest):
            inv = f"{n:032x}"
            ids.append(inv)
            hid = n >= old
            conn.execute(
                "INSERT INTO invocations VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (inv, now + n * 0.01, now + n * 0.01 + 0.2, 200.0, "http", "127.0.0.1",
                 "pairing", "enter_text" if hid else "health_check", "write" if hid else "read",
                 int(hid), max_args if hid else big_args, "ok", None, 0, "[]", "[]",
                 max_result if hid else None),
            )  # fmt: skip
            if hid:
                for kind, data in (("before", shots[n % 4]), ("after", shots[(n + 1) % 4])):
                    conn.execute("INSERT INTO images VALUES (?, ?, 360, 780, ?)", (inv, kind, data))
        conn.commit()
    return ids


async def health_ms(d: DaemonProcess, s: aiohttp.ClientSession) -> float:
    started = time.monotonic()
    async with s.post(f"{d.base}/api/tools/health_check", json={"input": {}}) as r:
        body = await r.json()
    assert r.status == 200 and body["is_error"] is False, body
    return (time.monotonic() - started) * 1000


async def read_pages(d: DaemonProcess, s: aiohttp.ClientSession) -> tuple[list[str], list[int]]:
    """Every record through /api/trace?limit=1000, page after page: (ids, each reply's size)."""
    ids: list[str] = []
    sizes: list[int] = []
    query = "?limit=1000"
    while True:
        async with s.get(f"{d.base}/api/trace{query}") as r:
            data = await r.read()
        assert r.status == 200, data[:300]
        sizes.append(len(data))
        body = json.loads(data)
        assert body["count"] == len(body["invocations"])
        ids += [i["id"] for i in body["invocations"]]
        if not body.get("next"):
            return ids, sizes
        query = f"?limit=1000&cursor={body['next']}"


# Replaces: ~1,000 recorded calls with 192 KB arguments each, then GET /api/trace?limit=1000:
# a 382 MB reply, RSS from ~500 MB to a peak of 2.1-2.3 GB, settling near 1.6 GB;
# health_check up to 6 s meanwhile and touch_gesture failing hid_write_timeout in 2 of 5;
# GET /api/trace/export?limit=5000 added 570-620 MB.
async def test_reading_a_full_trail_keeps_memory_bounded_and_the_daemon_prompt(
    tmp_path: Path,
) -> None:
    old, largest = 300, 150
    ids = fill_trail(tmp_path / "state" / store.DB_NAME, old, largest)
    d = DaemonProcess(tmp_path, {"input": dict(FAST), "log": {"level": "info"}}).start()
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as s:
            # Warm-up: every code path once (a page, an export, a tap with its screenshots).
            async with s.get(f"{d.base}/api/trace?limit=1") as r:
                assert r.status == 200
            async with s.get(f"{d.base}/api/trace/export?limit=1") as r:
                assert r.status == 200 and len(await r.read()) > 0
            tap = {"input": {"type": "tap", "point": {"x": 500, "y": 900}}}
            async with s.post(f"{d.base}/api/tools/touch_gesture", json=tap) as r:
                assert (await r.json())["is_error"] is False
            await health_ms(d, s)
            baseline = d.memory_kib("VmHWM")

            reading = True
            latencies: list[float] = []
            taps: list[dict[str, Any]] = []

            async def probe(tapping: bool) -> None:
                while reading:
                    latencies.append(await health_ms(d, s))
                    if tapping:
                        async with s.post(f"{d.base}/api/tools/touch_gesture", json=tap) as r:
                            taps.append(await r.json())
                    await asyncio.sleep(0.05)

            async def export() -> int:
                total = bytearray()
                async with s.get(f"{d.base}/api/trace/export?limit=5000") as r:
                    assert r.status == 200 and r.content_type == "application/gzip"
                    async for chunk in r.content.iter_chunked(1 << 16):
                        total += chunk
                with tarfile.open(fileobj=io.BytesIO(bytes(total)), mode="r:gz") as tar:
                    member = tar.extractfile("trace.jsonl")
                    assert member is not None
                    lines = member.read().splitlines()
                    images = [n for n in tar.getnames() if n.startswith("images/")]
                assert len(lines) >= old + largest and len(images) >= 2 * largest
                return len(total)

            async def read_all(tapping: bool) -> tuple[list[str], list[int], int]:
                nonlocal reading
                reading = True
                prober = asyncio.create_task(probe(tapping))
                try:
                    (listed, sizes), archive = await asyncio.gather(read_pages(d, s), export())
                finally:
                    reading = False
                    await prober
                return listed, sizes, archive

            # The memory of the reads alone (a tap's own screenshots are not the trail's)...
            listed, sizes, archive = await read_all(tapping=False)
            grown = d.memory_kib("VmHWM") - baseline
            # ...and taps beside them: every one goes through.
            listed_again, _, _ = await read_all(tapping=True)
            print(
                f"\nfull trail: peak RSS +{grown / 1024:.1f} MiB, {len(sizes)} pages of at most "
                f"{max(sizes) / 1024:.0f} KiB, export {archive / 1e6:.1f} MB, health_check "
                f"max {max(latencies):.0f} ms over {len(latencies)}, {len(taps)} taps"
            )
            # The trail, whole and once, newest first; every page bounded in bytes.
            assert set(ids) <= set(listed) and len(listed) == len(set(listed))
            assert listed.index(ids[-1]) < listed.index(ids[0])
            assert len(listed_again) >= len(listed)
            assert max(sizes) <= store.PAGE_BYTES + (64 << 10)
            assert grown < TRACE_READ_KIB, f"reading the trail grew the peak RSS by {grown} KiB"
            # Prompt meanwhile: health_check answered, and every tap went through.
            assert latencies and max(latencies) < 2000, latencies
            assert taps and all(t["is_error"] is False for t in taps), taps
        state = d.sim_state()
        assert {k: state[k] for k in NOTHING_HELD} == NOTHING_HELD, state
    finally:
        d.kill()


# -- strangers cannot erase the trail ------------------------------------------------------


async def post(
    s: aiohttp.ClientSession, url: str, body: bytes, token: str | None = None
) -> tuple[int, Any]:
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    async with s.post(url, data=body, headers=headers) as r:
        return r.status, await r.json(content_type=None)


def db_bytes(state: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(state.glob(f"{store.DB_NAME}*")))


# Replaces: 1,500-1,650 tokenless POST /api/tools/health_check with a 64,000-character junk
# argument (each a 400 in 15 s) took the database past its 256 MiB cap, and pruning removed
# every authenticated keyboard_tap record (14 -> 0), writing ~12 MB/s of a stranger's data.
async def test_strangers_cannot_erase_the_trail(make_daemon: Make) -> None:
    cap_mb = 1.0
    d = make_daemon(
        {
            "auth": {"require_on_loopback": True},
            "trace": {"max_size_mb": cap_mb},
            "input": dict(FAST),
            "log": {"level": "info"},
        }
    )
    base = f"{d.base}/api/tools"
    junk = json.dumps({"input": {"junk": JUNK}}, ensure_ascii=False).encode()
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=300)) as s:
        tap = json.dumps({"input": {"keys": "a"}}).encode()
        for _ in range(14):
            status, body = await post(s, f"{base}/keyboard_tap", tap, d.token)
            assert status == 200 and body["is_error"] is False, body

        async def taps_on_file() -> list[dict[str, Any]]:
            async with s.get(
                f"{d.base}/api/trace?tool=keyboard_tap&limit=100",
                headers={"Authorization": f"Bearer {d.token}"},
            ) as r:
                rows: list[dict[str, Any]] = (await r.json())["invocations"]
            return rows

        recorded = await eventually(lambda: _n(taps_on_file(), 14))
        # The attack, and its variants: each answered with its code, nothing run. The last
        # phases fit the strangers' share together: their records are all still on file.
        mcp = json.dumps(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/call",
                "params": {"name": "health_check", "arguments": {"junk": JUNK}},
            },
            ensure_ascii=False,
        ).encode()
        phases = [
            (f"{base}/health_check", junk, 400, 600),  # refused at validation
            (f"{base}/health_check", b'{"input":{}}', 200, 100),  # ran, but for no token
            (f"{d.base}/mcp", mcp, 200, 100),  # refused at validation, over MCP
            (f"{base}/no_such_tool", junk, 404, 50),  # unknown tool
            (f"{base}/keyboard_text", junk, 401, 50),  # a write tool without the token
        ]
        slots = asyncio.Semaphore(8)

        async def one(url: str, body: bytes, want: int) -> None:
            async with slots:
                status, reply = await post(s, url, body)
            assert status == want, reply

        for url, body, want, times in phases:
            await asyncio.gather(*(one(url, body, want) for _ in range(times)))
        health = await eventually(lambda: _settled(d, s, 900 + 14))
        kept = await eventually(lambda: _n(taps_on_file(), 14), "the 14 taps still on file")
    assert {r["id"] for r in kept} == {r["id"] for r in recorded}, "a stranger evicted the trail"
    assert all(r["trusted"] for r in kept)
    trace = health["trace"]
    print(f"\nstrangers: {trace['pruned']} of their records pruned, every tap kept ({len(kept)})")
    assert trace["pruned"] > 0  # they did fill their share
    d.stop()
    # The file: within its cap, the strangers' records compact, not one byte of their junk.
    with contextlib.closing(sqlite3.connect(d.state_dir / store.DB_NAME)) as conn:
        rows = conn.execute(
            "SELECT tool, transport, error_code, args, request_bytes, trusted FROM invocations "
            "WHERE trusted = 0"
        ).fetchall()
        widest = conn.execute("SELECT max(length(args)) FROM invocations").fetchone()[0]
        untrusted = conn.execute("SELECT sum(bytes) FROM invocations WHERE trusted = 0").fetchone()[
            0
        ]
    assert rows and widest < 200
    codes = {r[2] for r in rows}
    assert {"tool_arguments_invalid", "tool_not_found", "auth_required", None} <= codes, codes
    refused = [r for r in rows if r[2] is not None]
    assert all(r[3] == "null" and r[4] >= 192_000 for r in refused), refused[:3]
    assert untrusted <= store.caps(int(cap_mb * (1 << 20)))[False]
    assert JUNK[:100].encode() not in db_bytes(d.state_dir)
    assert (d.state_dir / store.DB_NAME).stat().st_size <= cap_mb * (1 << 20)


async def _n(rows: Any, count: int) -> Any:
    got = await rows
    return got if len(got) >= count else None


async def _settled(d: DaemonProcess, s: aiohttp.ClientSession, calls: int) -> Any:
    """health_check once the recorder has written at least `calls` records."""
    async with s.post(
        f"{d.base}/api/tools/health_check",
        json={"input": {}},
        headers={"Authorization": f"Bearer {d.token}"},
    ) as r:
        doc = json.loads((await r.json())["output"])
    return doc if doc["trace"]["recorded"] >= calls else None


# -- pruning gives the disk back ------------------------------------------------------------


# Replaces: after size prunes the file kept 56-64 MiB of free pages; with a 0.25 MiB cap it
# stayed at 5 MB with 1,208 of its 1,255 pages free.
async def test_pruning_gives_the_disk_back_and_the_file_stays_within_its_cap(
    tmp_path: Path,
) -> None:
    cap = 0.25
    fill_trail(tmp_path / "state" / store.DB_NAME, 0, 40)  # ~10 MB a daemon must cut down
    d = DaemonProcess(
        tmp_path, {"input": dict(FAST), "trace": {"max_size_mb": cap, "prune_interval_s": 0.2}}
    ).start()
    db = d.state_dir / store.DB_NAME
    try:
        await eventually(lambda: db.stat().st_size <= cap * (1 << 20), "the file shrank")
        async with aiohttp.ClientSession() as s:
            for n in range(12):
                tap = {"input": {"type": "tap", "point": {"x": 500, "y": 300 + 20 * n}}}
                async with s.post(f"{d.base}/api/tools/touch_gesture", json=tap) as r:
                    assert (await r.json())["is_error"] is False
                newest = await eventually(lambda: _newest(d, s))
                assert db.stat().st_size <= cap * (1 << 20), (n, db.stat().st_size)
        with contextlib.closing(sqlite3.connect(db)) as conn:
            free = conn.execute("PRAGMA freelist_count").fetchone()[0]
            pages = conn.execute("PRAGMA page_count").fetchone()[0]
        print(f"\nprune: file {db.stat().st_size} bytes, {free} of {pages} pages free")
        assert free <= 2, (free, pages)
        assert newest["tool"] == "touch_gesture" and newest["images"] == ["before", "after"]
    finally:
        d.kill()


async def _newest(d: DaemonProcess, s: aiohttp.ClientSession) -> Any:
    async with s.get(f"{d.base}/api/trace?limit=1&tool=touch_gesture") as r:
        rows = (await r.json())["invocations"]
    return rows[0] if rows and time.time() - rows[0]["started_at"] < 5 else None


# -- every record and every page bounded ----------------------------------------------------


async def test_a_large_argument_is_recorded_as_prefix_size_and_digest_and_pages_are_bounded(
    make_daemon: Make,
) -> None:
    d = make_daemon({"log": {"level": "info"}})
    command = ": " + "€" * 40_000  # 120 KB: under the kernel's bound on one argument
    async with aiohttp.ClientSession() as s:
        for _ in range(12):
            async with s.post(
                f"{d.base}/api/tools/shell", json={"input": {"command": command}}
            ) as r:
                assert (await r.json())["is_error"] is False
        rows = await eventually(lambda: _listed(d, s, "?tool=shell&limit=100", 12))
        full = json.dumps({"command": command}, ensure_ascii=False, separators=(",", ":"))
        for row in rows:
            args = row["args"]
            assert args.get("truncated") is True, "the argument was kept whole"
            assert args["bytes"] == len(full.encode())
            assert args["sha256"] == hashlib.sha256(full.encode()).hexdigest()
            assert full.startswith(args["prefix"]) and len(args["prefix"].encode()) <= 4096
        # A page is cut in bytes, with the cursor of the rest; a cursor no page gave is a 400.
        async with s.get(f"{d.base}/api/trace?limit=2") as r:
            body = await r.json()
        assert body["count"] == 2 and body["next"]
        async with s.get(f"{d.base}/api/trace?limit=100&cursor={body['next']}") as r:
            rest = await r.json()
        assert [x["id"] for x in body["invocations"] + rest["invocations"]] == [
            x["id"] for x in await _listed(d, s, "?limit=100", 0)
        ]
        async with s.get(f"{d.base}/api/trace?cursor=not-a-cursor") as r:
            assert r.status == 400 and (await r.json())["error"]["code"] == "trace_query_invalid"
    # The CLI reads the same pages.
    sock = d.tmp / "ipc.sock"
    db = str(d.state_dir / store.DB_NAME)
    reply, _ = cli(sock, "trace", "--db", db, "--limit", "2")
    assert reply["count"] == 2 and reply["next"] == body["next"]
    rest_cli, _ = cli(sock, "trace", "--db", db, "--cursor", reply["next"])
    assert [x["id"] for x in rest_cli["invocations"]] == [x["id"] for x in rest["invocations"]]
    bad, err = cli(sock, "trace", "--db", db, "--cursor", "nope")
    assert bad == {"type": "rejected", "failure": "INVALID_COMMAND"} and "cursor" in err


async def _listed(d: DaemonProcess, s: aiohttp.ClientSession, query: str, count: int) -> Any:
    async with s.get(f"{d.base}/api/trace{query}") as r:
        rows = (await r.json())["invocations"]
    return rows if len(rows) >= count else None


# -- readers that stop are dropped -----------------------------------------------------------


def unix(d: DaemonProcess) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(15)
    s.connect(str(d.tmp / "ipc.sock"))
    return s


def served_over_ipc(d: DaemonProcess) -> bool:
    with unix(d) as s:
        send_frame(s, {"id": 1, "op": "catalog"})
        return bool(recv_frame(s)["reply"]["type"] == "catalog")


# Replaces: clients sending 40 screenshot requests and never reading stayed connected past
# [ipc].idle_timeout_s (still open after 90 s with 30 s, after 10 s with 2 s); 64 of them
# would fill [ipc].max_connections.
async def test_an_ipc_client_that_stops_reading_is_dropped_and_its_slot_freed(
    make_daemon: Make,
) -> None:
    d = make_daemon(
        {
            "ipc": {"max_connections": 2, "idle_timeout_s": 600, "send_timeout_s": 1.0},
            # Both readers' 80 calls run (with the default 32 for one uid, the second reader's
            # would be refused with small replies that fit its socket: it would never stall).
            "server": {"max_client_calls": 80, "max_calls": 80},
        }
    )
    stalled = [unix(d), unix(d)]
    try:
        for s in stalled:
            for n in range(40):
                send_frame(s, {"id": n, "op": "call", "tool": "screenshot", "arguments": {}})
        started = time.monotonic()
        await eventually(lambda: both_slots_served(d), "both slots freed", timeout=30)
        print(
            f"\nipc: the stalled readers' slots came back after {time.monotonic() - started:.1f} s"
        )
        for s in stalled:  # what was sent before the drop is readable, then the end
            with pytest.raises((EOFError, ConnectionResetError)):
                while True:
                    recv_frame(s)
    finally:
        for s in stalled:
            s.close()
    events = [e for e in d.log_events() if e.get("event") == "ipc_reader_stopped"]
    assert events and events[0]["send_timeout_s"] == 1.0
    assert served_over_ipc(d)


def both_slots_served(d: DaemonProcess) -> bool:
    """Two clients served at once (the cap is two): neither stalled reader holds a slot."""
    try:
        with unix(d) as first, unix(d) as second:
            replies = []
            for s in (first, second):
                send_frame(s, {"id": 1, "op": "catalog"})
                replies.append(recv_frame(s)["reply"]["type"])
            return replies == ["catalog", "catalog"]
    except (OSError, EOFError):
        return False


def tcp_reader(d: DaemonProcess) -> socket.socket:
    """A TCP client with a small receive window: what it does not read stays on our side."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.settimeout(15)
    s.connect(("127.0.0.1", d.port))
    return s


def http_status(d: DaemonProcess) -> int:
    with socket.create_connection(("127.0.0.1", d.port), timeout=15) as s:
        s.sendall(b"GET /api/tools HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        return int(s.recv(64).split()[1])


# Replaces: an HTTP client that stops reading a reply was held without end (its connection
# slot too).
async def test_an_http_client_that_stops_reading_is_dropped_and_its_slot_freed(
    make_daemon: Make,
) -> None:
    d = make_daemon({"server": {"max_connections": 2, "send_timeout_s": 1.0}})
    request = b"GET /api/tools HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    stalled = [tcp_reader(d), tcp_reader(d)]
    try:
        for s in stalled:
            s.sendall(request * 200)  # pipelined: replies the client never reads
        assert http_status(d) == 503  # both slots held...
        started = time.monotonic()
        await eventually(lambda: _status_or(d) == 200, "a slot freed", timeout=30)
        print(f"\nhttp: a stalled reader's slot came back after {time.monotonic() - started:.1f} s")
    finally:
        for s in stalled:
            s.close()
    events = [e for e in d.log_events() if e.get("event") == "http_reader_stopped"]
    assert events and events[0]["send_timeout_s"] == 1.0


def _status_or(d: DaemonProcess) -> int:
    try:
        return http_status(d)
    except OSError:
        return 0


# -- every refusal is JSON -------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "/api/tools/health_check",
        "/mcp",
        "/api/trace/replay",
        "/api/sim/profile",
        "/api/sim/unplug",
    ],
)
@pytest.mark.parametrize("chunked", [False, True])
async def test_an_oversized_body_is_the_same_json_refusal_on_every_route(
    make_daemon: Make, path: str, chunked: bool
) -> None:
    """Replaces: over [server].max_body_bytes on /mcp, /api/trace/replay and /api/sim/* a 413
    text/plain ("Maximum request body size 1048576 exceeded."); an MCP client got no
    JSON-RPC error."""
    d = make_daemon({"server": {"max_body_bytes": 1024}})
    body = json.dumps({"input": {"x": "y" * 4000}}).encode()

    async def pieces() -> Any:
        for at in range(0, len(body), 500):
            yield body[at : at + 500]

    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    async with (
        aiohttp.ClientSession() as s,
        s.post(d.base + path, data=pieces() if chunked else body, headers=headers) as r,
    ):
        assert r.status == 413 and r.content_type == "application/json", await r.text()
        doc = await r.json()
    if path == "/mcp":
        assert doc["jsonrpc"] == "2.0" and doc["id"] is None
        assert doc["error"]["code"] == -32600
        assert doc["error"]["data"]["code"] == "request_too_large"
    else:
        assert doc["error"]["code"] == "request_too_large" and doc["is_error"] is True
        assert doc["error"]["details"] == {"max_bytes": 1024}
    state = d.sim_state()  # refused means not done
    assert state["attached"] is True and state["profile"] == "full"


# Variant: the same junk over every transport (HTTP, MCP, WebSocket, the IPC socket, the CLI),
# each from a caller that may call the tool: each refusal is kept compact, with its size.
async def test_a_refused_call_is_compact_on_every_transport(make_daemon: Make) -> None:
    d = make_daemon({"guard": {"mcp": "full-access"}})
    args = {"junk": JUNK}
    async with aiohttp.ClientSession() as s:
        status, _ = await post(s, f"{d.base}/api/tools/health_check", _input(args))
        assert status == 400
    async with mcp_client(d.base) as client:
        assert (await client.call_tool("health_check", args)).is_error
    async with ws_connect(d) as host:
        assert (await host.call("health_check", args))["type"] == "tool.error"
    sock = d.tmp / "ipc.sock"
    reply, _ = cli(sock, "call", "health_check", stdin=json.dumps(args).encode())
    assert reply == {"type": "rejected", "failure": "INVALID_ARGUMENTS"}
    async with aiohttp.ClientSession() as s:
        rows = await eventually(lambda: _listed(d, s, "?outcome=error&limit=100", 4))
    assert sorted(r["transport"] for r in rows) == ["http", "ipc", "mcp", "ws"]
    for r in rows:
        assert r["error_code"] == "tool_arguments_invalid" and r["args"] is None, r
        assert r["trusted"] is False and r["request_bytes"] >= 192_000, r
    assert JUNK[:100].encode() not in db_bytes(d.state_dir)


def _input(value: Any) -> bytes:
    return json.dumps({"input": value}, ensure_ascii=False).encode()


# Variant: GET /api/trace/export of a large trail by a client that never reads: the stream
# (and its read snapshot) is dropped, its slot freed.
async def test_an_export_reader_that_stops_is_dropped(tmp_path: Path) -> None:
    fill_trail(tmp_path / "state" / store.DB_NAME, 0, 60)  # ~15 MB of images: no buffer holds it
    d = DaemonProcess(tmp_path, {"server": {"max_connections": 1, "send_timeout_s": 1.0}})
    d.start()
    try:
        stalled = tcp_reader(d)
        stalled.sendall(b"GET /api/trace/export?limit=5000 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        await eventually(lambda: _status_or(d) == 200, "the export's slot freed", timeout=30)
        stalled.close()
        events = [e for e in d.log_events() if e.get("event") == "trace_export_reader_stopped"]
        assert events and events[0]["error"] == "ReaderStopped", events
    finally:
        d.kill()
