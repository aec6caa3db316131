"""A new connection on a TLS listener until its first byte is known: a TLS handshake record goes
on to TLS, anything else (plain HTTP sent to a TLS port) gets a short plain-text 400 saying to
use https, not a hang or a reset. It is handed a plain ssl.SSLContext (daemon.tls makes it);
limits.CappedSite counts it from the accept."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import ssl
from collections.abc import Callable

HANDSHAKE_RECORD = b"\x16"  # the first byte of every TLS connection (a handshake record)


class Gate(asyncio.Protocol):
    """A new connection on a TLS listener until its first byte is known.

    The accepting transport only hands the socket over: at once a duplicate of its fd is taken
    and the transport aborted (that closes its own fd, not the connection), before it can read
    a byte (Python 3.11.2, Debian 12's, registers a transport's reader even when paused in
    connection_made, and its read took the ClientHello). The first byte is then peeked at
    (MSG_PEEK), never read: a handshake record goes to asyncio's TLS, anything else is plain
    HTTP, answered by `refuse_plain`; both through connect_accepted_socket on the socket.
    Nothing within `timeout` (or EOF) closes it, and the handshake has `timeout` too. `done` is
    called once: the connection handed over (to TLS, or to the plain refusal) or closed."""

    def __init__(
        self,
        context: ssl.SSLContext,
        serve: Callable[[], asyncio.BaseProtocol],
        refuse_plain: Callable[[], asyncio.BaseProtocol],
        done: Callable[[Gate], None],
        timeout: float,
        failed: Callable[..., None],
    ):
        self.context, self.serve, self.refuse_plain = context, serve, refuse_plain
        self.done, self.timeout, self.failed = done, timeout, failed
        self.loop = asyncio.get_running_loop()
        self.sock: socket.socket | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.task: asyncio.Task[None] | None = None
        self.finished = False
        self.handed_over = ""  # "tls" (a protocol of `serve` has it) or "plain" (refuse_plain)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        raw = transport.get_extra_info("socket")
        try:
            self.sock = socket.socket(fileno=os.dup(raw.fileno()))
        except OSError:  # out of fds: this connection cannot be looked at
            self._finish()
            return
        finally:
            assert isinstance(transport, asyncio.Transport)
            transport.abort()  # its fd only, and before it reads: `sock` holds the connection
        self.sock.setblocking(False)
        self.loop.add_reader(self.sock.fileno(), self._first_byte)
        self.timer = self.loop.call_later(self.timeout, self.abort)

    def _first_byte(self) -> None:
        assert self.sock is not None
        try:
            first = self.sock.recv(1, socket.MSG_PEEK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            first = b""
        self._stop_watching()
        if not first:  # EOF before a byte
            self.abort()
            return
        sock, self.sock = self.sock, None
        self.task = self.loop.create_task(self._hand_over(sock, first == HANDSHAKE_RECORD))

    async def _hand_over(self, sock: socket.socket, tls: bool) -> None:
        try:
            if tls:
                await self.loop.connect_accepted_socket(
                    self.serve,
                    sock,
                    ssl=self.context,
                    ssl_handshake_timeout=self.timeout,
                    ssl_shutdown_timeout=self.timeout,
                )
            else:
                await self.loop.connect_accepted_socket(self.refuse_plain, sock)
            self.handed_over = "tls" if tls else "plain"
        except (OSError, ssl.SSLError, EOFError) as exc:  # a client that is not one, or left
            sock.close()
            self.failed(error=type(exc).__name__, reason=str(exc)[:200])
        except BaseException:  # cancelled at shutdown
            sock.close()
            raise
        finally:
            self._finish()

    def _stop_watching(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
        if self.sock is not None:
            with contextlib.suppress(Exception):
                self.loop.remove_reader(self.sock.fileno())

    def _finish(self) -> None:
        if not self.finished:
            self.finished = True
            self.done(self)

    def abort(self) -> None:
        """Close the connection (silence, EOF before a byte, shutdown)."""
        self._stop_watching()
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        if self.task is not None:
            self.task.cancel()
        self._finish()

    def connection_lost(self, exc: Exception | None) -> None:
        pass  # the accepting transport ends here at once; the connection lives on in `sock`

    def data_received(self, data: bytes) -> None:
        pass  # never: the accepting transport was aborted before it could read
