"""fingertip: the one-shot Tool RPC process over the daemon's local socket.

Startup is a product feature: this module imports only argparse, json, os, socket, sys,
msgpack and daemon.wire (the edge rule every transport shares, stdlib only) — nothing else from
daemon/ (that would pull in structlog, jsonschema, aiohttp, OpenCV).
The reply union comes from the daemon (daemon/transports/ipc.py); here are only the failures
that happen on this side of the socket. The wire format is described in that module.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time

import msgpack

from daemon import wire

DEFAULT_SOCKET = "/run/fingertip/ipc.sock"
TRACE_DB = "/var/lib/fingertip/trace.db"
# The configs `fingertip trace` reads the state folder from when none is named: the board's,
# then `make run`'s (relative to the clone, where it is run from, as its state folder is).
TRACE_CONFIGS = ("/etc/fingertip/fingertip.toml", "etc/fingertip.dev.toml")
STDIN_LIMIT = 1 << 20
HEADER_BYTES = 4
REPLY_LIMIT = 1 << 30  # a sanity bound on what the daemon may send back (screenshots are large)
REQUEST_ID = 1

REPLY_TYPES = ("catalog", "complete", "qualified", "rejected_document", "rejected")
TRACE_TYPE = "trace"  # `fingertip trace`'s own reply, read from the database file
FAILURES = (
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
)

EPILOG = """\
commands:
  fingertip catalog            list the tools: {"type":"catalog","catalog":{"schemaVersion":2,
                               "tools":[{name,description,effect,inputSchema}]}}, sorted by name;
                               effect READ for read tools, WRITE for write and critical ones
  fingertip call TOOL          one JSON object on stdin (at most 1 MiB of UTF-8) is TOOL's
                               arguments, e.g.  printf '{}' | fingertip call health_check
  fingertip discover           browse DNS-SD (mDNS) for boards for --seconds (default 3) and
                               print one JSON object per board: {name, host, addresses, port,
                               txt, fingerprint, known}; --interface ADDR (repeatable) limits
                               the browse to the interfaces with those addresses. A board heard
                               that does not resolve in 1.5 s is named on stderr, not listed.
                               fingerprint is its TLS certificate's (txt fp=); known compares
                               it with the pins `make deploy` saved (~/.config/fingertip/
                               known_boards): "match", "new" or "CHANGED" (also said on
                               stderr: an impostor, or a board given another key). Needs no
                               daemon on this machine.
  fingertip token rotate       a new pairing token, at once: the old one is refused from then
                               on and the connections it opened are closed. Root and the
                               daemon's user only; the reply names the file with the new token.

