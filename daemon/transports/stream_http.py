"""The live view's routes: GET /api/stream, /api/snapshot (daemon/screen/stream.py does the
work) and GET /api/live, which the Tool Lab polls for the stream's counters and the invocations
running now (its "driving" badge), the screen geometry (the stream is the target's screen,
cut out of the captured frame) and the USB link's state (a badge while the target sleeps).

Who may watch is declared with each route and checked by the one wrapper
(daemon.transports.routes: Caller.admit, the rule of every data route of the port): nothing
while the HTTP guard is disabled, and a phone's screen is private, so off loopback the stream
and the snapshot need the pairing token (Authorization: Bearer, or ?token= for a plain <img>, which
cannot send headers: the only routes that take a token in the URL). A stream ends when the token
that opened it is rotated. /api/live shows no screen and is open like health_check. Statuses:
the codes' own (daemon.errors.CODES).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from aiohttp import web

from daemon.auth import Auth
from daemon.catalog import Caller
from daemon.invocations import Running
from daemon.screen.stream import StreamHub, parse_params
from daemon.transports.routes import Route, data


def routes(
    hub: StreamHub,
    auth: Auth,
    running: Running,
    screen: Callable[[], dict[str, Any]] | None = None,
    usb: Callable[[], dict[str, Any]] | None = None,
) -> list[Route]:
    """GET /api/stream, /api/snapshot and /api/live (viewers, the running invocations and,
    given `screen`, where the streamed screen sits in the captured frame; given `usb`, the USB
    link's state: the Tool Lab shows a sleeping target)."""

    async def stream(request: web.Request, caller: Caller) -> web.StreamResponse:
        params = parse_params(request.query, hub.config)
        task = asyncio.current_task()
        assert task is not None
        unbind = auth.bind(caller.token_id, task.cancel)  # its connection closes with it
        try:
            return await hub.watch(request, params)
        finally:
            unbind()

    async def snapshot(request: web.Request, caller: Caller) -> web.Response:
        frame, encoded = await hub.snapshot(parse_params(request.query, hub.config))
        return web.Response(
            body=encoded.data,
            content_type="image/jpeg",
            headers={
                "Cache-Control": "no-store",
                "X-Frame-Seq": str(frame.seq),
                "X-Timestamp": f"{frame.captured_at_utc:.6f}",
            },
        )

    async def live(request: web.Request, caller: Caller) -> web.Response:
        body = {"stream": hub.metrics(), "running": running.snapshot()}
        if screen is not None:
            body["screen"] = screen()
        if usb is not None:
            body["usb"] = usb()
        return web.json_response(body)

    return [
        Route("GET", "/api/stream", stream, data("stream", private=True, query_token=True)),
        Route("GET", "/api/snapshot", snapshot, data("snapshot", private=True, query_token=True)),
        Route("GET", "/api/live", live, data("live")),
    ]
