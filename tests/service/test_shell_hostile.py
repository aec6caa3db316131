"""The shell tool against hostile use, on the real daemon over HTTP (issue 15): concurrent stops
of one session, NUL bytes, sessions that pile up, and children that escape with setsid."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.service.daemonproc import DaemonProcess
from tests.service.test_http_api import call

BOUND_S = 15.0
# A grandchild in its own session (setsid -f forks, so its parent exits at once and it is
# reparented away from the session's shell), which prints its pid and sleeps.
ESCAPEE = "setsid -f sh -c 'echo escapee $$; exec sleep 300'"


async def shell(d: DaemonProcess, **args: Any) -> tuple[int, dict[str, Any]]:
    return await call(d, "shell", {"input": args})


def out(body: dict[str, Any]) -> Any:
    return json.loads(body["output"])


def running(pid: int) -> bool:
    """Alive and not a zombie (a killed orphan may wait for a reaper that is not us)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


async def escapee_pid(d: DaemonProcess, sid: str) -> int:
    deadline = time.monotonic() + BOUND_S
    text = ""
    while time.monotonic() < deadline:
        _, body = await shell(d, action="read", session=sid)
        text += out(body)["output"]
        if m := re.search(r"escapee (\d+)", text):
            pid = int(m.group(1))
            assert running(pid)
            return pid
    raise AssertionError(f"no pid in {text!r}")


# Replaces: three concurrent {"action":"stop","session":"s1"} -> two HTTP 500 (KeyError).
async def test_concurrent_stops_one_wins_the_others_get_a_stable_error(
    daemon: DaemonProcess,
) -> None:
    _, body = await shell(daemon, action="start", command="sleep 300")
    sid = out(body)["session"]
    replies = await asyncio.gather(*(shell(daemon, action="stop", session=sid) for _ in range(3)))
    assert [status for status, _ in replies] == [200, 200, 200]
    codes = sorted(str(b["error"]["code"]) if b["is_error"] else "ok" for _, b in replies)
    assert codes == ["ok", "shell_session_not_found", "shell_session_not_found"]


# Replaces: {"command": "echo a\u0000b"} -> HTTP 500 (ValueError: embedded null byte).
async def test_nul_in_command_or_cwd_is_an_argument_error(daemon: DaemonProcess) -> None:
    for args in (
        {"command": "echo a\u0000b"},
        {"action": "start", "command": "cat\u0000"},
        {"command": "pwd", "cwd": "/tmp\u0000x"},
    ):
        status, body = await shell(daemon, **args)
        assert status == 400 and body["error"]["code"] == "tool_arguments_invalid", body


async def _start_ended_sessions(d: DaemonProcess, count: int) -> None:
    started = 0
    deadline = time.monotonic() + 60
    while started < count and time.monotonic() < deadline:
        _, body = await shell(d, action="start", command="head -c 60000 /dev/zero")
        if body["is_error"]:  # too many still running: they end in a moment
            assert body["error"]["code"] == "shell_too_many_sessions"
            continue
        started += 1
    assert started == count


async def _sessions(d: DaemonProcess) -> list[dict[str, Any]]:
    _, body = await shell(d, action="list")
    return list(out(body)["sessions"])


# Replaces: 400 starts of a command with 64 KiB of output -> 401 sessions kept, all output held.
async def test_ended_sessions_are_kept_in_bounded_number(daemon: DaemonProcess) -> None:
    await _start_ended_sessions(daemon, 24)  # more than [shell].max_ended (16 by default)
    deadline = time.monotonic() + BOUND_S
    sessions = await _sessions(daemon)
    while any(s["running"] for s in sessions):
        assert time.monotonic() < deadline
        sessions = await _sessions(daemon)
    assert 0 < len(sessions) <= 16
    # The newest are the ones kept.
    assert max(int(s["session"][1:]) for s in sessions) >= 24


async def test_ended_sessions_are_removed_after_keep_ended_s(
    make_daemon: Callable[..., DaemonProcess],
) -> None:
    d = make_daemon({"shell": {"keep_ended_s": 0.5}})
    _, body = await shell(d, action="start", command="echo bye")
    sid = out(body)["session"]
    deadline = time.monotonic() + BOUND_S
    while (status_body := await shell(d, action="read", session=sid))[1]["is_error"] is False:
        assert time.monotonic() < deadline, "an ended session was kept past keep_ended_s"
    assert status_body[1]["error"]["code"] == "shell_session_not_found"


# Replaces: {"action":"start","command":"setsid -f sleep 300"}, then stop -> the sleep lives on.
async def test_stop_ends_children_that_called_setsid(daemon: DaemonProcess) -> None:
    _, body = await shell(daemon, action="start", command=f"{ESCAPEE}; exec sleep 300")
    sid = out(body)["session"]
    pid = await escapee_pid(daemon, sid)
    _, body = await shell(daemon, action="stop", session=sid)
    assert not body["is_error"]
    assert not running(pid)


async def test_a_timed_out_run_ends_children_that_called_setsid(
    daemon: DaemonProcess, tmp_path: Path
) -> None:
    # The escapee keeps the run's stdout open, so the run times out once its shell has seen
    # the escapee's pid file and exited; the kill must reach the escapee.
    pid_file = tmp_path / "escapee.pid"
    command = (
        f"setsid -f sh -c 'echo $$ > {pid_file}.tmp; mv {pid_file}.tmp {pid_file}; exec sleep 300'"
        f"; while [ ! -s {pid_file} ]; do sleep 0.01; done"
    )
    _, body = await shell(daemon, command=command, timeout_s=3)
    assert out(body)["timed_out"] is True
    assert not running(int(pid_file.read_text()))


# Replaces: a session running `setsid -f sleep 300`, then systemctl stop -> the sleep lives on.
async def test_daemon_sigterm_ends_children_that_called_setsid(daemon: DaemonProcess) -> None:
    _, body = await shell(daemon, action="start", command=f"{ESCAPEE}; exec sleep 300")
    pid = await escapee_pid(daemon, out(body)["session"])
    assert daemon.stop() == 0
    assert not running(pid)
