"""The calls the daemon holds, and for whom: what the Tool Lab's "driving" badge reads
(GET /api/live), how many calls each client may have at once, and which calls a revoked token
still has.

The catalog enters an invocation when its handler starts and leaves it when the handler ends;
a HID invocation's handler runs in its own task, so an entry lasts as long as the action does
(its wait for the HID flow included), even after its client went away.

A caller is the transport's name plus CallContext.client. The HTTP transport adds the optional
`X-Fingertip-Caller` header to the peer address, so two pages on one host are told apart. It is
a display label the client chooses, never an identity the daemon trusts: calls are counted
against the peer address (the IPC socket's: the peer's uid), see `client_of`.

Bounds (issue 44), counted in calls, whatever carries them: every call is admitted against a
per-client and a total budget before it runs, and gives its place back when it ends. A request
that carries several calls (a WebSocket tool.batch) reserves all of them first (`reserve`); the
catalog's calls inside it then draw on that reservation, not on the budgets again.

Revocation (daemon.auth's rotate): every call carries its Ticket (the context variable
`current`, inherited by a HID call's own task); `Running.revoke` cuts a revoked token's calls
through their own asyncio timeout, except one that holds the HID flow, which the engine lets
end its current program and then stops (daemon.engine.flow).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from daemon.errors import ToolError

CALLER_HEADER = "X-Fingertip-Caller"
_LABEL = re.compile(r"[^A-Za-z0-9._:-]")
MAX_LABEL = 64
CLIENT_CALLS, TOTAL_CALLS = 32, 64  # [server].max_client_calls, [server].max_calls


def caller_label(remote: str | None, header: str | None) -> str:
    """The HTTP caller: the peer address, plus the client's own label (cleaned and capped)."""
    base = remote or ""
    label = _LABEL.sub("", header or "")[:MAX_LABEL]
    return f"{base}/{label}" if label else base


def client_of(caller: str) -> str:
    """Whom a caller's calls count against: its peer address without the label it chose, or
    on the IPC socket ("pid=1 uid=2 gid=3") its uid; the daemon itself is "" (uncounted)."""
    if caller.startswith("pid="):
        return next((p for p in caller.split() if p.startswith("uid=")), caller)
    return caller.split("/", 1)[0]


@dataclass(eq=False)
class Ticket:
    """One call from its admission (Catalog.call) to its end; `running` while its handler runs
    (or waits for the HID flow)."""

    token_id: str
    units: Reservation | None = None  # its own place in the budget (None: a request's, or none)
    revoked: bool = False  # its token was revoked: it starts nothing more
    tool: str = ""
    transport: str = ""
    caller: str = ""
    started_at: float = 0.0  # time.monotonic(), once running
    task: asyncio.Task[Any] | None = None  # the task its handler runs in (a HID call's own)
    limit: asyncio.Timeout | None = None  # its server-side limit: what a revocation cuts
    driving: bool = False  # it holds the HID flow (daemon.engine.flow marks it)

    def to_dict(self, now: float) -> dict[str, Any]:
        return {
            "tool": self.tool,
            "transport": self.transport,
            "caller": self.caller,
            "running_ms": round((now - self.started_at) * 1000),
        }


# The call this task runs (a HID call's own task inherits it): set by Running.admit.
current: contextvars.ContextVar[Ticket | None] = contextvars.ContextVar("ticket", default=None)


def token_revoked(tool: str) -> ToolError:
    return ToolError(
        "token_revoked",
        f"{tool} was stopped before it started: the token that asked for it was rotated",
        details={"tool": tool},
    )


def too_many_calls(scope: str, cap: int) -> ToolError:
    key = "max_client_calls" if scope == "client" else "max_calls"
    whose = "this client has" if scope == "client" else "all clients together have"
    return ToolError(
        "too_many_calls",
        f"{whose} {cap} calls admitted and not ended, the limit ([server].{key}); retry once "
        "some have ended",
        retryable=True,
        details={key: cap},
    )


@dataclass(eq=False)
class Reservation:
    """Calls admitted for one client; given back once."""

    client: str
    calls: int
    budget: Budget = field(repr=False)

    def release(self) -> None:
        self.budget.give_back(self)


# The reservation of the request this task serves (Budget.reserve): its calls draw on it.
_reserved: contextvars.ContextVar[Reservation | None] = contextvars.ContextVar(
    "reserved", default=None
)


