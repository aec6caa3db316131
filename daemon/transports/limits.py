"""What a slow, idle or too numerous client may hold: the connection-level rules of the network
transports, once.

- HTTP header timeout: aiohttp's own keepalive_timeout (set by daemon.service from
  [server].header_timeout_s) closes a connection that has not sent a whole request header that
  long after connecting or after its last response. aiohttp has no body timeout:
  `body_deadline` closes a connection whose request body is not whole [server].body_timeout_s
  after its header.
- Readers that stop: a client must take some of its reply every [server].send_timeout_s
  ([ipc].send_timeout_s on the socket), or its connection is aborted and its slot freed
  (`taken`, `reply_deadline`); aiohttp itself would wait on a full socket without end.
- Connection caps: `CappedSite` answers a TCP connection over [server].max_connections with one
  503 too_many_connections and closes it; the IPC server applies [ipc].max_connections itself.
  On a TLS listener (daemon.tls) a connection counts from its accept, through daemon.tls.Gate
  and its handshake; the 503 then goes over TLS, and plain HTTP gets the gate's 400.
- Accept errors (EMFILE when the fds run out) and refusals are logged once per interval with a
  count, never once per attempt: an attacker sets the pace of attempts.
- A request aiohttp cannot parse (a header past 8190 bytes, a bad chunk size, a control
  character) is answered 400 by aiohttp itself; `server_log` makes its log record one throttled
  line with the kind of fault, where aiohttp wrote "Error handling request" and a traceback, as
  plain text beside the JSON lines, for each one (quoting the line, a token in it too).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import resource
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

import structlog
from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from daemon.errors import ToolError

if TYPE_CHECKING:
    from daemon.tls import Gate, Tls

log = structlog.get_logger("daemon.transports.limits")

LOG_INTERVAL_S = 10.0
# A refused connection is read (and what it sends dropped) this long at most, so the close after
# the 503 is an orderly one, not a reset that can discard the answer before the client reads it.
REFUSE_LINGER_S = 1.0
_OUT_OF_RESOURCES = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)


class Throttled:
    """A warning that may repeat at an attacker's pace: logged at most once per interval; the
    next line says how many were left out in between."""

    def __init__(self, event: str, interval: float = LOG_INTERVAL_S):
        self.event = event
        self.interval = interval
        self._next = 0.0
        self._suppressed = 0

    def __call__(self, **fields: Any) -> None:
        now = time.monotonic()
        if now < self._next:
            self._suppressed += 1
            return
        log.warning(self.event, suppressed=self._suppressed, **fields)
        self._next, self._suppressed = now + self.interval, 0


def too_many_connections(transport: str, cap: int, key: str) -> ToolError:
    return ToolError(
        "too_many_connections",
        f"{transport} has {cap} open connections, its limit ([{key}].max_connections); "
        "retry shortly",
        retryable=True,
        details={"max_connections": cap},
    )


def throttle_accept_errors(loop: asyncio.AbstractEventLoop) -> None:
    """asyncio reports every failed accept() (and on Python 3.11 retries it up to the backlog
    within one tick) through the loop's exception handler, with a traceback each: out of fds
    that is thousands of lines a second. Those become one line per interval."""
    accept_failed = Throttled("accept_failed")

    def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        if "socket" in context and isinstance(exc, OSError) and exc.errno in _OUT_OF_RESOURCES:
            accept_failed(error=str(exc), fd_limit=resource.getrlimit(resource.RLIMIT_NOFILE)[0])
            return
        loop.default_exception_handler(context)

    loop.set_exception_handler(handler)


class _ServerLog(logging.Handler):
    """aiohttp's server log records as our lines: a request it could not parse is the client's
    fault (one throttled warning with the kind of fault, no traceback); anything else is an
    error of ours, logged with its traceback as a JSON field."""

    def __init__(self) -> None:
        super().__init__()
        self._malformed = Throttled("http_request_malformed")

    def emit(self, record: logging.LogRecord) -> None:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, HttpProcessingError):
            # Its kind only: aiohttp's message quotes the refused line, which may carry a token
            # (an Authorization header, ?token= in the request line).
            self._malformed(status=exc.code, error=type(exc).__name__)
        else:
            log.error("http_server_error", message=record.getMessage(), exc_info=record.exc_info)


def server_log() -> logging.Logger:
    """The logger aiohttp's request handlers write to (AppRunner's `logger`)."""
    logger = logging.getLogger("daemon.transports.http_server")
    if not logger.handlers:
        logger.addHandler(_ServerLog())
        logger.setLevel(logging.INFO)  # aiohttp's debug lines (a non-HTTP first line) stay out
        logger.propagate = False
    return logger


class _Refuse(asyncio.Protocol):
    """One connection over the cap: a 503 answer, then an orderly close."""

    def __init__(self, answer: bytes):
        self.answer = answer
        self.timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        transport.write(self.answer)
        if transport.can_write_eof():
            transport.write_eof()
        self.timer = asyncio.get_running_loop().call_later(REFUSE_LINGER_S, transport.close)

    def data_received(self, data: bytes) -> None:
        pass  # the request is not read: it is refused whatever it says

    def eof_received(self) -> bool:
        return False  # close now: the client has read the answer or does not care

    def connection_lost(self, exc: Exception | None) -> None:
        if self.timer is not None:
            self.timer.cancel()


def http_answer(status: str, body: bytes) -> bytes:
    retry = "Retry-After: 1\r\n" if status.startswith("503") else ""
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: application/json; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n{retry}\r\n"
    )
    return head.encode() + body


class CappedSite(web.TCPSite):
    """A TCPSite whose runner serves at most `cap` connections (over all its sites together);
    one more gets `answer` (a whole HTTP response) and is closed. With `tls`, every connection
    goes through its Gate: TLS, or `plain_answer` for plain HTTP."""

    def __init__(
        self,
        runner: web.BaseRunner,
        host: str,
        port: int,
        cap: int,
        answer: bytes,
        tls: Tls | None = None,
        plain_answer: bytes = b"",
    ):
        super().__init__(runner, host, port)
        self._cap = cap
        self._answer = answer
        self._tls = tls
        self._plain_answer = plain_answer
        self._gates: set[Gate] = set()  # connections not yet served by TLS (shutdown ends them)
        self._refused = Throttled("http_connection_refused")

    async def start(self) -> None:
        await web.BaseSite.start(self)  # registers the site with its runner, like TCPSite
        server = self._runner.server
        assert server is not None
        loop = asyncio.get_running_loop()
        # aiohttp counts a connection from its connection_made, which asyncio runs one loop turn
        # after this factory; a burst of accepts in one turn would pass the cap uncounted. So a
        # new handler also counts as pending until two turns later, when it is registered.
        pending = 0

        def registered() -> None:
            nonlocal pending
            pending -= 1

        def factory() -> asyncio.Protocol:
            nonlocal pending
            admitted = sum(1 for g in self._gates if g.counted)
            if len(server.connections) + pending + admitted >= self._cap:
                self._refused(code="too_many_connections", max_connections=self._cap)
                if self._tls is None:
                    return _Refuse(self._answer)
                return self._gate(lambda: _Refuse(self._answer), counted=False)
            if self._tls is None:
                pending += 1
                loop.call_soon(loop.call_soon, registered)
                return server()
            # Counted as a gate until connect_accepted_socket has run the handler's
            # connection_made, which registers it in server.connections.
            return self._gate(server, counted=True)

        self._server = await loop.create_server(
            factory, self._host, self._port, backlog=self._backlog
        )

    def _gate(self, serve: Callable[[], asyncio.BaseProtocol], counted: bool) -> Gate:
        assert self._tls is not None
        gate = self._tls.gate(serve, lambda: _Refuse(self._plain_answer), self._gates.discard)
        gate.counted = counted
        self._gates.add(gate)
        return gate

    async def stop(self) -> None:
        for gate in list(self._gates):
            gate.abort()
        await super().stop()


def body_deadline(timeout: float) -> Any:
    """aiohttp reads a request body for as long as the client takes to send it: a body not whole
    `timeout` seconds after its header closes the connection (its handler is cancelled)."""
    cut = Throttled("http_body_timeout")

    def expire(request: web.Request) -> None:
        if not request.content.is_eof() and request.transport is not None:
            cut(timeout_s=timeout, remote=request.remote)
            request.transport.close()

    @web.middleware
    async def middleware(request: web.Request, handler: Any) -> web.StreamResponse:
        timer = None
        if request.body_exists and not request.content.is_eof():
            timer = asyncio.get_running_loop().call_later(timeout, expire, request)
        try:
            response: web.StreamResponse = await handler(request)
            return response
        finally:
            if timer is not None:
                timer.cancel()

    return middleware


T = TypeVar("T")


class ReaderStopped(ConnectionResetError):
    """The client took nothing of its reply for the send timeout: its connection was aborted."""


def fits(transport: asyncio.BaseTransport | None, size: int) -> bool:
    """Whether `size` more bytes fit in the transport's buffer under its high-water mark: a
    write of them cannot wait on the client, so it needs no `taken` (a task and a wait, ~12 us
    on every small reply)."""
    if not isinstance(transport, asyncio.WriteTransport):
        return False
    _, high = transport.get_write_buffer_limits()
    return transport.get_write_buffer_size() + size <= high


async def taken(transport: asyncio.WriteTransport | None, write: Awaitable[T], timeout: float) -> T:
    """`write` (a write that waits for the client to take its bytes), as long as the client
    takes some of them every `timeout` seconds: one that stops reading has its connection
    aborted (ReaderStopped), so it holds no slot, task or buffer; a slow one that reads goes on."""
    task = asyncio.ensure_future(write)
    size = getattr(transport, "get_write_buffer_size", lambda: 0)
    last = size()
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=timeout)
            if done:
                return task.result()
            now = size()
            if now >= last:  # nothing taken in a whole timeout
                if transport is not None:
                    transport.abort()
                raise ReaderStopped(f"the client took nothing of its reply for {timeout:g} s")
            last = now
    finally:
        if not task.done():
            task.cancel()


def reply_deadline(timeout: float) -> Any:
    """A whole reply (not a stream, which keeps its own rule) is sent here, under `taken`: a
    client that does not read it is dropped after `timeout` instead of holding its connection
    (and the reply's buffer) for as long as it likes."""
    dropped = Throttled("http_reader_stopped")

    @web.middleware
    async def middleware(request: web.Request, handler: Any) -> web.StreamResponse:
        response: web.StreamResponse = await handler(request)
        if response.prepared or request.transport is None:
            return response

        async def send() -> None:
            await response.prepare(request)
            await response.write_eof()

        body = getattr(response, "body", None)
        if isinstance(body, bytes) and fits(request.transport, len(body) + 4096):  # + headers
            return response  # aiohttp sends it: it cannot wait on the client
        try:
            await taken(request.transport, send(), timeout)
        except ReaderStopped:
            dropped(send_timeout_s=timeout, remote=request.remote)
        except ConnectionError:
            pass  # the client left: aiohttp sees the closed connection as it always did
        return response  # aiohttp finds it sent, or its connection closed

    return middleware


# Fds beside the connections: listening sockets, HID and capture devices, shell pipes (3 per
# command), the weather client, Python's own.
FD_RESERVE = 128


def check_fd_budget(*caps: int) -> None:
    """Warn at start when the connection caps cannot all be served under the fd limit: past it,
    accept() fails (EMFILE) for everyone instead of the surplus being refused."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    needed = sum(caps) + FD_RESERVE
    if soft != resource.RLIM_INFINITY and needed > soft:
        log.warning("fd_limit_below_connection_caps", fd_limit=soft, needed=needed)
