"""The Tool Lab: a single page served at `/` that lists the HTTP catalog, invokes tools through
the HTTP tools API (so every rule of that API applies) and shows the target's screen.

Plain files beside this module, no build step and nothing from a CDN: the page works on a
laptop that reaches only the board.
"""

from __future__ import annotations

from pathlib import Path

from aiohttp import web

from daemon.catalog import Caller
from daemon.transports.routes import OPEN, Route

HERE = Path(__file__).resolve().parent
ASSETS = ("app.js", "app.css", "history.js", "history.css", "takeover.js")

# The page only talks to its own origin; screenshots arrive as data: URLs, stream frames as
# blob: URLs.
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
    "img-src 'self' data: blob:; connect-src 'self'; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


async def index(request: web.Request, caller: Caller) -> web.FileResponse:
    return web.FileResponse(HERE / "index.html", headers=HEADERS)


async def asset(request: web.Request, caller: Caller) -> web.FileResponse:
    name = request.match_info["name"]
    if name not in ASSETS:
        raise web.HTTPNotFound()
    return web.FileResponse(HERE / name, headers=HEADERS)


def routes() -> list[Route]:
    # Open: the page holds no data; what it shows comes through the routes that check access.
    return [Route("GET", "/", index, OPEN), Route("GET", "/toollab/{name}", asset, OPEN)]
