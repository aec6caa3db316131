"""The store's read half: read-only connections, filters and cursors, pages of records as
JSON, the streamed export, and what replay reads. Bounded: no read holds more than a page, or
one record and its images."""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import math
import sqlite3
import tarfile
import time
import zlib
from collections.abc import Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from daemon.trace.store.schema import COLUMNS, FLAGS, JSON_COLUMNS, Image
from daemon.wire import iso_utc, query_number

PAGE_BYTES = 1 << 20  # a listing page's records at most (its first record always comes whole)
HIDDEN = "arguments and results of critical tools need a full-access caller"


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
        if name in JSON_COLUMNS:
            text = "null" if v is None or (hidden and name in ("args", "result")) else v
        elif name in FLAGS:
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
    for key in JSON_COLUMNS:
        out[key] = json.loads(out[key]) if out[key] is not None else None
    for key in FLAGS:
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
