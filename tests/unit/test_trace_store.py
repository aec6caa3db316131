"""The flight recorder's store and its pure helpers: migrations, batches, pruning, filters,
redaction by schema, result slimming."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import time
from pathlib import Path

import pytest

from daemon.trace import store
from daemon.trace.recorder import REDACTED, redact, secret_names, slim_result, to_json


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
