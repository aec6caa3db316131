"""The flight recorder's SQLite database: schema and migrations, reads, and pruning.

Standard library only (sqlite3, json, tarfile, zlib): the `fingertip trace` CLI reads through
this module without loading the daemon. WAL mode, so readers (the HTTP API, the CLI) never block
the one writer (recorder.Recorder's thread) and a SIGKILL mid-write loses at most the
transaction in flight. The schema's version is SQLite's user_version; MIGRATIONS[n] brings
version n to n+1.

Bounded by design, whatever the file holds (docs/flight-recorder.md):
- The size cap is split in two shares. The trail (`trusted` rows: calls that ran for a caller
  that passed its connection's token rule) and the rest (calls refused before they ran, and
  calls of callers without the token their connection needs) are pruned each within its own
  share, so a stranger's calls can never evict the trail. Pruned pages go back to the file
  system (incremental_vacuum stepped to completion).
- Reads come in pages of at most PAGE_BYTES with a `next` cursor, and the export is a stream:
  no read holds more than a page, or one record and its images.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import math
import os
import sqlite3
import tarfile
import time
import zlib
from collections.abc import Generator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from daemon.wire import iso_utc, query_number

DB_NAME = "trace.db"

# What a row costs beyond its values, counted in its share: its id again in the key's index, the
# index entries, the record and cell headers (SQLite's own figures for these rows: 120-150).
ROW_OVERHEAD = 160
# The share of the size cap the untrusted rows may hold; the trail holds the rest.
UNTRUSTED_SHARE = 0.1
PRUNE_TO = 0.8  # a share over its cap is pruned to this part of it: room for the next batches
PAGE_BYTES = 1 << 20  # a listing page's records at most (its first record always comes whole)
HIDDEN = "arguments and results of critical tools need a full-access caller"

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
_JSON_COLUMNS = ("args", "profile_switches", "released", "result")
_FLAGS = ("hid", "client_gone", "trusted")


@dataclass(frozen=True)
class Image:
    kind: str  # "before" | "after"
    width: int
    height: int
    jpeg: bytes


@dataclass(frozen=True)
class Row:
    """One invocation as stored: JSON columns already encoded (and bounded by the recorder),
    images already reduced."""

    values: tuple[Any, ...]  # in RECORDED order
    images: tuple[Image, ...] = ()
    trusted: bool = True  # in the trail's share; else in the untrusted one
    request_bytes: int | None = None

    def size(self) -> int:
        """What the row costs its share: its values' bytes, its images and ROW_OVERHEAD."""
        n = ROW_OVERHEAD + sum(len(i.jpeg) + 32 for i in self.images)
        for v in self.values:
            if isinstance(v, str):
                n += len(v) if v.isascii() else len(v.encode("utf-8", "surrogatepass"))
            else:
                n += 8
        return n


def _private(path: Path) -> None:
    """The database, its WAL and its shared memory readable by the daemon's user alone (audit
    data). SQLite gives the -wal and -shm files the database file's mode when it makes them, so
    the database is made 0600 before it is opened: chmodding it afterwards left the WAL, which
    holds the newest records, at the umask's 0644. Files an older daemon left are mended too."""
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
    for part in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        with contextlib.suppress(FileNotFoundError):
            part.chmod(0o600)


