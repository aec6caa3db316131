"""The flight recorder's SQLite database: schema and migrations, reads, and pruning.

Standard library only (sqlite3, json): the `fingertip trace` CLI reads through this module
without loading the daemon. WAL mode, so readers (the HTTP API, the CLI) never block the one
writer (recorder.Recorder's thread) and a SIGKILL mid-write loses at most the transaction in
flight. The schema's version is SQLite's user_version; MIGRATIONS[n] brings version n to n+1.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sqlite3
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from daemon.wire import query_number

DB_NAME = "trace.db"

MIGRATIONS: tuple[str, ...] = (
    # 0 -> 1: invocations and their images (reduced JPEGs), newest-first reads by start time.
    """
    CREATE TABLE invocations (
        id TEXT PRIMARY KEY,
        started_at REAL NOT NULL,
        ended_at REAL NOT NULL,
        duration_ms REAL NOT NULL,
        transport TEXT NOT NULL,
        client TEXT NOT NULL,
        token_id TEXT NOT NULL,
        tool TEXT NOT NULL,
        policy TEXT NOT NULL,
        hid INTEGER NOT NULL,
        args TEXT NOT NULL,
        outcome TEXT NOT NULL,
        error_code TEXT,
        client_gone INTEGER NOT NULL,
        profile_switches TEXT NOT NULL,
        released TEXT NOT NULL,
        result TEXT
    );
    CREATE INDEX invocations_started ON invocations (started_at);
    CREATE TABLE images (
        invocation_id TEXT NOT NULL,
        kind TEXT NOT NULL,
        width INTEGER NOT NULL,
        height INTEGER NOT NULL,
        jpeg BLOB NOT NULL,
        PRIMARY KEY (invocation_id, kind)
    ) WITHOUT ROWID;
    """,
)
SCHEMA_VERSION = len(MIGRATIONS)

COLUMNS = (
    "id",
    "started_at",
    "ended_at",
    "duration_ms",
    "transport",
    "client",
    "token_id",
    "tool",
    "policy",
    "hid",
    "args",
    "outcome",
    "error_code",
    "client_gone",
    "profile_switches",
    "released",
    "result",
)
_JSON_COLUMNS = ("args", "profile_switches", "released", "result")


@dataclass(frozen=True)
class Image:
    kind: str  # "before" | "after"
    width: int
    height: int
    jpeg: bytes


@dataclass(frozen=True)
class Row:
    """One invocation as stored: JSON columns already encoded, images already reduced."""

    values: tuple[Any, ...]  # in COLUMNS order
    images: tuple[Image, ...] = ()


def _private(path: Path) -> None:
    """The database, its WAL and its shared memory readable by the daemon's user alone (audit
    data). SQLite gives the -wal and -shm files the database file's mode when it makes them, so
    the database is made 0600 before it is opened: chmodding it afterwards left the WAL, which
    holds the newest records, at the umask's 0644. Files an older daemon left are mended too."""
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
    for part in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        with contextlib.suppress(FileNotFoundError):
            part.chmod(0o600)


def open_writer(path: Path) -> sqlite3.Connection:
    """The writer's connection: WAL, incremental auto-vacuum (so pruning gives space back to
    the SD card), migrated to SCHEMA_VERSION. Raises sqlite3.Error / OSError when it cannot."""
    _private(path)
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    try:
        conn.execute("PRAGMA busy_timeout = 5000")
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version == 0:  # auto_vacuum must be chosen before the first table exists
            conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
        conn.execute("PRAGMA journal_mode = WAL")
        # NORMAL in WAL: a power cut may lose the last commits, never corrupt the file.
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA journal_size_limit = 4194304")  # the WAL shrinks back to 4 MiB
        if version > SCHEMA_VERSION:
            raise sqlite3.DatabaseError(
                f"{path} has schema version {version}, newer than this daemon's {SCHEMA_VERSION}"
            )
        for n in range(version, SCHEMA_VERSION):
            conn.execute("BEGIN IMMEDIATE")
            for statement in _statements(MIGRATIONS[n]):
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {n + 1}")
            conn.execute("COMMIT")
    except BaseException:
        conn.close()
        raise
    return conn


def _statements(script: str) -> Iterable[str]:
    return (s.strip() for s in script.split(";") if s.strip())


