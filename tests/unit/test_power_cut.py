"""A power cut at any moment: every state file is written atomically (daemon.private_files), and
a start after a cut is always clean. Each state file is fed truncated at every byte offset (the
token, the board id, the certificate's info cache) or at a spread of them (the certificate and
key, which need the certificate child; the flight recorder's database) to its real loader over
real files, and the start must give a usable value: the file whole as it was, or set aside
(kept, renamed with a timestamp), reported, and rebuilt. The board VM cuts the power for real:
tests/board/power_cut.py."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from daemon import private_files
from daemon.auth import TOKEN_FILE, load_or_create_token, parse_token
from daemon.config import from_mapping
from daemon.discovery import BOARD_ID_FILE, board_id
from daemon.tls import service as tls_service
from daemon.tls import store as tls_store
from daemon.trace import store


@pytest.fixture(autouse=True)
def loose_umask() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def damaged_copies(folder: Path, name: str) -> list[Path]:
    return sorted(folder.glob(f"{name}.damaged-*"))


def clear(folder: Path) -> None:
    for p in folder.iterdir():
        if p.is_file():
            p.unlink()


# -- the one writer --------------------------------------------------------------------------


def test_a_secret_is_private_from_its_first_byte(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The temporary file already has its final mode when the first byte goes in: no window
    where another user could open a token at the umask's 0644."""
    seen: list[int] = []
    real_write = os.write

    def watching_write(fd: int, data: Any) -> int:
        seen.append(stat.S_IMODE(os.fstat(fd).st_mode))
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", watching_write)
    private_files.write_private(tmp_path / "secret", b"s3cret\n")
    private_files.write_atomic(tmp_path / "public", b"hello\n")
    monkeypatch.undo()
    assert seen == [0o600, 0o644]
    assert stat.S_IMODE((tmp_path / "secret").stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "public").stat().st_mode) == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == ["public", "secret"]


