"""The flight recorder's writer thread: faults lose what they must and say so (real SQLite)."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from daemon.catalog import Caller, Catalog, Guard, Invocation, ToolSpec, object_schema
from daemon.config import TraceConfig
from daemon.frames import Frame
from daemon.trace import recorder, store
from daemon.trace.recorder import Recorder


def _recorder(tmp_path: Path) -> Recorder:
    return Recorder(Catalog("ios"), tmp_path, TraceConfig(prune_interval_s=0.05))


def _invocation(n: int, args: Any = None, **fields: Any) -> Invocation:
    base: dict[str, Any] = {
        "id": f"{n:032x}",
        "tool": "tap",
        "transport": "http",
        "client": "127.0.0.1",
        "args": args or {},
        "started_at": time.time(),
        "duration_ms": 1.0,
        "outcome": "ok",
        "error_code": None,
    }
    return Invocation(**(base | fields))


def _until(check: Callable[[], bool], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


async def test_a_picture_the_writer_cannot_encode_is_lost_alone(tmp_path: Path) -> None:
    """A frame that cannot be encoded loses its own picture, not its record nor the writer."""
    rec = _recorder(tmp_path)
    rec.start()
    try:
        rec.observe(_invocation(1, evidence=(("before", object()),)))  # not a Frame
        rec.observe(_invocation(2))
        _until(lambda: rec.recorded == 2)
        assert rec.status()["recording"] is True and rec.dropped == 0
        rec.observe(_invocation(3))
        _until(lambda: rec.recorded == 3)
    finally:
        rec.stop()
    with contextlib.closing(store.open_reader(tmp_path / store.DB_NAME)) as conn:
        ids = [
            r["id"]
            for r in store.select(conn, store.parse_filter({}, default_limit=9, max_limit=9))
        ]
        assert conn.execute("SELECT count(*) FROM images").fetchone()[0] == 0
    assert sorted(ids) == [f"{n:032x}" for n in (1, 2, 3)]


async def test_a_record_is_stored_before_its_pictures_are_encoded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A power cut may lose only the last batch window of the trail: a record must not wait for
    its frames' JPEG encoding (seconds of a loaded board's CPU). Its images follow in their own
    transaction, and its size in its share counts them then."""
    frame = Frame(np.full((1080, 1920, 3), 200, np.uint8), 1, time.monotonic(), time.time())
    encoding, go_on = threading.Event(), threading.Event()
    real = Recorder._image

    def slow_image(self: Recorder, kind: str, f: Frame) -> store.Image:
        encoding.set()
        assert go_on.wait(30)
        return real(self, kind, f)

    monkeypatch.setattr(Recorder, "_image", slow_image)
    rec = _recorder(tmp_path)
    rec.start()
    path = tmp_path / store.DB_NAME
    try:
        rec.observe(_invocation(1, evidence=(("before", frame), ("after", frame))))
        assert encoding.wait(15)
        with contextlib.closing(store.open_reader(path)) as conn:  # committed: a cut keeps it
            stored = conn.execute("SELECT bytes FROM invocations").fetchall()
            assert (
                len(stored) == 1 and conn.execute("SELECT count(*) FROM images").fetchone()[0] == 0
            )
        go_on.set()
        _until(lambda: _images(path) == 2)
    finally:
        go_on.set()
        rec.stop()
    with contextlib.closing(store.open_reader(path)) as conn:
        (grown,) = conn.execute("SELECT bytes FROM invocations").fetchone()
        (jpegs,) = conn.execute("SELECT sum(length(jpeg) + 32) FROM images").fetchone()
    assert grown == stored[0][0] + jpegs


def _images(path: Path) -> int:
    with contextlib.closing(store.open_reader(path)) as conn:
        return int(conn.execute("SELECT count(*) FROM images").fetchone()[0])


async def test_a_backlog_is_written_without_waiting_a_window_per_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The window gathers a burst; it must not pace a backlog to one batch per window, or a
    client faster than that fills the queue and its calls go unrecorded."""
    monkeypatch.setattr(recorder, "BATCH_WINDOW_S", 60.0)  # a window no test could wait out
    rec = _recorder(tmp_path)
    backlog = 3 * recorder.BATCH
    for n in range(backlog):  # queued before the writer runs: it finds them all waiting
        rec.observe(_invocation(n))
    rec.start()
    try:
        _until(lambda: rec.recorded == backlog)
        assert rec.dropped == 0
    finally:
        rec.stop()


async def test_a_writer_fault_turns_recording_off_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Any fault of the writer itself, not only the file's, ends recording visibly."""

    def insert(*_: object) -> None:
        raise MemoryError("boom")

    rec = _recorder(tmp_path)
    rec.start()
    try:
        _until(lambda: rec.ready)
        monkeypatch.setattr(store, "insert", insert)
        rec.observe(_invocation(1))
        _until(lambda: rec.status()["recording"] is False)
        assert "MemoryError: boom" in rec.status()["reason"]
        rec.observe(_invocation(2))  # refused quietly from now on: nothing queues up
        assert rec._queue.qsize() == 0
    finally:
        rec.stop()


