"""Dev/test control of the simulated target over HTTP (only mounted with backend = simulated):
observe its state and inject the faults a real board has. The actions live in daemon.sim.control;
this is only their route. Who may call it is the tools API's rule (Caller.authorize: the token
rule, then the HTTP guard as a client token's max policy lowers it): observing is a read that
shows what was typed, private like the screen; a fault is a write."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from daemon.catalog import Caller
from daemon.errors import ToolError
from daemon.sim.control import control, policy
from daemon.transports.routes import Route, action
from daemon.wire import loads

if TYPE_CHECKING:
    from daemon.sim.target import SimTarget


def _authorized(request: web.Request) -> tuple[str, str, bool]:
    """What an action is to Caller.authorize: its name, policy and privacy."""
    name = request.match_info.get("action", "state")
    return (f"sim/{name}", *policy(name))


def routes(target: SimTarget) -> list[Route]:
    async def state(request: web.Request, caller: Caller) -> web.Response:
        return web.json_response(await control(target, "state"))

    async def act(request: web.Request, caller: Caller) -> web.Response:
        body = await request.read()
        try:
            args = loads(body) if body.strip() else {}
            if not isinstance(args, dict):
                raise ValueError("the body must be a JSON object")
            return web.json_response(await control(target, request.match_info["action"], args))
        except (ValueError, ToolError) as exc:
            code = exc.code if isinstance(exc, ToolError) else "tool_call_payload_invalid"
            return web.json_response({"error": str(exc), "code": code}, status=400)

    access = action(_authorized, transport="sim")
    return [
        Route("GET", "/api/sim/state", state, access),
        Route("POST", "/api/sim/{action}", act, access),
    ]