catalog, call and trace print exactly one JSON object on stdout, discriminated by "type":
  complete           {"document": the tool's result}
  qualified          {"document": the result plus "qualification": a sentence the caller must
                     read, e.g. the screen never settled after an action, a shell command timed
                     out or its output was cut}
  rejected_document  {"document": {code, message, retryable, details}}: the tool or the daemon
                     refused with a semantic reason (e.g. capture unavailable, weather offline)
  rejected           {"failure": CODE}; a human explanation goes to stderr. CODE is one of
    INSTALLATION_STOPPED     no daemon answers at the socket
    OBSERVATION_UNAVAILABLE  the call was sent but no reply came (daemon stopped, --timeout);
                             the tool may or may not have run
    CATALOG_UNAVAILABLE      discovery is disabled ([guard].ipc) or the catalog did not arrive
    INVALID_COMMAND          bad command line, or the daemon could not read the request
                             (trace: no database where it looked, named on stderr)
    REQUEST_TOO_LARGE        stdin over 1 MiB, or a request over [ipc].max_frame_bytes
    UNKNOWN_TOOL             no such tool here (agent-run tools like wait_for_wakeup included)
    INVALID_ARGUMENTS        stdin is not one JSON object in UTF-8, or fails the tool's schema
    OUT_OF_SCOPE             this user may not use the socket, or [guard].ipc denies the tool
    INVOCATION_FAILED        the tool crashed or hit the daemon's time limit
    INVALID_RESULT           the result broke its schema, or the reply was unreadable

  fingertip trace              the flight recorder, newest first, read from its database:
                               --db, else $FINGERTIP_TRACE_DB, else <state.dir>/trace.db of the
                               daemon's config (--config, else $FINGERTIP_CONFIG, else the first
                               of /etc/fingertip/fingertip.toml and etc/fingertip.dev.toml, which
                               is `make run`'s, from the clone), else /var/lib/fingertip/trace.db;
                               a file not there is INVALID_COMMAND, naming it;
                               {"type":"trace","count":N,"invocations":[...],"next":C}; filters
                               --since --until (Unix seconds or ISO 8601) --tool --transport
                               --outcome --limit; at most 1 MiB of records a page: when "next"
                               is not null, --cursor C gives the page that follows; --id ID for
                               one invocation; --timeout bounds the read

Exit status: 0 whenever one reply was printed (whatever its type); 1 when stdout could not be
written, or when discover could not browse (its reason on stderr). --help exits 0.

The socket is --socket, else $FINGERTIP_SOCKET, else /run/fingertip/ipc.sock (`make run` uses
.fingertip/ipc.sock in the clone).
"""


class Rejected(Exception):
    """A failure on this side of the socket: printed as a rejected reply, explained on stderr."""

    def __init__(self, failure: str, message: str):
        super().__init__(message)
        self.failure = failure
        self.message = message


class _CliParser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise Rejected("INVALID_COMMAND", f"{message} (see fingertip --help)")


def _formatter(prog: str) -> argparse.HelpFormatter:
    # A fixed width: argparse would otherwise import shutil (2 ms) to ask the terminal's.
    return argparse.RawDescriptionHelpFormatter(prog, width=100)


MAX_SECONDS = 86400.0  # a day: more is a typo, and inf or 1e308 overflows the clocks


def _seconds(text: str) -> float:
    value = float(text)
    if not 0 < value <= MAX_SECONDS:  # NaN fails this too
        raise ValueError(text)
    return value


def parser() -> argparse.ArgumentParser:
    p = _CliParser(
        prog="fingertip",
        description="Call the Fingertip daemon's tools: one JSON object out per invocation.",
        epilog=EPILOG,
        formatter_class=_formatter,
    )
    p.add_argument("--socket", help="the daemon's IPC socket (see below)")
    p.add_argument(
        "--timeout",
        type=_seconds,
        default=None,
        help="seconds to wait for the reply (default: as long as the daemon's own limits)",
    )
    sub = p.add_subparsers(
        dest="command", required=True, metavar="{catalog,call,trace,discover,token}"
    )
    sub.add_parser("catalog", help="list the tools", formatter_class=_formatter)
    call = sub.add_parser(
        "call", help="call TOOL with one JSON object from stdin", formatter_class=_formatter
    )
    call.add_argument("tool")
    trace = sub.add_parser(
        "trace",
        help="read the flight recorder (the database file, not the socket)",
        formatter_class=_formatter,
    )
    trace.add_argument("--db", help="the database file (default: see below)")
    trace.add_argument("--config", help="the daemon's config: its <state.dir>/trace.db")
    for name in ("since", "until", "tool", "transport", "outcome"):
        trace.add_argument(f"--{name}")
    trace.add_argument("--limit", default="100")
    trace.add_argument("--cursor", help="the page after the one whose next this is")
    trace.add_argument("--id", help="one invocation, with the sizes of its images")
    discover = sub.add_parser(
        "discover", help="list the boards DNS-SD finds", formatter_class=_formatter
    )
    discover.add_argument("--seconds", type=_seconds, default=3.0, help="browse this long")
    discover.add_argument("--interface", action="append", help="an address to browse on")
    token = sub.add_parser("token", help="rotate the pairing token", formatter_class=_formatter)
    token.add_argument("action", choices=("rotate",))
    return p


def read_arguments(data: bytes) -> dict[str, object]:
    """stdin's bytes (read up to STDIN_LIMIT + 1) as the one JSON object of arguments."""
    if len(data) > STDIN_LIMIT:
        raise Rejected("REQUEST_TOO_LARGE", f"stdin is over {STDIN_LIMIT} bytes")
    try:
        value = wire.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise Rejected("INVALID_ARGUMENTS", f"stdin is not UTF-8: {exc}") from None
    except wire.WireError as exc:  # not JSON, NaN, a lone surrogate, nested too deep
        raise Rejected("INVALID_ARGUMENTS", f"stdin is not one JSON object: {exc}") from None
    if not isinstance(value, dict):
        raise Rejected("INVALID_ARGUMENTS", "stdin must be one JSON object, e.g. {}")
    return value


def _recv_exactly(sock: socket.socket, size: int, deadline: float | None) -> bytes | None:
    """`size` bytes, or None when the connection ends first; TimeoutError past `deadline`
    (monotonic), however the bytes trickle in: a socket timeout counts for each recv alone, and
    a daemon sending a byte a second kept --timeout 3 waiting without end."""
    chunks, got = [], 0
    while got < size:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            sock.settimeout(left)
        chunk = sock.recv(min(size - got, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def exchange(path: str, request: dict[str, object], timeout: float | None) -> dict[str, object]:
    """Send one request, return its response map (Rejected for what goes wrong on the way)."""
    try:
        body = msgpack.packb(request, use_bin_type=True)
    except (TypeError, ValueError, OverflowError) as exc:
        raise Rejected("INVALID_ARGUMENTS", f"arguments cannot be sent: {exc}") from None
    deadline = None if timeout is None else time.monotonic() + timeout
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        try:
            sock.connect(path)
        except PermissionError as exc:
            raise Rejected("OUT_OF_SCOPE", f"not allowed to use {path}: {exc.strerror}") from None
        except OSError as exc:
            raise Rejected("INSTALLATION_STOPPED", f"no daemon at {path}: {exc}") from None
        try:
            sock.sendall(len(body).to_bytes(HEADER_BYTES, "big") + body)
            sent = True
        except OSError:
            sent = False  # the daemon may have refused us already: its error frame is readable
        frame = _read_frame(sock, timeout, deadline, request["op"] != "catalog")
    if frame is None:
        if not sent:
            raise Rejected("INSTALLATION_STOPPED", f"the daemon at {path} closed the connection")
        if request["op"] == "catalog":
            raise Rejected("CATALOG_UNAVAILABLE", f"the daemon at {path} sent no catalog")
        raise Rejected(
            "OBSERVATION_UNAVAILABLE", f"the daemon at {path} closed the connection, no reply"
        )
    try:
        message = msgpack.unpackb(frame, raw=False)
    except Exception as exc:  # msgpack raises a spread of ValueError/TypeError subclasses
        raise Rejected("INVALID_RESULT", f"the reply is not msgpack: {exc}") from None
    if not isinstance(message, dict) or message.get("id") not in (request["id"], None):
        raise Rejected("INVALID_RESULT", "the reply is not a response to this request")
    return message


def _read_frame(
    sock: socket.socket, timeout: float | None, deadline: float | None, call: bool
) -> bytes | None:
    """One response frame; None when the connection ends first."""
    try:
        header = _recv_exactly(sock, HEADER_BYTES, deadline)
        if header is None:
            return None
        size = int.from_bytes(header, "big")
        if size > REPLY_LIMIT:
            raise Rejected("INVALID_RESULT", f"reply of {size} bytes is over {REPLY_LIMIT}")
        return _recv_exactly(sock, size, deadline)
    except TimeoutError:
        failure = "OBSERVATION_UNAVAILABLE" if call else "CATALOG_UNAVAILABLE"
        raise Rejected(failure, f"no reply within {timeout:g} s") from None
    except OSError:
        return None


def checked_reply(message: dict[str, object]) -> dict[str, object]:
    """The response's reply, if it is one this contract knows (unknown values are incompatible)."""
    reply = message.get("reply")
    if not isinstance(reply, dict) or reply.get("type") not in REPLY_TYPES:
        raise Rejected("INVALID_RESULT", "the daemon's reply has no known type")
    if reply["type"] == "rejected" and reply.get("failure") not in FAILURES:
        raise Rejected("INVALID_RESULT", f"unknown failure {reply.get('failure')!r}")
    return reply


def trace_db(db: str | None, config: str | None) -> tuple[str, str]:
    """The flight recorder's file, and where that choice came from (said when it is missing)."""
    if db:
        return db, "--db"
    if os.environ.get("FINGERTIP_TRACE_DB"):
        return os.environ["FINGERTIP_TRACE_DB"], "$FINGERTIP_TRACE_DB"
    named = config or os.environ.get("FINGERTIP_CONFIG")
    found = named or next((c for c in TRACE_CONFIGS if os.path.isfile(c)), None)
    if found is None:
        return TRACE_DB, f"the default; no config at {' or '.join(TRACE_CONFIGS)}"
    import tomllib  # only here: the other commands never read a config

    try:
        with open(found, "rb") as f:
            state = tomllib.load(f).get("state", {})
    except (OSError, ValueError) as exc:  # missing, unreadable, not TOML
        raise Rejected("INVALID_COMMAND", f"cannot read the config {found}: {exc}") from None
    folder = state.get("dir", os.path.dirname(TRACE_DB)) if isinstance(state, dict) else None
    if not isinstance(folder, str) or not folder:
        raise Rejected("INVALID_COMMAND", f"{found}: state.dir is not a folder name")
    return os.path.join(folder, "trace.db"), f"state.dir of {found}"


def read_trace(args: argparse.Namespace) -> dict[str, object]:
    """`fingertip trace`: the flight recorder read straight from its file (read-only), so it
    works when the daemon does not; who may read the file (0600) sees everything."""
    import json
    import sqlite3
    from pathlib import Path

    from daemon.trace import store  # stdlib only (sqlite3), and only for this command

    db, origin = trace_db(args.db, args.config)
    path = Path(db)
    query = {k: getattr(args, k) for k in store.FILTERS if getattr(args, k) is not None}
    for name, value in [*query.items(), ("id", args.id)]:
        if value is not None and not wire.is_text(value):  # argv bytes that are not UTF-8
            raise Rejected("INVALID_COMMAND", f"--{name} is not UTF-8 text")
    try:
        f = store.parse_filter(query, default_limit=100, max_limit=100000)
        conn = store.open_reader(path)
    except ValueError as exc:
        raise Rejected("INVALID_COMMAND", str(exc)) from None
    except FileNotFoundError:  # the daemon may well run: its recorder is elsewhere, or off
        raise Rejected(
            "INVALID_COMMAND",
            f"no flight recorder database at {path.absolute()} ({origin}); name the daemon's "
            "config with --config, or the file with --db",
        ) from None
    except PermissionError as exc:  # the file or a folder on the way (0600: audit data)
        raise Rejected("OUT_OF_SCOPE", f"not allowed to read {path}: {exc.strerror}") from None
    except (OSError, sqlite3.Error) as exc:
        raise Rejected("INSTALLATION_STOPPED", f"cannot read {path}: {exc}") from None
    if args.timeout is not None:  # a query that runs on (a hostile file's view) is cut
        cut_at = time.monotonic() + args.timeout
        conn.set_progress_handler(lambda: time.monotonic() > cut_at, 10000)
    try:
        if args.id is not None:
            record = store.get(conn, args.id)
            if record is None:
                raise Rejected("INVALID_COMMAND", f"no recorded invocation {args.id!r}")
            record["images"] = [
                {"kind": i.kind, "width": i.width, "height": i.height, "size": len(i.jpeg)}
                for i in store.images(conn, args.id)
            ]
            rows, cursor = [record], None
        else:
            page = store.page(conn, f)
            rows, cursor = [json.loads(r) for r in page.records], page.next
    except sqlite3.OperationalError as exc:
        if args.timeout is not None and time.monotonic() > cut_at:
            raise Rejected(
                "OBSERVATION_UNAVAILABLE", f"no trace within {args.timeout:g} s"
            ) from None
        raise Rejected("INSTALLATION_STOPPED", f"cannot read {path}: {exc}") from None
    except sqlite3.Error as exc:
        raise Rejected("INSTALLATION_STOPPED", f"cannot read {path}: {exc}") from None
    except (ValueError, RecursionError) as exc:  # a record's JSON column is not JSON
        raise Rejected("INVALID_RESULT", f"{path} holds a record that is not JSON: {exc}") from None
    finally:
        conn.close()
    return {"type": TRACE_TYPE, "count": len(rows), "invocations": rows, "next": cursor}


def run(args: argparse.Namespace, stdin: bytes | None) -> dict[str, object]:
    if args.command == "trace":
        return read_trace(args)
    path = args.socket or os.environ.get("FINGERTIP_SOCKET") or DEFAULT_SOCKET
    op = "token_rotate" if args.command == "token" else args.command
    request: dict[str, object] = {"id": REQUEST_ID, "op": op}
    if args.command == "call":
        request["tool"] = args.tool
        request["arguments"] = read_arguments(stdin or b"")
    message = exchange(path, request, args.timeout)
    reply = checked_reply(message)
    error = message.get("error")
    if isinstance(error, dict) and reply["type"] == "rejected":
        print(f"fingertip: {error.get('code')}: {error.get('message')}", file=sys.stderr)
    return reply


_encode = wire.encoder(ensure_ascii=False, separators=(",", ":"))


def encode(reply: dict[str, object]) -> bytes:
    try:
        text = _encode(reply)
    except (TypeError, ValueError) as exc:
        print(f"fingertip: the reply is not JSON: {exc}", file=sys.stderr)
        return b'{"type":"rejected","failure":"INVALID_RESULT"}\n'
    return text.encode("utf-8") + b"\n"


def discover(seconds: float, interfaces: list[str] | None) -> int:
    """One JSON line per board heard (none when there is none); exit 1 when browsing failed."""
    # zeroconf: only this command pays for it
    from daemon.browse import RESOLVE_MS
    from daemon.browse import discover as browse

    try:
        found = browse(seconds, interfaces)
    except (OSError, ValueError) as exc:  # no such interface address, no multicast
        print(f"fingertip: cannot browse DNS-SD: {exc}", file=sys.stderr)
        return 1
    for name in found.invalid:  # e.g. a hostile announcement: named (escaped), then passed over
        print(
            f"fingertip: {name!r} was heard as a board but is no valid name; not listed",
            file=sys.stderr,
        )
    for name in found.unresolved:  # heard, but not listed: say so, never drop it silently
        print(
            f"fingertip: board {name!r} was heard but did not resolve within "
            f"{RESOLVE_MS} ms (no address, port or TXT answer); not listed",
            file=sys.stderr,
        )
    from daemon import known_boards

    known = known_boards.load()
    for board in found.boards:
        fingerprint = board["txt"].get("fp") or ""
        board["fingerprint"] = fingerprint or None
        board["known"] = known_boards.verdict(known, board["addresses"], board["port"], fingerprint)
        if board["known"] == "CHANGED":  # as SSH says a host key changed: loud, on stderr
            print(
                f"fingertip: board {board['name']!r} at {board['addresses']} announces "
                f"fingerprint {fingerprint or 'none (no TLS)'}, not the one kept in "
                f"{known_boards.default_path()}: an impostor on the link, or the board has a "
                "new key (check on the board, then make deploy again)",
                file=sys.stderr,
            )
    try:
        for board in found.boards:
            sys.stdout.buffer.write(_encode(board).encode("utf-8") + b"\n")
        sys.stdout.buffer.flush()
    except OSError:
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    try:
        args = parser().parse_args(argv)
        if args.command == "discover":
            return discover(args.seconds, args.interface)
        stdin = None
        if args.command == "call" and sys.stdin is not None:
            try:
                stdin = sys.stdin.buffer.read(STDIN_LIMIT + 1)
            except OSError as exc:  # e.g. opened write-only: EBADF
                raise Rejected("INVALID_ARGUMENTS", f"cannot read stdin: {exc}") from None
        reply = run(args, stdin)
    except Rejected as exc:
        print(f"fingertip: {exc.message}", file=sys.stderr)
        reply = {"type": "rejected", "failure": exc.failure}
    try:
        sys.stdout.buffer.write(encode(reply))
        sys.stdout.buffer.flush()
    except OSError:
        return 1
    return 0
