"""Dev/test control of the simulated target (only mounted with backend = simulated):
observe its state and inject the faults a real board has (target unplugged, capture gone, a
screen that never settles)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aiohttp import web

if TYPE_CHECKING:
    from daemon.sim.target import SimTarget


def routes(target: SimTarget) -> list[web.RouteDef]:
    actions: dict[str, Any] = {
        "unplug": target.unplug,
        "plug": target.plug,
        "capture_off": target.capture_off,
        "capture_on": target.capture_on,
        "animate_on": lambda: target.set_animating(True),
        "animate_off": lambda: target.set_animating(False),
    }

    async def state(request: web.Request) -> web.Response:
        return web.json_response(target.state())

    async def act(request: web.Request) -> web.Response:
        name = request.match_info["action"]
        if name not in actions:
            raise web.HTTPNotFound(text=f"unknown sim action {name!r}; one of {sorted(actions)}")
        actions[name]()
        return web.json_response(target.state())

    return [web.get("/api/sim/state", state), web.post("/api/sim/{action}", act)]
