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
- Connection caps: every TCP connection, on every listener together, counts against
  [server].max_connections from its accept to its close (`Admission`): on a TLS listener also
  while at its tls_gate.Gate and in its handshake. One over the cap gets one 503
  too_many_connections and is closed (on a TLS listener the 503 goes over TLS, after a first
  byte and handshake of REFUSE_HANDSHAKE_S at most); at most MAX_REFUSING are answered at a
  time, more are closed at once unread. So what a flood holds is bounded, not its rate times a
  timeout. The IPC server applies [ipc].max_connections itself.
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
import functools
import logging
import resource
import ssl
import weakref
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar, TypeVar

import structlog
from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.typedefs import Handler, Middleware

from daemon.errors import ToolError
from daemon.throttled import Throttled
from daemon.transports.tls_gate import Gate

log = structlog.get_logger("daemon.transports.limits")

# A refused connection is read (and what it sends dropped) this long at most, so the close after
# the 503 is an orderly one, not a reset that can discard the answer before the client reads it.
REFUSE_LINGER_S = 1.0
# Connections over the cap being answered 503 at one time (all listeners together); more are
# closed at once. On a TLS listener a refusal's first byte and handshake get REFUSE_HANDSHAKE_S.
MAX_REFUSING = 32
REFUSE_HANDSHAKE_S = 2.0
_OUT_OF_RESOURCES = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)


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
    """One connection refused (over the cap, or plain HTTP on a TLS port): its answer, then an
    orderly close; `release` (its count) at its end."""

    def __init__(self, answer: bytes, release: Callable[[], None]):
        self.answer = answer
        self.release = release
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
        self.release()


class _Shed(asyncio.Protocol):
    """One connection over the cap while MAX_REFUSING others are being refused: closed at once,
    unread and unanswered (what a flood gets; it costs a descriptor for a few loop turns)."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        transport.abort()


def http_answer(status: str, body: bytes) -> bytes:
    retry = "Retry-After: 1\r\n" if status.startswith("503") else ""
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: application/json; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n{retry}\r\n"
    )
    return head.encode() + body


def _once(release: Callable[[], None]) -> Callable[[], None]:
    done = False

    def once() -> None:
        nonlocal done
        if not done:
            done = True
            release()

    return once


class Admission:
    """Every connection of one HTTP runner, over all its listeners together, from its accept to
    its close, against the cap: served by aiohttp (its `server.connections`), accepted but not
    yet registered there (`pending`), or on a TLS listener still at its gate, in its handshake
    or being told to use https (`gated`). The connections over the cap being answered 503 are
    counted apart and bounded too (`refusing`, at most MAX_REFUSING): past both, a connection
    is closed at once. So the daemon's descriptors for HTTP stay under cap + MAX_REFUSING, plus
    sockets between their accept and their close, whatever arrives."""

    _of: ClassVar[weakref.WeakKeyDictionary[web.Server, Admission]] = weakref.WeakKeyDictionary()

    def __init__(self, server: web.Server, cap: int):
        self.server, self.cap = server, cap
        self.pending = 0
        self.gated = 0
        self.refusing = 0
        self.gates: set[Gate] = set()  # admitted or refused: stop() ends them

    @classmethod
    def of(cls, server: web.Server, cap: int) -> Admission:
        """The one Admission of a runner's server (its sites share it, and so the cap)."""
        admission = cls._of.get(server)
        if admission is None:
            admission = cls._of[server] = cls(server, cap)
        return admission

    @property
    def open(self) -> int:
        return len(self.server.connections) + self.pending + self.gated

    def gate(self) -> Callable[[], None] | None:
        """A place under the cap for a connection at a TLS gate, and its one-shot release; or
        None when the cap is reached."""
        if self.open >= self.cap:
            return None
        self.gated += 1
        return _once(self._ungate)

    def _ungate(self) -> None:
        self.gated -= 1

    def refusal(self) -> Callable[[], None] | None:
        """A refusal slot and its one-shot release, or None when MAX_REFUSING are taken."""
        if self.refusing >= MAX_REFUSING:
            return None
        self.refusing += 1
        return _once(self._unrefuse)

    def _unrefuse(self) -> None:
        self.refusing -= 1


