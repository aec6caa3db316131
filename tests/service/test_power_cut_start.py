"""A start after a power cut is always clean, on the real daemon: killed (SIGKILL, as a cut
stops it), its state files then damaged as a cut on a file system without atomic writes could
leave them (the pairing token cut short, the flight recorder's file overwritten), and started
again. It starts once, without a crash; each damaged file is set aside under a timestamped name
(kept), logged once, rebuilt and listed in health_check; the new token works and the old one
does not. The board VM cuts the power for real: tests/board/power_cut.py."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import urllib.error
import urllib.request
from pathlib import Path

from daemon.trace import store
from tests.service.daemonproc import DaemonProcess, eventually


def call(d: DaemonProcess, tool: str, token: str) -> int:
    req = urllib.request.Request(
        f"{d.base}/api/tools/{tool}",
        data=json.dumps({"input": {}}).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as reply:
            return int(reply.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def test_a_start_after_a_cut_sets_damaged_state_aside(tmp_path: Path) -> None:
    # The token is required on loopback too, so that the old token's refusal is seen.
    d = DaemonProcess(tmp_path, {"auth": {"require_on_loopback": True}}).start()
    try:
        old = d.token
        assert call(d, "rotate_token", old) == 200  # a write: recorded in the trail
        old = d.token
        # Its record committed, so the trail is made and in WAL: killed sooner (READY does not
        # wait for the recorder), the first start's rollback journal could be left, and SQLite
        # would play it back over the noise below, mending the file (test_power_cut.py).
        asyncio.run(eventually(lambda: d.health()["trace"]["recorded"], "the first record"))
    finally:
        d.kill()
    state = d.state_dir
    (state / "pairing-token").write_bytes(old[:20].encode())  # cut short
    db = state / "trace.db"
    db.write_bytes(b"SQLite format 3\x00" + b"\xa5" * 8192)  # a header and then noise
    for suffix in store.COMPANIONS:  # (a WAL holding every page would make it whole again)
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    d.start()
    try:
        health = d.health()
        new = d.token
        assert new != old and len(new) == len(old)
        assert call(d, "rotate_token", old[:20]) == 401
        assert call(d, "rotate_token", new) == 200
        files = {n["file"]: n for n in health["security"]["state_files"]}
        token_note = files[str(state / "pairing-token")]
        assert "NEW pairing token" in token_note["consequence"]
        assert Path(token_note["kept_as"]).read_bytes() == old[:20].encode()
        assert any("pairing-token was damaged" in w for w in health["security"]["warnings"])
        # The recorder's thread opens its file after the start: waited for.
        trace = asyncio.run(eventually(lambda: d.health()["trace"].get("set_aside"), "set_aside"))
        kept = Path(trace["kept_as"])
        assert kept.name.startswith("trace.db.damaged-") and kept.stat().st_size == 8208
        with sqlite3.connect(db) as conn:  # the new trail, whole
            assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        events = [e.get("event") for e in d.log_events()]
        assert events.count("state_file_set_aside") == 1
        assert events.count("trace_file_set_aside") == 1
    finally:
        d.stop()