class Budget:
    """Calls admitted and not yet ended: at most `per_client` for one client, `total` for all.
    Never waits: a request past either is refused whole (too_many_calls, retryable), so
    waiting requests cannot pile up either."""

    def __init__(self, total: int = TOTAL_CALLS, per_client: int = CLIENT_CALLS):
        self.total = total
        self.per_client = per_client
        self.used = 0
        self.by_client: dict[str, int] = {}

    def take(self, client: str, calls: int) -> Reservation:
        mine = self.by_client.get(client, 0)
        if mine + calls > self.per_client:
            raise too_many_calls("client", self.per_client)
        if self.used + calls > self.total:
            raise too_many_calls("total", self.total)
        self.by_client[client] = mine + calls
        self.used += calls
        return Reservation(client, calls, self)

    def give_back(self, r: Reservation) -> None:
        if r.calls == 0:
            return
        self.used -= r.calls
        left = self.by_client[r.client] - r.calls
        if left:
            self.by_client[r.client] = left
        else:
            del self.by_client[r.client]
        r.calls = 0

    @contextlib.contextmanager
    def reserve(self, client: str, calls: int) -> Iterator[Reservation]:
        """Admit one request's `calls` at once (all taken, or refused whole); the catalog's
        calls made inside this context draw on them instead of the budget."""
        r = self.take(client, calls)
        token = _reserved.set(r)
        try:
            yield r
        finally:
            _reserved.reset(token)
            r.release()


def _this_task() -> asyncio.Task[Any] | None:
    try:
        return asyncio.current_task()
    except RuntimeError:  # no event loop: a synchronous caller (tests)
        return None


class Running:
    """The registry: touched only on the event loop (no lock)."""

    def __init__(self, budget: Budget | None = None) -> None:
        self._admitted: set[Ticket] = set()
        self._now: set[Ticket] = set()
        self.budget = budget or Budget()

    def admit(self, caller: str, token_id: str = "") -> Ticket:
        """A call arrives (Catalog.call): it takes its place in the budget (unless its request
        reserved it, or the daemon itself calls) and becomes this context's `current`. Raises
        too_many_calls."""
        client = client_of(caller)
        units = None
        if client and _reserved.get() is None:
            units = self.budget.take(client, 1)
        ticket = Ticket(token_id, units)
        self._admitted.add(ticket)
        current.set(ticket)
        return ticket

    def dismiss(self, ticket: Ticket | None) -> None:
        """The call has its outcome (or its client left): its place is given back, once its
        handler's task has ended too (a HID call's own task outlives a client that left)."""
        if ticket is None:
            return
        self._admitted.discard(ticket)
        task = ticket.task
        if ticket.units is None:
            return
        if task is not None and not task.done() and task is not _this_task():
            task.add_done_callback(lambda _: self._release(ticket))
        else:
            self._release(ticket)

    @staticmethod
    def _release(ticket: Ticket) -> None:
        if ticket.units is not None:
            ticket.units.release()

    def enter(self, tool: str, transport: str, caller: str, token_id: str = "") -> Ticket:
        """The admitted call's handler starts, in the current task (a HID call's own): it is
        listed as running. Raises token_revoked when its token was revoked since it came."""
        ticket = current.get()
        if ticket is None or ticket.task is not None or ticket.token_id != token_id:
            ticket = Ticket(token_id)  # not admitted through the catalog (tests, tools)
            current.set(ticket)
        if ticket.revoked:
            raise token_revoked(tool)
        ticket.tool, ticket.transport, ticket.caller = tool, transport, caller
        ticket.started_at = time.monotonic()
        ticket.task = _this_task()
        self._now.add(ticket)
        return ticket

    def leave(self, ticket: Ticket) -> None:
        self._now.discard(ticket)

    def snapshot(self) -> list[dict[str, Any]]:
        now = time.monotonic()
        return [t.to_dict(now) for t in self._now]

    def revoke(self, token_id: str) -> tuple[int, int]:
        """`token_id` is no longer valid. Its calls that do not drive the target (queued for
        the HID flow, admitted and not yet started, or not HID at all) are cut now, through
        their own limit: they end as token_revoked, having started nothing. One that drives
        the target plays its current program to its end and starts no other
        (HidInvocation.run), then releases as every invocation does. The revoking call itself
        goes on. Returns (cut, driving)."""
        me = current.get()
        cut = driving = 0
        for ticket in (*self._admitted, *self._now):
            if ticket.token_id != token_id or ticket is me or ticket.revoked:
                continue
            ticket.revoked = True
            if ticket.driving:
                driving += 1
                continue
            cut += 1
            if ticket.limit is not None:
                with contextlib.suppress(RuntimeError):  # its limit has already ended
                    ticket.limit.reschedule(asyncio.get_running_loop().time())
        return cut, driving
