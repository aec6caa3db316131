"""The security posture (health_check's `security`, the log at start) against what the daemon
really does, and the pairing token's rotation without a restart: over HTTPS with the
rotate_token tool and on the board with `fingertip token rotate`; the old token refused at
once, its WebSocket sessions and streams closed; no token in any log line, URL or record."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import Callable
from typing import Any

import aiohttp
import pytest

from tests.service.daemonproc import DaemonProcess, eventually
from tests.service.test_input_tools import start, tile
from tests.service.test_ipc_cli import NOBODY, cli

Make = Callable[..., DaemonProcess]
READER, ADMIN = "r" * 24, "a" * 24
FILES = tile("ios", "Files")  # an app whose list a drag moves
NO_CHECK = aiohttp.TCPConnector  # made per session: ssl=False (the certificate: test_tls.py)


def session() -> aiohttp.ClientSession:
    return aiohttp.ClientSession(connector=NO_CHECK(ssl=False))


async def call(
    base: str, tool: str, token: str | None = None, args: Any = None
) -> tuple[int, dict[str, Any]]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        session() as s,
        s.post(f"{base}/api/tools/{tool}", json={"input": args or {}}, headers=headers) as r,
    ):
        return r.status, await r.json()


def secrets_in(d: DaemonProcess, *tokens: str) -> list[str]:
    """Where any of `tokens` appears in what the daemon wrote: its log and its state folder
    (the flight recorder's database included), but for the token file itself."""
    found = []
    places = {"log": d.log_path.read_bytes()}
    for path in d.state_dir.iterdir():
        if path.is_file() and path.name != "pairing-token":
            places[path.name] = path.read_bytes()
    for where, data in places.items():
        found += [f"{where}: {t[:4]}..." for t in tokens if t.encode() in data]
    return found


async def test_posture_says_what_the_daemon_does(make_daemon: Make, offloop_addr: str) -> None:
    d = make_daemon(
        {
            "server": {"listen": ["127.0.0.1", offloop_addr]},
            "guard": {"mcp": "read-only"},
            "auth": {
                "client_tokens": [
                    {"token": READER, "max_policy": "read"},
                    {"token": ADMIN, "max_policy": "critical"},
                ]
            },
        }
    )
    security = d.health()["security"]
    assert [(x["address"], x["tls"], x["loopback"]) for x in security["listeners"]] == [
        ("127.0.0.1", False, True),
        (offloop_addr, True, False),
    ]
    assert security["guards"] == {
        "http": "full-access",
        "ws": "full-access",
        "mcp": "read-only",
        "ipc": "full-access",
    }
    assert security["client_tokens"] == [
        {"id": "client-1", "max_policy": "read"},
        {"id": "client-2", "max_policy": "critical"},
    ]
    token = security["token"]
    assert token["required_off_loopback"] is True and token["required_on_loopback"] is False
    assert token["pairing_token"] == str(d.state_dir / "pairing-token")
    shell = security["shell"]
    assert shell["reachable"] is True
    by = {x["transport"]: x["who"] for x in shell["by"]}
    assert set(by) == {"http", "ws", "ipc"}  # not MCP: its guard is read-only
    network = "holders of the tokens pairing, client-2"
    assert by["http"] == f"loopback: anyone on this machine; network: {network}"
    assert str(os.geteuid()) in by["ipc"]
    assert security["warnings"] == []
    assert security["ipc"]["uids"] == sorted({0, os.geteuid()})
    # The posture is the daemon's behaviour: the shell over MCP is refused, over HTTP off
    # loopback a read client token cannot run it and the critical one can.
    far = d.url(offloop_addr)
    status, body = await call(far, "shell", READER, {"command": "true"})
    assert status == 403 and body["error"]["code"] == "tool_execution_denied"
    status, body = await call(far, "shell", ADMIN, {"command": "true"})
    assert status == 200 and body["is_error"] is False
    mcp = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    headers = {"Authorization": f"Bearer {d.token}", "Accept": "application/json"}
    async with session() as s, s.post(f"{d.base}/mcp", json=mcp, headers=headers) as r:
        assert "shell" not in {t["name"] for t in (await r.json())["result"]["tools"]}
    # Logged at start as it is in health_check; never a secret in either.
    (logged,) = [e for e in d.log_events() if e.get("event") == "security_posture"]
    assert logged["shell"] == shell and logged["client_tokens"] == security["client_tokens"]
    assert secrets_in(d, d.token, READER, ADMIN) == []
    assert d.token not in json.dumps(d.health())

    # On loopback too, with require_on_loopback: the shell's "who" says so.
    strict = make_daemon({"auth": {"require_on_loopback": True}})
    by = {x["transport"]: x["who"] for x in strict.health()["security"]["shell"]["by"]}
    assert by["http"] == "loopback: holders of the tokens pairing"
    assert strict.health()["security"]["token"]["required_on_loopback"] is True


async def test_rotation_over_https_closes_what_the_old_token_opened(
    make_daemon: Make, offloop_addr: str
) -> None:
    d = make_daemon({"server": {"listen": ["127.0.0.1", offloop_addr]}})
    far, old = d.url(offloop_addr), d.token
    auth = {"Authorization": f"Bearer {old}"}
    async with session() as s:
        ws = await s.ws_connect(f"{far}/api/ws", headers=auth)
        stream = await s.get(f"{far}/api/stream", headers=auth)
        assert stream.status == 200
        await stream.content.readuntil(b"\xff\xd9")  # a first frame: the stream is open

        status, body = await call(far, "rotate_token", old)
        assert status == 200 and body["is_error"] is False, body
        result = json.loads(body["output"])
        new = result["token"]
        assert new != old and len(new) >= 40 and result["token_id"] == "pairing"
        assert result["connections_closed"] == 2 and result["token_file"].endswith("token")
        assert d.token == new  # the file holds it, 0600
        assert (d.state_dir / "pairing-token").stat().st_mode & 0o777 == 0o600

        # What the old token opened is closed: the WebSocket with 1008, the stream cut.
        msg = await ws.receive(timeout=30)
        assert msg.type is aiohttp.WSMsgType.CLOSE, msg
        assert (msg.data, msg.extra) == (1008, "the token was rotated")
        # An MJPEG stream never ends by itself: it ending (cut, or closed) is the rotation.
        with contextlib.suppress(aiohttp.ClientPayloadError, aiohttp.ClientConnectionError):
            async with asyncio.timeout(30):
                while await stream.content.read(65536):
                    pass
        await ws.close()
        stream.close()

    # The old token is refused from now on, everywhere; the new one works.
    status, body = await call(far, "shell", old, {"command": "true"})
    assert status == 401 and body["error"]["code"] == "auth_required"
    async with session() as s:
        with pytest.raises(aiohttp.WSServerHandshakeError) as info:
            await s.ws_connect(f"{far}/api/ws", headers=auth)
        assert info.value.status == 401
        async with s.get(f"{far}/api/stream?token={old}") as r:
            assert r.status == 401
    status, body = await call(far, "shell", new, {"command": "true"})
    assert status == 200 and body["is_error"] is False
    assert d.health()["security"]["token"]["rotated_at"]

    # Recorded in the flight recorder, by token id; neither token anywhere the daemon writes.
    async def recorded() -> list[dict[str, Any]]:
        headers = {"Authorization": f"Bearer {new}"}
        async with (
            session() as s,
            s.get(f"{far}/api/trace?tool=rotate_token", headers=headers) as r,
        ):
            return list((await r.json())["invocations"])

    (record,) = await eventually(recorded, "the rotation in the flight recorder")
    assert record["token_id"] == "pairing" and record["outcome"] == "ok"
    await eventually(lambda: any(e.get("event") == "token_rotated" for e in d.log_events()))
    assert secrets_in(d, old, new) == []


async def test_rotate_token_is_for_people_over_http_only(make_daemon: Make) -> None:
    d = make_daemon()  # every guard full-access (tests' default)
    listed = {t["name"] for t in d.get_json("/api/tools")["tools"]}
    assert "rotate_token" in listed
    for catalog in (cli(d.tmp / "ipc.sock", "catalog")[0],):
        assert "rotate_token" not in json.dumps(catalog)
    mcp = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    async with (
        session() as s,
        s.post(f"{d.base}/mcp", json=mcp, headers={"Accept": "application/json"}) as r,
    ):
        assert "rotate_token" not in json.dumps(await r.json())
    # It takes no arguments: anything else is refused, and nothing rotates.
    token = d.token
    for hostile in ({"token": "mine"}, {"x": float("nan")}, {"\ud800": 1}, {"a": [[[[[[]]]]]]}):
        async with (
            session() as s,
            s.post(
                f"{d.base}/api/tools/rotate_token",
                data=json.dumps({"input": hostile}),
                headers={"Content-Type": "application/json"},
            ) as r,
        ):
            body = await r.json()
        assert r.status == 400, body
        assert body["error"]["code"] in ("tool_arguments_invalid", "tool_call_payload_invalid")
    assert d.token == token
    # Under a read-write HTTP guard it is neither listed nor callable.
    rw = make_daemon({"guard": {"http": "read-write"}})
    assert "rotate_token" not in {t["name"] for t in rw.get_json("/api/tools")["tools"]}
    status, body = await call(rw.base, "rotate_token")
    assert status == 403 and body["error"]["code"] == "tool_execution_denied"


async def test_fingertip_token_rotate_on_the_board(make_daemon: Make) -> None:
    d = make_daemon({"ipc": {"mode": "0666", "allowed_uids": [NOBODY]}})
    sock = d.tmp / "ipc.sock"
    old = d.token
    reply, _ = cli(sock, "token", "rotate")
    assert reply["type"] == "complete", reply
    document = reply["document"]
    assert "token" not in document  # it stays in its file, off the terminal
    assert document["token_file"] == str(d.state_dir / "pairing-token")
    new = d.token
    assert new != old
    status, _ = await call(d.url("127.0.0.1"), "rotate_token", old)  # loopback: no token
    assert status == 200  # (a local process with full access may rotate again)
    newest = d.token
    assert newest != new

    # A user the socket lets in, but who is not root nor the daemon's: refused, nothing done.
    if os.geteuid() == 0:
        reply, err = cli(sock, "token", "rotate", user=NOBODY)
        assert reply == {"type": "rejected", "failure": "OUT_OF_SCOPE"}
        assert "may not rotate" in err
        assert d.token == newest
        calls, _ = cli(sock, "call", "health_check", stdin=b"{}", user=NOBODY)  # still served
        assert calls["type"] == "complete"
    for bad in (["token"], ["token", "show"], ["token", "rotate", "extra"]):
        reply, _ = cli(sock, *bad)
        assert reply == {"type": "rejected", "failure": "INVALID_COMMAND"}
    assert d.token == newest


async def test_a_token_from_the_config_is_not_rotated(make_daemon: Make) -> None:
    fixed = "f" * 32
    d = make_daemon({"auth": {"token": fixed}})
    status, body = await call(d.base, "rotate_token")
    assert status == 200 and body["is_error"] is True
    assert body["error"]["code"] == "token_in_config"
    reply, _ = cli(d.tmp / "ipc.sock", "token", "rotate")
    assert reply["type"] == "rejected_document"
    assert reply["document"]["code"] == "token_in_config"
    assert d.health()["security"]["token"]["pairing_token"] == "[auth].token"
    status, _ = await call(d.base, "shell", fixed, {"command": "true"})
    assert status == 200


def held(state: dict[str, Any]) -> list[Any]:
    """What the simulated target holds: contacts, buttons, keys."""
    return [*state["contacts_down"], *state["buttons_down"], *state["keys_down"]]


async def test_rotation_stops_the_old_tokens_queued_calls(make_daemon: Make) -> None:
    """Ten long presses queued with the pairing token, then `fingertip token rotate`: the one
    driving the phone ends its press and lifts; none of the nine waiting for the HID flow ever
    starts (issue 44: seven started after the rotation, the last 14 s later)."""
    d = make_daemon()
    old, sock = d.token, d.tmp / "ipc.sock"
    press = {"type": "long_press", "point": {"x": 500, "y": 500}, "duration_ms": 4000}
    headers = {"Authorization": f"Bearer {old}"}
    async with session() as s:

        async def long_press() -> dict[str, Any]:
            url = f"{d.base}/api/tools/touch_gesture"
            async with s.post(url, json={"input": press}, headers=headers) as r:
                return dict(await r.json())

        calls = [asyncio.create_task(long_press()) for _ in range(10)]
        # All ten admitted (the first driving the target, nine queued for the flow) ...
        await eventually(
            lambda: len(d.get_json("/api/live")["running"]) == 10, "ten calls in the flow"
        )
        # ... and the first one's press is down (a button on a desktop, a contact on a phone).
        await eventually(lambda: held(d.sim_state()), "the first press down")
        reply, _ = await asyncio.to_thread(cli, sock, "token", "rotate")
        assert reply["type"] == "complete", reply
        at_rotation = d.sim_state()
        replies = await asyncio.gather(*calls)

    codes = [r["error"]["code"] if r["is_error"] else "ok" for r in replies]
    assert sorted(codes) == ["ok"] + ["token_revoked"] * 9, codes
    # On the target: one long press happened (the one that was driving), and nothing is held.
    after = d.sim_state()
    presses = [e for e in after["events"] if e.startswith("long press")]
    assert len(presses) == 1, after["events"]
    assert not [e for e in at_rotation["events"] if e.startswith("long press")]
    assert held(after) == []
    # The engine's record: nine calls ended token_revoked, none of them having driven.
    ended = await eventually(
        lambda: [
            e
            for e in d.log_events()
            if e.get("event") == "tool_invocation" and e.get("tool") == "touch_gesture"
        ]
        if sum(e.get("event") == "tool_invocation" and e.get("tool") == "touch_gesture"
               for e in d.log_events()) == 10
        else None,
        "ten touch_gesture invocations logged",
    )  # fmt: skip
    assert sorted(e["error_code"] or "ok" for e in ended) == sorted(codes)
    # The new token drives the target at once: the flow was let go.
    status, body = await call(d.base, "touch_gesture", d.token, {**press, "duration_ms": 100})
    assert status == 200 and body["is_error"] is False, body


async def test_rotation_undoes_the_old_tokens_drag(make_daemon: Make) -> None:
    """A confirmed drag outlives its call on purpose, for [input].drag_limit_s (60 s): one the
    old token began is undone when the token is rotated, not a minute later."""
    d = start(make_daemon)
    old = d.token
    status, body = await call(d.base, "touch_gesture", old, {"type": "tap", "point": FILES})
    assert status == 200 and body["is_error"] is False, body
    status, body = await call(d.base, "drag_start", old, {"point": {"x": 300, "y": 500}})
    assert status == 200 and json.loads(body["output"])["screen_stable"] is True, body
    assert held(d.sim_state()) == ["left"]
    reply, _ = await asyncio.to_thread(cli, d.tmp / "ipc.sock", "token", "rotate")
    assert reply["type"] == "complete", reply
    await eventually(lambda: held(d.sim_state()) == [], "the drag undone", timeout=20)
    undone = await eventually(
        lambda: [e for e in d.log_events() if e.get("event") == "drag_expired"], "drag_expired"
    )
    assert len(undone) == 1
