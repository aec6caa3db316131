"""Slow, idle and too many clients against the real daemon on loopback: half-sent HTTP headers,
bodies and IPC frames are closed after the configured timeout, connections over the cap get a
stable refusal, and a daemon out of file descriptors logs that once per interval, not per
accept, and serves a normal client again once the attackers are gone (issue 15).

Every wait here is on a condition (a socket closing, a reply arriving) with a bound, never a
fixed sleep."""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.service.daemonproc import DaemonProcess
from tests.service.test_ipc_cli import recv_frame, send_frame

BOUND_S = 15.0  # how long a condition may take before the test fails


def tcp(d: DaemonProcess, timeout: float = BOUND_S) -> socket.socket:
    return socket.create_connection(("127.0.0.1", d.port), timeout=timeout)


def unix(d: DaemonProcess, timeout: float = BOUND_S) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.connect(str(d.tmp / "ipc.sock"))
    return s


def closed_by_peer(s: socket.socket) -> bool:
    """Blocks until the daemon closes (True) or the socket's timeout passes (False)."""
    try:
        while True:
            if not s.recv(65536):
                return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def http_get(d: DaemonProcess, path: str, timeout: float = BOUND_S) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(d.base + path, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def ipc_catalog(s: socket.socket) -> dict[str, Any]:
    send_frame(s, {"id": 7, "op": "catalog"})
    return recv_frame(s)


@pytest.fixture
def short(make_daemon: Callable[..., DaemonProcess]) -> DaemonProcess:
    return make_daemon(
        {
            "server": {"header_timeout_s": 0.5, "body_timeout_s": 0.5},
            "ipc": {"idle_timeout_s": 0.5},
        }
    )


# Replaces: printf 'GET /api/tools HTTP/1.1\r\nHost: 127.0.0.1' | nc 127.0.0.1 8080  (held open)
def test_half_sent_http_header_is_closed(short: DaemonProcess) -> None:
    with tcp(short) as s:
        s.sendall(b"GET /api/tools HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        assert closed_by_peer(s)
    with tcp(short) as s:  # nothing sent at all
        assert closed_by_peer(s)


# Replaces: a POST with Content-Length: 100 and 10 bytes of body, held open forever.
def test_half_sent_http_body_is_closed(short: DaemonProcess) -> None:
    with tcp(short) as s:
        s.sendall(
            b"POST /api/tools/health_check HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b'Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"input":'
        )
        assert closed_by_peer(s)
    assert http_get(short, "/api/tools")[0] == 200


# Replaces: python -c 'import socket; s=socket.socket(socket.AF_UNIX); s.connect(SOCK);
#           s.send(b"\0\0")'  (half a frame header, held open)
def test_half_sent_ipc_frame_is_closed(short: DaemonProcess) -> None:
    with unix(short) as s:
        s.sendall(b"\x00\x00")  # half a header
        assert closed_by_peer(s)
    with unix(short) as s:
        s.sendall(b"\x00\x00\x00\x10\x82")  # a header, then one byte of a 16-byte body
        assert closed_by_peer(s)
    with unix(short) as s:
        # Waiting for an answer is not idleness: a call longer than the timeout is answered...
        args = {"command": "sleep 1.5; echo done"}
        send_frame(s, {"id": 1, "op": "call", "tool": "shell", "arguments": args})
        reply = recv_frame(s)["reply"]
        assert reply["type"] == "complete" and reply["document"]["stdout"] == "done\n"
        assert closed_by_peer(s)  # ...and then, with nothing running, silence is


# Replaces: 300 idle connections (for i in $(seq 300); do nc 127.0.0.1 8080 & done) that left
# no connection for anyone else.
def test_http_connections_over_the_cap_get_503(make_daemon: Callable[..., DaemonProcess]) -> None:
    d = make_daemon({"server": {"max_connections": 3}})
    holders = []
    try:
        for _ in range(3):  # one whole request each, then idle on keep-alive: surely counted
            s = tcp(d)
            s.sendall(b"GET /api/tools HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            assert s.recv(65536).startswith(b"HTTP/1.1 200")
            holders.append(s)
        status, body = http_get(d, "/api/tools")
        assert status == 503
        assert body["error"]["code"] == "too_many_connections"
        assert body["error"]["retryable"] is True and body["is_error"] is True
        holders.pop().close()
        deadline = time.monotonic() + BOUND_S
        while (status := http_get(d, "/api/tools")[0]) == 503 and time.monotonic() < deadline:
            pass  # the daemon notices the close on its next turn
        assert status == 200
    finally:
        for s in holders:
            s.close()


def test_ipc_connections_over_the_cap_get_an_error_frame(
    make_daemon: Callable[..., DaemonProcess],
) -> None:
    d = make_daemon({"ipc": {"max_connections": 2}})
    with unix(d) as a, unix(d) as b:
        assert ipc_catalog(a)["reply"]["type"] == "catalog"
        assert ipc_catalog(b)["reply"]["type"] == "catalog"
        with unix(d) as c:
            message = recv_frame(c)
            assert message["id"] is None
            assert message["reply"]["type"] == "rejected_document"
            assert message["error"]["code"] == "too_many_connections"
            assert closed_by_peer(c)
    # Once the holders left, a new connection is served (the daemon may need a turn).
    deadline = time.monotonic() + BOUND_S
    while time.monotonic() < deadline:
        with unix(d) as s:
            reply = ipc_catalog(s)
        if reply["reply"]["type"] == "catalog":
            break
    assert reply["reply"]["type"] == "catalog"


def _accept_error_lines(d: DaemonProcess) -> list[str]:
    return [line for line in d.logs().splitlines() if "Too many open files" in line]


@pytest.fixture
def attackers() -> Iterator[list[socket.socket]]:
    socks: list[socket.socket] = []
    yield socks
    for s in socks:
        s.close()


# Replaces: ulimit -n 256; fingertipd & ; 300 connections sending half a request each: HTTP and
# IPC stopped for everyone and 124,988 accept tracebacks (50 MB) were logged in 9 s.
def test_fd_exhaustion_passes_and_is_logged_once_per_interval(
    tmp_path: Path, attackers: list[socket.socket]
) -> None:
    nofile = 64
    # The caps are set above the fd limit on purpose: accept() itself must run out of fds.
    d = DaemonProcess(
        tmp_path,
        {
            "server": {"header_timeout_s": 1.0, "max_connections": 1000},
            "ipc": {"idle_timeout_s": 1.0, "max_connections": 1000},
        },
        nofile=nofile,
    ).start()
    try:
        for _ in range(2 * nofile):
            s = tcp(d, timeout=5)
            s.sendall(b"GET /api/tools HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            attackers.append(s)
        for _ in range(nofile // 2):
            s = unix(d, timeout=5)
            s.sendall(b"\x00\x00")
            attackers.append(s)
        # More half-sent connections than the daemon has fds: a normal client still gets in
        # once the attackers have been timed out.
        status, body = http_get(d, "/api/tools", timeout=60)
        assert status == 200 and body["count"] > 0
        with unix(d, timeout=60) as s:
            assert ipc_catalog(s)["reply"]["type"] == "catalog"
        assert all(closed_by_peer(s) for s in attackers)
        assert d.stop() == 0
    finally:
        d.kill()
    lines = _accept_error_lines(d)
    events = [e for e in d.log_events() if e.get("event") == "accept_failed"]
    assert events, "the fds never ran out: the test proved nothing"
    assert len(lines) <= 4, lines[:10]


def _post(d: DaemonProcess, tool: str, args: Any) -> tuple[int, Any]:
    body = json.dumps({"input": args}).encode()
    req = urllib.request.Request(
        f"{d.base}/api/tools/{tool}", data=body, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=BOUND_S) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _running(d: DaemonProcess) -> list[dict[str, Any]]:
    status, body = http_get(d, "/api/live")
    assert status == 200, body
    running: list[dict[str, Any]] = body["running"]
    return running


def _until(check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + BOUND_S
    while not check():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.02)


# Replaces: 32 keyboard_text calls of 5,000 characters a round, each client gone after 0.5 s,
# round after round: the accepted calls queued up without end (128 after four rounds, RSS
# 84 -> 268 MB) and a new client's keyboard_tap waited behind them all.
def test_hid_invocations_left_by_their_clients_are_bounded(
    make_daemon: Callable[..., DaemonProcess],
) -> None:
    d = make_daemon({"server": {"max_pending_hid": 2}, "input": {"typing_rate_cps": 20}})
    request = json.dumps({"input": {"text": "a" * 60}}).encode()  # 3 s each at 20 cps
    head = (
        "POST /api/tools/keyboard_text HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(request)}\r\n\r\n"
    ).encode()
    callers = [tcp(d), tcp(d)]
    for s in callers:
        s.sendall(head + request)
    _until(lambda: len(_running(d)) == 2)
    for s in callers:  # both clients leave; their calls go on, one typing, one waiting
        s.close()
    status, body = _post(d, "keyboard_text", {"text": "b"})
    assert status == 200 and body["is_error"] is True, body
    assert body["error"]["code"] == "hid_busy" and body["error"]["retryable"] is True, body
    assert _post(d, "health_check", {})[1]["is_error"] is False  # other tools go on
    _until(lambda: not _running(d))
    status, body = _post(d, "keyboard_text", {"text": "b"})
    assert status == 200 and body["is_error"] is False, body
    state = d.sim_state()
    held = ("keys_down", "modifiers_down", "buttons_down", "contacts_down")
    assert all(state[k] == [] for k in held), state
