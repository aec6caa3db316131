"""Dev/test control of the simulated target over HTTP (only mounted with backend = simulated):
observe its state and inject the faults a real board has. The actions live in daemon.sim.control;
this is only their route. Who may call it is the tools API's rule (Caller.check_token):
observing is a read, a fault is a write."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from daemon.auth import Auth
from daemon.catalog import Guard
from daemon.errors import ToolError
from daemon.sim.control import control
from daemon.wire import STATUS, error_body, loads

if TYPE_CHECKING:
    from daemon.sim.target import SimTarget


def routes(target: SimTarget, auth: Auth) -> list[web.RouteDef]:
    guard = Guard.preset("full-access")  # no guard preset: the token rule alone decides

    def check(request: web.Request, action: str, policy: str) -> None:
        auth.caller("sim", guard, request, kind="http").check_token(f"sim/{action}", policy)

    def error_response(error: ToolError) -> web.Response:
        return web.json_response(error_body(error), status=STATUS.get(error.code, 500))

    async def state(request: web.Request) -> web.Response:
        try:
            check(request, "state", "read")
        except ToolError as exc:
            return error_response(exc)
        return web.json_response(await control(target, "state"))

    async def act(request: web.Request) -> web.Response:
        action = request.match_info["action"]
        try:
            check(request, action, "write")
        except ToolError as exc:
            return error_response(exc)
        body = await request.read()
        try:
            args = loads(body) if body.strip() else {}
            if not isinstance(args, dict):
                raise ValueError("the body must be a JSON object")
            return web.json_response(await control(target, action, args))
        except (ValueError, ToolError) as exc:
            code = exc.code if isinstance(exc, ToolError) else "tool_call_payload_invalid"
            return web.json_response({"error": str(exc), "code": code}, status=400)

    return [web.get("/api/sim/state", state), web.post("/api/sim/{action}", act)]