def test_a_failed_write_leaves_the_old_file_and_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "token"
    private_files.write_private(path, b"old\n")

    def failing_fsync(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(OSError, match="Input/output"):
        private_files.write_private(path, b"new\n")
    monkeypatch.undo()
    assert path.read_bytes() == b"old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["token"]


def test_temporaries_a_cut_left_are_swept_never_read(tmp_path: Path) -> None:
    path = tmp_path / "board-id"
    (tmp_path / ".board-id.123.456.tmp").write_bytes(b"half")
    (tmp_path / ".other.1.2.tmp").write_bytes(b"not ours")
    private_files.write_atomic(path, b"x\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == [".other.1.2.tmp", "board-id"]


def test_set_aside_keeps_the_file_under_a_timestamped_name(tmp_path: Path) -> None:
    path = tmp_path / "pairing-token"
    path.write_bytes(b"abc")
    now = time.mktime((2026, 12, 6, 9, 0, 0, 0, 0, 0)) - time.timezone
    kept = private_files.set_aside(path, "test", now=now)
    assert kept == tmp_path / "pairing-token.damaged-20261206T090000Z"
    assert kept.read_bytes() == b"abc" and not path.exists()
    path.write_bytes(b"again")
    assert private_files.set_aside(path, "test", now=now) == tmp_path / (
        "pairing-token.damaged-20261206T090000Z-2"
    )


# -- the pairing token -----------------------------------------------------------------------


def test_token_truncated_at_every_offset(tmp_path: Path) -> None:
    config = from_mapping({"state": {"dir": str(tmp_path)}}, "test")
    token = load_or_create_token(config)
    whole = (tmp_path / TOKEN_FILE).read_bytes()
    assert whole == token.encode() + b"\n"
    for cut in range(len(whole)):
        clear(tmp_path)
        (tmp_path / TOKEN_FILE).write_bytes(whole[:cut])
        got = load_or_create_token(config)
        # A new pairing: never a prefix of the old token, which a cut would otherwise leave.
        assert got != token and len(got) == len(token), cut
        assert (tmp_path / TOKEN_FILE).read_text() == got + "\n"
        assert stat.S_IMODE((tmp_path / TOKEN_FILE).stat().st_mode) == 0o600
        (kept,) = damaged_copies(tmp_path, TOKEN_FILE)
        assert kept.read_bytes() == whole[:cut]
    (note,) = [n for n in private_files.set_aside_files() if n["file"].startswith(str(tmp_path))]
    assert "NEW pairing token" in note["consequence"] and note["kept_as"] == str(kept)
    clear(tmp_path)
    (tmp_path / TOKEN_FILE).write_bytes(whole)
    assert load_or_create_token(config) == token  # whole: kept as it is


@pytest.mark.parametrize(
    "data",
    [b"", b"\n", b"\x00" * 44, b"short\n", b"two words here and more\n", b"\xff" * 50 + b"\n"],
)
def test_hostile_token_files_are_refused(data: bytes) -> None:
    with pytest.raises(ValueError):
        parse_token(data)


# -- the board id ----------------------------------------------------------------------------


def test_board_id_truncated_at_every_offset(tmp_path: Path) -> None:
    first = board_id(tmp_path)
    whole = (tmp_path / BOARD_ID_FILE).read_bytes()
    for cut in range(len(whole)):
        clear(tmp_path)
        (tmp_path / BOARD_ID_FILE).write_bytes(whole[:cut])
        again = board_id(tmp_path)
        assert len(again) == 32 and again != first, cut
        assert board_id(tmp_path) == again  # rebuilt, and kept
        assert len(damaged_copies(tmp_path, BOARD_ID_FILE)) == 1
    clear(tmp_path)
    (tmp_path / BOARD_ID_FILE).write_bytes(whole)
    assert board_id(tmp_path) == first


# -- the certificate -------------------------------------------------------------------------


def tls_config(state: Path) -> Any:
    return from_mapping(
        {"state": {"dir": str(state)}, "server": {"listen": ["127.0.0.1"], "tls": "on"}}, "test"
    )


def offsets(n: int) -> list[int]:
    """A spread of cut points over n bytes: the first ones, the last ones, and some between."""
    return sorted({0, 1, 2, 30, n // 3, n // 2, 2 * n // 3, n - 30, n - 2, n - 1})


def test_certificate_info_cache_truncated_at_every_offset(tmp_path: Path) -> None:
    """The cache's own parser at every offset (the child is not needed to see it refuse)."""
    t = tls_service.Tls(tls_config(tmp_path))
    t.load()
    whole = (tmp_path / tls_store.INFO_FILE).read_bytes()
    info = tls_store._parse_info(whole)
    assert info == t.info
    for cut in range(len(whole)):
        with pytest.raises(ValueError):
            tls_store._parse_info(whole[:cut])
    # and the real loader over a few of them: the certificate read again, the cache rebuilt
    for cut in offsets(len(whole)):
        (tmp_path / tls_store.INFO_FILE).write_bytes(whole[:cut])
        again = tls_service.Tls(tls_config(tmp_path))
        again.load()
        assert again.info == t.info
        assert (tmp_path / tls_store.INFO_FILE).read_bytes() == whole


@pytest.mark.parametrize("name", [tls_store.CERT_FILE, tls_store.KEY_FILE])
def test_certificate_and_key_truncated(tmp_path: Path, name: str) -> None:
    """A cut certificate is made again with the same key (the same fingerprint); a cut key
    means a new key (a new fingerprint, said loudly). Never a daemon that cannot start."""
    first = tls_service.Tls(tls_config(tmp_path))
    first.load()
    assert first.info is not None
    cert, key = tmp_path / tls_store.CERT_FILE, tmp_path / tls_store.KEY_FILE
    good = {p: p.read_bytes() for p in (cert, key)}
    whole = good[tmp_path / name]
    for cut in offsets(len(whole)):
        for p, data in good.items():
            p.write_bytes(data)
        for leftover in tmp_path.glob("*.damaged-*"):
            leftover.unlink()
        (tmp_path / name).write_bytes(whole[:cut])
        t = tls_service.Tls(tls_config(tmp_path))
        t.load()  # serves: the pair fits
        assert t.info is not None and t.context is not None
        tls_store.read_info(cert, tmp_path / "check.json")
        whole_enough = cut == len(whole) - 1  # only the PEM's last newline gone
        if name == tls_store.CERT_FILE or whole_enough:
            assert t.info.fingerprint == first.info.fingerprint, cut
        else:
            assert t.info.fingerprint != first.info.fingerprint, cut
        kept = damaged_copies(tmp_path, name)
        if whole_enough:  # still a whole PEM: kept as it is
            assert not kept
        else:
            assert [k.read_bytes() for k in kept] == [whole[:cut]], cut
    notes = [n for n in private_files.set_aside_files() if n["file"] == str(tmp_path / name)]
    if name == tls_store.KEY_FILE:
        assert notes and all("NEW key" in n["consequence"] for n in notes)


def test_a_new_key_without_its_certificate_is_mended(tmp_path: Path) -> None:
    """A cut between writing a new key and its certificate: the certificate is made again for
    the key on the disk, rather than a daemon that cannot load the pair."""
    t = tls_service.Tls(tls_config(tmp_path))
    t.load()
    other = tmp_path / "other"
    other.mkdir()
    tls_service.Tls(tls_config(other)).load()
    key = tmp_path / tls_store.KEY_FILE
    key.write_bytes((other / tls_store.KEY_FILE).read_bytes())
    again = tls_service.Tls(tls_config(tmp_path))
    again.load()
    assert again.info is not None and t.info is not None
    assert again.info.fingerprint != t.info.fingerprint
    assert tls_service._unusable(tmp_path / tls_store.CERT_FILE, key) == ""


# -- the flight recorder's file ---------------------------------------------------------------


def row(n: int) -> store.Row:
    now = time.time()
    values = (f"{n:032x}", now, now, 1.0, "http", "", "", "tap", "write", 1)
    values += ("{}", "ok", None, 0, "[]", "[]", None)
    return store.Row(values)


def test_recorder_file_truncated_or_damaged(tmp_path: Path) -> None:
    """A trace.db cut at page boundaries and between them, or scribbled over: the writer opens
    it (it passes its check) or sets it aside and starts a new one; either way the file it
    then writes passes PRAGMA integrity_check. Never a writer that cannot start."""
    from daemon.config import TraceConfig
    from daemon.trace.recorder import Recorder

    source = tmp_path / "source"
    source.mkdir()
    db = source / store.DB_NAME
    with contextlib.closing(store.open_writer(db)) as conn:
        for n in range(0, 400, 20):
            store.insert(conn, [row(i) for i in range(n, n + 20)])
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    whole = db.read_bytes()
    page = 4096
    cuts = sorted({0, 1, 100, page - 1, page, page + 7, len(whole) // 2, len(whole) - 1})
    outcomes = {"kept": 0, "set aside": 0}
    for n, cut in enumerate([*cuts, "scribbled"]):
        state = tmp_path / f"s{n}"
        state.mkdir()
        if cut == "scribbled":  # a page of noise in the middle of the b-tree
            data = bytearray(whole)
            data[2 * page : 3 * page] = os.urandom(page)
            (state / store.DB_NAME).write_bytes(bytes(data))
        else:
            (state / store.DB_NAME).write_bytes(whole[: int(cut)])
            (state / f"{store.DB_NAME}-wal").write_bytes(b"")  # as a cut leaves it
        # Only its file handling: no catalog needed, no thread started.
        rec = Recorder(None, state, TraceConfig())  # type: ignore[arg-type]
        conn = rec._open()
        try:
            store.insert(conn, [row(10_000)])
            # quick_check (at open) does not cross-check indexes against their tables, which
            # only noise (a bad card, not a cut) can break: the check for noise is quick_check.
            check = "quick_check" if cut == "scribbled" else "integrity_check"
            assert conn.execute(f"PRAGMA {check}").fetchall() == [("ok",)], cut
            assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
        finally:
            conn.close()
        if rec.set_aside:
            outcomes["set aside"] += 1
            kept = Path(str(rec.set_aside["kept_as"]))
            assert kept.exists() and kept.name.startswith(f"{store.DB_NAME}.damaged-")
            assert rec.status()["set_aside"]["file"] == str(state / store.DB_NAME)
        else:
            outcomes["kept"] += 1
    # the cuts that leave no database at all are kept (an empty file is a new database)
    assert outcomes["set aside"] >= 3, outcomes


# A child that commits 50 rows in a new database (SQLite's default rollback journal, as the
# trail is in its first transactions, before it is switched to WAL), then starts rewriting them
# with a cache too small to hold the change, so that the changed pages reach the file, and is
# killed before it commits: the cut leaves a hot journal beside a half-changed file.
KILLED_MID_TRANSACTION = """
import os, signal, sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("CREATE TABLE t (n INTEGER, pad TEXT)")
conn.executemany("INSERT INTO t VALUES (?, ?)", [(n, "x" * 2000) for n in range(50)])
conn.execute("PRAGMA cache_size = 2")
conn.execute("BEGIN")
conn.execute("UPDATE t SET pad = 'y' || pad")
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_hot_journal_is_an_unclean_stop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A kill in the trail's first transactions (rollback journal, not yet WAL) leaves a hot
    journal: the start after it takes the whole check, and SQLite plays the journal back, so
    the file is as it was before the killed transaction and is kept, not set aside. (The
    service test's damaged file was once mended this way: its first daemon was killed while its
    recorder was still making the file.)"""
    import subprocess
    import sys

    db = tmp_path / store.DB_NAME
    subprocess.run([sys.executable, "-c", KILLED_MID_TRANSACTION, str(db)], check=False)
    assert (tmp_path / f"{store.DB_NAME}-journal").stat().st_size > 0  # the cut's journal
    fulls: list[bool] = []
    check = store.write.check

    def spied(conn: sqlite3.Connection, full: bool = False) -> None:
        fulls.append(full)
        check(conn, full)

    monkeypatch.setattr(store.write, "check", spied)
    with contextlib.closing(store.open_writer(db)) as conn:
        assert fulls == [True]
        assert conn.execute("SELECT count(*) FROM t WHERE pad LIKE 'x%'").fetchone() == (50,)
    assert not (tmp_path / f"{store.DB_NAME}-journal").exists()


def test_a_damaged_trail_is_set_aside_with_all_its_companions(tmp_path: Path) -> None:
    """Each file SQLite keeps beside the trail goes with it: a journal left at the path would be
    played into the new trail made there."""
    db = tmp_path / store.DB_NAME
    db.write_bytes(b"SQLite format 3\x00" + b"\xa5" * 8192)
    for suffix in store.COMPANIONS:
        Path(f"{db}{suffix}").write_bytes(suffix.encode())
    kept = store.set_aside(db)
    assert kept is not None and not db.exists()
    for suffix in store.COMPANIONS:
        assert not Path(f"{db}{suffix}").exists()
        assert Path(f"{kept}{suffix}").read_bytes() == suffix.encode()


def test_damaged_is_only_for_damage(tmp_path: Path) -> None:
    """A database newer than this daemon is no damage: never set aside (it is refused)."""
    db = tmp_path / store.DB_NAME
    with contextlib.closing(sqlite3.connect(db)) as conn:
        conn.execute(f"PRAGMA user_version = {store.SCHEMA_VERSION + 1}")
    with pytest.raises(sqlite3.DatabaseError) as caught:
        store.open_writer(db)
    assert not isinstance(caught.value, store.Damaged)
