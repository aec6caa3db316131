"""The flight recorder against the real daemon (simulated target): every transport's call kept
once with its caller, redaction, retention by size and by age, a full disk and a read-only
folder, SIGKILL under load, the export archive, and replay with visual checkpoints. The
routes' rules (the token, bad filters and replay requests) run on the daemon in this process
(tests/service/inprocess.py)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import json
import os
import sqlite3
import subprocess
import tarfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import cv2
import numpy as np
import pytest

from tests.service.daemonproc import DaemonProcess, eventually
from tests.service.inprocess import InProcess, MakeApp
from tests.service.test_http_api import request
from tests.service.test_input_tools import FAST, FIELD, tile
from tests.service.test_ipc_cli import cli
from tests.service.test_mcp import mcp_client
from tests.service.test_ws import connect
from tests.service.test_ws import ok as ws_ok

Make = Callable[..., DaemonProcess]
CLIENT_TOKEN = "a-client-token-for-the-trace-tests"
READ_TOKEN = "a-read-only-token-for-the-trace-tests"
TOKENS = [
    {"token": CLIENT_TOKEN, "max_policy": "write"},
    {"token": READ_TOKEN, "max_policy": "read"},
]


def start(make: Make, **tables: dict[str, Any]) -> DaemonProcess:
    overrides: dict[str, dict[str, Any]] = {"input": dict(FAST)}
    for table, values in tables.items():
        overrides.setdefault(table, {}).update(values)
    return make(overrides)


Daemon = DaemonProcess | InProcess


async def http(
    d: Daemon,
    method: str,
    path: str,
    body: Any = None,
    token: str | None = None,
) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    timeout = aiohttp.ClientTimeout(total=120)
    async with request(d, method, path, json=body, headers=headers, timeout=timeout) as r:
        data = await r.read()
        if r.content_type == "application/json":
            return r.status, json.loads(data)
        return r.status, data


async def tool(d: Daemon, name: str, args: Any, token: str | None = None) -> Any:
    status, body = await http(d, "POST", f"/api/tools/{name}", {"input": args}, token)
    assert status == 200 and body["is_error"] is False, body
    return json.loads(body["output"])


async def traced(
    d: Daemon, query: str = "", *, count: int | None = None, token: str | None = None
) -> list[dict[str, Any]]:
    """GET /api/trace, waiting (the writer batches) until `count` invocations match."""
    deadline = time.monotonic() + 60  # a bound for a busy machine, not a timing
    while True:
        status, body = await http(d, "GET", f"/api/trace{query}", token=token)
        assert status == 200, body
        rows: list[dict[str, Any]] = body["invocations"]
        if count is None or len(rows) >= count:
            return rows
        assert time.monotonic() < deadline, (count, rows)
        await asyncio.sleep(0.05)


async def health(d: DaemonProcess) -> dict[str, Any]:
    out: dict[str, Any] = await tool(d, "health_check", {})
    return out


def restart(d: DaemonProcess) -> DaemonProcess:
    """A new daemon on the same folder (state, trace.db) and config, on a new port."""
    tables = {k: dict(v) for k, v in d.tables.items()}
    del tables["server"]["port"]
    return DaemonProcess(d.tmp, tables).start()


def integrity(path: Path) -> str:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return str(conn.execute("PRAGMA integrity_check").fetchone()[0])


# -- what is recorded ------------------------------------------------------------------------


async def test_each_transport_call_appears_once_with_its_caller(make_daemon: Make) -> None:
    d = start(make_daemon, auth={"client_tokens": TOKENS}, guard={"mcp": "full-access"})
    await tool(d, "health_check", {}, token=CLIENT_TOKEN)
    async with connect(d) as host:
        ws_ok(await host.call("health_check", {}))
    async with mcp_client(d.base) as client:
        await client.call_tool("health_check", {})
    reply, _ = cli(d.tmp / "ipc.sock", "call", "health_check", stdin=b"{}")
    assert reply["type"] == "complete"
    rows = await traced(d, "?tool=health_check", count=4)
    await asyncio.sleep(0.3)  # nothing more arrives: each call is there once
    rows = await traced(d, "?tool=health_check")
    by = {r["transport"]: r for r in rows}
    assert sorted(r["transport"] for r in rows) == ["http", "ipc", "mcp", "ws"], rows
    assert by["http"]["token_id"] == "client-1" and by["http"]["client"] == "127.0.0.1"
    assert by["ws"]["token_id"] == "pairing" and by["ws"]["client"] == "127.0.0.1"
    assert by["mcp"]["token_id"] == "" and by["mcp"]["client"] == "127.0.0.1"
    assert f"uid={os.getuid()}" in by["ipc"]["client"] or str(os.getuid()) in by["ipc"]["client"]
    for r in rows:
        assert r["outcome"] == "ok" and r["error_code"] is None and r["policy"] == "read"
        assert r["result"] is None and r["ended_at"] >= r["started_at"]  # input tools' only
    assert [r["started_at"] for r in rows] == sorted((r["started_at"] for r in rows), reverse=True)
    # No token anywhere in the record.
    assert CLIENT_TOKEN not in json.dumps(rows) and d.token not in json.dumps(rows)
    # Filters, and an error's code.
    status, _ = await http(d, "POST", "/api/tools/touch_gesture", {"input": {"type": "nope"}})
    assert status == 400
    [bad] = await traced(d, "?outcome=error", count=1)
    assert bad["tool"] == "touch_gesture" and bad["error_code"] == "tool_arguments_invalid"
    assert [r["transport"] for r in await traced(d, "?transport=ws")] == ["ws"]
    assert len(await traced(d, "?tool=health_check&limit=2")) == 2
    since = by["ws"]["started_at"]
    assert {r["id"] for r in await traced(d, f"?since={since}&tool=health_check")} >= {
        by["ws"]["id"]
    }
    # The CLI reads the same database.
    reply, _ = cli(
        d.tmp / "ipc.sock", "trace", "--db", str(d.state_dir / "trace.db"), "--tool", "health_check"
    )
    assert reply["type"] == "trace" and {r["id"] for r in reply["invocations"]} == set(
        r["id"] for r in rows
    )
    reply, err = cli(d.tmp / "ipc.sock", "trace", "--db", str(d.tmp / "none.db"))
    assert reply == {"type": "rejected", "failure": "INVALID_COMMAND"} and "none.db" in err


async def test_input_invocation_keeps_images_switches_and_releases(make_daemon: Make) -> None:
    d = start(make_daemon)
    await tool(d, "touch_gesture", {"type": "tap", "point": tile("ios", "Notes")})
    await tool(d, "enter_text", {"point": FIELD, "text": "abc", "clear": True})
    [rec] = await traced(d, "?tool=enter_text", count=1)
    assert rec["hid"] is True and rec["images"] == ["before", "after"]
    assert rec["profile_switches"] == ["keyboard-isolated", "full"]
    assert isinstance(rec["released"], list)
    assert rec["result"]["data"] == "[image]"  # the screenshot bytes live in the images
    status, one = await http(d, "GET", f"/api/trace/{rec['id']}")
    assert status == 200 and [i["kind"] for i in one["images"]] == ["before", "after"]
    for img in one["images"]:
        pixels = cv2.imdecode(np.frombuffer(base64.b64decode(img["data"]), np.uint8), 1)
        assert pixels.shape[1] == img["width"] == 360 and pixels.shape[0] == img["height"]
    status, body = await http(d, "GET", "/api/trace/nope")
    assert status == 404 and body["error"]["code"] == "trace_not_found"
    # The export: JSONL oldest first, and every image.
    status, data = await http(d, "GET", "/api/trace/export")
    assert status == 200
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        names = tar.getnames()
        member = tar.extractfile("trace.jsonl")
        assert member is not None
        lines = [json.loads(x) for x in member.read().decode().splitlines()]
    assert [x["tool"] for x in lines] == ["touch_gesture", "enter_text"]
    assert f"images/{rec['id']}-before.jpg" in names and f"images/{rec['id']}-after.jpg" in names


async def test_secret_arguments_are_redacted_and_critical_ones_need_full_access(
    make_daemon: Make,
) -> None:
    d = start(make_daemon, auth={"client_tokens": TOKENS})
    started = await tool(d, "shell", {"action": "start", "command": "cat >/dev/null"})
    session = started["session"]
    await tool(d, "shell", {"action": "write", "session": session, "input": "hunter2\n"})
    await tool(d, "shell", {"action": "stop", "session": session})
    rows = await traced(d, "?tool=shell", count=3)
    write = next(r for r in rows if r["args"]["action"] == "write")
    assert write["args"] == {"action": "write", "session": session, "input": "[redacted]"}
    assert write["policy"] == "critical"
    # A read-only token sees that the calls happened, not what they said.
    hidden = await traced(d, "?tool=shell", token=READ_TOKEN)
    assert len(hidden) == 3 and all(r["args"] is None and r["result"] is None for r in hidden)
    assert all("full-access" in r["hidden"] for r in hidden)
    status, one = await http(d, "GET", f"/api/trace/{write['id']}", token=READ_TOKEN)
    assert status == 200 and one["args"] is None
    d.stop()
    for name in ("trace.db", "trace.db-wal"):
        path = d.state_dir / name
        assert not path.exists() or b"hunter2" not in path.read_bytes()


async def test_the_trace_needs_the_token_where_write_tools_do(make_app: MakeApp) -> None:
    d = await make_app({"input": dict(FAST), "auth": {"require_on_loopback": True}})
    await tool(d, "health_check", {})
    for method, path in (
        ("GET", "/api/trace"),
        ("GET", "/api/trace/x"),
        ("GET", "/api/trace/export"),
        ("POST", "/api/trace/replay"),
    ):
        status, body = await http(d, method, path, {"ids": ["x"]} if method == "POST" else None)
        assert status == 401 and body["error"]["code"] == "auth_required", (path, body)
    assert len(await traced(d, count=1, token=d.token)) >= 1


@pytest.mark.parametrize(
    "query",
    [
        "?limit=0",
        "?limit=100000",
        "?limit=x",
        "?since=yesterday",
        "?until=nan",
        "?outcome=maybe",
        "?color=red",
        "?since=inf",
        "?limit=1_0",
        "?limit=%2B5",
        "?limit=%EF%BC%91",
        "?outcome=ok&outcome=error",
    ],
)
async def test_bad_filters_have_their_code(app: InProcess, query: str) -> None:
    status, body = await http(app, "GET", f"/api/trace{query}")
    assert status == 400 and body["error"]["code"] == "trace_query_invalid", body


@pytest.mark.parametrize(
    "body",
    [
        [],
        {"ids": "x"},
        {"ids": []},
        {"ids": [1]},
        {"ids": ["a"], "since": 0},
        {"threshold": -1, "ids": ["a"]},
        {"threshold": True, "ids": ["a"]},
        {"checkpoints": "yes", "ids": ["a"]},
        {"until": 5},
        {"since": None},
        {"since": None, "until": 5},
        {"other": 1},
        {"since": 10**400},  # no double holds it: float() raised OverflowError, a bare 500
        {"since": 0, "until": 10**400},
    ],
)
async def test_bad_replay_requests_have_their_code(app: InProcess, body: Any) -> None:
    status, reply = await http(app, "POST", "/api/trace/replay", body)
    assert status == 400 and reply["error"]["code"] == "trace_query_invalid", reply


# -- bounds and faults -----------------------------------------------------------------------


async def test_retention_by_size(make_daemon: Make) -> None:
    d = start(make_daemon, trace={"max_size_mb": 0.25})
    ids: list[str] = []
    for n in range(14):
        seen = {r["id"] for r in await traced(d, "?limit=1000")}
        await tool(d, "touch_gesture", {"type": "tap", "point": {"x": 500, "y": 300 + 20 * n}})

        async def new_tap(seen: set[str] = seen) -> Any:
            rows = await traced(d, "?limit=1")
            return rows and rows[0]["id"] not in seen and rows[0]["id"]

        ids.append(await eventually(new_tap))  # on file before the next tap
    kept = {r["id"] for r in await traced(d, "?limit=1000")}
    assert ids[-1] in kept and ids[0] not in kept and 0 < len(kept) < len(ids), (len(kept), kept)
    d.stop()
    size = sum(p.stat().st_size for p in d.state_dir.glob("trace.db*"))
    assert size <= 0.25 * (1 << 20) * 1.5, size
    assert integrity(d.state_dir / "trace.db") == "ok"


async def test_retention_by_age(make_daemon: Make) -> None:
    d = start(make_daemon, trace={"max_age_s": 1.0, "prune_interval_s": 0.2})
    await health(d)
    [old] = await traced(d, count=1)

    async def gone() -> bool:
        return old["id"] not in {r["id"] for r in await traced(d)}

    await eventually(gone, timeout=10)  # pruned while idle
    await health(d)
    assert len(await traced(d, count=1)) == 1


def _disabled(d: DaemonProcess) -> list[dict[str, Any]]:
    return [e for e in d.log_events() if e.get("event") == "trace_recording_disabled"]


async def test_a_full_disk_turns_recording_off_and_the_tools_keep_working(
    make_daemon: Make, tmp_path: Path
) -> None:
    folder = tmp_path / "full"
    folder.mkdir()
    # Every file the daemon writes may grow to 1 MiB and no further (EFBIG, as a full disk's
    # ENOSPC): full-size screenshots fill the database after a few taps.
    d = DaemonProcess(
        folder,
        {
            "input": dict(FAST),
            "trace": {"image_max_width": 4096, "image_quality": 100},
            "log": {"level": "info"},
        },
        fsize=1 << 20,
    ).start()
    try:

        async def off() -> Any:
            await tool(d, "touch_gesture", {"type": "tap", "point": {"x": 500, "y": 500}})
            trace = (await health(d))["trace"]
            return None if trace["recording"] else trace

        trace = await eventually(off, timeout=60)
        assert trace["reason"] and trace["recorded"] >= 1
        await tool(d, "touch_gesture", {"type": "tap", "point": tile("ios", "Notes")})
        assert d.sim_state()["app"] == "Notes"
        assert len(_disabled(d)) == 1, _disabled(d)
    finally:
        d.kill()


@contextlib.contextmanager
def read_only(folder: Path) -> Iterator[None]:
    """A folder nobody may write to: a read-only mount as root (root ignores modes), else 0555."""
    if os.geteuid() == 0:
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(folder)], check=True
        )
        try:
            yield
        finally:
            subprocess.run(["umount", str(folder)], check=True)
    else:
        folder.chmod(0o555)
        try:
            yield
        finally:
            folder.chmod(0o755)


async def test_a_read_only_state_folder_turns_recording_off(
    make_daemon: Make, tmp_path: Path
) -> None:
    folder = tmp_path / "ro"
    state = folder / "state"
    state.mkdir(parents=True)
    with read_only(state):
        d = DaemonProcess(
            folder, {"input": dict(FAST), "auth": {"token": "a-token-set-in-the-config"}}
        ).start()
        try:
            trace = await eventually(lambda: _off(d))
            assert trace["recording"] is False and trace["reason"]
            await tool(d, "touch_gesture", {"type": "tap", "point": tile("ios", "Notes")})
            assert d.sim_state()["app"] == "Notes"
            status, body = await http(d, "GET", "/api/trace")
            assert (
                status == 200 and body["invocations"] == [] and body["trace"]["recording"] is False
            )
            assert len(_disabled(d)) == 1
        finally:
            d.kill()


async def _off(d: DaemonProcess) -> Any:
    trace = (await health(d))["trace"]
    return None if trace["recording"] else trace


async def test_sigkill_under_load_leaves_a_clean_database(make_daemon: Make) -> None:
    d = start(make_daemon)
    stop = asyncio.Event()

    async def load() -> None:
        async with aiohttp.ClientSession() as s:
            while not stop.is_set():
                with contextlib.suppress(aiohttp.ClientError):
                    async with s.post(f"{d.base}/api/tools/health_check", json={}) as r:
                        await r.read()

    async def taps() -> None:
        n = 0
        while not stop.is_set():
            with contextlib.suppress(aiohttp.ClientError, AssertionError):
                await tool(d, "touch_gesture", {"type": "tap", "point": {"x": 500, "y": 300 + n}})
            n = (n + 37) % 600

    workers = [asyncio.create_task(load()) for _ in range(4)] + [asyncio.create_task(taps())]
    try:
        await traced(d, "?tool=touch_gesture", count=3)
        await traced(d, "?limit=1000", count=200)
        assert d.proc is not None
        d.proc.kill()  # SIGKILL while the writer is busy
        d.proc.wait()
        killed_at = time.time()
    finally:
        stop.set()
        await asyncio.gather(*workers, return_exceptions=True)
    db = d.state_dir / "trace.db"
    assert integrity(db) == "ok"
    with contextlib.closing(sqlite3.connect(db)) as conn:
        kept = conn.execute("SELECT count(*) FROM invocations").fetchone()[0]
        orphans = conn.execute(
            "SELECT count(*) FROM images WHERE invocation_id NOT IN (SELECT id FROM invocations)"
        ).fetchone()[0]
    assert kept >= 200 and orphans == 0
    # The same folder opens clean and records on.
    again = restart(d)
    try:
        await health(again)
        [after] = await traced(again, f"?since={killed_at}", count=1)
        assert after["tool"] == "health_check"
    finally:
        again.kill()


# -- replay ----------------------------------------------------------------------------------


async def test_replay_reproduces_the_recorded_text_on_a_fresh_target(make_daemon: Make) -> None:
    d = start(make_daemon)
    await tool(d, "touch_gesture", {"type": "tap", "point": tile("ios", "Notes")})
    await tool(d, "enter_text", {"point": FIELD, "text": "Replayed, word for word!"})
    assert d.sim_state()["texts"]["Notes"] == "Replayed, word for word!"
    recorded = await traced(d, count=2)
    d.stop()
    # The same state folder, a fresh simulated target: home screen, empty field.
    again = restart(d)
    try:
        assert again.sim_state()["texts"].get("Notes", "") == ""
        ids = [r["id"] for r in reversed(recorded)]
        status, report = await http(again, "POST", "/api/trace/replay", {"ids": ids})
        assert status == 200 and report["ok"] is True, report
        assert [s["id"] for s in report["completed"]] == ids and report["stopped"] is None
        assert again.sim_state()["texts"]["Notes"] == "Replayed, word for word!"
        # The replayed steps are recorded too, as such.
        replayed = await traced(again, "?transport=replay", count=2)
        assert len(replayed) == 2
        # A range replays what was done, never the replays of it again.
        body = {"since": 0, "checkpoints": False}
        status, report = await http(again, "POST", "/api/trace/replay", body)
        assert status == 200 and [s["id"] for s in report["completed"]] == ids, report
        skipped = {s["id"] for s in report["skipped"] if s["reason"] == "a replayed step"}
        assert skipped == {r["id"] for r in replayed}
    finally:
        again.kill()


async def test_replay_stops_at_the_first_step_whose_screen_does_not_match(
    make_daemon: Make,
) -> None:
    d = start(make_daemon)
    await tool(d, "touch_gesture", {"type": "tap", "point": tile("ios", "Notes")})  # from home
    [tap] = await traced(d, count=1)
    await tool(d, "quick_action", {"action": "home"})
    await tool(d, "touch_gesture", {"type": "tap", "point": tile("ios", "Maps")})  # from home
    maps = (await traced(d, "?tool=touch_gesture", count=2))[0]  # the newest tap
    await tool(d, "quick_action", {"action": "home"})
    status, report = await http(d, "POST", "/api/trace/replay", {"ids": [tap["id"], maps["id"]]})
    assert status == 200 and report["ok"] is False, report
    assert [s["id"] for s in report["completed"]] == [tap["id"]]
    stopped = report["stopped"]
    assert stopped["index"] == 1 and stopped["id"] == maps["id"]
    assert stopped["reason"] == "screen_mismatch" and stopped["diff"]["changed"] is True
    for key in ("recorded_before", "live"):
        img = base64.b64decode(stopped[key]["data"])
        assert cv2.imdecode(np.frombuffer(img, np.uint8), 1) is not None
    assert d.sim_state()["app"] == "Notes"  # the mismatching step did not run
    # No screen to check against: it stops before acting.
    status, _ = await http(d, "POST", "/api/sim/capture_off")
    assert status == 200
    status, report = await http(d, "POST", "/api/trace/replay", {"ids": [maps["id"]]})
    assert report["stopped"]["reason"] == "capture_unavailable" and report["completed"] == []
    assert d.sim_state()["app"] == "Notes"
    await http(d, "POST", "/api/sim/capture_on")
    # Without checkpoints it runs anyway.
    status, report = await http(
        d, "POST", "/api/trace/replay", {"ids": [maps["id"]], "checkpoints": False}
    )
    assert status == 200 and report["ok"] is True
