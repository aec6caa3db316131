"""The HTTP port's route table: every route the daemon serves is declared with an access level,
and the one wrapper (daemon.transports.routes.mount) enforces it before the handler runs.
Served in-process by aiohttp's test client; the daemon is built (service.build) and not started:
a refused request never reaches a handler, so nothing behind one needs to run."""

from __future__ import annotations

import re
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest
from aiohttp import web

from daemon import config as cfg
from daemon.auth import Auth
from daemon.catalog import Caller, Guard
from daemon.errors import ToolError
from daemon.service import Daemon, build
from daemon.transports.routes import OPEN, Route, access_of, action, catalog, data, mount

PARAMS = {"name": "health_check", "action": "unplug", "id": "x"}
TOKEN = "a-pairing-token-for-the-route-table"
HOST = {"Host": "127.0.0.1"}  # one of ours (the test server's port is not the configured one)


@pytest.fixture
def built(request: pytest.FixtureRequest) -> Iterator[Daemon]:
    """The daemon `make run` builds (the simulated target mounts /api/sim too), with the
    [guard] presets and [auth] the test's marker gives."""
    overrides: dict[str, Any] = getattr(request, "param", {})
    with tempfile.TemporaryDirectory() as state:
        yield build(
            cfg.from_mapping(
                {
                    "backend": {"kind": "simulated"},
                    "state": {"dir": state},
                    "ipc": {"socket": f"{state}/ipc.sock"},
                    "auth": {"token": TOKEN, **overrides.get("auth", {})},
                    "guard": overrides.get("guard", {}),
                }
            )
        )


def served(d: Daemon) -> list[tuple[str, str, Any]]:
    return [
        (r.method, r.resource.canonical, r.handler)
        for r in d.app.router.routes()
        if r.resource is not None
    ]


def concrete(path: str) -> str:
    return re.sub(r"\{(\w+)\}", lambda m: PARAMS[m.group(1)], path)


def test_every_route_the_daemon_serves_declares_its_access(built: Daemon) -> None:
    routes = served(built)
    assert len(routes) > 15  # the router was read, not an empty app
    undeclared = [f"{m} {p}" for m, p, handler in routes if access_of(handler) is None]
    assert undeclared == []
    levels = {(m, p): access_of(h).level for m, p, h in routes}  # type: ignore[union-attr]
    # The data of the port is never open: the screen and the audit trail are private.
    assert levels["GET", "/api/stream"] == levels["GET", "/api/snapshot"] == "private"
    assert levels["GET", "/api/trace"] == levels["POST", "/api/trace/replay"] == "private"
    assert levels["GET", "/metrics"] == levels["GET", "/api/live"] == "data"
    assert levels["POST", "/api/sim/{action}"] == "action"
    assert levels["POST", "/api/tools/{name}"] == levels["GET", "/api/ws"] == "catalog"
    assert {p for (_, p), level in levels.items() if level == "open"} == {
        "/",
        "/toollab/{name}",
        "/mcp",
    }


DISABLED = {"guard": {"http": "disabled", "mcp": "disabled", "ws": "disabled"}}


@pytest.mark.parametrize("built", [DISABLED], indirect=True)
async def test_with_the_guard_disabled_every_checked_route_refuses(
    built: Daemon, aiohttp_client: Any
) -> None:
    client = await aiohttp_client(built.app, headers=HOST)
    checked = [
        (m, p)
        for m, p, h in served(built)
        if m != "HEAD" and access_of(h).level in ("data", "private", "action")  # type: ignore[union-attr]
    ]
    assert len(checked) >= 8
    for method, path in checked:
        auth = {"Authorization": f"Bearer {TOKEN}"}
        async with client.request(method, concrete(path), headers=auth) as r:
            body = await r.json()
            assert r.status == 403, (method, path, body)
            assert body["error"]["code"] == "tool_execution_denied", (method, path)
    # The catalog's routes refuse through the catalog: nothing listed, nothing run.
    async with client.get("/api/tools") as r:
        assert r.status == 200 and (await r.json())["tools"] == []
    async with client.post("/api/tools/health_check", json={"input": {}}) as r:
        assert r.status == 403 and (await r.json())["error"]["code"] == "tool_execution_denied"


