"""The store's write half: the one writer's connection (WAL, migrated), batched inserts, and
pruning within each share's part of the size cap."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from daemon import private_files
from daemon.trace.store.schema import (
    MIGRATIONS,
    RECORDED,
    ROW_OVERHEAD,
    SCHEMA_VERSION,
    Image,
)

# The share of the size cap the untrusted rows may hold; the trail holds the rest.
UNTRUSTED_SHARE = 0.1
PRUNE_TO = 0.8  # a share over its cap is pruned to this part of it: room for the next batches


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
        n = ROW_OVERHEAD + sum(image_bytes(i) for i in self.images)
        for v in self.values:
            if isinstance(v, str):
                n += len(v) if v.isascii() else len(v.encode("utf-8", "surrogatepass"))
            else:
                n += 8
        return n


# The files SQLite keeps beside a database, named after it: a new database at the same path
# must not inherit them (SQLite would play a hot journal left by the old one into the new).
COMPANIONS = ("-wal", "-shm", "-journal")


def _private(path: Path) -> None:
    """The database and its COMPANIONS readable by the daemon's user alone (audit data).
    SQLite gives the -wal, -shm and -journal files the database file's mode when it makes them, so
    the database is made 0600 before it is opened: chmodding it afterwards left the WAL, which
    holds the newest records, at the umask's 0644. Files an older daemon left are mended too."""
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
    for part in (str(path), *(f"{path}{suffix}" for suffix in COMPANIONS)):
        with contextlib.suppress(FileNotFoundError):
            os.chmod(part, 0o600)


# FULL in WAL: each commit (one batch of the recorder, BATCH_WINDOW_S) is fsynced, so a power
# cut loses at most the batch in flight. NORMAL fsyncs the WAL only at checkpoints: a cut could
# lose every commit since the last one (up to the WAL's size, tens of seconds of the trail).
# tests/bench/bench_durability.py measures what FULL costs per record against NORMAL.
SYNCHRONOUS = "FULL"

# SQLite's primary result codes for a file that is not (or no longer) a database.
_CORRUPT, _NOTADB = 11, 26


class Damaged(sqlite3.DatabaseError):
    """The file fails SQLite's own checks (quick_check, or is no database at all)."""


def check(conn: sqlite3.Connection, full: bool = False) -> None:
    """PRAGMA quick_check (the pages and records), or with `full` integrity_check (also every
    index against its table: 2-3x the time, 0.18 s for 55 MB here): Damaged when it finds a
    fault."""
    try:
        rows = conn.execute(f"PRAGMA {'integrity_check' if full else 'quick_check'}").fetchall()
    except sqlite3.DatabaseError as exc:
        if getattr(exc, "sqlite_errorcode", 0) & 0xFF in (_CORRUPT, _NOTADB):
            raise Damaged(str(exc)) from None
        raise
    if rows != [("ok",)]:
        raise Damaged("quick_check: " + "; ".join(str(r[0]) for r in rows[:4]))


def open_writer(path: Path, max_bytes: int | None = None) -> sqlite3.Connection:
    """The writer's connection: checked (quick_check; integrity_check after an unclean stop),
    WAL, incremental auto-vacuum (so pruning gives space back to the SD card), migrated to
    SCHEMA_VERSION. With `max_bytes` (the
    size cap) the WAL is kept to a quarter of it (4 MiB at most), so a small cap is not dwarfed
    by its WAL. Raises Damaged for a file that fails its check, else sqlite3.Error / OSError
    when it cannot."""
    # A WAL or a rollback journal left behind: the last writer did not close (a cut, a kill;
    # the journal: in the file's first transactions, before it is in WAL), so the whole check.
    # (quick_check missed a file cut short by one byte: an index row gone.)
    unclean = any(os.path.exists(f"{path}{suffix}") for suffix in ("-wal", "-journal"))
    _private(path)
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    try:
        conn.execute("PRAGMA busy_timeout = 5000")
        check(conn, full=unclean)  # first: it also replays a WAL a cut left
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version == 0:  # auto_vacuum must be chosen before the first table exists
            conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute(f"PRAGMA synchronous = {SYNCHRONOUS}")
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


def set_aside(path: Path, now: float | None = None) -> Path | None:
    """Move a damaged database aside with its COMPANIONS (PATH.damaged-STAMP, -wal, -shm,
    -journal: SQLite still opens it for reading), so that a new one can start. None: it
    stayed."""
    kept = private_files.set_aside(path, "damaged", now)
    if kept is not None:
        for suffix in COMPANIONS:
            with contextlib.suppress(FileNotFoundError):
                os.replace(f"{path}{suffix}", f"{kept}{suffix}")
        private_files.fsync_folder(path.parent)
    return kept


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


@contextlib.contextmanager
def _transaction(conn: sqlite3.Connection) -> Iterator[None]:
    """BEGIN ... COMMIT, rolled back when anything in it raises."""
    conn.execute("BEGIN")
    try:
        yield
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def insert(conn: sqlite3.Connection, rows: Sequence[Row], ledger: Ledger | None = None) -> None:
    """One transaction for the whole batch (one fsync on the SD card, not one per call)."""
    columns = (*RECORDED, "trusted", "request_bytes", "bytes")
    marks = ",".join("?" * len(columns))
    sizes = [r.size() for r in rows]
    with _transaction(conn):
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
    if ledger is not None:
        for r, n in zip(rows, sizes, strict=True):
            ledger.held[r.trusted] += n


def add_images(
    conn: sqlite3.Connection, shots: Sequence[tuple[str, bool, Image]], ledger: Ledger | None = None
) -> None:
    """Images (invocation id, its share, image) for records already stored, in a transaction of
    their own: a record is not held back by its pictures' encoding. An image whose record is
    gone (pruned meanwhile) is left out. Each record's `bytes` grows by what its images cost."""
    ids = sorted({i for i, _, _ in shots})
    marks = ",".join("?" * len(ids))
    there = {r[0] for r in conn.execute(f"SELECT id FROM invocations WHERE id IN ({marks})", ids)}
    kept = [(i, trusted, image) for i, trusted, image in shots if i in there]
    if not kept:
        return
    with _transaction(conn):
        conn.executemany(
            "INSERT OR REPLACE INTO images VALUES (?, ?, ?, ?, ?)",
            [(i, m.kind, m.width, m.height, m.jpeg) for i, _, m in kept],
        )
        conn.executemany(
            "UPDATE invocations SET bytes = bytes + ? WHERE id = ?",
            [(image_bytes(m), i) for i, _, m in kept],
        )
    if ledger is not None:
        for _, trusted, m in kept:
            ledger.held[trusted] += image_bytes(m)


def image_bytes(image: Image) -> int:
    """What an image costs its record's share (Row.size counts the same)."""
    return len(image.jpeg) + 32


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
    with _transaction(conn):
        conn.execute(
            f"DELETE FROM images WHERE invocation_id IN (SELECT id FROM invocations WHERE {where})",
            params,
        )
        n = conn.execute(f"DELETE FROM invocations WHERE {where}", params).rowcount
    return int(n)
