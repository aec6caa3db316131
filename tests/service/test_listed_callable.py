"""Listed <=> callable over every real transport, on an Android target (the issue's case: the
CLI did not list mouse_move yet ran it). One daemon; each transport lists, then calls every tool
the daemon has (and a few that it hides) with an argument no tool takes: a listed tool reaches
validation, an unlisted one is unknown. Nothing acts on the target."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.service.daemonproc import DaemonProcess
from tests.service.test_ipc_cli import cli
from tests.service.test_ws import connect

BAD = {"__not_an_argument__": 1}
HIDDEN_SOMEWHERE = ("wait_for_wakeup", "skill_manage", "mouse_move", "mouse_scroll", "no_such")


@pytest.fixture(scope="module")
def android(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    folder = tmp_path_factory.mktemp("android")
    d = DaemonProcess(
        folder, {"device": {"device_type": "Android"}, "guard": {"mcp": "full-access"}}
    ).start()
    yield d
    d.kill()


def universe(d: DaemonProcess) -> list[str]:
    names = {t["name"] for t in d.get_json("/api/tools")["tools"]}
    return sorted(names | set(HIDDEN_SOMEWHERE))


def check(transport: str, listed: set[str], codes: dict[str, str]) -> None:
    for name, code in codes.items():
        assert code != "ok", (transport, name)  # nothing takes BAD
        assert (code == "tool_not_found") == (name not in listed), (transport, name, code)


async def test_http(android: DaemonProcess) -> None:
    listed = {t["name"] for t in android.get_json("/api/tools")["tools"]}
    assert {"mouse_move", "mouse_scroll"} <= listed  # diagnostics: listed, marked unavailable
    codes = {}
    async with aiohttp.ClientSession() as s:
        for name in universe(android):
            async with s.post(f"{android.base}/api/tools/{name}", json={"input": BAD}) as r:
                body = await r.json()
            codes[name] = body["error"]["code"] if body["is_error"] else "ok"
    check("http", listed, codes)
    assert codes["mouse_move"] == "tool_unavailable"


async def _mcp(d: DaemonProcess, method: str, params: dict[str, Any]) -> dict[str, Any]:
    message = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    headers = {"Accept": "application/json", "Content-Type": "application/json"}
    async with (
        aiohttp.ClientSession() as s,
        s.post(d.base + "/mcp", data=json.dumps(message), headers=headers) as r,
    ):
        reply: dict[str, Any] = await r.json()
        return reply


async def test_mcp(android: DaemonProcess) -> None:
    listed = {t["name"] for t in (await _mcp(android, "tools/list", {}))["result"]["tools"]}
    assert not {"mouse_move", "mouse_scroll"} & listed  # this target has no mouse pointer
    codes = {}
    for name in universe(android):
        reply = await _mcp(android, "tools/call", {"name": name, "arguments": BAD})
        if "error" in reply:  # MCP says "unknown tool" as a JSON-RPC error
            assert reply["error"]["message"] == f"Unknown tool: {name}"
            codes[name] = "tool_not_found"
        else:
            result = reply["result"]
            codes[name] = json.loads(result["content"][0]["text"])["code"]
    check("mcp", listed, codes)


async def test_websocket(android: DaemonProcess) -> None:
    async with connect(android) as host:
        listed = {t["id"] for t in (await host.query(detail="index"))["tools"]}
        codes = {}
        for name in universe(android):
            reply = await host.call(name, BAD)
            codes[name] = reply["payload"]["code"] if reply["type"] == "tool.error" else "ok"
    check("ws", listed, codes)
    assert "mouse_move" in listed and codes["mouse_move"] == "tool_unavailable"


def test_ipc_cli(android: DaemonProcess) -> None:
    sock = Path(android.tables["ipc"]["socket"])
    reply, _ = cli(sock, "catalog")
    listed = {t["name"] for t in reply["catalog"]["tools"]}
    assert not {"mouse_move", "mouse_scroll", "wait_for_wakeup"} & listed
    codes = {}
    for name in universe(android):
        reply, _ = cli(sock, "call", name, stdin=json.dumps(BAD).encode())
        if reply["type"] == "rejected":
            codes[name] = {"UNKNOWN_TOOL": "tool_not_found"}.get(reply["failure"], reply["failure"])
        else:
            codes[name] = reply["document"].get("code", "ok")
    check("ipc", listed, codes)
    assert codes["mouse_move"] == "tool_not_found"  # listed nowhere here, so not callable