class CappedSite(web.TCPSite):
    """A TCPSite whose runner serves at most `cap` connections (over all its sites together,
    counted by one Admission); one more gets `answer` (a whole HTTP response) and is closed, or
    is closed at once when MAX_REFUSING are already being answered. With `ssl_context`, every
    connection goes through a tls_gate.Gate first (`handshake_timeout` for its first byte and
    again for its handshake): TLS, or `plain_answer` for plain HTTP."""

    def __init__(
        self,
        runner: web.BaseRunner,
        host: str,
        port: int,
        cap: int,
        answer: bytes,
        ssl_context: ssl.SSLContext | None = None,
        handshake_timeout: float = 15.0,
        plain_answer: bytes = b"",
    ):
        super().__init__(runner, host, port)
        self._cap = cap
        self._answer = answer
        self._ssl = ssl_context
        self._handshake_timeout = handshake_timeout
        self._plain_answer = plain_answer
        self._refused = Throttled("http_connection_refused")
        self._shed = Throttled("http_connection_shed")
        self._handshake_failed = Throttled("tls_handshake_failed")

    async def start(self) -> None:
        await web.BaseSite.start(self)  # registers the site with its runner, like TCPSite
        server = self._runner.server
        assert server is not None
        admission = Admission.of(server, self._cap)
        loop = asyncio.get_running_loop()

        # aiohttp counts a connection from its connection_made, which asyncio runs one loop turn
        # after this factory; a burst of accepts in one turn would pass the cap uncounted. So a
        # new handler also counts as pending until two turns later, when it is registered.
        def registered() -> None:
            admission.pending -= 1

        def factory() -> asyncio.BaseProtocol:
            if self._ssl is None:
                if admission.open < self._cap:
                    admission.pending += 1
                    loop.call_soon(loop.call_soon, registered)
                    return server()
            else:
                release = admission.gate()
                if release is not None:
                    return self._gate(admission, server, self._handshake_timeout, release, True)
            release = admission.refusal()
            if release is None:
                self._shed(max_connections=self._cap, refusing=MAX_REFUSING)
                return _Shed()
            self._refused(code="too_many_connections", max_connections=self._cap)
            if self._ssl is None:
                return _Refuse(self._answer, release)
            refuse = functools.partial(_Refuse, self._answer, release)
            timeout = min(self._handshake_timeout, REFUSE_HANDSHAKE_S)
            return self._gate(admission, refuse, timeout, release, False)

        self._server = await loop.create_server(
            factory, self._host, self._port, backlog=self._backlog
        )

    def _gate(
        self,
        admission: Admission,
        serve: Callable[[], asyncio.BaseProtocol],
        timeout: float,
        release: Callable[[], None],
        admitted: bool,
    ) -> Gate:
        """A gate holding `release` (its place under the cap, or its refusal slot) until the
        connection closes, or, admitted and served by TLS, until aiohttp counts it instead. A
        _Refuse that takes the connection (the 503, or the 400 to plain HTTP) releases it."""
        assert self._ssl is not None

        def done(gate: Gate) -> None:
            admission.gates.discard(gate)
            if not gate.handed_over or (gate.handed_over == "tls" and admitted):
                release()

        plain = functools.partial(_Refuse, self._plain_answer, release)
        gate = Gate(self._ssl, serve, plain, done, timeout, self._handshake_failed)
        admission.gates.add(gate)
        return gate

    async def stop(self) -> None:
        if self._runner.server is not None:
            for gate in list(Admission.of(self._runner.server, self._cap).gates):
                gate.abort()
        await super().stop()


def body_deadline(timeout: float) -> Middleware:
    """aiohttp reads a request body for as long as the client takes to send it: a body not whole
    `timeout` seconds after its header closes the connection (its handler is cancelled)."""
    cut = Throttled("http_body_timeout")

    def expire(request: web.Request) -> None:
        if not request.content.is_eof() and request.transport is not None:
            cut(timeout_s=timeout, remote=request.remote)
            request.transport.close()

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        timer = None
        # A route that streams its body (a media upload) bounds each chunk's wait itself.
        streams = getattr(request.match_info.handler, "streams_body", False)
        if request.body_exists and not request.content.is_eof() and not streams:
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


def reply_deadline(timeout: float) -> Middleware:
    """A whole reply (not a stream, which keeps its own rule) is sent here, under `taken`: a
    client that does not read it is dropped after `timeout` instead of holding its connection
    (and the reply's buffer) for as long as it likes."""
    dropped = Throttled("http_reader_stopped")

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
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
    needed = sum(caps) + MAX_REFUSING + FD_RESERVE
    if soft != resource.RLIM_INFINITY and needed > soft:
        log.warning("fd_limit_below_connection_caps", fd_limit=soft, needed=needed)
