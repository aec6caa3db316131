"""The flight recorder's store and its pure helpers: migrations, batches, pruning, filters,
redaction by schema, result slimming."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import sqlite3
import tarfile
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings

from daemon.trace import store
from daemon.trace.recorder import (
    MAX_VALUE_BYTES,
    PREFIX_BYTES,
    REDACTED,
    STEP,
    bounded_json,
    is_truncated,
    json_chunks,
    redact,
    secret_names,
    slim_result,
    to_json,
)
from tests.unit.test_wire import json_values


def row(n: int, started: float, blob: int = 0) -> store.Row:
    values = (
        f"id{n}", started, started + 0.1, 100.0, "http", "127.0.0.1", "", "tap", "write", 1,
        json.dumps({"n": n}), "ok", None, 0, "[]", "[]", None,
    )  # fmt: skip
    images = (store.Image("before", 4, 4, b"x" * blob),) if blob else ()
    return store.Row(values, images)


def test_a_new_database_is_migrated_and_reopens_at_its_version(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    with contextlib.closing(store.open_writer(path)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == store.SCHEMA_VERSION
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA auto_vacuum").fetchone()[0] == 2  # incremental
        store.insert(conn, [row(1, 10.0)])
    with contextlib.closing(store.open_writer(path)) as conn:  # no second migration
        assert conn.execute("SELECT count(*) FROM invocations").fetchone()[0] == 1


@pytest.mark.parametrize("folder", ["a?b", "a#b", "a%3Fb", "sp ace"])
def test_a_reader_opens_the_file_in_any_folder_name(tmp_path: Path, folder: str) -> None:
    path = tmp_path / folder / "t.db"
    path.parent.mkdir()
    with contextlib.closing(store.open_writer(path)) as conn:
        store.insert(conn, [row(1, 10.0)])
    with contextlib.closing(store.open_reader(path)) as conn:
        assert [
            r["id"]
            for r in store.select(conn, store.parse_filter({}, default_limit=5, max_limit=5))
        ] == ["id1"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [folder]  # nothing made beside it


def test_a_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute(f"PRAGMA user_version = {store.SCHEMA_VERSION + 1}")
    with pytest.raises(sqlite3.DatabaseError, match="newer"):
        store.open_writer(path)


def test_a_batch_that_fails_midway_is_rolled_back_whole(tmp_path: Path) -> None:
    """A batch whose images statement fails (bytes SQLite cannot bind) leaves none of its
    records and the connection out of its transaction: the next batch is written."""
    with contextlib.closing(store.open_writer(tmp_path / "t.db")) as conn:
        unbindable = store.Image("before", 4, 4, [0] * 4)  # type: ignore[arg-type]
        bad = [row(1, 10.0), store.Row(row(2, 11.0).values, (unbindable,))]
        with pytest.raises(sqlite3.Error):
            store.insert(conn, bad)
        assert not conn.in_transaction
        assert conn.execute("SELECT count(*) FROM invocations").fetchone()[0] == 0
        store.insert(conn, [row(3, 12.0)])
        assert [r[0] for r in conn.execute("SELECT id FROM invocations")] == ["id3"]


def test_select_filters_and_orders(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    with contextlib.closing(store.open_writer(path)) as conn:
        store.insert(conn, [row(n, 100.0 + n, blob=10 if n % 2 else 0) for n in range(10)])
    with contextlib.closing(store.open_reader(path)) as conn:
        newest = store.select(conn, store.Filter(limit=3))
        assert [r["id"] for r in newest] == ["id9", "id8", "id7"]
        assert newest[0]["images"] == ["before"] and newest[1]["images"] == []
        assert newest[0]["args"] == {"n": 9} and newest[0]["hid"] is True
        window = store.select(conn, store.Filter(since=102, until=104, oldest_first=True))
        assert [r["id"] for r in window] == ["id2", "id3", "id4"]
        assert store.get(conn, "nope") is None
        assert [i.kind for i in store.images(conn, "id1")] == ["before"]
        with pytest.raises(sqlite3.OperationalError):  # read-only
            conn.execute("DELETE FROM invocations")


def test_prune_by_age_and_by_size(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    now = time.time()
    with contextlib.closing(store.open_writer(path)) as conn:
        store.insert(conn, [row(n, now - 1000 + n, blob=20000) for n in range(5)])
        store.insert(conn, [row(n, now + n, blob=20000) for n in range(5, 40)])
        assert store.prune(conn, 100 << 20, max_age_s=500) == 5  # the old five
        before = path.stat().st_size
        removed = store.prune(conn, 200_000, max_age_s=10**6)
        left = [r[0] for r in conn.execute("SELECT id FROM invocations ORDER BY started_at")]
        assert removed > 0 and left[-1] == "id39" and "id5" not in left
        assert store.used_bytes(conn) <= 200_000
        assert conn.execute("SELECT count(*) FROM images").fetchone()[0] == len(left)
        assert path.stat().st_size < before  # the pages went back to the file system


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ({"limit": "0"}, "limit"),
        ({"limit": "x"}, "limit"),
        ({"since": "soon"}, "since"),
        ({"until": "inf"}, "until"),
        ({"outcome": "meh"}, "outcome"),
        ({"bogus": "1"}, "unknown filter"),
        ({"tool": 5}, "tool"),
    ],
)
def test_bad_filters_say_which(query: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        store.parse_filter(query, default_limit=100, max_limit=1000)


def test_filter_times_take_seconds_or_iso() -> None:
    f = store.parse_filter(
        {"since": "2026-01-01T00:00:00Z", "until": "1767225601"}, default_limit=5, max_limit=9
    )
    assert f.since == 1767225600.0 and f.until == 1767225601.0 and f.limit == 5


def test_secrets_are_found_in_any_branch_and_redacted_at_any_depth() -> None:
    schema = {
        "type": "object",
        "properties": {"user": {"type": "string"}, "pin": {"type": "string", "writeOnly": True}},
        "allOf": [{"then": {"properties": {"otp": {"writeOnly": True}}}}],
    }
    names = secret_names(schema)
    assert names == {"pin", "otp"}
    args = {"user": "u", "pin": "1234", "nested": [{"otp": "9"}]}
    assert redact(args, names) == {"user": "u", "pin": REDACTED, "nested": [{"otp": REDACTED}]}
    assert redact(args, frozenset()) is args


def test_results_lose_screenshot_bytes_and_long_text() -> None:
    shot = {"format": "jpeg", "data": "A" * 100, "width": 1}
    assert slim_result({"action_output": {}, **shot})["data"] == "[image]"
    assert slim_result({"data": "kept"}) == {"data": "kept"}  # not a screenshot
    cut = slim_result("x" * 20000)
    assert len(cut) < 20000 and cut.endswith("chars cut]")
    assert json.loads(to_json({"x": float("nan")})) == "{'x': nan}"  # NaN never reaches JSON


# -- issue 35: every record and every read bounded; the trail kept apart from strangers ----------


def compact(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


@settings(deadline=None)  # a loaded machine is no failure
@given(json_values)
def test_json_chunks_write_what_json_writes(value: object) -> None:
    assert "".join(json_chunks(value)) == compact(value)


def test_a_long_string_is_encoded_in_slices_and_stays_exact() -> None:
    text = 'a"\\\n\x00€😀' * (3 * STEP)  # escapes and multi-byte characters across slices
    pieces = list(json_chunks({"s": text, "n": [1, 2.5, None, True]}))
    assert max(len(p) for p in pieces) <= 2 * 6 * STEP  # no piece holds the whole string
    assert len(pieces) > 3 * 7
    assert "".join(pieces) == compact({"s": text, "n": [1, 2.5, None, True]})


@pytest.mark.parametrize("chars", [10, 21_000, 64_000, 400_000])
def test_a_value_over_the_bound_is_kept_as_prefix_size_and_digest(chars: int) -> None:
    """Replaces: 64,000 "€" (192 KB) kept whole in each record (the issue's 1,000 records)."""
    value = {"text": "€" * chars, "nested": [{"k": "ü" * 100}]}
    full = compact(value).encode()
    kept = bounded_json(value)
    if len(full) <= MAX_VALUE_BYTES:
        assert kept == compact(value)
        return
    doc = json.loads(kept)
    assert doc["truncated"] is True and doc["bytes"] == len(full)
    assert doc["sha256"] == hashlib.sha256(full).hexdigest()
    prefix = doc["prefix"].encode()
    assert full.startswith(prefix) and PREFIX_BYTES - 4 < len(prefix) <= PREFIX_BYTES
    assert len(kept.encode()) < PREFIX_BYTES + 200  # what the record holds, whatever came
    assert is_truncated(doc)


def test_bounded_json_takes_odd_values_without_failing() -> None:
    for value in ({"x": float("nan")}, {1: "a"}, {"o": object()}, [[[[[]]]]]):
        json.loads(bounded_json(value))  # JSON whatever it was


def v1_database(path: Path, rows: int, args: str = '{"n":1}') -> None:
    """A database as a daemon of schema version 1 left it."""
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
        conn.executescript(store.MIGRATIONS[0])
        conn.execute("PRAGMA user_version = 1")
        conn.executemany(
            "INSERT INTO invocations VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            [
                (
                    f"id{n}",
                    100.0 + n,
                    100.1 + n,
                    1.0,
                    "http",
                    "",
                    "",
                    "tap",
                    "write",
                    1,
                    args,
                    "ok",
                    None,
                    0,
                    "[]",
                    "[]",
                    None,
                )
                for n in range(rows)
            ],
        )
        conn.execute("INSERT INTO images VALUES ('id0', 'before', 4, 4, ?)", (b"j" * 5000,))
        conn.commit()