def open_writer(path: Path, max_bytes: int | None = None) -> sqlite3.Connection:
    """The writer's connection: WAL, incremental auto-vacuum (so pruning gives space back to
    the SD card), migrated to SCHEMA_VERSION. With `max_bytes` (the size cap) the WAL is kept
    to a quarter of it (4 MiB at most), so a small cap is not dwarfed by its WAL. Raises
    sqlite3.Error / OSError when it cannot."""
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
        wal = 4 << 20 if max_bytes is None else max(64 << 10, min(4 << 20, max_bytes // 4))
        page: int = conn.execute("PRAGMA page_size").fetchone()[0]
        conn.execute(f"PRAGMA journal_size_limit = {wal}")  # the WAL shrinks back to this
        conn.execute(f"PRAGMA wal_autocheckpoint = {max(16, wal // page)}")
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


class Ledger:
    """The bytes each share holds (Row.size summed), read once from the file and then kept by
    the one writer as it inserts and deletes: deciding whether to prune costs no query."""

    def __init__(self, conn: sqlite3.Connection):
        self.held = {True: 0, False: 0}
        for trusted, total in conn.execute(
            "SELECT trusted, coalesce(sum(bytes), 0) FROM invocations GROUP BY trusted"
        ):
            self.held[bool(trusted)] = int(total)


def insert(conn: sqlite3.Connection, rows: Sequence[Row], ledger: Ledger | None = None) -> None:
    """One transaction for the whole batch (one fsync on the SD card, not one per call)."""
    columns = (*RECORDED, "trusted", "request_bytes", "bytes")
    marks = ",".join("?" * len(columns))
    sizes = [r.size() for r in rows]
    conn.execute("BEGIN")
    try:
        conn.executemany(
            f"INSERT OR REPLACE INTO invocations ({','.join(columns)}) VALUES ({marks})",
            [
                (*r.values, int(r.trusted), r.request_bytes, n)
                for r, n in zip(rows, sizes, strict=True)
            ],
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
    if ledger is not None:
        for r, n in zip(rows, sizes, strict=True):
            ledger.held[r.trusted] += n


def used_bytes(conn: sqlite3.Connection) -> int:
    """Bytes the database holds in live pages (the file minus its free list)."""
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    free = conn.execute("PRAGMA freelist_count").fetchone()[0]
    size: int = conn.execute("PRAGMA page_size").fetchone()[0]
    return int((pages - free) * size)


def file_bytes(conn: sqlite3.Connection) -> int:
    """The database file's size in pages (free ones included)."""
    pages: int = conn.execute("PRAGMA page_count").fetchone()[0]
    size: int = conn.execute("PRAGMA page_size").fetchone()[0]
    return pages * size


def caps(max_bytes: int) -> dict[bool, int]:
    """Each share's part of the size cap."""
    untrusted = int(max_bytes * UNTRUSTED_SHARE)
    return {True: max_bytes - untrusted, False: untrusted}


def prune(
    conn: sqlite3.Connection,
    max_bytes: int,
    max_age_s: float,
    ledger: Ledger | None = None,
    incoming: Mapping[bool, int] | None = None,
) -> int:
    """Make room for `incoming` bytes (per share, a batch about to be inserted) and keep the
    file under `max_bytes`: drop invocations older than max_age_s; then in each share over its
    part of the cap (caps()) the share's oldest, down to PRUNE_TO of it; then, should the pages
    still pass the cap (the sizes are estimates), the oldest untrusted rows first and the trail's
    only when none is left. The freed pages go back to the file system. Returns how many
    invocations went."""
    ledger = ledger or Ledger(conn)
    coming = {True: 0, False: 0, **(incoming or {})}
    cutoff = time.time() - max_age_s
    aged = conn.execute(
        "SELECT trusted, coalesce(sum(bytes), 0) FROM invocations WHERE started_at < ? "
        "GROUP BY trusted",
        (cutoff,),
    ).fetchall()
    removed = _delete(conn, "started_at < ?", (cutoff,)) if aged else 0
    for trusted, total in aged:
        ledger.held[bool(trusted)] -= int(total)
    for trusted, cap in caps(max_bytes).items():
        if ledger.held[trusted] + coming[trusted] > cap:
            target = max(0, int(cap * PRUNE_TO) - coming[trusted])
            removed += _drop_oldest(conn, ledger, trusted, ledger.held[trusted] - target)
    while (over := used_bytes(conn) + sum(coming.values()) - max_bytes) > 0:
        excess = over + int(max_bytes * (1 - PRUNE_TO))
        dropped = _drop_oldest(conn, ledger, False, excess) or _drop_oldest(
            conn, ledger, True, excess
        )
        if not dropped:
            break
        removed += dropped
    if removed:
        give_back(conn)
    return removed


def give_back(conn: sqlite3.Connection) -> None:
    """Return every free page to the file system. `PRAGMA incremental_vacuum` frees one page
    per step of its statement, each step a result row of no columns: Python's execute() steps
    it once, and its cursor ends at such a row, so fetchall() too left all but one page free
    (1,208 of 1,255 pages after size prunes). executescript() steps each statement to its end.
    The checkpoint then writes the shrunken file and empties the WAL. It does not wait for a
    reader's snapshot (an export holds one for its whole download): with the writer's 5 s busy
    timeout it stalled every prune 5 s and the recorder's queue filled. Busy, it checkpoints
    what it can now and the next prune does the rest."""
    conn.executescript("PRAGMA incremental_vacuum;")
    (wait_ms,) = conn.execute("PRAGMA busy_timeout").fetchone()
    conn.execute("PRAGMA busy_timeout = 0")
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    finally:
        conn.execute(f"PRAGMA busy_timeout = {int(wait_ms)}")


def _drop_oldest(conn: sqlite3.Connection, ledger: Ledger, trusted: bool, excess: int) -> int:
    """Delete a share's oldest rows until at least `excess` of its bytes went."""
    if excess <= 0:
        return 0
    went, cut = 0, None
    cur = conn.execute(
        "SELECT started_at, rowid, bytes FROM invocations WHERE trusted = ? "
        "ORDER BY started_at, rowid",
        (int(trusted),),
    )
    try:
        for started, rowid, size in cur:
            went, cut = went + size, (started, rowid)
            if went >= excess:
                break
    finally:
        cur.close()
    if cut is None:
        return 0
    n = _delete(
        conn,
        "trusted = ? AND (started_at < ? OR (started_at = ? AND rowid <= ?))",
        (int(trusted), cut[0], cut[0], cut[1]),
    )
    ledger.held[trusted] -= went
    return n


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


def encode_cursor(started_at: float, rowid: int) -> str:
    """A page's `next`: where the following page starts (opaque to callers)."""
    raw = f"{started_at!r},{rowid}".encode()
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def decode_cursor(text: str) -> tuple[float, int]:
    try:
        if len(text) > 64:
            raise ValueError(text)
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).decode("ascii")
        started, rowid = raw.split(",")
        at, row = float(started), int(rowid)
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise ValueError("cursor is not one a page gave as its next") from None
    if not math.isfinite(at):
        raise ValueError("cursor is not one a page gave as its next")
    return at, row


@dataclass(frozen=True)
class Filter:
    """GET /api/trace's filters; times are Unix seconds, both ends inclusive. `after` is a
    cursor's position: the page starts past it, in the page's own order."""

    since: float | None = None
    until: float | None = None
    tool: str | None = None
    transport: str | None = None
    outcome: str | None = None
    ids: tuple[str, ...] | None = None
    limit: int = 100
    oldest_first: bool = False
    after: tuple[float, int] | None = None

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
        if self.after is not None:
            op = ">" if self.oldest_first else "<"
            clauses.append(f"(started_at {op} ? OR (started_at = ? AND rowid {op} ?))")
            params += [self.after[0], self.after[0], self.after[1]]
        return (" WHERE " + " AND ".join(clauses) if clauses else ""), params

    def order(self) -> str:
        way = "ASC" if self.oldest_first else "DESC"
        return f" ORDER BY started_at {way}, rowid {way}"


OUTCOMES = ("ok", "error", "cancelled")
FILTERS = ("since", "until", "tool", "transport", "outcome", "limit", "cursor")


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
    for key in ("tool", "transport", "cursor"):
        if query.get(key) is not None and not isinstance(query.get(key), str):
            raise ValueError(f"{key} must be a string")
    cursor = query.get("cursor")
    return Filter(
        since=parse_time("since", query.get("since")),
        until=parse_time("until", query.get("until")),
        tool=query.get("tool"),
        transport=query.get("transport"),
        outcome=outcome,
        limit=limit,
        after=None if cursor is None else decode_cursor(cursor),
    )


# Built once: json.dumps with options builds a new encoder on every call.
_scalar = json.JSONEncoder(ensure_ascii=False).encode


def record_json(values: Sequence[Any], images: str, *, hide_critical: bool) -> str:
    """One record (`values` in COLUMNS order) as a JSON object, its JSON columns spliced in as
    stored (never parsed and encoded again), with its start as ISO 8601 and `images` (JSON
    text). With hide_critical a critical tool's arguments and result are left out."""
    rec = dict(zip(COLUMNS, values, strict=True))
    hidden = hide_critical and rec["policy"] == "critical"
    parts = []
    for name in COLUMNS:
        v = rec[name]
        if name in _JSON_COLUMNS:
            text = "null" if v is None or (hidden and name in ("args", "result")) else v
        elif name in _FLAGS:
            text = "true" if v else "false"
        else:
            text = _scalar(v)
        parts.append(f'"{name}":{text}')
    parts.append(f'"started_at_iso":{_scalar(iso_utc(rec["started_at"]))}')
    if hidden:
        parts.append(f'"hidden":{_scalar(HIDDEN)}')
    parts.append(f'"images":{images}')
    return "{" + ",".join(parts) + "}"


def _utf8_len(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


@dataclass(frozen=True)
class Page:
    records: list[str]  # each one record's JSON object (record_json)
    next: str | None  # the cursor of the page that follows; None: nothing more matches
    bytes: int  # the records' UTF-8 size


def page(
    conn: sqlite3.Connection,
    f: Filter,
    *,
    max_bytes: int = PAGE_BYTES,
    hide_critical: bool = False,
) -> Page:
    """Up to f.limit matching records, no more than max_bytes of them (the first always), read
    one row at a time; `next` when more match."""
    where, params = f.where()
    cur = conn.execute(
        f"SELECT rowid, {','.join(COLUMNS)} FROM invocations{where}{f.order()} LIMIT ?",
        [*params, f.limit + 1],
    )
    records: list[str] = []
    size, last, more = 0, None, False
    try:
        for rowid, *values in cur:
            if len(records) == f.limit:
                more = True
                break
            text = record_json(values, _kinds(conn, values[0]), hide_critical=hide_critical)
            n = _utf8_len(text)
            if records and size + n > max_bytes:
                more = True
                break
            records.append(text)
            size, last = size + n, (values[1], rowid)
    finally:
        cur.close()
    return Page(records, encode_cursor(*last) if more and last else None, size)


def _kinds(conn: sqlite3.Connection, invocation_id: str) -> str:
    kinds = [
        k
        for (k,) in conn.execute(
            "SELECT kind FROM images WHERE invocation_id = ? ORDER BY kind DESC", (invocation_id,)
        )
    ]
    return _scalar(kinds)


def one(conn: sqlite3.Connection, invocation_id: str) -> tuple[Sequence[Any], list[Image]] | None:
    """One invocation's values (COLUMNS order) and its images, or None."""
    row = conn.execute(
        f"SELECT {','.join(COLUMNS)} FROM invocations WHERE id = ?", (invocation_id,)
    ).fetchone()
    if row is None:
        return None
    return row, images(conn, invocation_id)


def export(
    conn: sqlite3.Connection | None,
    f: Filter,
    *,
    hide_critical: bool = False,
    chunk: int = 1 << 16,
) -> Generator[bytes, None, None]:
    """The matching records (oldest first) as a .tar.gz, yielded in pieces of about `chunk`
    bytes: images/<id>-<kind>.jpg, then trace.jsonl. A tar member's size comes before its
    content, so the lines are written twice over one snapshot (a read transaction): measured
    while the images go out, then sent. No more than one record and its images is held.
    Without a database (None), an archive with an empty trace.jsonl."""
    f = replace(f, oldest_first=True)
    gz = zlib.compressobj(6, zlib.DEFLATED, 31)  # wbits 31: the gzip container
    out = bytearray()
    now = int(time.time())

    def member(name: str, size: int) -> None:
        info = tarfile.TarInfo(name)
        info.size, info.mtime, info.mode = size, now, 0o600
        out.extend(gz.compress(info.tobuf(tarfile.PAX_FORMAT)))

    def end_member(size: int) -> None:
        out.extend(gz.compress(b"\0" * (-size % tarfile.BLOCKSIZE)))

    if conn is None:
        member("trace.jsonl", 0)
        out.extend(gz.compress(b"\0" * (2 * tarfile.BLOCKSIZE)) + gz.flush())
        yield bytes(out)
        return
    conn.execute("BEGIN")  # one snapshot for both passes
    try:
        jsonl = 0
        for values in _rows(conn, f):
            shots = images(conn, values[0])
            kinds = _scalar([i.kind for i in shots])
            jsonl += len(_line(values, kinds, hide_critical))
            for img in shots:
                member(f"images/{values[0]}-{img.kind}.jpg", len(img.jpeg))
                out.extend(gz.compress(img.jpeg))
                end_member(len(img.jpeg))
            if len(out) >= chunk:
                yield bytes(out)
                out.clear()
        member("trace.jsonl", jsonl)
        sent = 0
        for values in _rows(conn, f):
            line = _line(values, _kinds(conn, values[0]), hide_critical)
            sent += len(line)
            out.extend(gz.compress(line))
            if len(out) >= chunk:
                yield bytes(out)
                out.clear()
        if sent != jsonl:  # the snapshot failed to hold: no archive that lies about its size
            raise sqlite3.DatabaseError("the records changed while they were exported")
        end_member(jsonl)
        out.extend(gz.compress(b"\0" * (2 * tarfile.BLOCKSIZE)))  # the end of the archive
        out.extend(gz.flush())
        yield bytes(out)
    finally:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")


def _rows(conn: sqlite3.Connection, f: Filter) -> Iterator[Sequence[Any]]:
    where, params = f.where()
    cur = conn.execute(
        f"SELECT {','.join(COLUMNS)} FROM invocations{where}{f.order()} LIMIT ?",
        [*params, f.limit],
    )
    try:
        yield from cur
    finally:
        cur.close()


def _line(values: Sequence[Any], kinds: str, hide_critical: bool) -> bytes:
    return (record_json(values, kinds, hide_critical=hide_critical) + "\n").encode(
        "utf-8", "surrogatepass"
    )


def _record(row: Sequence[Any]) -> dict[str, Any]:
    out = dict(zip(COLUMNS, row, strict=True))
    for key in _JSON_COLUMNS:
        out[key] = json.loads(out[key]) if out[key] is not None else None
    for key in _FLAGS:
        out[key] = bool(out[key])
    return out


def select(conn: sqlite3.Connection, f: Filter) -> list[dict[str, Any]]:
    """Matching invocations as dicts, newest first (or oldest first), each with its image
    kinds. For few records (replay's, one): listings go by page()."""
    out = [_record(r) for r in _rows(conn, f)]
    for r in out:
        r["images"] = json.loads(_kinds(conn, r["id"]))
    return out


def ids(conn: sqlite3.Connection, f: Filter) -> list[str]:
    """The ids a replay runs, in order: f.ids as asked (each once; LookupError names one that
    is not recorded), else those in f's range."""
    if f.ids is not None:
        asked = list(dict.fromkeys(f.ids))
        found: set[str] = set()
        for at in range(0, len(asked), 500):  # under SQLite's bound-parameter limit
            chunk = asked[at : at + 500]
            found.update(
                i
                for (i,) in conn.execute(
                    f"SELECT id FROM invocations WHERE id IN ({','.join('?' * len(chunk))})",
                    chunk,
                )
            )
        missing = [i for i in asked if i not in found]
        if missing:
            raise LookupError(f"no recorded invocation {missing[0]!r}")
        return asked
    where, params = f.where()
    return [
        i
        for (i,) in conn.execute(
            f"SELECT id FROM invocations{where}{f.order()} LIMIT ?", [*params, f.limit]
        )
    ]


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