STRICT = {"auth": {"require_on_loopback": True}}


@pytest.mark.parametrize("built", [STRICT], indirect=True)
async def test_private_routes_need_the_token(built: Daemon, aiohttp_client: Any) -> None:
    client = await aiohttp_client(built.app, headers=HOST)
    private = [
        (m, p)
        for m, p, h in served(built)
        if m != "HEAD" and access_of(h).level == "private"  # type: ignore[union-attr]
    ]
    assert ("GET", "/api/trace/{id}") in private
    for method, path in private:
        async with client.request(method, concrete(path)) as r:
            body = await r.json()
            assert r.status == 401 and body["error"]["code"] == "auth_required", (path, body)
            assert body["is_error"] is True


async def test_the_wrapper_runs_the_handler_only_once_admitted(aiohttp_client: Any) -> None:
    ran: list[str] = []

    async def handler(request: web.Request, caller: Caller) -> web.Response:
        ran.append(caller.token_id or "-")
        return web.json_response({"ok": True})

    app = web.Application()
    routes = [
        Route("GET", "/open", handler, OPEN),
        Route("GET", "/data", handler, data("data")),
        Route("GET", "/private", handler, data("private", private=True, query_token=True)),
        Route("GET", "/tools", handler, catalog()),
    ]
    config = cfg.from_mapping({"auth": {"require_on_loopback": True}})
    mount(app, routes, Auth(config, TOKEN), {"http": Guard.preset("read-only")})
    client = await aiohttp_client(app)
    for path in ("/open", "/data", "/tools"):
        async with client.get(path) as r:
            assert r.status == 200, path
    assert ran == ["-", "-", "-"]
    async with client.get("/private") as r:
        assert r.status == 401 and (await r.json())["error"]["code"] == "auth_required"
    async with client.get("/private", params={"token": "wrong"}) as r:
        assert r.status == 401
    assert len(ran) == 3  # refused: the handler did not run
    async with client.get("/private", params={"token": TOKEN}) as r:
        assert r.status == 200
    assert ran[-1] == "pairing"  # the caller the wrapper admitted is the one handed over


async def test_an_action_is_told_of_its_refusals_and_only_of_those(aiohttp_client: Any) -> None:
    """on_refused (a media upload records its refusals through it) hears the access rule's
    refusal, never the handler's own errors nor an admitted request."""
    told: list[tuple[str, str]] = []

    async def handler(request: web.Request, caller: Caller) -> web.Response:
        if request.query.get("fail"):
            raise ToolError("media_name_invalid", "the handler's own refusal")
        return web.json_response({"ok": True})

    def refused(request: web.Request, caller: Caller, exc: ToolError) -> None:
        told.append((exc.code, caller.token_id or "-"))

    access = action(
        lambda _: ("media_upload", "write", False), transport="http", on_refused=refused
    )
    app = web.Application()
    mount(
        app,
        [Route("PUT", "/up", handler, access)],
        Auth(cfg.from_mapping({"auth": {"require_on_loopback": True}}), TOKEN),
        {"http": Guard.preset("full-access")},
    )
    client = await aiohttp_client(app)
    async with client.put("/up") as r:
        assert r.status == 401
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    async with client.put("/up", headers=bearer) as r:
        assert r.status == 200
    async with client.put("/up", headers=bearer, params={"fail": "1"}) as r:
        assert r.status == 400
    assert told == [("auth_required", "-")]


def test_a_route_cannot_be_declared_without_its_access() -> None:
    async def handler(request: web.Request, caller: Caller) -> web.Response:
        return web.Response()

    with pytest.raises(TypeError):
        Route("GET", "/x", handler)  # type: ignore[call-arg]