def test_a_version_1_file_is_migrated_with_each_row_counted(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    v1_database(path, 3)
    with contextlib.closing(store.open_writer(path)) as conn:
        sizes = dict(conn.execute("SELECT id, bytes FROM invocations"))
        assert sizes["id1"] == store.ROW_OVERHEAD + len('{"n":1}')
        assert sizes["id0"] == sizes["id1"] + 5000
        assert store.Ledger(conn).held == {True: sum(sizes.values()), False: 0}
    with contextlib.closing(store.open_reader(path)) as conn:
        [rec] = store.select(conn, store.Filter(ids=("id2",), limit=1))
        assert rec["trusted"] is True and rec["request_bytes"] is None


def test_pages_are_bounded_in_bytes_and_their_cursors_cover_everything_once(
    tmp_path: Path,
) -> None:
    path = tmp_path / "t.db"
    big = json.dumps({"t": "x" * 100_000})  # an old daemon's oversized record: bounded anyway
    with contextlib.closing(store.open_writer(path)) as conn:
        store.insert(conn, [row(n, 100.0 + n // 3) for n in range(40)])  # ties on started_at
        wide = [row(n, 200.0).values for n in range(40, 50)]
        store.insert(conn, [store.Row((*v[:10], big, *v[11:])) for v in wide])
    with contextlib.closing(store.open_reader(path)) as conn:
        seen: list[str] = []
        f = store.parse_filter({"limit": "1000"}, default_limit=100, max_limit=1000)
        pages = 0
        while True:
            page = store.page(conn, f, max_bytes=250_000)
            pages += 1
            assert page.bytes <= 250_000 or len(page.records) == 1
            assert page.bytes == sum(len(r.encode()) for r in page.records)
            seen += [json.loads(r)["id"] for r in page.records]
            if page.next is None:
                break
            f = store.parse_filter(
                {"limit": "1000", "cursor": page.next}, default_limit=100, max_limit=1000
            )
        assert pages > 2 and len(seen) == len(set(seen)) == 50
        newest_first = [f"id{n}" for n in range(49, 39, -1)] + [f"id{n}" for n in range(39, -1, -1)]
        assert seen == newest_first
        # limit cuts too, and says there is more
        small_page = store.page(conn, store.Filter(limit=5))
        assert len(small_page.records) == 5 and small_page.next is not None
        last = store.page(conn, store.Filter(limit=50))
        assert len(last.records) == 50 and last.next is None


@pytest.mark.parametrize("cursor", ["", "x", "!!!", "bmFu", "aW5mLDE", "MS41LHg", "A" * 100])
def test_a_cursor_no_page_gave_is_refused(cursor: str) -> None:
    with pytest.raises(ValueError, match="cursor"):
        store.parse_filter({"cursor": cursor}, default_limit=5, max_limit=9)


def test_records_hide_critical_arguments_when_asked(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    values = row(1, 10.0).values
    critical = store.Row((*values[:8], "critical", *values[9:]))
    with contextlib.closing(store.open_writer(path)) as conn:
        store.insert(conn, [critical])
    with contextlib.closing(store.open_reader(path)) as conn:
        [shown] = store.page(conn, store.Filter(), hide_critical=True).records
        [whole] = store.page(conn, store.Filter()).records
    assert json.loads(shown)["args"] is None and "full-access" in json.loads(shown)["hidden"]
    assert json.loads(whole)["args"] == {"n": 1} and "hidden" not in json.loads(whole)


def test_the_export_streams_in_bounded_pieces_and_is_a_whole_archive(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    rng = np.random.default_rng(3)
    noise = rng.integers(0, 256, 200_000, dtype=np.uint8).tobytes()  # does not compress
    with contextlib.closing(store.open_writer(path)) as conn:
        store.insert(conn, [row(n, 100.0 + n) for n in range(30)])
        store.insert(
            conn,
            [
                store.Row(row(n, 200.0 + n).values, (store.Image("after", 4, 4, noise),))
                for n in range(30, 40)
            ],
        )
    with contextlib.closing(store.open_reader(path)) as conn:
        pieces = list(store.export(conn, store.Filter(limit=5000), chunk=1 << 16))
    assert len(pieces) >= 10  # images went out as they were read, not all at the end
    assert max(len(p) for p in pieces) < (1 << 16) + 2 * len(noise)
    with tarfile.open(fileobj=io.BytesIO(b"".join(pieces)), mode="r:gz") as tar:
        names = tar.getnames()
        member = tar.extractfile("trace.jsonl")
        assert member is not None
        lines = [json.loads(x) for x in member.read().decode().splitlines()]
        image = tar.extractfile("images/id35-after.jpg")
        assert image is not None and image.read() == noise
    assert [x["id"] for x in lines] == [f"id{n}" for n in range(40)]  # oldest first
    assert names[-1] == "trace.jsonl" and len(names) == 11
    assert lines[35]["images"] == ["after"] and "started_at_iso" in lines[0]
    # No database: an archive with an empty trace.jsonl.
    empty = b"".join(store.export(None, store.Filter()))
    with tarfile.open(fileobj=io.BytesIO(empty), mode="r:gz") as tar:
        member = tar.extractfile("trace.jsonl")
        assert member is not None and member.read() == b""


def test_strangers_never_evict_the_trail_and_pruning_gives_the_disk_back(
    tmp_path: Path,
) -> None:
    """Replaces: 1,600 tokenless calls with 192 KB of junk each took the database past its cap
    and pruning removed every authenticated keyboard_tap (14 -> 0); and the file kept 1,208 of
    its 1,255 pages free after size prunes (PRAGMA incremental_vacuum stepped once)."""
    path = tmp_path / "t.db"
    cap = 1 << 20
    now = time.time()
    with contextlib.closing(store.open_writer(path, cap)) as conn:
        ledger = store.Ledger(conn)
        taps = [row(n, now + n, blob=2000) for n in range(14)]
        store.insert(conn, taps, ledger)
        for burst in range(60):  # strangers' calls, each as large as a row gets
            junk = [
                store.Row(row(1000 + burst * 50 + k, now + 100 + burst).values, trusted=False)
                for k in range(50)
            ]
            incoming = {False: sum(r.size() for r in junk)}
            store.prune(conn, cap, 10**6, ledger, incoming)
            store.insert(conn, junk, ledger)
        kept = {r[0] for r in conn.execute("SELECT id FROM invocations WHERE trusted = 1")}
        assert kept == {f"id{n}" for n in range(14)}  # every tap still there
        untrusted = conn.execute("SELECT count(*) FROM invocations WHERE trusted = 0").fetchone()
        assert 0 < untrusted[0] < 3000  # pruned within their own share
        assert ledger.held[False] <= store.caps(cap)[False]
        # A trail over its own part of the cap loses its oldest, never the newest.
        for n in range(14, 800):
            store.prune(conn, cap, 10**6, ledger, {True: row(n, now + n, blob=2000).size()})
            store.insert(conn, [row(n, now + n, blob=2000)], ledger)
        assert conn.execute("SELECT count(*) FROM invocations WHERE id = 'id799'").fetchone()[0]
        assert store.file_bytes(conn) <= cap  # the file, not only its live pages
        assert conn.execute("PRAGMA freelist_count").fetchone()[0] == 0
        assert ledger.held == store.Ledger(conn).held  # the running count is the truth


def test_a_prune_gives_every_free_page_back(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    now = time.time()
    with contextlib.closing(store.open_writer(path)) as conn:
        store.insert(conn, [row(n, now + n, blob=20000) for n in range(200)])
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        assert store.prune(conn, 256 << 10, 10**6) > 0
        assert conn.execute("PRAGMA freelist_count").fetchone()[0] == 0
        assert store.file_bytes(conn) <= 256 << 10 < pages * 4096
    assert path.stat().st_size <= 256 << 10  # checkpointed: the file itself shrank


def test_giving_space_back_does_not_wait_for_an_open_reader(tmp_path: Path) -> None:
    """An export holds one read snapshot for its whole download: the writer's checkpoint after
    a prune must not wait out its busy timeout (5 s) for it, every prune, and once the reader
    is gone the next one empties the WAL."""
    path = tmp_path / "trace.db"
    with contextlib.closing(store.open_writer(path)) as writer:
        store.insert(writer, [row(1, 1.0)])
        with contextlib.closing(store.open_reader(path)) as reader:
            reader.execute("BEGIN")
            reader.execute("SELECT count(*) FROM invocations").fetchall()  # the snapshot
            store.insert(writer, [row(2, 2.0)])
            began = time.monotonic()
            store.give_back(writer)
            # A bound, not a timing: waiting for the reader takes the whole 5 s busy timeout.
            assert time.monotonic() - began < 4.0
            assert writer.execute("PRAGMA busy_timeout").fetchone() == (5000,)
            reader.execute("COMMIT")
        store.give_back(writer)
        assert Path(f"{path}-wal").stat().st_size == 0