async def test_readers_wait_for_the_writer_to_open_the_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Right after the daemon's start the writer may still be opening (migrating) the file: a
    reader waits for that instead of finding no history; a writer that fails answers at once."""
    opening = threading.Event()
    real_open = store.open_writer

    def slow_open(path: Path, *args: Any) -> Any:
        opening.wait(15)
        return real_open(path, *args)

    monkeypatch.setattr(store, "open_writer", slow_open)
    rec = _recorder(tmp_path)
    rec.start()
    try:
        assert await rec.wait_ready(0.05) is False  # still opening
        opening.set()
        assert await rec.wait_ready(15) is True
    finally:
        rec.stop()

    def failing_open(path: Path, *args: Any) -> Any:
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(store, "open_writer", failing_open)
    broken = _recorder(tmp_path / "other")
    broken.start()
    began = time.monotonic()
    assert await broken.wait_ready(15) is False
    assert time.monotonic() - began < 10  # answered when the open failed, not at the bound
    assert "disk I/O error" in broken.status()["reason"]


def _rows(path: Path) -> dict[str, dict[str, Any]]:
    with contextlib.closing(store.open_reader(path / store.DB_NAME)) as conn:
        return {r["id"]: r for r in store.select(conn, store.Filter(limit=100))}


async def test_a_refused_call_is_kept_compact_and_apart_from_the_trail(tmp_path: Path) -> None:
    """Replaces: a call refused at validation was recorded with its whole arguments (192 KB of
    a stranger's junk per record) in the same share as what authenticated callers did."""

    async def tap(args: dict[str, Any], ctx: Any) -> Any:
        return {"ok": True}

    schema = object_schema({"x": {"type": "integer"}})
    catalog = Catalog("ios", [ToolSpec("tap", "", "input", "write", tap, schema, hid=True)])
    seen: list[Invocation] = []
    catalog.observers.append(seen.append)
    rec = Recorder(catalog, tmp_path, TraceConfig(prune_interval_s=0.05))
    rec.start()
    junk = {"junk": "€" * 64_000}
    stranger = Caller("http", Guard.preset("full-access"), token_required=True)
    local = Caller("http", Guard.preset("full-access"))  # loopback: no token needed
    try:
        refused = await catalog.call("tap", junk, local, request_bytes=192_017)
        assert refused.error is not None and refused.error.code == "tool_arguments_invalid"
        unknown = await catalog.call("nope", junk, local, request_bytes=5)
        denied = await catalog.call("tap", {"x": 1}, stranger, request_bytes=9)
        assert denied.error is not None and denied.error.code == "auth_required"
        ran = await catalog.call("tap", {"x": 1}, local, request_bytes=9)
        assert ran.error is None and unknown.error is not None
        await asyncio.sleep(0)  # observers are told on the next loop turn
        _until(lambda: rec.recorded == 4)
    finally:
        rec.stop()
    # Observers never get a refused call's arguments: nothing keeps a stranger's junk alive.
    assert [(i.ran, i.args is None, i.request_bytes) for i in seen] == [
        (False, True, 192_017),
        (False, True, 5),
        (False, True, 9),
        (True, False, 9),
    ]
    rows = _rows(tmp_path)
    by_code = {r["error_code"]: r for r in rows.values()}
    for code, size in (("tool_arguments_invalid", 192_017), ("tool_not_found", 5)):
        r = by_code[code]
        assert r["args"] is None and r["request_bytes"] == size and r["trusted"] is False
    assert by_code["auth_required"]["trusted"] is False
    [ok] = [r for r in rows.values() if r["outcome"] == "ok"]
    assert ok["trusted"] is True and ok["args"] == {"x": 1} and ok["result"] == {"ok": True}
    db = (tmp_path / store.DB_NAME).read_bytes() + (tmp_path / f"{store.DB_NAME}-wal").read_bytes()
    assert "€".encode() not in db


async def test_a_large_argument_is_recorded_as_prefix_size_and_digest(tmp_path: Path) -> None:
    rec = _recorder(tmp_path)
    rec.start()
    args = {"text": "€" * 64_000}
    try:
        rec.observe(_invocation(1, args=args))
        _until(lambda: rec.recorded == 1)
    finally:
        rec.stop()
    [row] = _rows(tmp_path).values()
    full = json.dumps(args, ensure_ascii=False, separators=(",", ":")).encode()
    assert row["args"]["truncated"] is True and row["args"]["bytes"] == len(full)
    assert row["args"]["sha256"] == hashlib.sha256(full).hexdigest()
    assert full.startswith(row["args"]["prefix"].encode())