def insert(conn: sqlite3.Connection, rows: Sequence[Row]) -> None:
    """One transaction for the whole batch (one fsync on the SD card, not one per call)."""
    marks = ",".join("?" * len(COLUMNS))
    conn.execute("BEGIN")
    try:
        conn.executemany(
            f"INSERT OR REPLACE INTO invocations ({','.join(COLUMNS)}) VALUES ({marks})",
            [r.values for r in rows],
        )
        conn.executemany(
            "INSERT OR REPLACE INTO images VALUES (?, ?, ?, ?, ?)",
            [(r.values[0], i.kind, i.width, i.height, i.jpeg) for r in rows for i in r.images],
        )
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def used_bytes(conn: sqlite3.Connection) -> int:
    """Bytes the database holds in live pages (the file minus its free list)."""
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    free = conn.execute("PRAGMA freelist_count").fetchone()[0]
    size: int = conn.execute("PRAGMA page_size").fetchone()[0]
    return int((pages - free) * size)


def prune(conn: sqlite3.Connection, max_bytes: int, max_age_s: float) -> int:
    """Drop invocations older than max_age_s, then the oldest until the live data is under
    80 % of max_bytes (room for the next batches before the next prune); give the pages
    back to the file system. Returns how many invocations went."""
    removed = _delete(conn, "started_at < ?", (time.time() - max_age_s,))
    while used_bytes(conn) > max_bytes:
        count = conn.execute("SELECT count(*) FROM invocations").fetchone()[0]
        if count == 0:
            break
        share = 1 - 0.8 * max_bytes / used_bytes(conn)
        oldest = max(1, min(count, round(count * share)))
        cut = conn.execute(
            "SELECT started_at FROM invocations ORDER BY started_at LIMIT 1 OFFSET ?",
            (oldest - 1,),
        ).fetchone()[0]
        removed += _delete(conn, "started_at <= ?", (cut,))
    if removed:
        conn.execute("PRAGMA incremental_vacuum")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return removed


def _delete(conn: sqlite3.Connection, where: str, params: tuple[Any, ...]) -> int:
    conn.execute("BEGIN")
    try:
        conn.execute(
            f"DELETE FROM images WHERE invocation_id IN (SELECT id FROM invocations WHERE {where})",
            params,
        )
        n = conn.execute(f"DELETE FROM invocations WHERE {where}", params).rowcount
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return int(n)


# -- reads ------------------------------------------------------------------------------------


def open_reader(path: Path) -> sqlite3.Connection:
    """A read-only connection (mode=ro: a reader never creates or migrates the file)."""
    if not path.exists():
        raise FileNotFoundError(f"{path}: no flight recorder database")
    uri = f"{path.resolve().as_uri()}?mode=ro"  # quoted: a ? # or % in the folder is a name
    conn = sqlite3.connect(uri, uri=True, check_same_thread=False)
    conn.execute("PRAGMA busy_timeout = 5000")
    return conn


@dataclass(frozen=True)
class Filter:
    """GET /api/trace's filters; times are Unix seconds, both ends inclusive."""

    since: float | None = None
    until: float | None = None
    tool: str | None = None
    transport: str | None = None
    outcome: str | None = None
    ids: tuple[str, ...] | None = None
    limit: int = 100
    oldest_first: bool = False

    def where(self) -> tuple[str, list[Any]]:
        clauses, params = [], []
        for column, op, value in (
            ("started_at", ">=", self.since),
            ("started_at", "<=", self.until),
            ("tool", "=", self.tool),
            ("transport", "=", self.transport),
            ("outcome", "=", self.outcome),
        ):
            if value is not None:
                clauses.append(f"{column} {op} ?")
                params.append(value)
        if self.ids is not None:
            clauses.append(f"id IN ({','.join('?' * len(self.ids))})")
            params += list(self.ids)
        return (" WHERE " + " AND ".join(clauses) if clauses else ""), params


OUTCOMES = ("ok", "error", "cancelled")
FILTERS = ("since", "until", "tool", "transport", "outcome", "limit")


