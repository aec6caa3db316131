"""What a newcomer does after `make run` (issue 48): another port (fingertipd --port, --listen,
`make run PORT=N`), a clear answer when the port is taken, and `fingertip trace` finding the
running daemon's flight recorder from the clone (or naming the file it looked for)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.service.daemonproc import REPO, SETTLE_S, DaemonProcess, free_port, write_config

FINGERTIP = REPO / ".venv" / "bin" / "fingertip"


def fingertipd(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "daemon", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_port_and_listen_options_replace_the_files(tmp_path: Path) -> None:
    d = DaemonProcess(tmp_path)
    in_file = d.tables["server"]["port"]
    d.port = free_port()  # the option's: the file's port stays free
    d.args = ["--port", str(d.port), "--listen", "127.0.0.1"]
    d.start()
    try:
        assert d.health()["backend"]
        # The same port taken: the second daemon says which port and what to do.
        other = fingertipd("--config", str(d.config_path), "--port", str(d.port))
        assert other.returncode == 1
        assert f"port {d.port} is taken" in other.stderr, other.stderr
        assert "--port N" in other.stderr and "make run PORT=N" in other.stderr
    finally:
        assert d.stop() == 0
    assert in_file != d.port


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--port", "70000"], "server.port: 70000 is greater than the maximum of 65535"),
        (["--port", "0"], "server.port: 0 is less than the minimum of 1"),
        (["--port", "80; touch x"], "argument --port: invalid int value"),
        (["--listen", "localhost"], "'localhost' is not an IP address"),
    ],
)
def test_bad_port_or_listen_is_refused_naming_it(
    tmp_path: Path, args: list[str], said: str
) -> None:
    d = DaemonProcess(tmp_path)
    done = fingertipd("--config", str(d.config_path), "--check", *args)
    assert done.returncode == 2 and said in done.stderr, done.stderr


def test_make_run_passes_port_to_fingertipd_verbatim(tmp_path: Path) -> None:
    """`make run PORT=…` reaches fingertipd as --port, never as shell text; PORT from the
    environment (a common variable) is not taken."""
    marker = tmp_path / "ran"
    done = subprocess.run(
        ["make", "--no-print-directory", "run", f"PORT=1; touch {marker}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode != 0 and "argument --port: invalid int value" in done.stderr
    assert not marker.exists()
    dry = subprocess.run(
        ["make", "-n", "--no-print-directory", "run"],
        cwd=REPO,
        env={**os.environ, "PORT": "9999"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "fingertipd --config etc/fingertip.dev.toml" in dry.stdout
    assert "9999" not in dry.stdout


def trace(
    cwd: Path, *args: str, env: dict[str, str] | None = None
) -> tuple[dict[str, object], str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("FINGERTIP_")}
    done = subprocess.run(
        [str(FINGERTIP), "trace", *args],
        cwd=cwd,
        env={**clean, **(env or {})},
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout), done.stderr.decode()


@pytest.mark.skipif(Path("/etc/fingertip/fingertip.toml").exists(), reason="a board's config")
def test_trace_finds_the_make_run_daemons_recorder(tmp_path: Path) -> None:
    (tmp_path / "daemon").mkdir()
    d = DaemonProcess(tmp_path / "daemon")
    clone = tmp_path / "clone"
    (clone / "etc").mkdir(parents=True)
    # `make run` as in the clone: etc/fingertip.dev.toml with its state folder relative to it.
    (clone / ".fingertip").symlink_to(d.state_dir, target_is_directory=True)
    tables = {**d.tables, "state": {"dir": ".fingertip"}}
    write_config(clone / "etc" / "fingertip.dev.toml", tables)
    # Before the daemon ever ran: the file it looked for, named, and not "no daemon".
    reply, err = trace(clone)
    assert reply == {"type": "rejected", "failure": "INVALID_COMMAND"}
    assert str(clone / ".fingertip" / "trace.db") in err and "etc/fingertip.dev.toml" in err
    d.start()
    try:
        d.health()
        d.health()
        deadline = time.monotonic() + SETTLE_S  # the recorder writes on its own thread
        while (reply := trace(clone, "--tool", "health_check")[0]).get("count") != 2:
            assert reply["type"] == "trace" and time.monotonic() < deadline, reply
            time.sleep(0.1)
        # Anywhere else, the daemon's config names it; --db and the variable still win.
        reply, _ = trace(tmp_path, "--config", str(d.config_path), "--limit", "1")
        assert reply["type"] == "trace" and reply["count"] == 1
        reply, err = trace(clone, env={"FINGERTIP_TRACE_DB": str(tmp_path / "none.db")})
        assert reply == {"type": "rejected", "failure": "INVALID_COMMAND"}
        assert str(tmp_path / "none.db") in err and "$FINGERTIP_TRACE_DB" in err
    finally:
        assert d.stop() == 0


def test_require_token_asks_loopback_callers_for_the_token(tmp_path: Path) -> None:
    """`make run REQUIRE_TOKEN=1` (fingertipd --require-token): on a machine other people use,
    loopback is no longer a free shell."""
    d = DaemonProcess(tmp_path)
    d.args = ["--require-token"]
    d.start()
    try:
        body = json.dumps({"input": {"command": "id"}}).encode()
        request = urllib.request.Request(
            d.base + "/api/tools/shell", data=body, headers={"Content-Type": "application/json"}
        )
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=30)
        assert refused.value.code == 401
        request.add_header("Authorization", f"Bearer {d.token}")
        with urllib.request.urlopen(request, timeout=30) as reply:
            assert json.loads(reply.read())["is_error"] is False
    finally:
        assert d.stop() == 0
