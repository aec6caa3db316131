"""The HTTP port's error replies outside a tool call, shared by every route on it (the tools API,
the live stream, the flight recorder, /metrics), so no route module imports another's.

The pure half of the rule is the error codes' declared statuses (daemon.errors) and the bodies
and timestamps of daemon.wire, which the one-shot CLI imports and which therefore stays free of
aiohttp; this module only wraps them in responses.
"""

from __future__ import annotations

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from daemon.errors import ToolError, http_status
from daemon.wire import error_body


def request_too_large(max_bytes: int) -> ToolError:
    """The refusal of a body over [server].max_body_bytes, on every route of the port."""
    return ToolError(
        "request_too_large",
        f"request body is larger than {max_bytes} bytes ([server].max_body_bytes)",
        details={"max_bytes": max_bytes},
    )


def error_response(error: ToolError) -> web.Response:
    """An error raised outside any tool call (a refused request, or the refusal of one of the
    port's data routes: stream, snapshot, live, flight recorder), with the tools API's body
    shape and the code's declared status."""
    return web.json_response(error_body(error), status=http_status(error.code))


def body_limit(max_bytes: int) -> Middleware:
    """aiohttp refuses a body over client_max_size ([server].max_body_bytes) in whichever
    handler reads it, as a plain-text 413: every route answers the tools API's JSON
    request_too_large instead (/mcp answers a JSON-RPC error, in its own handler)."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            response: web.StreamResponse = await handler(request)
        except web.HTTPRequestEntityTooLarge:
            return error_response(request_too_large(max_bytes))
        return response

    return middleware
