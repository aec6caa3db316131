"""The MCP endpoint (/mcp) against the real daemon, driven by the official client of the `mcp`
package over streamable HTTP (simulated target)."""

from __future__ import annotations

import base64
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import cv2
import httpx2
import numpy as np
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import ImageContent, TextContent
from mcp_types.version import LATEST_HANDSHAKE_VERSION

from daemon.sim.layout import make_layout
from tests.service.daemonproc import DaemonProcess


@contextlib.asynccontextmanager
async def mcp_client(base: str, token: str | None = None) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {token}"} if token else None
    http = create_mcp_http_client(headers=headers)
    if base.startswith("https://"):  # the daemon's own certificate (tests/service/test_tls.py)
        http = httpx2.AsyncClient(headers=headers, timeout=http.timeout, verify=False)
    transport = streamable_http_client(f"{base}/mcp", http_client=http)
    async with Client(transport) as client:
        yield client


def tile_point(d: DaemonProcess, name: str) -> dict[str, int]:
    """The normalized centre of a home-screen icon, from the simulator's own layout."""
    state = d.sim_state()
    width, height = state["size"]
    tile = next(t for t in make_layout(state["platform"], width, height).tiles if t.name == name)
    return {
        "x": round((tile.icon.x0 + tile.icon.x1) / 2),
        "y": round((tile.icon.y0 + tile.icon.y1) / 2),
    }


def text_json(result: Any) -> Any:
    texts = [c for c in result.content if isinstance(c, TextContent)]
    assert len(texts) == 1
    return json.loads(texts[0].text)


@pytest.fixture
def fast_input() -> dict[str, dict[str, Any]]:
    """A short post-action stability wait keeps the input calls quick on the simulator."""
    return {"input": {"evidence_timeout_ms": 1500, "evidence_stable_ms": 200}}


async def test_initialize_and_list(daemon: DaemonProcess) -> None:
    async with mcp_client(daemon.base) as client:
        init = client.session.initialize_result
        assert init is not None
        assert init.protocol_version == LATEST_HANDSHAKE_VERSION
        assert init.server_info.name == "fingertip"
        assert init.capabilities.tools is not None
        listed = (await client.list_tools()).tools
    http = {t["name"]: t for t in daemon.get_json("/api/tools")["tools"]}
    names = [t.name for t in listed]
    assert names == sorted(names)
    assert {"screenshot", "touch_gesture", "health_check"} <= set(names) <= set(http)
    # The default guard of /mcp is read-write: the critical shell is not offered.
    assert "shell" in http and "shell" not in names
    for tool in listed:
        entry = http[tool.name]
        # Platform filtered: nothing that does not run on this (iOS) target.
        assert "ios" in entry.get("platforms", ["ios"])
        assert tool.input_schema == entry["args_schema"]
        assert tool.annotations is not None
        assert tool.annotations.read_only_hint is (entry["policy"] == "read")
        if entry["policy"] != "read":
            assert tool.annotations.destructive_hint is (entry["policy"] == "critical")
    shot = next(t for t in listed if t.name == "screenshot")
    # The screenshot's bytes travel as an image item, so its output schema has no data.
    assert shot.output_schema is not None
    assert "width" in shot.output_schema["properties"]
    assert "data" not in shot.output_schema["properties"]


async def test_call_read_tool(daemon: DaemonProcess) -> None:
    async with mcp_client(daemon.base) as client:
        result = await client.call_tool("health_check", {})
    assert result.is_error is False
    assert result.structured_content is not None
    assert result.structured_content["ok"] is True
    assert result.structured_content["platform"] == "ios"
    assert text_json(result) == result.structured_content


async def test_screenshot_is_an_image_item(daemon: DaemonProcess) -> None:
    async with mcp_client(daemon.base) as client:
        result = await client.call_tool("screenshot", {"max_width": 200})
    assert result.is_error is False
    images = [c for c in result.content if isinstance(c, ImageContent)]
    assert len(images) == 1 and images[0].mime_type == "image/jpeg"
    data = base64.b64decode(images[0].data)
    img = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    meta = result.structured_content
    assert meta is not None and "data" not in meta
    assert (img.shape[1], img.shape[0]) == (meta["width"], meta["height"]) and meta["width"] == 200
    assert meta["size"] == len(data)
    # No base64 hidden inside the text either.
    assert "data" not in text_json(result)


async def test_tap_returns_post_action_image(
    make_daemon: Callable[..., DaemonProcess], fast_input: dict[str, dict[str, Any]]
) -> None:
    d = make_daemon(fast_input)
    point = tile_point(d, "Settings")
    async with mcp_client(d.base) as client:
        result = await client.call_tool("touch_gesture", {"type": "tap", "point": point})
    assert result.is_error is False, result.content
    assert d.sim_state()["app"] == "Settings"
    meta = result.structured_content
    assert meta is not None and meta["screen_changed"] is True and "action_output" in meta
    images = [c for c in result.content if isinstance(c, ImageContent)]
    assert len(images) == 1 and images[0].mime_type == "image/jpeg"
    assert len(base64.b64decode(images[0].data)) == meta["size"]


