"""The live view's routes: GET /api/stream, /api/snapshot (daemon/screen/stream.py does the
work) and GET /api/live, which the Tool Lab polls for the stream's counters and the invocations
running now (its "driving" badge).

Who may watch. The Host and Origin rules are the HTTP transport's middleware, as for every
route; the token rule is Caller.check_token with the policy of a write tool: a phone's
screen is private, so off loopback the stream and the snapshot need the pairing token
(Authorization: Bearer, or ?token= for a plain <img>, which cannot send headers). /api/live
shows no screen and is read like health_check.

Status mapping (error bodies have the tools API's shape, daemon.transports.http.error_body):
400 stream_params_invalid, 401 auth_required, 503 capture_unavailable and too_many_viewers.
"""

from __future__ import annotations

from aiohttp import web

from daemon.auth import Auth
from daemon.catalog import Guard
from daemon.errors import ToolError
from daemon.invocations import Running
from daemon.screen.stream import Params, StreamHub, parse_params
from daemon.wire import error_body

STATUS = {
    "stream_params_invalid": 400,
    "auth_required": 401,
    "capture_unavailable": 503,
    "too_many_viewers": 503,
}


def _error_response(error: ToolError) -> web.Response:
    status = STATUS.get(error.code, 500)
    return web.json_response(error_body(error), status=status)


def routes(hub: StreamHub, auth: Auth, running: Running, guard: Guard) -> list[web.RouteDef]:
    """GET /api/stream, /api/snapshot and /api/live (viewers and the running invocations)."""

    def admit(request: web.Request, what: str) -> Params:
        caller = auth.caller("http", guard, request, query_token=True)
        caller.check_token(what, "write")  # a phone's screen is private: a write tool's rule
        return parse_params(request.query, hub.config)

    async def stream(request: web.Request) -> web.StreamResponse:
        try:
            return await hub.watch(request, admit(request, "stream"))
        except ToolError as exc:
            return _error_response(exc)

    async def snapshot(request: web.Request) -> web.Response:
        try:
            frame, encoded = await hub.snapshot(admit(request, "snapshot"))
        except ToolError as exc:
            return _error_response(exc)
        return web.Response(
            body=encoded.data,
            content_type="image/jpeg",
            headers={
                "Cache-Control": "no-store",
                "X-Frame-Seq": str(frame.seq),
                "X-Timestamp": f"{frame.captured_at_utc:.6f}",
            },
        )

    async def live(request: web.Request) -> web.Response:
        try:
            auth.caller("http", guard, request).check_token("live", "read")
        except ToolError as exc:
            return _error_response(exc)
        return web.json_response({"stream": hub.metrics(), "running": running.snapshot()})

    return [
        web.get("/api/stream", stream),
        web.get("/api/snapshot", snapshot),
        web.get("/api/live", live),
    ]
