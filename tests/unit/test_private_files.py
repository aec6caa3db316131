"""What the daemon keeps in its state folder is its own user's alone (0600), whatever the umask
it was started with: the pairing token, and the flight recorder's database with its WAL and
shared-memory files (a real SQLite file). The board's unit sets UMask=0077; `make run` and a
shell do not."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from daemon.auth import TOKEN_FILE, load_or_create_token
from daemon.config import from_mapping
from daemon.trace import store


@pytest.fixture(autouse=True)
def loose_umask() -> Iterator[None]:
    """The umask of `make run` and most shells: new files 0644 unless made otherwise."""
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def modes(folder: Path) -> dict[str, str]:
    return {p.name: oct(p.stat().st_mode & 0o777) for p in folder.iterdir()}


def test_the_database_and_its_wal_are_private(tmp_path: Path) -> None:
    """The WAL holds the newest records: it came out 0644 beside a 0600 database, because
    SQLite gives it the database's mode and the database was chmodded after it was opened."""
    db = tmp_path / store.DB_NAME
    (tmp_path / f"{store.DB_NAME}-wal").write_bytes(b"")  # as an older daemon left it: 0644
    values = ("a" * 32, time.time(), time.time(), 1.0, "http", "", "", "tap", "write", 1)
    values += ("{}", "ok", None, 0, "[]", "[]", None)
    with contextlib.closing(store.open_writer(db)) as conn:
        store.insert(conn, [store.Row(values)])
        names = [f"{store.DB_NAME}{suffix}" for suffix in ("", "-shm", "-wal")]
        assert modes(tmp_path) == dict.fromkeys(names, "0o600")


def test_an_empty_token_file_found_there_becomes_private(tmp_path: Path) -> None:
    config = from_mapping({"state": {"dir": str(tmp_path)}}, "test")
    (tmp_path / TOKEN_FILE).write_text("")  # 0644: os.open's 0600 counts only when it creates
    token = load_or_create_token(config)
    assert (tmp_path / TOKEN_FILE).read_text() == token + "\n"
    # The empty one is set aside as it was (tests/unit/test_power_cut.py), the new one 0600.
    found = modes(tmp_path)
    assert found.pop(TOKEN_FILE) == "0o600"
    assert [name.startswith(f"{TOKEN_FILE}.damaged-") for name in found] == [True]
