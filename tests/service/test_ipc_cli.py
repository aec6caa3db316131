"""The one-shot CLI as a real subprocess against the real daemon's IPC socket (simulated target),
and raw msgpack clients on the same socket."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest

from daemon.trace import store
from tests.service.daemonproc import REPO, DaemonProcess

FINGERTIP = Path(sys.executable).with_name("fingertip")
NOBODY = 65534
OTHER_UID = 4242
GROUP = 12345
HEAVY = ("aiohttp", "cv2", "structlog", "jsonschema", "numpy", "gadget", "yarl", "multidict")
FAILURES = {
    "INSTALLATION_STOPPED",
    "OBSERVATION_UNAVAILABLE",
    "CATALOG_UNAVAILABLE",
    "INVALID_COMMAND",
    "REQUEST_TOO_LARGE",
    "UNKNOWN_TOOL",
    "INVALID_ARGUMENTS",
    "OUT_OF_SCOPE",
    "INVOCATION_FAILED",
    "INVALID_RESULT",
}


def cli(
    sock: Path | str,
    *args: str,
    stdin: bytes = b"",
    user: int | None = None,
    group: int | None = None,
    extra_groups: list[int] | None = None,
    env_socket: bool = True,
) -> tuple[dict[str, Any], str]:
    """Run `fingertip`; check the process contract (exit 0, exactly one JSON object on stdout)."""
    env = {k: v for k, v in os.environ.items() if k != "FINGERTIP_SOCKET"}
    if env_socket:
        env["FINGERTIP_SOCKET"] = str(sock)
    prefix: list[str] = []
    if user is not None:  # we are root: become another user the way an admin would
        groups = ",".join(map(str, extra_groups or []))
        prefix = ["setpriv", f"--reuid={user}", f"--regid={group if group is not None else user}"]
        prefix.append(f"--groups={groups}" if groups else "--clear-groups")
        # The clone may sit in a root-only folder (mktemp -d): keep the right to read and
        # traverse, never to write, so the CLI loads and the socket's own mode still decides.
        prefix += ["--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search"]
    proc = subprocess.run(
        [*prefix, str(FINGERTIP), *args],
        input=stdin,
        capture_output=True,
        env=env,
        cwd="/",
        timeout=120,
    )
    out = proc.stdout.decode()
    assert proc.returncode == 0, (proc.returncode, out, proc.stderr)
    assert out.endswith("\n") and out.count("\n") == 1, out
    reply = json.loads(out)
    assert isinstance(reply, dict)
    if reply["type"] == "rejected":
        assert set(reply) == {"type", "failure"} and reply["failure"] in FAILURES
    return reply, proc.stderr.decode()


def call(sock: Path, tool: str, args: Any = None, **kw: Any) -> tuple[dict[str, Any], str]:
    stdin = args if isinstance(args, bytes) else json.dumps({} if args is None else args).encode()
    return cli(sock, "call", tool, stdin=stdin, **kw)


def failure(reply: dict[str, Any]) -> str:
    assert reply["type"] == "rejected", reply
    return str(reply["failure"])


# -- raw msgpack frames ---------------------------------------------------------------------------


def send_frame(s: socket.socket, message: Any) -> None:
    body = msgpack.packb(message, use_bin_type=True)
    s.sendall(len(body).to_bytes(4, "big") + body)


def recv_exactly(s: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = s.recv(n - len(data))
        if not chunk:
            raise EOFError(f"closed after {len(data)} of {n} bytes")
        data += chunk
    return data


def recv_frame(s: socket.socket) -> dict[str, Any]:
    size = int.from_bytes(recv_exactly(s, 4), "big")
    message = msgpack.unpackb(recv_exactly(s, size), raw=False)
    assert isinstance(message, dict)
    return message


def connect(path: Path) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(30)
    s.connect(str(path))
    return s


def assert_closed(s: socket.socket) -> None:
    with contextlib.suppress(ConnectionResetError):
        assert s.recv(1) == b""


# -- daemons --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    """One daemon (full-access IPC guard, default limits) for tests that change nothing."""
    d = DaemonProcess(tmp_path_factory.mktemp("ipc"), {"shell": {"max_output_bytes": 1024}})
    d.start()
    yield d
    d.kill()


def sock_of(d: DaemonProcess) -> Path:
    return Path(d.tables["ipc"]["socket"])


@pytest.fixture
def world_dir() -> Iterator[Path]:
    """A folder other uids can traverse (pytest's own tmp folders are root-only)."""
    path = Path(tempfile.mkdtemp(prefix="ft-ipc-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


# -- catalog --------------------------------------------------------------------------------------


def test_catalog_shape_and_order(shared: DaemonProcess) -> None:
    reply, _ = cli(sock_of(shared), "catalog")
    assert set(reply) == {"type", "catalog"} and reply["type"] == "catalog"
    assert set(reply["catalog"]) == {"schemaVersion", "tools"}
    assert reply["catalog"]["schemaVersion"] == 2
    tools = reply["catalog"]["tools"]
    names = [t["name"] for t in tools]
    assert names == sorted(names) and len(set(names)) == len(names)
    for tool in tools:
        assert set(tool) == {"name", "description", "effect", "inputSchema"}
        assert tool["description"] and tool["inputSchema"]["type"] == "object"
    # Agent-run tools and internal maintenance tools are not exposed here.
    assert {"health_check", "screenshot", "shell", "wait_for_stable_screen"} <= set(names)
    assert not {"wait_for_wakeup", "skill_manage", "skill_mark_used"} & set(names)
    # Same tools, schemas and policies as the HTTP catalog: effect READ only for read tools.
    http = {t["name"]: t for t in shared.get_json("/api/tools")["tools"]}
    for tool in tools:
        assert tool["inputSchema"] == http[tool["name"]]["args_schema"]
        assert tool["effect"] == ("READ" if http[tool["name"]]["policy"] == "read" else "WRITE")
    by_name = {t["name"]: t for t in tools}
    assert by_name["health_check"]["effect"] == "READ" and by_name["shell"]["effect"] == "WRITE"


def test_help_documents_replies_and_exit_status() -> None:
    proc = subprocess.run([str(FINGERTIP), "--help"], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0
    assert "Exit status: 0 whenever one reply was printed" in proc.stdout
    for word in (*FAILURES, "complete", "qualified", "rejected_document", "FINGERTIP_SOCKET"):
        assert word in proc.stdout, word


def test_socket_from_option_then_environment(shared: DaemonProcess, tmp_path: Path) -> None:
    missing = tmp_path / "none.sock"
    # --socket wins over $FINGERTIP_SOCKET ...
    reply, _ = cli(missing, "--socket", str(sock_of(shared)), "catalog")
    assert reply["type"] == "catalog"
    reply, err = cli(sock_of(shared), "--socket", str(missing), "catalog")
    assert failure(reply) == "INSTALLATION_STOPPED" and str(missing) in err
    # ... and without either, the board default is used (no daemon there on this machine).
    if not Path("/run/fingertip/ipc.sock").exists():
        reply, err = cli(missing, "catalog", env_socket=False)
        assert failure(reply) == "INSTALLATION_STOPPED" and "/run/fingertip/ipc.sock" in err


# -- replies --------------------------------------------------------------------------------------


def test_complete(shared: DaemonProcess) -> None:
    reply, err = call(sock_of(shared), "health_check", {})
    assert reply["type"] == "complete", err
    assert reply["document"]["ok"] is True and reply["document"]["platform"] == "ios"
    assert "qualification" not in reply["document"]
    reply, _ = call(sock_of(shared), "shell", {"command": "printf 'héllo'"})
    assert reply == {
        "type": "complete",
        "document": {**reply["document"], "stdout": "héllo", "exit_code": 0, "timed_out": False},
    }


def test_qualified_shell(shared: DaemonProcess) -> None:
    reply, _ = call(sock_of(shared), "shell", {"command": "sleep 30", "timeout_s": 0.3})
    assert reply["type"] == "qualified"
    assert (
        reply["document"]["timed_out"] is True and "timed out" in reply["document"]["qualification"]
    )
    # The shared daemon caps output at 1024 bytes: cut output is a qualification too.
    reply, _ = call(sock_of(shared), "shell", {"command": "head -c 5000 /dev/zero | tr '\\0' x"})
    assert reply["type"] == "qualified" and reply["document"]["truncated"] is True
    assert "cut" in reply["document"]["qualification"]


def test_qualified_screen_never_settled(shared: DaemonProcess) -> None:
    shared.post_json("/api/sim/animate_on")
    try:
        args = {"timeout_ms": 400, "stable_ms": 5000}
        reply, _ = call(sock_of(shared), "wait_for_stable_screen", args)
        assert reply["type"] == "qualified"
        assert reply["document"]["stable"] is False and reply["document"]["format"] == "jpeg"
        assert "still changing" in reply["document"]["qualification"]
    finally:
        shared.post_json("/api/sim/animate_off")
    reply, _ = call(sock_of(shared), "wait_for_stable_screen", {"stable_ms": 0})
    assert reply["type"] == "complete" and reply["document"]["stable"] is True


def test_qualified_launch(shared: DaemonProcess) -> None:
    reply, err = call(sock_of(shared), "open_app", {"name": "Settings"})
    assert reply["type"] == "qualified", err
    assert "launch request was accepted" in reply["document"]["qualification"]
    assert shared.sim_state()["app"] == "Settings"


def test_rejected_document(shared: DaemonProcess) -> None:
    shared.post_json("/api/sim/capture_off")
    try:
        reply, _ = call(sock_of(shared), "screenshot", {})
    finally:
        shared.post_json("/api/sim/capture_on")
    assert reply["type"] == "rejected_document"
    doc = reply["document"]
    assert doc["code"] == "tool_unavailable" and doc["retryable"] is True
    assert doc["details"]["code"] == "capture_unavailable" and doc["details"]["remediation"]
    reply, _ = call(sock_of(shared), "shell", {"action": "read", "session": "s999"})
    assert reply["type"] == "rejected_document"
    assert reply["document"]["code"] == "shell_session_not_found"


# -- failures -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tool", "stdin", "needle"),
    [
        ("health_check", b"\xff\xfe{}", "not UTF-8"),
        ("health_check", b"[]", "one JSON object"),
        ("health_check", b'"text"', "one JSON object"),
        ("health_check", b"{} {}", "Extra data"),
        ("health_check", b"", "one JSON object"),
        ("wait_for_stable_screen", b'{"diff_threshold": NaN}', "NaN"),
        ("health_check", b'{"x": 1}', "Additional properties"),  # the daemon's schema check
        ("health_check", b'{"x": ' + b"[" * 5000 + b"]" * 5000 + b"}", "recursion"),
    ],
)
def test_invalid_arguments(shared: DaemonProcess, tool: str, stdin: bytes, needle: str) -> None:
    reply, err = call(sock_of(shared), tool, stdin)
    assert failure(reply) == "INVALID_ARGUMENTS"
    assert needle in err


def test_schema_errors_reach_stderr(shared: DaemonProcess) -> None:
    reply, err = call(sock_of(shared), "screenshot", {"quality": "high"})
    assert failure(reply) == "INVALID_ARGUMENTS" and "tool_arguments_invalid" in err
    assert "$.quality" in err


def test_stdin_over_one_mib(shared: DaemonProcess) -> None:
    big = b'{"command": "' + b"x" * (1 << 20) + b'"}'
    reply, err = call(sock_of(shared), "shell", big)
    assert failure(reply) == "REQUEST_TOO_LARGE" and "1048576" in err
    # Exactly 1 MiB is still accepted (and then judged by the tool's schema).
    exact = b'{"x": "' + b"y" * ((1 << 20) - 9) + b'"}'
    assert len(exact) == 1 << 20
    reply, _ = call(sock_of(shared), "health_check", exact)
    assert failure(reply) == "INVALID_ARGUMENTS"


@pytest.mark.parametrize("tool", ["no_such_tool", "wait_for_wakeup", "skill_manage"])
def test_unknown_tool(shared: DaemonProcess, tool: str) -> None:
    reply, err = call(sock_of(shared), tool, {})
    assert failure(reply) == "UNKNOWN_TOOL" and "tool_not_found" in err


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["bogus"],
        ["call"],
        ["call", "a", "b"],
        ["catalog", "--nope"],
        ["--timeout=x", "catalog"],
        ["--timeout=0", "catalog"],
        ["--timeout=inf", "catalog"],
        ["--timeout=1e308", "catalog"],
        ["--timeout=nan", "catalog"],
        ["discover", "--seconds", "inf"],
    ],
)
def test_invalid_command(shared: DaemonProcess, argv: list[str]) -> None:
    reply, err = cli(sock_of(shared), *argv)
    assert failure(reply) == "INVALID_COMMAND" and "--help" in err


def test_no_reply_within_timeout(shared: DaemonProcess) -> None:
    reply, err = cli(
        sock_of(shared),
        "--timeout",
        "0.3",
        "call",
        "shell",
        stdin=b'{"command": "sleep 5", "timeout_s": 5}',
    )
    assert failure(reply) == "OBSERVATION_UNAVAILABLE" and "no reply within 0.3 s" in err


def test_daemon_not_running_and_stopping(
    make_daemon: Callable[..., DaemonProcess], tmp_path: Path
) -> None:
    d = make_daemon()
    sock = sock_of(d)
    assert sock.is_socket()
    marker = f"sleep {31.5 + os.getpid() % 100}"  # a command line this test can find in /proc
    env = {**os.environ, "FINGERTIP_SOCKET": str(sock)}
    args = tmp_path / "args.json"
    args.write_text(json.dumps({"command": marker, "timeout_s": 60}))
    with args.open("rb") as stdin:
        pending = subprocess.Popen(
            [str(FINGERTIP), "call", "shell"],
            stdin=stdin,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
    deadline = time.monotonic() + 30
    while not any(marker in _cmdline(p) for p in Path("/proc").glob("[0-9]*")):
        assert time.monotonic() < deadline, "the shell call never started"
        time.sleep(0.05)
    assert d.stop() == 0
    out, err = pending.communicate(timeout=30)
    assert pending.returncode == 0
    assert json.loads(out) == {"type": "rejected", "failure": "OBSERVATION_UNAVAILABLE"}, err
    # The socket file went with the daemon; now nobody answers.
    assert not sock.exists()
    reply, err = cli(sock, "catalog")
    assert failure(reply) == "INSTALLATION_STOPPED" and "No such file" in err


def _cmdline(proc: Path) -> str:
    with contextlib.suppress(OSError):
        return (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    return ""


def test_socket_permissions_refuse_other_users(
    make_daemon: Callable[..., DaemonProcess], world_dir: Path
) -> None:
    sock = world_dir / "ipc.sock"
    d = make_daemon({"ipc": {"socket": str(sock), "mode": "0600"}, "guard": {"ipc": "read-only"}})
    st = sock.stat()
    assert oct(st.st_mode & 0o777) == "0o600" and st.st_uid == os.geteuid()
    reply, err = cli(sock, "catalog", user=NOBODY, group=NOBODY, extra_groups=[])
    assert failure(reply) == "OUT_OF_SCOPE" and "Permission denied" in err
    # Root may use it, within [guard].ipc = read-only: shell is neither listed nor callable.
    reply, _ = cli(sock, "catalog")
    names = {t["name"] for t in reply["catalog"]["tools"]}
    assert "health_check" in names and "shell" not in names
    assert {t["effect"] for t in reply["catalog"]["tools"]} == {"READ"}
    reply, err = call(sock, "shell", {"command": "true"})
    assert failure(reply) == "OUT_OF_SCOPE" and "tool_execution_denied" in err
    assert call(sock, "health_check")[0]["type"] == "complete"
    assert d.proc is not None and d.proc.poll() is None


def test_peer_credentials(make_daemon: Callable[..., DaemonProcess], world_dir: Path) -> None:
    sock = world_dir / "ipc.sock"
    make_daemon(
        {
            "ipc": {
                "socket": str(sock),
                "mode": "0666",
                "group": str(GROUP),
                "allowed_uids": [OTHER_UID],
                "allowed_gids": [GROUP],
            }
        }
    )
    st = sock.stat()
    assert oct(st.st_mode & 0o777) == "0o666" and st.st_gid == GROUP
    # The file lets anyone connect; the peer check refuses a uid that is not allowed.
    reply, err = cli(sock, "catalog", user=NOBODY, group=NOBODY, extra_groups=[])
    assert failure(reply) == "OUT_OF_SCOPE" and "ipc_peer_not_allowed" in err
    reply, _ = call(sock, "health_check", user=NOBODY, group=NOBODY, extra_groups=[])
    assert failure(reply) == "OUT_OF_SCOPE"
    # Allowed by uid, by primary group, by supplementary group (SO_PEERGROUPS).
    for user, group, extra in [
        (OTHER_UID, OTHER_UID, []),
        (NOBODY, GROUP, []),
        (NOBODY, NOBODY, [GROUP]),
    ]:
        reply, err = call(sock, "health_check", user=user, group=group, extra_groups=extra)
        assert reply["type"] == "complete", (user, group, extra, err)


def test_guard_disabled(make_daemon: Callable[..., DaemonProcess]) -> None:
    d = make_daemon({"guard": {"ipc": "disabled"}})
    reply, err = cli(sock_of(d), "catalog")
    assert failure(reply) == "CATALOG_UNAVAILABLE" and "[guard].ipc" in err
    reply, _ = call(sock_of(d), "health_check")
    assert failure(reply) == "OUT_OF_SCOPE"


@pytest.fixture
def black_hole() -> Iterator[str]:
    """A TCP port that accepts connections and never answers (a stalled upstream)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(16)
        yield f"http://127.0.0.1:{s.getsockname()[1]}/"


def test_limits_of_a_tight_daemon(
    make_daemon: Callable[..., DaemonProcess], black_hole: str
) -> None:
    d = make_daemon(
        {
            "ipc": {"max_frame_bytes": 65536},
            "server": {"tool_timeout_s": 0.5},
            "weather": {"geocoding_url": black_hole, "forecast_url": black_hole, "timeout_s": 30},
        }
    )
    # Under the CLI's 1 MiB but over the daemon's frame limit: the daemon refuses the frame.
    reply, err = call(sock_of(d), "shell", {"command": "x" * 100_000})
    assert failure(reply) == "REQUEST_TOO_LARGE" and "max_frame_bytes" in err
    # A tool that hits the daemon's time limit failed as an invocation.
    reply, err = call(sock_of(d), "weather", {"location": "Paris"})
    assert failure(reply) == "INVOCATION_FAILED" and "tool_timeout" in err
    assert call(sock_of(d), "health_check")[0]["type"] == "complete"


# -- sockets and processes ------------------------------------------------------------------------


def test_concurrent_cli_processes(shared: DaemonProcess) -> None:
    env = {**os.environ, "FINGERTIP_SOCKET": str(sock_of(shared))}
    procs = []
    for i in range(10):
        argv, stdin = (
            (["call", "shell"], json.dumps({"command": f"echo {i}"}).encode())
            if i % 3
            else (["catalog"], b"")
        )
        p = subprocess.Popen(
            [str(FINGERTIP), *argv],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        procs.append((i, p, stdin))
    for i, p, stdin in procs:
        out, err = p.communicate(stdin, timeout=60)
        assert p.returncode == 0, err
        reply = json.loads(out)
        if i % 3:
            assert reply["type"] == "complete" and reply["document"]["stdout"] == f"{i}\n"
        else:
            assert reply["type"] == "catalog"


def test_pipelined_requests_are_answered_concurrently(
    shared: DaemonProcess, tmp_path: Path
) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with connect(sock_of(shared)) as s:
        # The first call blocks until the third one writes the fifo: sequential handling would
        # end it by its own timeout (timed_out true) instead.
        send_frame(
            s,
            {
                "id": "reader",
                "op": "call",
                "tool": "shell",
                "arguments": {"command": f"cat {fifo}", "timeout_s": 30},
            },
        )
        send_frame(s, {"id": 2, "op": "catalog"})
        send_frame(
            s,
            {
                "id": 3,
                "op": "call",
                "tool": "shell",
                "arguments": {"command": f"echo through > {fifo}"},
            },
        )
        replies = {}
        for _ in range(3):
            message = recv_frame(s)
            replies[message["id"]] = message["reply"]
    assert replies[2]["type"] == "catalog" and replies[3]["type"] == "complete"
    assert replies["reader"]["type"] == "complete"
    assert replies["reader"]["document"]["stdout"] == "through\n"


def test_half_closed_client_still_gets_its_reply(shared: DaemonProcess) -> None:
    with connect(sock_of(shared)) as s:
        send_frame(s, {"id": 7, "op": "call", "tool": "health_check", "arguments": {}})
        s.shutdown(socket.SHUT_WR)
        message = recv_frame(s)
        assert message["id"] == 7 and message["reply"]["type"] == "complete"
        assert_closed(s)


@pytest.mark.parametrize(
    "body",
    [
        b"\xc1",  # a byte msgpack never uses
        msgpack.packb([1, "call"]),
        msgpack.packb({"op": "catalog"}),  # no id
        msgpack.packb({"id": 1, "op": "catalog"}) + b"\x00",  # trailing bytes
        msgpack.packb({"id": msgpack.ExtType(5, b"x"), "op": "catalog"}),
        b"\xa3ab",  # a truncated str
    ],
)
def test_malformed_frame_closes_only_that_connection(shared: DaemonProcess, body: bytes) -> None:
    with connect(sock_of(shared)) as bystander, connect(sock_of(shared)) as s:
        s.sendall(len(body).to_bytes(4, "big") + body)
        message = recv_frame(s)
        assert message["id"] is None
        assert message["reply"] == {"type": "rejected", "failure": "INVALID_COMMAND"}
        assert message["error"]["code"] == "ipc_frame_invalid"
        assert_closed(s)
        # Another connection, open all along, is still served; so is a new one.
        send_frame(bystander, {"id": 1, "op": "catalog"})
        assert recv_frame(bystander)["reply"]["type"] == "catalog"
    assert cli(sock_of(shared), "catalog")[0]["type"] == "catalog"


def test_bad_request_in_a_good_frame_keeps_the_connection(shared: DaemonProcess) -> None:
    with connect(sock_of(shared)) as s:
        send_frame(s, {"id": 1, "op": "dance"})
        send_frame(s, {"id": 2, "op": "call", "tool": 42})
        send_frame(s, {"id": 3, "op": "call", "tool": "health_check", "arguments": [1]})
        send_frame(s, {"id": 4, "op": "call", "tool": "health_check"})
        replies = {m["id"]: m for m in (recv_frame(s) for _ in range(4))}
    for rid in (1, 2):
        assert replies[rid]["reply"] == {"type": "rejected", "failure": "INVALID_COMMAND"}
        assert replies[rid]["error"]["code"] == "ipc_request_invalid"
    assert replies[3]["reply"] == {"type": "rejected", "failure": "INVALID_ARGUMENTS"}
    assert replies[4]["reply"]["type"] == "complete"  # arguments default to {}


def test_frame_over_the_limit(shared: DaemonProcess) -> None:
    limit = 4 << 20  # the default [ipc].max_frame_bytes
    with connect(sock_of(shared)) as s:
        s.sendall((limit + 1).to_bytes(4, "big"))
        message = recv_frame(s)
        assert message["reply"] == {"type": "rejected", "failure": "REQUEST_TOO_LARGE"}
        assert message["error"]["details"] == {"max_bytes": limit}
        assert_closed(s)
    with connect(sock_of(shared)) as s:  # a client that vanishes mid-frame harms nobody
        s.sendall((100).to_bytes(4, "big") + b"\x81")
    assert cli(sock_of(shared), "catalog")[0]["type"] == "catalog"


def test_cli_rejects_replies_outside_the_contract(tmp_path: Path) -> None:
    """A fake daemon (a raw socket in this test) answering garbage: the CLI must not pass on
    anything the contract does not know."""
    path = tmp_path / "fake.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(4)
    answers = [
        b"\x00\x00\x00\x01\xc1",
        _frame({"id": 1, "reply": {"type": "mystery"}}),
        _frame({"id": 1, "reply": {"type": "rejected", "failure": "SOMETHING_NEW"}}),
        _frame({"id": 99, "reply": {"type": "complete", "document": {}}}),
        b"",  # closes without answering
    ]

    def serve() -> None:
        for answer in answers:
            conn, _ = server.accept()
            with conn:
                size = int.from_bytes(recv_exactly(conn, 4), "big")
                recv_exactly(conn, size)
                conn.sendall(answer)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        for _ in answers[:4]:
            assert failure(call(path, "health_check")[0]) == "INVALID_RESULT"
        assert failure(call(path, "health_check")[0]) == "OBSERVATION_UNAVAILABLE"
    finally:
        thread.join(10)
        server.close()


def _frame(message: Any) -> bytes:
    body = msgpack.packb(message)
    return len(body).to_bytes(4, "big") + body


def test_timeout_holds_against_a_reply_that_trickles_in(tmp_path: Path) -> None:
    """A fake daemon announces 1,000 bytes and sends one every 0.2 s: the socket's timeout
    counted for each recv alone, so --timeout 1 waited the whole 200 s."""
    path = tmp_path / "drip.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)
    done = threading.Event()

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            recv_exactly(conn, int.from_bytes(recv_exactly(conn, 4), "big"))
            conn.sendall((1000).to_bytes(4, "big"))
            while not done.wait(0.2):
                try:
                    conn.sendall(b"\x00")
                except OSError:
                    return

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        reply, err = cli(path, "--timeout", "1", "call", "health_check", stdin=b"{}")
        assert failure(reply) == "OBSERVATION_UNAVAILABLE" and "within 1 s" in err, err
    finally:
        done.set()
        thread.join(10)
        server.close()


def test_stdin_that_cannot_be_read_is_a_reply(tmp_path: Path) -> None:
    """stdin opened write-only: read() fails with EBADF, which was a traceback and no JSON."""
    write_only = tmp_path / "w"
    write_only.touch()
    with write_only.open("wb") as fd0:
        proc = subprocess.run(
            [str(FINGERTIP), "--socket", str(tmp_path / "none.sock"), "call", "health_check"],
            stdin=fd0,
            capture_output=True,
            timeout=120,
        )
    assert proc.returncode == 0 and json.loads(proc.stdout) == {
        "type": "rejected",
        "failure": "INVALID_ARGUMENTS",
    }, proc
    assert b"cannot read stdin" in proc.stderr


def test_trace_of_a_hostile_or_unreachable_database_is_a_reply(tmp_path: Path) -> None:
    """Each was a traceback and no JSON: a path the reader cannot even look at, filters that
    are not UTF-8 (argv bytes), a record whose JSON column is not JSON, and a query that runs
    on (a view over an endless recursive query) past --timeout."""
    sock = tmp_path / "none.sock"  # trace reads the file: no daemon needed
    too_long = tmp_path / ("x" * 300) / "trace.db"  # ENAMETOOLONG from the existence check
    reply, _ = cli(sock, "trace", "--db", str(too_long))
    assert failure(reply) == "INSTALLATION_STOPPED"

    db = tmp_path / "trace.db"
    with contextlib.closing(store.open_writer(db)) as conn:
        values = ("a" * 32, 1.0, 2.0, 1.0, "http", "", "", "tap", "write", 1)
        store.insert(conn, [store.Row((*values, "not json", "ok", None, 0, "[]", "[]", None))])
    reply, err = cli(sock, "trace", "--db", str(db))
    assert failure(reply) == "INVALID_RESULT" and "not JSON" in err, err
    not_utf8 = os.fsdecode(b"\xff")
    for flag in ("--tool", "--transport", "--id"):
        reply, err = cli(sock, "trace", "--db", str(db), flag, not_utf8)
        assert failure(reply) == "INVALID_COMMAND" and "UTF-8" in err, (flag, err)

    endless = tmp_path / "endless.db"
    with contextlib.closing(sqlite3.connect(endless)) as conn:
        columns = ", ".join(f"i AS {name}" for name in store.COLUMNS)
        conn.execute(
            "CREATE VIEW invocations AS WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL "
            f"SELECT i + 1 FROM n) SELECT {columns} FROM n WHERE i < 0"
        )
    reply, err = cli(sock, "--timeout", "1", "trace", "--db", str(endless))
    assert failure(reply) == "OBSERVATION_UNAVAILABLE" and "within 1 s" in err, err


def test_stale_socket_is_replaced_and_a_live_one_is_kept(
    make_daemon: Callable[..., DaemonProcess], tmp_path: Path
) -> None:
    sock = tmp_path / "shared.sock"
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(sock))  # a socket file nobody listens on: what a killed daemon leaves
    stale.close()
    first = make_daemon({"ipc": {"socket": str(sock)}})
    assert cli(sock, "catalog")[0]["type"] == "catalog"
    second_dir = tmp_path / "second"
    second_dir.mkdir()
    second = DaemonProcess(second_dir, {"ipc": {"socket": str(sock)}})
    with pytest.raises(RuntimeError, match="another daemon is serving"):
        second.start()
    assert first.proc is not None and first.proc.poll() is None
    assert cli(sock, "catalog")[0]["type"] == "catalog"


def test_cli_imports_nothing_heavy(shared: DaemonProcess) -> None:
    code = (
        "import json, sys\n"
        "before = set(sys.modules)\n"
        "from daemon.cli import main\n"
        "sys.argv = ['fingertip', 'catalog']\n"
        "main()\n"
        "new = sorted(set(sys.modules) - before)\n"
        "print(json.dumps(new), file=sys.stderr)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "FINGERTIP_SOCKET": str(sock_of(shared))},
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["type"] == "catalog"  # the whole path ran
    new = json.loads(proc.stderr.splitlines()[-1])
    assert not [m for m in new if m.split(".")[0] in HEAVY]
    # daemon.wire is the edge rule every transport shares: stdlib only.
    assert [m for m in new if m.split(".")[0] == "daemon"] == [
        "daemon",
        "daemon.cli",
        "daemon.wire",
    ]
    outside = {m.split(".")[0] for m in new} - set(sys.stdlib_module_names)
    # msgpack's compiled extension brings its Cython runtime along.
    assert outside - {"cython_runtime"} <= {"daemon", "msgpack", *_cython(outside)}, outside


def _cython(names: set[str]) -> set[str]:
    return {n for n in names if n.startswith("_cython_")}