async def test_tool_errors_are_results_unknown_tools_are_protocol_errors(
    daemon: DaemonProcess,
) -> None:
    async with mcp_client(daemon.base) as client:
        bad = await client.call_tool("screenshot", {"quality": 0})
        with pytest.raises(MCPError, match="Unknown tool"):
            await client.call_tool("no_such_tool", {})
        with pytest.raises(MCPError, match="Unknown tool"):
            await client.call_tool("skill_manage", {})  # internal: never callable
    assert bad.is_error is True
    error = text_json(bad)
    assert error["code"] == "tool_arguments_invalid"
    assert error["details"]["errors"][0]["path"] == "$.quality"


async def test_guard_limits_listing_and_calls(make_daemon: Callable[..., DaemonProcess]) -> None:
    d = make_daemon({"guard": {"mcp": "read-only"}})
    async with mcp_client(d.base) as client:
        listed = (await client.list_tools()).tools
        denied = await client.call_tool("touch_gesture", {"type": "tap", "point": {"x": 1, "y": 1}})
    assert listed and all(t.annotations and t.annotations.read_only_hint for t in listed)
    assert denied.is_error is True
    assert text_json(denied)["code"] == "tool_execution_denied"
    assert d.sim_state()["reports"].get("pointer", 0) == 0

    full = make_daemon({"guard": {"mcp": "full-access"}})
    async with mcp_client(full.base) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        result = await client.call_tool("shell", {"command": "echo hi"})
    shell = tools["shell"].annotations
    assert shell is not None and shell.destructive_hint is True and shell.read_only_hint is False
    assert result.is_error is False and result.structured_content["stdout"] == "hi\n"


async def test_token_rules_off_loopback(
    make_daemon: Callable[..., DaemonProcess],
    offloop_addr: str,
    fast_input: dict[str, dict[str, Any]],
) -> None:
    reader = "r" * 24
    d = make_daemon(
        {
            **fast_input,
            "server": {"listen": ["127.0.0.1", offloop_addr]},
            "auth": {"client_tokens": [{"token": reader, "max_policy": "read"}]},
        }
    )
    base = d.url(offloop_addr)  # https: TLS off loopback
    assert base.startswith("https://")
    tap = {"type": "tap", "point": {"x": 500, "y": 950}}
    async with mcp_client(base) as client:
        assert (await client.call_tool("health_check", {})).is_error is False  # reads: no token
        refused = await client.call_tool("touch_gesture", tap)
    assert refused.is_error is True and text_json(refused)["code"] == "auth_required"
    assert d.sim_state()["reports"].get("pointer", 0) == 0

    async with mcp_client(base, token="wrong-token") as client:
        refused = await client.call_tool("touch_gesture", tap)
    assert text_json(refused)["code"] == "auth_required"

    async with mcp_client(base, token=reader) as client:  # a read-only client token
        listed = (await client.list_tools()).tools
        denied = await client.call_tool("touch_gesture", tap)
    assert all(t.annotations and t.annotations.read_only_hint for t in listed)
    assert text_json(denied)["code"] == "tool_execution_denied"

    async with mcp_client(base, token=d.token) as client:
        done = await client.call_tool("touch_gesture", tap)
    assert done.is_error is False, done.content
    assert d.sim_state()["reports"]["pointer"] > 0


async def post_raw(
    d: DaemonProcess, body: bytes, headers: dict[str, str] | None = None
) -> tuple[int, Any]:
    hdrs = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    hdrs.update(headers or {})
    async with aiohttp.ClientSession() as s, s.post(f"{d.base}/mcp", data=body, headers=hdrs) as r:
        text = await r.text()
        return r.status, json.loads(text) if text else None


async def test_transport_edges(daemon: DaemonProcess) -> None:
    """What the SDK client never sends, but the streamable HTTP transport defines."""
    ping = b'{"jsonrpc":"2.0","id":7,"method":"ping"}'
    assert await post_raw(daemon, ping) == (200, {"jsonrpc": "2.0", "id": 7, "result": {}})
    note = b'{"jsonrpc":"2.0","method":"notifications/initialized"}'
    assert await post_raw(daemon, note) == (202, None)
    status, body = await post_raw(daemon, b"{not json")
    assert status == 400 and body["error"]["code"] == -32700 and body["id"] is None
    status, body = await post_raw(daemon, b'[{"jsonrpc":"2.0","id":1,"method":"ping"}]')
    assert status == 400 and body["error"]["code"] == -32600
    status, body = await post_raw(daemon, b'{"jsonrpc":"2.0","id":1,"method":"resources/list"}')
    assert status == 200 and body["error"]["code"] == -32601
    status, body = await post_raw(daemon, ping, {"MCP-Protocol-Version": "1999-01-01"})
    assert status == 400 and "2025-11-25" in body["error"]["data"]["supported"]
    status, _ = await post_raw(daemon, ping, {"Accept": "text/html"})
    assert status == 406
    status, _ = await post_raw(daemon, ping, {"Content-Type": "text/plain"})
    assert status == 415
    async with aiohttp.ClientSession() as s:
        for method in ("GET", "DELETE"):
            async with s.request(method, f"{daemon.base}/mcp") as r:
                assert r.status == 405 and r.headers["Allow"] == "POST"
        # The security middleware guards /mcp like every route (DNS rebinding, other sites).
        async with s.post(
            f"{daemon.base}/mcp",
            data=ping,
            headers={"Content-Type": "application/json", "Origin": "http://evil.example"},
        ) as r:
            assert r.status == 403
