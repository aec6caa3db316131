"""The local msgpack IPC socket (spec/tool-rpc-cli.txt): a codec over the catalog for the
one-shot `fingertip` CLI and for local scripts.

Wire format, both directions: a frame is a 4-byte big-endian length, then that many bytes of one
msgpack map. Requests carry an `id` (int or str) so one connection can pipeline several:

    {"id": 1, "op": "catalog"}
    {"id": 2, "op": "call", "tool": "health_check", "arguments": {}}
    {"id": 3, "op": "token_rotate"}

`token_rotate` (`fingertip token rotate`) runs the rotate_token tool for root and the daemon's
own uid only (they can write the token file anyway), whatever [guard].ipc says; its reply names
the file that holds the new token and does not carry the token itself.

Each response echoes the id and carries the Tool RPC reply union, plus the daemon's full error
whenever the reply is a rejection (so a client can say why):

    {"id": 2, "reply": {"type": "complete", "document": {...}}}
    {"id": 3, "reply": {"type": "rejected", "failure": "UNKNOWN_TOOL"},
     "error": {"code": "tool_not_found", "message": "...", "retryable": false}}

Responses may come out of order. A connection-level problem (more than [ipc].max_connections
open: too_many_connections; peer not allowed; frame over [ipc].max_frame_bytes; a frame that is
not a msgpack map with an id) gets one response with id nil and the connection is closed; the
daemon goes on serving everyone else. A connection that sends nothing for [ipc].idle_timeout_s
while none of its requests runs, or does not finish a frame that long after its first byte, is
closed without a reply. A client that takes nothing of a reply for [ipc].send_timeout_s is
disconnected (its slot freed; HID calls it started still finish). At EOF, requests
already read still run and are answered (a half-closed client can read them).

The reply mapping lives here, once (see FAILURES and reply_for); whether a successful result is
`complete` or `qualified` is tool knowledge (ToolSpec.qualification).

Who may connect: the socket file's owner/group/mode from [ipc], then every connection's
SO_PEERCRED (uid, primary gid) and SO_PEERGROUPS (supplementary gids) are checked: root, the
daemon's own uid, [ipc].allowed_uids and members of [ipc].allowed_gids are let in.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import grp
import os
import pwd
import socket
import stat
import struct
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgpack
import structlog

from daemon.catalog import CALLER_KINDS, Caller, Catalog, Guard, Outcome, ToolSpec
from daemon.config import IpcConfig
from daemon.errors import ToolError
from daemon.throttled import Throttled
from daemon.transports.limits import ReaderStopped, fits, taken, too_many_connections
from daemon.wire import WireError, check

log = structlog.get_logger("daemon.transports.ipc")

HEADER_BYTES = 4
MAX_IN_FLIGHT = 32  # per connection; reading pauses beyond it (backpressure, not an error)
SCHEMA_VERSION = 2
# Linux's SO_PEERGROUPS (asm-generic, also arm and x86); the socket module does not name it.
SO_PEERGROUPS = getattr(socket, "SO_PEERGROUPS", 59)

# Internal error codes that are process-boundary failures; any other error is the tool's or the
# daemon's semantic rejection and travels whole as a rejected_document.
FAILURES = {
    "tool_not_found": "UNKNOWN_TOOL",
    "tool_arguments_invalid": "INVALID_ARGUMENTS",
    "tool_call_payload_invalid": "INVALID_ARGUMENTS",
    "tool_execution_denied": "OUT_OF_SCOPE",
    "ipc_peer_not_allowed": "OUT_OF_SCOPE",
    "tool_discovery_disabled": "CATALOG_UNAVAILABLE",
    "request_too_large": "REQUEST_TOO_LARGE",
    "ipc_frame_invalid": "INVALID_COMMAND",
    "ipc_request_invalid": "INVALID_COMMAND",
    "tool_execution_exception": "INVOCATION_FAILED",
    "tool_timeout": "INVOCATION_FAILED",
    "tool_result_schema_invalid": "INVALID_RESULT",
    "ipc_result_unencodable": "INVALID_RESULT",
}


# -- the pure mapping ---------------------------------------------------------------------------


def caller(guard: Guard, peer: str = "") -> Caller:
    """A local process over the socket: its peer credentials were checked at connect (no
    token rule); a model-facing catalog without terminating tools (a one-shot process has no
    agent run to end)."""
    return Caller("ipc", guard, peer=peer, authenticated=True, **CALLER_KINDS["ipc"])


ROTATE_TOOL = "rotate_token"


def owner_caller(peer: str) -> Caller:
    """Root or the daemon's own uid asking for an administrative act (token_rotate): the tool
    an HTTP caller with full access would call, recorded like any invocation."""
    return Caller(
        "ipc", Guard.preset("full-access"), "diagnostic", peer=peer, authenticated=True,
        one_shot=True,
    )  # fmt: skip


def project(spec: ToolSpec, catalog: Catalog) -> dict[str, Any]:
    """One catalog entry of the Tool RPC contract."""
    return {
        "name": spec.name,
        "description": spec.description,
        "effect": "READ" if spec.policy == "read" else "WRITE",
        "inputSchema": catalog.args_schema(spec),
    }


def catalog_reply(catalog: Catalog, guard: Guard) -> dict[str, Any]:
    """The model-facing tools this socket may see, sorted by name."""
    if not guard.discovery_enabled:
        raise ToolError("tool_discovery_disabled", "tool discovery is disabled for [guard].ipc")
    specs = catalog.tools(caller(guard))
    return {
        "type": "catalog",
        "catalog": {"schemaVersion": SCHEMA_VERSION, "tools": [project(s, catalog) for s in specs]},
    }


def error_reply(error: ToolError) -> dict[str, Any]:
    failure = FAILURES.get(error.code)
    if failure is not None:
        return {"type": "rejected", "failure": failure}
    return {"type": "rejected_document", "document": error.to_dict()}


def reply_for(outcome: Outcome) -> dict[str, Any]:
    """complete / qualified / rejected_document / rejected for one invocation."""
    if outcome.error is not None:
        return error_reply(outcome.error)
    result = outcome.result
    document = dict(result) if isinstance(result, dict) else {"result": result}
    qualification = outcome.tool.qualification(result)
    if qualification:
        document["qualification"] = qualification
        return {"type": "qualified", "document": document}
    return {"type": "complete", "document": document}


def response(request_id: Any, reply: dict[str, Any], error: ToolError | None = None) -> bytes:
    """One response frame (header included)."""
    message: dict[str, Any] = {"id": request_id, "reply": reply}
    if error is not None and reply["type"].startswith("rejected"):
        message["error"] = error.to_dict()
    try:
        body: bytes = msgpack.packb(message, use_bin_type=True)
    except (TypeError, ValueError, OverflowError) as exc:
        bad = ToolError("ipc_result_unencodable", f"the result cannot be sent: {exc}")
        return response(request_id, error_reply(bad), bad)
    return len(body).to_bytes(HEADER_BYTES, "big") + body


def error_response(request_id: Any, error: ToolError) -> bytes:
    return response(request_id, error_reply(error), error)


@dataclass(frozen=True)
class Request:
    id: int | str
    op: str
    tool: str
    arguments: Any
    size: int = field(default=0, compare=False)  # the frame's body, in bytes


def _no_ext(code: int, data: bytes) -> Any:
    raise ValueError(f"msgpack extension type {code} is not accepted")


def decode_request(body: bytes) -> Request:
    """A frame's request. ToolError ipc_frame_invalid when it is no msgpack map with an id (the
    connection is then closed); ipc_request_invalid when only the op or its fields are wrong."""
    try:
        message = msgpack.unpackb(body, raw=False, ext_hook=_no_ext)
    except Exception as exc:  # msgpack raises a spread of ValueError/TypeError subclasses
        raise ToolError("ipc_frame_invalid", f"frame is not one msgpack value: {exc}") from None
    if not isinstance(message, dict):
        raise ToolError("ipc_frame_invalid", "frame is not a msgpack map")
    request_id = message.get("id")
    if not isinstance(request_id, int | str) or isinstance(request_id, bool):
        raise ToolError("ipc_frame_invalid", "request has no id (int or str)")
    try:  # the edge rule of every transport: finite numbers, valid strings, bounded depth
        check(message)
    except WireError as exc:
        raise ToolError(
            "tool_call_payload_invalid",
            f"request is not plain JSON data: {exc}",
            details={"id": request_id},
        ) from None
    op, tool = message.get("op"), message.get("tool", "")
    if op not in ("catalog", "call", "token_rotate"):
        raise _bad_request(
            request_id, f"op must be 'catalog', 'call' or 'token_rotate', not {op!r}"
        )
    if op == "call" and (not isinstance(tool, str) or not tool):
        raise _bad_request(request_id, "call needs a tool name (str)")
    return Request(request_id, op, tool, message.get("arguments", {}), len(body))


def _bad_request(request_id: int | str, message: str) -> ToolError:
    return ToolError("ipc_request_invalid", message, details={"id": request_id})


# -- who may connect ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Peer:
    pid: int
    uid: int
    gid: int
    groups: tuple[int, ...] = ()

    def describe(self) -> str:
        return f"pid={self.pid} uid={self.uid} gid={self.gid}"


def peer_of(sock: Any) -> Peer:
    """The connecting process's credentials, as the kernel recorded them at connect()."""
    fmt = "3i"
    pid, uid, gid = struct.unpack(
        fmt, sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize(fmt))
    )
    try:
        # 1024 bytes is the most getsockopt() takes: 256 groups; more = primary gid only.
        raw = sock.getsockopt(socket.SOL_SOCKET, SO_PEERGROUPS, 1024)
        groups = struct.unpack(f"{len(raw) // 4}I", raw[: len(raw) // 4 * 4])
    except OSError:
        groups = ()
    return Peer(pid, uid, gid, tuple(groups))


@dataclass(frozen=True)
class Access:
    allowed_uids: frozenset[int]
    allowed_gids: frozenset[int]

    @staticmethod
    def from_config(cfg: IpcConfig) -> Access:
        # Root and our own uid could read the daemon's memory anyway: refusing them buys nothing.
        uids = {0, os.geteuid(), *cfg.allowed_uids}
        return Access(frozenset(uids), frozenset(cfg.allowed_gids))

    def allows(self, peer: Peer) -> bool:
        return peer.uid in self.allowed_uids or bool(self.allowed_gids & {peer.gid, *peer.groups})


def _user_id(name: str) -> int:
    if not name:
        return -1
    try:
        return int(name) if name.isdigit() else pwd.getpwnam(name).pw_uid
    except KeyError:
        raise OSError(f"[ipc].owner: no user {name!r}") from None


def _group_id(name: str) -> int:
    if not name:
        return -1
    try:
        return int(name) if name.isdigit() else grp.getgrnam(name).gr_gid
    except KeyError:
        raise OSError(f"[ipc].group: no group {name!r}") from None


def _clear_stale(path: Path) -> None:
    """Remove a socket file left by a daemon that died; refuse to take over a live one."""
    try:
        st = path.lstat()
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise OSError(f"{path} exists and is not a socket")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(str(path))
        except ConnectionRefusedError:
            path.unlink()
            return
    raise OSError(f"{path}: another daemon is serving this socket")


def bind_socket(cfg: IpcConfig) -> socket.socket:
    """The listening socket, with owner, group and mode applied before listen() so nobody can
    connect while the file still has the umask's permissions."""
    path = Path(cfg.socket)
    path.parent.mkdir(parents=True, exist_ok=True)
    _clear_stale(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(str(path))
        os.chown(path, _user_id(cfg.owner), _group_id(cfg.group))
        os.chmod(path, int(cfg.mode, 8))
        sock.listen(64)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        with contextlib.suppress(OSError):
            path.unlink()
        raise
    return sock


# -- the server ---------------------------------------------------------------------------------

Send = Callable[[bytes], Awaitable[None]]


class IpcServer:
    def __init__(self, catalog: Catalog, cfg: IpcConfig, guard: Guard):
        self.catalog = catalog
        self.cfg = cfg
        self.guard = guard
        self.access = Access.from_config(cfg)
        self.path = Path(cfg.socket)
        self._server: asyncio.Server | None = None
        self._inode: tuple[int, int] | None = None
        self._connections: set[asyncio.Task[Any]] = set()
        self._refused = Throttled("ipc_connection_refused")
        self._idle = Throttled("ipc_connection_timed_out")
        self._stopped = Throttled("ipc_reader_stopped")

    @property
    def open_connections(self) -> int:
        """Connections being served now (for /metrics)."""
        return len(self._connections)

    async def start(self) -> None:
        sock = bind_socket(self.cfg)
        st = self.path.stat()
        self._inode = (st.st_dev, st.st_ino)
        self._server = await asyncio.start_unix_server(self._serve, sock=sock)
        log.info(
            "ipc_listening", path=str(self.path), mode=self.cfg.mode, guard=self.guard.to_dict()
        )

    async def stop(self) -> None:
        if self._server is None:
            return
        self._server.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        await self._server.wait_closed()
        self._server = None
        # Remove the file only if it is still ours (not a newer daemon's).
        with contextlib.suppress(OSError):
            st = self.path.lstat()
            if (st.st_dev, st.st_ino) == self._inode:
                self.path.unlink()
        log.info("ipc_stopped", path=str(self.path))

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        lock = asyncio.Lock()

        async def send(frame: bytes) -> None:
            async with lock:
                if writer.is_closing():  # dropped meanwhile: nothing more is written
                    raise ConnectionResetError("the connection is closed")
                writer.write(frame)
                if fits(writer.transport, 0):  # buffered under the high-water mark: no wait
                    return
                try:
                    await taken(writer.transport, writer.drain(), self.cfg.send_timeout_s)
                except ReaderStopped:
                    self._stopped(send_timeout_s=self.cfg.send_timeout_s)
                    raise

        try:
            # The cap first: it is what keeps fds for everyone else when one client floods.
            if len(self._connections) > self.cfg.max_connections:
                self._refused(max_connections=self.cfg.max_connections)
                busy = too_many_connections("IPC", self.cfg.max_connections, "ipc")
                await send(error_response(None, busy))
                return
            peer = peer_of(writer.get_extra_info("socket"))
            if not self.access.allows(peer):
                log.warning("ipc_peer_refused", peer=peer.describe(), groups=list(peer.groups))
                await send(
                    error_response(
                        None,
                        ToolError(
                            "ipc_peer_not_allowed",
                            f"uid {peer.uid} may not use this socket: add it to "
                            "[ipc].allowed_uids or one of its groups to [ipc].allowed_gids",
                        ),
                    )
                )
                return
            await self._requests(reader, send, peer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client went away; nothing to answer
        except TimeoutError:
            self._idle(idle_timeout_s=self.cfg.idle_timeout_s)  # slow or idle: closed
        finally:
            self._connections.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _requests(
        self,
        reader: asyncio.StreamReader,
        send: Send,
        peer: Peer,
    ) -> None:
        slots = asyncio.Semaphore(MAX_IN_FLIGHT)
        in_flight: set[asyncio.Task[None]] = set()

        async def answer(request: Request) -> None:
            try:
                frame = await self._answer(request, peer)
                with contextlib.suppress(ConnectionError):
                    await send(frame)
            finally:
                slots.release()

        try:
            while True:
                try:
                    first = await self._first_byte(reader, in_flight)
                except asyncio.IncompleteReadError:
                    break  # EOF between frames: a clean end
                # A frame once begun must be whole within the idle timeout (TimeoutError closes).
                async with asyncio.timeout(self.cfg.idle_timeout_s):
                    header = first + await reader.readexactly(HEADER_BYTES - 1)
                    size = int.from_bytes(header, "big")
                    if size <= self.cfg.max_frame_bytes:
                        body = await reader.readexactly(size)
                if size > self.cfg.max_frame_bytes:
                    await self._refuse(
                        send,
                        peer,
                        ToolError(
                            "request_too_large",
                            f"frame of {size} bytes is over [ipc].max_frame_bytes "
                            f"({self.cfg.max_frame_bytes})",
                            details={"max_bytes": self.cfg.max_frame_bytes},
                        ),
                    )
                    return
                try:
                    request = decode_request(body)
                except ToolError as exc:
                    if exc.code == "ipc_frame_invalid":
                        await self._refuse(send, peer, exc)
                        return
                    await send(error_response((exc.details or {}).get("id"), exc))
                    continue
                await slots.acquire()
                t = asyncio.create_task(answer(request))
                in_flight.add(t)
                t.add_done_callback(in_flight.discard)
            # EOF: what was asked is still answered (a half-closed client reads the replies).
            await asyncio.gather(*in_flight, return_exceptions=True)
        finally:
            for t in in_flight:
                t.cancel()  # HID invocations go on: the catalog shields them from their caller
            await asyncio.gather(*in_flight, return_exceptions=True)

    async def _first_byte(self, reader: asyncio.StreamReader, in_flight: set[Any]) -> bytes:
        """The first byte of the next frame. A client may wait as long as its requests run;
        with none running, silence for [ipc].idle_timeout_s is TimeoutError."""
        while True:
            try:
                async with asyncio.timeout(self.cfg.idle_timeout_s):
                    return await reader.readexactly(1)
            except TimeoutError:
                if not in_flight:
                    raise

    async def _refuse(self, send: Send, peer: Peer, error: ToolError) -> None:
        log.warning(
            "ipc_frame_refused", peer=peer.describe(), code=error.code, reason=error.message
        )
        await send(error_response(None, error))

    async def _answer(self, request: Request, peer: Peer) -> bytes:
        if request.op == "token_rotate":
            return await self._rotate(request, peer)
        if request.op == "catalog":
            try:
                return response(request.id, catalog_reply(self.catalog, self.guard))
            except ToolError as exc:
                return error_response(request.id, exc)
        outcome = await self.catalog.call(
            request.tool,
            request.arguments,
            caller(self.guard, peer.describe()),
            request_bytes=request.size,
        )
        return response(request.id, reply_for(outcome), outcome.error)

    async def _rotate(self, request: Request, peer: Peer) -> bytes:
        if peer.uid not in (0, os.geteuid()):
            return error_response(
                request.id,
                ToolError(
                    "ipc_peer_not_allowed",
                    f"uid {peer.uid} may not rotate the token: only root and the daemon's user",
                ),
            )
        outcome = await self.catalog.call(ROTATE_TOOL, {}, owner_caller(peer.describe()))
        if isinstance(outcome.result, dict):  # the token stays in its file, off the terminal
            outcome = dataclasses.replace(
                outcome, result={k: v for k, v in outcome.result.items() if k != "token"}
            )
        return response(request.id, reply_for(outcome), outcome.error)
