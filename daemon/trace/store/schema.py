"""The flight recorder's database file: its schema, the migrations that bring an older file
to it, and the values both halves of the store speak (daemon/trace/store/__init__.py)."""

from __future__ import annotations

from dataclasses import dataclass

DB_NAME = "trace.db"

# What a row costs beyond its values, counted in its share: its id again in the key's index, the
# index entries, the record and cell headers (SQLite's own figures for these rows: 120-150).
ROW_OVERHEAD = 160

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
    # 1 -> 2: the two shares (trusted), the size of the request that carried the call, and
    # each row's cost in its share (bytes; rows of version 1 are counted as they are).
    f"""
    ALTER TABLE invocations ADD COLUMN trusted INTEGER NOT NULL DEFAULT 1;
    ALTER TABLE invocations ADD COLUMN request_bytes INTEGER;
    ALTER TABLE invocations ADD COLUMN bytes INTEGER NOT NULL DEFAULT 0;
    UPDATE invocations SET bytes = {ROW_OVERHEAD} + length(CAST(args AS BLOB))
        + coalesce(length(CAST(result AS BLOB)), 0)
        + (SELECT coalesce(sum(length(jpeg)), 0) FROM images WHERE invocation_id = id);
    CREATE INDEX invocations_share ON invocations (trusted, started_at, bytes);
    """,
)
SCHEMA_VERSION = len(MIGRATIONS)

RECORDED = (  # what Row.values holds
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
COLUMNS = (*RECORDED, "trusted", "request_bytes")  # the rest are Row's own fields
JSON_COLUMNS = ("args", "profile_switches", "released", "result")
FLAGS = ("hid", "client_gone", "trusted")


@dataclass(frozen=True)
class Image:
    kind: str  # "before" | "after"
    width: int
    height: int
    jpeg: bytes