def parse_time(name: str, raw: Any) -> float | None:
    """Unix seconds, or an ISO 8601 time (naive = local), as Unix seconds; ValueError else."""
    if raw is None:
        return None
    if isinstance(raw, int | float) and not isinstance(raw, bool):
        try:
            value = float(raw)
        except OverflowError:  # an integer no double holds (the edge rule refuses it first)
            value = math.inf
    elif isinstance(raw, str):
        try:
            value = float(raw)
        except ValueError:
            try:
                value = datetime.fromisoformat(raw.replace("Z", "+00:00")).timestamp()
            except ValueError:
                raise ValueError(f"{name} must be Unix seconds or an ISO 8601 time") from None
    else:
        raise ValueError(f"{name} must be Unix seconds or an ISO 8601 time")
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite")
    return value


def parse_filter(query: Mapping[str, Any], *, default_limit: int, max_limit: int) -> Filter:
    """The read filters from a query string or the CLI's options; ValueError names the bad one."""
    unknown = set(query) - set(FILTERS)
    if unknown:
        raise ValueError(f"unknown filter {sorted(unknown)[0]!r}")
    getall = getattr(query, "getall", None)  # a query string can name a key twice
    twice = sorted(k for k in set(query) if getall is not None and len(getall(k)) > 1)
    if twice:
        raise ValueError(f"{twice[0]} is given twice")
    outcome = query.get("outcome")
    if outcome is not None and outcome not in OUTCOMES:
        raise ValueError(f"outcome must be one of {', '.join(OUTCOMES)}")
    limit_text = query.get("limit", default_limit)
    try:
        limit = limit_text if type(limit_text) is int else int(query_number(limit_text, int))
    except (TypeError, ValueError):
        raise ValueError("limit must be an integer") from None
    if not 1 <= limit <= max_limit:
        raise ValueError(f"limit must be in 1..{max_limit}")
    for key in ("tool", "transport"):
        if query.get(key) is not None and not isinstance(query.get(key), str):
            raise ValueError(f"{key} must be a string")
    return Filter(
        since=parse_time("since", query.get("since")),
        until=parse_time("until", query.get("until")),
        tool=query.get("tool"),
        transport=query.get("transport"),
        outcome=outcome,
        limit=limit,
    )


def _record(row: sqlite3.Row | tuple[Any, ...]) -> dict[str, Any]:
    out = dict(zip(COLUMNS, row, strict=True))
    for key in _JSON_COLUMNS:
        out[key] = json.loads(out[key]) if out[key] is not None else None
    out["hid"] = bool(out["hid"])
    out["client_gone"] = bool(out["client_gone"])
    return out


def select(conn: sqlite3.Connection, f: Filter) -> list[dict[str, Any]]:
    """Matching invocations, newest first (or oldest first), each with its image kinds."""
    where, params = f.where()
    order = "ASC" if f.oldest_first else "DESC"
    rows = conn.execute(
        f"SELECT {','.join(COLUMNS)} FROM invocations{where} "
        f"ORDER BY started_at {order}, rowid {order} LIMIT ?",
        [*params, f.limit],
    ).fetchall()
    out = [_record(r) for r in rows]
    kinds = _image_kinds(conn, [r["id"] for r in out])
    for r in out:
        r["images"] = kinds.get(r["id"], [])
    return out


def _image_kinds(conn: sqlite3.Connection, ids: list[str]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for start in range(0, len(ids), 500):  # under SQLite's bound-parameter limit
        chunk = ids[start : start + 500]
        for inv, kind in conn.execute(
            f"SELECT invocation_id, kind FROM images WHERE invocation_id IN "
            f"({','.join('?' * len(chunk))}) ORDER BY kind DESC",
            chunk,
        ):
            found.setdefault(inv, []).append(kind)
    return found


def get(conn: sqlite3.Connection, invocation_id: str) -> dict[str, Any] | None:
    rows = select(conn, Filter(ids=(invocation_id,), limit=1))
    return rows[0] if rows else None


def images(conn: sqlite3.Connection, invocation_id: str) -> list[Image]:
    return [
        Image(kind, w, h, bytes(jpeg))
        for kind, w, h, jpeg in conn.execute(
            "SELECT kind, width, height, jpeg FROM images WHERE invocation_id = ? "
            "ORDER BY kind DESC",  # before, then after
            (invocation_id,),
        )
    ]
