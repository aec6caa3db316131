"""Every route of the HTTP port is declared once, as a Route: method, path, handler and the
Access it needs. mount() is the one wrapper around every handler: it reads the request's Caller,
applies the route's access rule before the handler runs, and answers a ToolError raised in
either with the port's error reply, so no handler checks access itself and none can forget to.

The access levels (who decides, and what a refusal is):
  open     nobody: the Tool Lab's static files, /mcp's 405 (Host and Origin are the security
           middleware's, before any route)
  catalog  the catalog, per tool, from the Caller the wrapper hands over (the tools API, its
           OpenAPI description, MCP, the WebSocket protocol)
  data     Caller.admit: open where the caller's guard is (/metrics, /api/live)
  private  Caller.admit(private=True): the token wherever a write tool needs one (the stream,
           the snapshot, the flight recorder)
  action   Caller.authorize with the policy the route names for the request (/api/sim/*)
Refusals and other ToolErrors get the tools API's body with the status of their code
(responses.error_response).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from aiohttp import typedefs, web

from daemon.auth import Auth
from daemon.catalog import Caller, Guard
from daemon.errors import ToolError
from daemon.transports.responses import error_response

Level = Literal["open", "catalog", "data", "private", "action"]
Handler = Callable[[web.Request, Caller], Awaitable[web.StreamResponse]]
# (what is run, its policy, whether it is private), as Caller.authorize takes them.
ActionOf = Callable[[web.Request], tuple[str, str, bool]]
# Told of a refusal by the access rule, for a route whose runs are recorded as a tool's are.
OnRefused = Callable[[web.Request, Caller, ToolError], None]


@dataclass(frozen=True)
class Access:
    """Who may reach a route: its level, and whose Caller it reads (`transport` names it in
    the caller, `guard` the [guard] preset it is under, `kind` its row of CALLER_KINDS)."""

    level: Level
    transport: str = "http"
    guard: str = "http"
    kind: str | None = None
    what: str = ""  # how a data route's refusal names it
    query_token: bool = False  # ?token= is read too (a plain <img> sends no header)
    action: ActionOf | None = None
    # An action recorded like a tool call (a media upload): its refusals are recorded as a
    # refused tool call is (the catalog's trail keeps those), so a refused one leaves a trace.
    on_refused: OnRefused | None = None

    def check(self, caller: Caller, request: web.Request) -> None:
        """Raise the ToolError that refuses `caller`, or return."""
        if self.level in ("data", "private"):
            caller.admit(self.what, private=self.level == "private")
        elif self.level == "action":
            assert self.action is not None
            caller.authorize(*self.action(request))


OPEN = Access("open")


def catalog(transport: str = "http", *, kind: str | None = None) -> Access:
    """The catalog decides, per tool, from the Caller (the transport's own guard)."""
    return Access("catalog", transport, transport, kind)


def data(what: str, *, private: bool = False, query_token: bool = False) -> Access:
    """A route that is data, not a tool: Caller.admit under the HTTP guard."""
    return Access("private" if private else "data", what=what, query_token=query_token)


def action(of: ActionOf, *, transport: str, on_refused: OnRefused | None = None) -> Access:
    """Something that runs like a tool of the policy `of` names (Caller.authorize), under the
    HTTP guard and the tools API's kind of caller; `on_refused` is told when the rule refuses."""
    return Access("action", transport, "http", "http", action=of, on_refused=on_refused)


@dataclass(frozen=True)
class Route:
    method: str
    path: str
    handler: Handler
    access: Access
    # Its body may take longer than [server].body_timeout_s (an image upload): the handler
    # bounds each chunk's wait itself, and limits.body_deadline leaves it alone.
    streams_body: bool = False


def mount(
    app: web.Application, routes: Iterable[Route], auth: Auth, guards: Mapping[str, Guard]
) -> None:
    """Add `routes` to `app`, each behind the access wrapper (`guards` by [guard] name)."""
    app.add_routes(
        [web.route(r.method, r.path, wrap(r, auth, guards[r.access.guard])) for r in routes]
    )


def wrap(route: Route, auth: Auth, guard: Guard) -> typedefs.Handler:
    access, handler = route.access, route.handler

    async def checked(request: web.Request) -> web.StreamResponse:
        caller = auth.caller(
            access.transport, guard, request, query_token=access.query_token, kind=access.kind
        )
        try:
            access.check(caller, request)
        except ToolError as exc:
            if access.on_refused is not None:
                access.on_refused(request, caller, exc)
            return error_response(exc)
        try:
            return await handler(request, caller)
        except ToolError as exc:
            return error_response(exc)

    checked.access = access  # type: ignore[attr-defined]  # read by the route table's test
    checked.streams_body = route.streams_body  # type: ignore[attr-defined]  # body_deadline
    return checked


def access_of(handler: object) -> Access | None:
    """The Access a mounted handler enforces; None for a handler mount() did not wrap."""
    found = getattr(handler, "access", None)
    return found if isinstance(found, Access) else None
