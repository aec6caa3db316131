"""The live view's routes: GET /api/stream, /api/snapshot (daemon/screen/stream.py does the
work) and GET /api/live, which the Tool Lab polls for the stream's counters and the invocations
running now (its "driving" badge).

Who may watch is Caller.admit, the rule of every data route of the port: nothing while the
HTTP guard is disabled, and a phone's screen is private, so off loopback the stream and the
snapshot need the pairing token (Authorization: Bearer, or ?token= for a plain <img>, which
cannot send headers: the only routes that take a token in the URL). A stream ends when the token
that opened it is rotated. /api/live shows no screen and is open like health_check. Statuses:
daemon.wire.DATA_STATUS.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from aiohttp import web

from daemon.auth import Auth
from daemon.catalog import Guard
from daemon.errors import ToolError
from daemon.invocations import Running
from daemon.screen.stream import Params, StreamHub, parse_params
from daemon.transports.responses import data_error


def routes(
    hub: StreamHub,
    auth: Auth,
    running: Running,
    guard: Guard,
    usb: Callable[[], dict[str, Any]] | None = None,
) -> list[web.RouteDef]:
    """GET /api/stream, /api/snapshot and /api/live (viewers, the running invocations and the
    USB link's state: the Tool Lab shows a sleeping target)."""

    def admit(request: web.Request, what: str) -> tuple[Params, str]:
        caller = auth.caller("http", guard, request, query_token=True)
        caller.admit(what, private=True)
        return parse_params(request.query, hub.config), caller.token_id

    async def stream(request: web.Request) -> web.StreamResponse:
        try:
            params, token_id = admit(request, "stream")
        except ToolError as exc:
            return data_error(exc)
        task = asyncio.current_task()
        assert task is not None
        unbind = auth.bind(token_id, task.cancel)  # its connection closes with it
        try:
            return await hub.watch(request, params)
        except ToolError as exc:
            return data_error(exc)
        finally:
            unbind()

    async def snapshot(request: web.Request) -> web.Response:
        try:
            frame, encoded = await hub.snapshot(admit(request, "snapshot")[0])
        except ToolError as exc:
            return data_error(exc)
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
            auth.caller("http", guard, request).admit("live")
        except ToolError as exc:
            return data_error(exc)
        body = {"stream": hub.metrics(), "running": running.snapshot()}
        if usb is not None:
            body["usb"] = usb()
        return web.json_response(body)

    return [
        web.get("/api/stream", stream),
        web.get("/api/snapshot", snapshot),
        web.get("/api/live", live),
    ]
