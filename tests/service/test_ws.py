"""The WebSocket tool protocol against the real daemon on loopback (simulated target), with a
real aiohttp WebSocket client playing the host."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import gzip
import json
import zlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import cv2
import numpy as np
import pytest

from daemon.transports import ws_codec
from tests.service.daemonproc import DaemonProcess, eventually
from tests.unit.test_ws_catalog import FULL_REPLY_KEYS

Make = Callable[..., DaemonProcess]
ENVELOPE_ORDER = ["type", "id", "replyTo", "sessionId", "sentAt", "capability", "payload"]
READ_TOKEN = "read-only-client-token-0123456789"
WRITE_TOKEN = "write-client-token-0123456789abc"
_ABSENT: Any = object()


class Host:
    """One host session: envelopes out, envelopes (and ASFT frames) in."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse):
        self.ws = ws
        self.n = 0

    async def send(self, obj: Any) -> None:
        await self.ws.send_str(obj if isinstance(obj, str) else json.dumps(obj))

    async def recv_raw(self) -> aiohttp.WSMessage:
        return await self.ws.receive(timeout=60)

    async def recv(self) -> dict[str, Any]:
        msg = await self.recv_raw()
        assert msg.type is aiohttp.WSMsgType.TEXT, (msg.type, msg.data, msg.extra)
        env: dict[str, Any] = json.loads(msg.data)
        assert list(env) == [k for k in ENVELOPE_ORDER if k in env]
        assert env["capability"] == "tool.exec" and env["sentAt"].endswith("Z")
        return env

    def envelope(self, kind: str, payload: Any = _ABSENT, **fields: Any) -> dict[str, Any]:
        self.n += 1
        env: dict[str, Any] = {
            "type": kind,
            "id": f"req_{self.n}",
            "sessionId": "session_1",
            "sentAt": "2026-08-25T00:00:00Z",
            "capability": "tool.exec",
        }
        env.update(fields)
        if payload is not _ABSENT:
            env["payload"] = payload
        return env

    async def request(self, kind: str, payload: Any = _ABSENT, **fields: Any) -> dict[str, Any]:
        env = self.envelope(kind, payload, **fields)
        await self.send(env)
        reply = await self.recv()
        assert reply["replyTo"] == env["id"] and reply["id"] == f"{env['id']}.response"
        session = env.get("sessionId")
        assert reply.get("sessionId") == (session if isinstance(session, str) else None)
        reply["payload"] = ws_codec.unwrap_payload(reply["payload"], 1 << 30)
        return reply

    async def query(self, **payload: Any) -> dict[str, Any]:
        reply = await self.request("tool.query", payload)
        assert reply["type"] == "tool.catalog", reply
        return dict(reply["payload"])

    async def call(self, tool: str, arguments: Any = _ABSENT, **extra: Any) -> dict[str, Any]:
        payload: dict[str, Any] = {"toolId": tool, **extra}
        if arguments is not _ABSENT:
            payload["arguments"] = arguments
        return await self.request("tool.call", payload)

    async def closed_with(self) -> int | None:
        """Read until the server closes; the close code it sent."""
        while True:
            msg = await self.recv_raw()
            if msg.type is aiohttp.WSMsgType.CLOSE:
                return int(msg.data)
            if msg.type in (
                aiohttp.WSMsgType.CLOSED,
                aiohttp.WSMsgType.CLOSING,
                aiohttp.WSMsgType.ERROR,
            ):
                return self.ws.close_code


@contextlib.asynccontextmanager
async def connect(
    d: DaemonProcess, token: str | None = None, *, in_query: bool = False, **kw: Any
) -> AsyncIterator[Host]:
    token = d.token if token is None else token
    url = f"{d.base}/api/ws" + (f"?token={token}" if in_query else "")
    headers = {} if in_query else {"Authorization": f"Bearer {token}"}
    async with (
        aiohttp.ClientSession() as session,
        session.ws_connect(url, headers=headers, **kw) as ws,
    ):
        yield Host(ws)


def error(reply: dict[str, Any], code: str) -> dict[str, Any]:
    assert reply["type"] == "tool.error", reply
    payload: dict[str, Any] = reply["payload"]
    assert payload["code"] == code, payload
    assert set(payload) <= {"code", "message", "retryable", "details"}
    assert isinstance(payload["message"], str) and isinstance(payload["retryable"], bool)
    return payload


def ok(reply: dict[str, Any]) -> dict[str, Any]:
    assert reply["type"] == "tool.result", reply
    payload: dict[str, Any] = reply["payload"]
    assert payload["success"] is True
    return payload


def skills(tmp_path: Path, description: str = "Plans trips.") -> dict[str, dict[str, Any]]:
    skill = tmp_path / "skills" / "planner"
    skill.mkdir(parents=True, exist_ok=True)
    (skill / "SKILL.md").write_text(
        f"---\nname: planner\ndescription: {description}\n---\n# Plan\nStep 1.\n"
    )
    return {"skills": {"dir": str(tmp_path / "skills")}}


async def post(d: DaemonProcess, path: str) -> Any:
    async with aiohttp.ClientSession() as s, s.post(d.base + path) as r:
        assert r.status == 200
        return await r.json()


async def logged(d: DaemonProcess, event: str) -> list[dict[str, Any]]:
    """The daemon's log events once `event` has been logged (it logs after the client sees
    the effect, so poll a little)."""
    await eventually(
        lambda: any(e.get("event") == event for e in d.log_events()), f"{event} logged"
    )
    return d.log_events()


# -- the upgrade ----------------------------------------------------------------------------


async def test_unauthenticated_upgrade_is_refused(daemon: DaemonProcess) -> None:
    for token in ("", "not-the-token"):
        with pytest.raises(aiohttp.WSServerHandshakeError) as info:
            async with connect(daemon, token):
                pass
        assert info.value.status == 401
    # The same refusal as a plain request: a JSON body with a stable code, nothing upgraded.
    async with aiohttp.ClientSession() as s:
        async with s.get(daemon.base + "/api/ws") as r:
            assert r.status == 401 and r.headers["WWW-Authenticate"] == "Bearer"
            assert (await r.json())["error"]["code"] == "auth_required"
        auth = {"Authorization": f"Bearer {daemon.token}"}
        async with s.get(daemon.base + "/api/ws", headers=auth) as r:
            assert r.status == 426
            assert (await r.json())["error"]["code"] == "websocket_upgrade_required"
    assert not [e for e in daemon.log_events() if e.get("event") == "ws_connected"]


async def test_token_in_header_only(daemon: DaemonProcess) -> None:
    async with connect(daemon) as host:
        assert (await host.query(detail="index"))["count"] > 0
    # Never in the URL (proxies, browser history and access logs keep URLs): a host can send
    # the header, and ?token= is taken only by the stream and snapshot (a plain <img>).
    with pytest.raises(aiohttp.WSServerHandshakeError) as info:
        async with connect(daemon, in_query=True):
            pass
    assert info.value.status == 401


async def test_foreign_origin_is_refused(daemon: DaemonProcess) -> None:
    with pytest.raises(aiohttp.WSServerHandshakeError) as info:
        async with connect(daemon, origin="http://evil.example"):
            pass
    assert info.value.status == 403


# -- catalog --------------------------------------------------------------------------------


async def test_query_details(daemon: DaemonProcess) -> None:
    async with connect(daemon) as host:
        full = await host.query()
        assert list(full) == FULL_REPLY_KEYS
        assert full["schema"] == "ansight.tool-catalog.v3"
        ids = [t["id"] for t in full["tools"]]
        assert ids == sorted(ids) and {"health_check", "screenshot", "shell"} <= set(ids)
        assert not {"skill_manage", "skill_mark_used"} & set(ids)
        assert full["count"] == full["totalCount"] == len(ids)
        assert sum(full["categories"].values()) == len(ids)
        shell = next(t for t in full["tools"] if t["id"] == "shell")
        assert shell["policy"] == "critical" and shell["category"] == "system"
        assert "additionalProperties" not in shell["argumentsSchema"]  # protocol default
        assert shell["keywords"] == "command, exec, terminal"
        assert "runtime" not in shell and "executable" not in shell
        assert "argumentEncoding" not in shell

        index = await host.query(detail="index")
        assert index["detail"] == "index" and index["revision"] == full["revision"]
        assert all("argumentsSchema" not in t and "resultSchema" not in t for t in index["tools"])
        defs = await host.query(detail="definitions", ids=["shell", "screenshot", "nope"])
        assert list(defs) == ["schema", "revision", "tools", "count", "detail"]
        assert [t["id"] for t in defs["tools"]] == ["screenshot", "shell"]
        by_id = {t["id"]: t for t in full["tools"]}
        for t in defs["tools"]:
            assert t == by_id[t["id"]]  # same definition, same definitionRevision

        # Filters, applied before serialization; totals still describe the catalog.
        assert [t["id"] for t in (await host.query(policy="critical"))["tools"]] == ["shell"]
        for filters, expected in (
            ({"query": "Capture IMAGE"}, "screenshot"),
            ({"feature": "idle"}, "wait_for_stable_screen"),
            ({"query": "screen", "feature": "settle"}, "wait_for_stable_screen"),
        ):
            found = await host.query(detail="index", **filters)
            assert expected in [t["id"] for t in found["tools"]]
            assert 0 < found["count"] < found["totalCount"]
            terms = " ".join(filters.values()).lower().split()
            for t in found["tools"]:
                text = " ".join((t["id"], t["name"], t["description"], t.get("keywords", "")))
                assert all(term in text.lower() for term in terms), (t["id"], terms)
        limited = await host.query(detail="index", limit=2)
        assert limited["count"] == 2 and limited["totalCount"] == len(ids)
        assert (await host.query(detail="index", maxResults=0))["count"] == 1
        # A payload may be left out: full catalog. Bad members are protocol errors.
        bare = await host.request("tool.query")
        assert bare["payload"]["revision"] == full["revision"]
        bad = await host.request("tool.query", {"detail": "everything"})
        details = error(bad, "tool_protocol_invalid_request")["details"]
        assert details["errors"][0]["path"] == "$.detail"


async def test_revisions_across_restart_tool_and_guard_changes(
    make_daemon: Make, tmp_path: Path
) -> None:
    async def revisions(d: DaemonProcess, token: str | None = None) -> tuple[str, str]:
        async with connect(d, token) as host:
            index = await host.query(detail="index")
            return index["revision"], index["availabilityRevision"]

    first = make_daemon(skills(tmp_path))
    base = await revisions(first)
    first.stop()
    again = make_daemon(skills(tmp_path))
    assert await revisions(again) == base  # same config, new process: same revisions
    again.stop()
    edited = make_daemon(skills(tmp_path, "Plans trips and hikes."))
    rev, avail = await revisions(edited)
    assert rev != base[0] and avail == base[1]  # a tool changed; availability did not
    edited.stop()
    read_write = make_daemon({**skills(tmp_path), "guard": {"ws": "read-write"}})
    assert (await revisions(read_write))[0] != base[0]


async def test_availability_only_and_unchanged_replies(daemon: DaemonProcess) -> None:
    async with connect(daemon) as host:
        first = await host.query(detail="index")
        rev, avail = first["revision"], first["availabilityRevision"]
        same = await host.query(detail="index", ifRevision=rev, ifAvailabilityRevision=avail)
        assert json.dumps(same) == json.dumps(
            {"schema": "ansight.tool-catalog.v3", "revision": rev, "unchanged": True}
        )
        await post(daemon, "/api/sim/capture_off")
        moved = await host.query(detail="index", ifRevision=rev, ifAvailabilityRevision=avail)
        assert list(moved) == [
            "schema",
            "revision",
            "unchanged",
            "availabilityRevision",
            "evaluatedAtUtc",
            "changes",
        ]
        assert moved["revision"] == rev and moved["unchanged"] is True
        assert moved["availabilityRevision"] != avail
        # the text tools read the screen, so they go with the capture too
        screen_tools = ["find_text", "screen_text", "screenshot", "tap_text"]
        assert sorted(moved["changes"]) == [*screen_tools, "wait_for_stable_screen"]
        change = moved["changes"]["screenshot"]
        assert change["available"] is False and change["code"] == "capture_unavailable"
        assert change["retryable"] is True and change["remediation"]
        # The full view marks the same tools; executableOnly leaves them out.
        index = await host.query(detail="index")
        assert index["availabilityRevision"] == moved["availabilityRevision"]
        marked = {t["id"] for t in index["tools"] if t.get("executable") is False}
        assert marked == {*screen_tools, "wait_for_stable_screen"}
        runnable = await host.query(detail="index", executableOnly=True)
        assert not marked & {t["id"] for t in runnable["tools"]}
        # Availability is evaluated again right before execution.
        error(await host.call("screenshot", {}), "tool_unavailable")
        await post(daemon, "/api/sim/capture_on")
        back = await host.query(detail="index", ifRevision=rev, ifAvailabilityRevision=avail)
        assert list(back) == ["schema", "revision", "unchanged"]


async def test_read_token_sees_and_calls_only_read_tools(make_daemon: Make) -> None:
    d = make_daemon(
        {
            "auth": {
                "client_tokens": [
                    {"token": READ_TOKEN, "max_policy": "read"},
                    {"token": WRITE_TOKEN, "max_policy": "write"},
                ]
            }
        }
    )
    async with connect(d, READ_TOKEN) as reader, connect(d) as owner:
        seen = await reader.query()
        assert {t["policy"] for t in seen["tools"]} == {"read"}
        assert "shell" not in {t["id"] for t in seen["tools"]}
        denied = error(await reader.call("shell", {"command": "true"}), "tool_execution_denied")
        assert denied["details"] == {"policy": "critical", "maxPolicy": "read"}
        assert ok(await reader.call("health_check"))["result"]["ok"] is True
        owned = await owner.query()
        assert "shell" in {t["id"] for t in owned["tools"]}
        assert owned["revision"] != seen["revision"]  # the effective guard is part of it
        assert ok(await owner.call("shell", {"command": "echo hi"}))["result"]["stdout"] == "hi\n"
    async with connect(d, WRITE_TOKEN) as writer:
        policies = {t["policy"] for t in (await writer.query())["tools"]}
        assert policies == {"read", "write"}


async def test_disabled_guard(make_daemon: Make) -> None:
    d = make_daemon({"guard": {"ws": "disabled"}})
    async with connect(d) as host:
        error(await host.request("tool.query", {}), "tool_discovery_disabled")
        error(await host.call("health_check"), "tool_execution_denied")


# -- calls ----------------------------------------------------------------------------------


async def test_call_results_and_errors(daemon: DaemonProcess) -> None:
    async with connect(daemon) as host:
        result = ok(await host.call("health_check", {}))
        assert list(result) == ["toolId", "success", "result"]
        assert result["toolId"] == "health_check" and result["result"]["platform"] == "ios"
        assert ok(await host.call("health_check"))["result"]["ok"] is True  # arguments optional
        assert ok(await host.call("health_check", None))["result"]["ok"] is True
        error(await host.call("no_such_tool"), "tool_not_found")
        error(await host.call("skill_manage"), "tool_not_found")  # internal
        error(await host.request("tool.call", {"arguments": {}}), "tool_call_missing_id")
        error(await host.request("tool.call", {"toolId": ""}), "tool_call_missing_id")
        error(await host.request("tool.call", ["health_check"]), "tool_call_payload_invalid")
        error(await host.request("tool.call"), "tool_call_payload_invalid")
        for tool in ("health_check", "touch_gesture"):
            bad = error(await host.call(tool, [1]), "tool_arguments_invalid")
            assert bad["details"]["valid"] is False
            assert bad["details"]["errors"] == [
                {
                    "path": "$",
                    "code": "type_mismatch",
                    "message": "arguments must be a JSON object, not array",
                }
            ]
        extra = error(await host.call("health_check", {"x": 1}), "tool_arguments_invalid")
        assert extra["details"]["errors"][0]["code"] == "additional_property_not_allowed"
        missing = error(await host.call("shell", {}), "tool_arguments_invalid")
        assert missing["details"]["errors"][0] == {
            "path": "$.command",
            "code": "required_property_missing",
            "message": "'command' is a required property",
        }
        wrong = error(await host.call("screenshot", {"quality": None}), "tool_arguments_invalid")
        assert wrong["details"]["errors"][0]["code"] == "null_not_allowed"
        for options in (
            {"after": {"delayMilliseconds": 2001}},
            {"after": {"delayMilliseconds": -1}},
            {"after": {"include": ["logs"]}},
            {"after": {"screenshotArguments": {"quality": 0}}},
            {"after": {"unknown": 1}},
            {"callId": 5},
            {"deliveryMode": "carrier-pigeon"},
            {"chunkBytes": 100},
        ):
            bad = error(await host.call("health_check", {}, **options), "tool_call_payload_invalid")
            assert bad["details"]["errors"]
        # A tool's own failure keeps its code (shell's sessions are the shell's business).
        gone = await host.call("shell", {"action": "read", "session": "s99"})
        error(gone, "shell_session_not_found")


async def test_after_evidence(daemon: DaemonProcess) -> None:
    async with connect(daemon) as host:
        reply = ok(
            await host.call(
                "health_check",
                {},
                after={
                    "include": ["screenshot", "visualTree", "tree"],
                    "delayMilliseconds": 100,
                    "screenshotArguments": {"max_width": 120, "format": "png"},
                },
            )
        )
        evidence = reply["evidence"]
        assert list(evidence) == ["screenshot", "visualTree", "tree"]
        shot = evidence["screenshot"]
        assert shot["success"] is True and shot["toolId"] == "screenshot"
        image = cv2.imdecode(
            np.frombuffer(base64.b64decode(shot["result"]["data"]), np.uint8), cv2.IMREAD_COLOR
        )
        assert image.shape[1] == shot["result"]["width"] == 120
        assert shot["result"]["format"] == "png"
        for key in ("visualTree", "tree"):  # the on-device OCR of the frame (screen_text)
            tree = evidence[key]
            assert tree["success"] is True and tree["toolId"] == "screen_text", tree
            assert "Settings" in {e["text"] for e in tree["result"]["elements"]}
        # No include: the peers' default, the visual tree; visualTreeArguments are screen_text's.
        region = {"x0": 0, "y0": 0, "x1": 1000, "y1": 200}
        after = {"visualTreeArguments": {"region": region, "min_confidence": 0.8}}
        default = ok(await host.call("health_check", {}, after=after))
        assert list(default["evidence"]) == ["visualTree"]
        elements = default["evidence"]["visualTree"]["result"]["elements"]
        assert elements and all(e["center"]["y"] <= 200 for e in elements)
        bad = ok(await host.call("health_check", {}, after={"visualTreeArguments": {"x": 1}}))
        assert bad["evidence"]["visualTree"]["error"]["code"] == "tool_arguments_invalid"
        # A screenshot's result is its own screenshot evidence.
        own = ok(await host.call("screenshot", {}, after={"include": ["screenshot"]}))
        assert "evidence" not in own and own["result"]["format"] == "jpeg"
        # Capture gone: the evidence says so, the call itself still succeeded.
        await post(daemon, "/api/sim/capture_off")
        blind = ok(await host.call("health_check", {}, after={"include": ["screenshot"]}))
        assert blind["result"]["capture"]["available"] is False
        failed = blind["evidence"]["screenshot"]
        assert failed["success"] is False and failed["error"]["code"] == "capture_unavailable"


async def test_flattened_string_tool(make_daemon: Make, tmp_path: Path) -> None:
    d = make_daemon(skills(tmp_path))
    async with connect(d) as host:
        defs = await host.query(detail="definitions", ids=["skill_planner"])
        (planner,) = defs["tools"]
        assert planner["argumentEncoding"] == "flattened-string"
        result = ok(await host.call("skill_planner", {"input": 42}))  # flattened to "42"
        assert result["result"]["content"].endswith("Step 1.\n")


async def test_hid_calls_from_several_hosts_share_one_flow(daemon: DaemonProcess) -> None:
    texts = ["aaaaaaaa", "bbbbbbbb", "cccccccc"]
    async with connect(daemon) as h1, connect(daemon) as h2, connect(daemon) as h3:
        replies = await asyncio.gather(
            *(
                h.call("keyboard_text", {"text": t})
                for h, t in zip((h1, h2, h3), texts, strict=True)
            )
        )
    assert [ok(r)["result"]["typed"] for r in replies] == [8, 8, 8]
    events = daemon.sim_state()["events"]
    typed = "".join(e[6] for e in events if e.startswith("type '") and e.endswith("(no focus)"))
    # Serialized: each text arrives whole, never interleaved with another host's.
    assert sorted(typed[i : i + 8] for i in range(0, 24, 8)) == texts


async def test_requests_on_one_socket_run_concurrently(daemon: DaemonProcess) -> None:
    async with connect(daemon) as host:
        slow = host.envelope("tool.call", {"toolId": "shell", "arguments": {"command": "sleep 3"}})
        quick = host.envelope("tool.query", {"detail": "index"})
        await host.send(slow)
        await host.send(quick)
        first, second = await host.recv(), await host.recv()
        assert (first["replyTo"], second["replyTo"]) == (quick["id"], slow["id"])


async def test_inflight_limit(make_daemon: Make) -> None:
    d = make_daemon({"ws": {"max_inflight": 1}})
    async with connect(d) as host:
        slow = host.envelope("tool.call", {"toolId": "shell", "arguments": {"command": "sleep 2"}})
        await host.send(slow)
        busy = await host.request("tool.query", {})
        assert error(busy, "tool_protocol_busy")["retryable"] is True
        assert ok(await host.recv())["result"]["exit_code"] == 0


# -- batches --------------------------------------------------------------------------------


async def test_batches(daemon: DaemonProcess) -> None:
    async with connect(daemon) as host:

        async def batch(calls: Any, **extra: Any) -> dict[str, Any]:
            return await host.request("tool.batch", {"calls": calls, **extra})

        health = {"toolId": "health_check", "arguments": {}}
        for size in (0, 33):
            bad = error(await batch([health] * size), "tool_batch_size_invalid")
            assert bad["details"] == {"requested": size, "max": 32}
        one = await batch([{**health, "callId": "only"}])
        assert one["type"] == "tool.batch.result"
        assert one["payload"] == {
            "success": True,
            "completed": 1,
            "requested": 1,
            "stoppedEarly": False,
            "results": [
                {
                    "index": 0,
                    "callId": "only",
                    "toolId": "health_check",
                    "success": True,
                    "result": one["payload"]["results"][0]["result"],
                }
            ],
        }
        full = (await batch([{**health, "callId": f"c{i}"} for i in range(32)]))["payload"]
        assert (full["success"], full["completed"], full["requested"]) == (True, 32, 32)
        assert [r["index"] for r in full["results"]] == list(range(32))
        assert [r["callId"] for r in full["results"]] == [f"c{i}" for i in range(32)]

        marker = "echo ran >> batch-marker"
        calls = [
            health,
            {"toolId": "no_such_tool", "callId": "bad"},
            {"toolId": "shell", "arguments": {"command": marker}},
        ]
        stopped = (await batch(calls))["payload"]
        assert (stopped["success"], stopped["completed"], stopped["stoppedEarly"]) == (
            False,
            2,
            True,
        )
        failed = stopped["results"][1]
        assert failed == {
            "index": 1,
            "callId": "bad",
            "toolId": "no_such_tool",
            "success": False,
            "message": failed["error"]["message"],
            "error": failed["error"],
        }
        assert failed["error"]["code"] == "tool_not_found"
        assert not (daemon.state_dir / "batch-marker").exists()  # the rest never ran
        went_on = (await batch(calls, continueOnError=True))["payload"]
        assert (went_on["success"], went_on["completed"], went_on["stoppedEarly"]) == (
            False,
            3,
            False,
        )
        assert (daemon.state_dir / "batch-marker").read_text() == "ran\n"

        mixed = (await batch(["nope", health], continueOnError=True))["payload"]
        assert mixed["completed"] == 1 and mixed["results"][0]["index"] == 0
        assert mixed["results"][0]["error"]["code"] == "tool_batch_call_invalid"
        assert mixed["results"][1]["success"] is True
        evidence = (await batch([{**health, "after": {"include": ["screenshot"]}}]))["payload"]
        assert evidence["results"][0]["evidence"]["screenshot"]["success"] is True

        error(await host.request("tool.batch", {}), "tool_batch_payload_invalid")
        error(await host.request("tool.batch", {"calls": {}}), "tool_batch_payload_invalid")
        for flag in ("yes", 1, 0):
            error(await batch([health], continueOnError=flag), "tool_batch_payload_invalid")


async def test_a_large_batch_result_is_streamed_as_produced(daemon: DaemonProcess) -> None:
    """Inline screenshots past 256 KiB of items: the result goes out as its calls end, as one
    message in fragments (the client reassembles them), members `requested` and `results`
    first; a reply to another request comes before or after it, never inside."""
    shot = {"toolId": "screenshot", "arguments": {"quality": 100}, "deliveryMode": "inline"}
    calls = [{**shot, "callId": f"s{i}"} for i in range(12)]
    calls += [{"toolId": "no_such_tool", "callId": "bad"}, shot]
    async with connect(daemon) as host:
        batch = host.envelope("tool.batch", {"calls": calls})
        await host.send(batch)
        query = host.envelope("tool.query", {"detail": "index"})
        await host.send(query)  # answered before the stream begins, or after it ends
        replies = {r["replyTo"]: r for r in [await host.recv(), await host.recv()]}
        assert replies[query["id"]]["type"] == "tool.catalog"
        assert replies[batch["id"]]["type"] == "tool.batch.result"
        result = replies[batch["id"]]["payload"]
        assert "$ansightEncoding" not in result  # streamed: never wrapped
        assert list(result) == ["requested", "results", "success", "completed", "stoppedEarly"]
        assert (result["requested"], result["completed"], result["success"]) == (14, 13, False)
        assert result["stoppedEarly"] is True
        items = result["results"]
        assert [r.get("callId") for r in items] == [f"s{i}" for i in range(12)] + ["bad"]
        assert sum(len(r["result"]["data"]) for r in items[:12]) > 256 * 1024
        for r in items[:12]:
            image = np.frombuffer(base64.b64decode(r["result"]["data"]), np.uint8)
            assert cv2.imdecode(image, cv2.IMREAD_COLOR) is not None
        assert items[12]["error"]["code"] == "tool_not_found"
        # The socket goes on as usual after a streamed message.
        assert ok(await host.call("health_check"))["result"]["ok"] is True


async def test_a_batch_counts_each_call_against_max_inflight(make_daemon: Make) -> None:
    d = make_daemon({"ws": {"max_inflight": 4}})
    async with connect(d) as host:
        slow = {"toolId": "shell", "arguments": {"command": "sleep 2"}}
        four = host.envelope("tool.batch", {"calls": [slow] * 4})
        await host.send(four)
        busy = error(await host.request("tool.query", {}), "tool_protocol_busy")
        assert busy["retryable"] is True and busy["details"] == {"max_inflight": 4}
        done = await host.recv()
        assert done["replyTo"] == four["id"] and done["payload"]["completed"] == 4
        # Three calls and a batch of two: five, one over.
        for _ in range(3):
            await host.send(host.envelope("tool.call", slow))
        refused = await host.request("tool.batch", {"calls": [slow] * 2})
        assert error(refused, "tool_protocol_busy")["details"] == {"max_inflight": 4}
        for _ in range(3):
            assert ok(await host.recv())["result"]["exit_code"] == 0


# -- large payloads -------------------------------------------------------------------------


async def test_large_payloads_are_wrapped_both_ways(daemon: DaemonProcess) -> None:
    async with connect(daemon) as host:
        command = "python3 -c \"print('fingertip ' * 5000)\""
        env = host.envelope("tool.call", {"toolId": "shell", "arguments": {"command": command}})
        await host.send(env)
        reply = await host.recv()
        wrapper = reply["payload"]
        assert list(wrapper) == [
            "$ansightEncoding",
            "contentType",
            "originalByteCount",
            "compressedByteCount",
            "data",
        ]
        packed = base64.b64decode(wrapper["data"])
        assert wrapper["compressedByteCount"] == len(packed)
        raw = gzip.decompress(packed)
        assert wrapper["originalByteCount"] == len(raw) >= 32768
        assert len(wrapper["data"]) < len(raw)
        result = json.loads(raw)
        assert result["success"] is True and result["result"]["stdout"].startswith("fingertip ")
        # Errors are wrapped too when large: a 40 KB unknown argument name, echoed twice.
        big = error(await host.call("health_check", {"k" * 40000: 1}), "tool_arguments_invalid")
        assert big["details"]["errors"][0]["code"] == "additional_property_not_allowed"
        # Small replies stay plain.
        await host.send(host.envelope("tool.call", {"toolId": "health_check"}))
        assert "$ansightEncoding" not in (await host.recv())["payload"]
        # What hosts send may be wrapped as well.
        raw_call = json.dumps({"toolId": "health_check", "arguments": {}}).encode()
        packed = gzip.compress(raw_call)
        wrapped = {
            "$ansightEncoding": "gzip-base64-json",
            "contentType": "application/json",
            "originalByteCount": len(raw_call),
            "compressedByteCount": len(packed),
            "data": base64.b64encode(packed).decode(),
        }
        assert ok(await host.request("tool.call", wrapped))["result"]["ok"] is True
        for broken, reason in (
            ({**wrapped, "$ansightEncoding": "zstd-base64-json"}, "unsupported_encoding"),
            ({**wrapped, "data": "%%%"}, "invalid_base64"),
            ({**wrapped, "data": base64.b64encode(b"plain").decode()}, "invalid_gzip"),
        ):
            if reason == "invalid_gzip":
                broken.pop("compressedByteCount")
            bad = error(await host.request("tool.call", broken), "tool_protocol_invalid_request")
            assert bad["details"]["reason"] == reason
        not_json = base64.b64encode(gzip.compress(b"{nope")).decode()
        bad = error(
            await host.request(
                "tool.call", {"$ansightEncoding": "gzip-base64-json", "data": not_json}
            ),
            "tool_protocol_invalid_request",
        )
        assert bad["details"]["reason"] == "invalid_json"


async def test_gzip_bomb_costs_nothing(daemon: DaemonProcess) -> None:
    deflater = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = bytes(1 << 20)
    packed = b"".join(deflater.compress(block) for _ in range(512)) + deflater.flush()
    bomb = {"$ansightEncoding": "gzip-base64-json", "data": base64.b64encode(packed).decode()}
    assert len(bomb["data"]) < 1 << 20  # 512 MiB of zeros in well under 1 MiB of text
    async with connect(daemon) as host:
        await host.call("health_check")  # warm up, so the baseline includes a request
        before = daemon.memory_kib("VmHWM")
        for _ in range(3):
            reply = await host.request("tool.call", bomb)
            bad = error(reply, "tool_protocol_invalid_request")
            assert bad["details"]["reason"] == "payload_too_large"
        grown_mib = (daemon.memory_kib("VmHWM") - before) / 1024
        assert grown_mib < 64, f"peak RSS grew {grown_mib:.0f} MiB decoding a gzip bomb"
        assert ok(await host.call("health_check"))["result"]["ok"] is True


# -- protocol violations --------------------------------------------------------------------


async def test_malformed_envelopes(daemon: DaemonProcess) -> None:
    async with connect(daemon) as host:
        await host.send({"type": "tool.query", "sessionId": "s9", "payload": {}})
        reply = await host.recv()
        assert reply["type"] == "tool.error" and reply["id"] == "tool.invalid.response"
        assert "replyTo" not in reply and reply["sessionId"] == "s9"
        assert reply["payload"]["code"] == "tool_protocol_invalid_request"
        error(await host.request("tool.query", {}, type=""), "tool_protocol_invalid_request")
        error(await host.request("tool.query", {}, sessionId=7), "tool_protocol_invalid_request")
        unknown = await host.request("tool.subscribe", {})
        assert error(unknown, "tool_protocol_unknown_type")["retryable"] is False
        error(await host.request("tool.result", {}), "tool_protocol_unknown_type")
        # Another capability's message is not for us: ignored, no reply at all.
        await host.send(host.envelope("tool.query", {}, capability="metrics.stream"))
        after = await host.request("tool.query", {"detail": "index"})
        assert after["type"] == "tool.catalog"

    cases: list[tuple[Callable[[Host], Any], int]] = [
        (lambda h: h.send("this is not json"), aiohttp.WSCloseCode.INVALID_TEXT),
        (lambda h: h.send("[1, 2, 3]"), aiohttp.WSCloseCode.INVALID_TEXT),
        (lambda h: h.send('{"type": "tool.query", "id": "x", "n": NaN}'), 1007),
        (lambda h: h.ws.send_bytes(b"ASFT"), aiohttp.WSCloseCode.UNSUPPORTED_DATA),
    ]
    for act, code in cases:
        async with connect(daemon) as host:
            await act(host)
            assert await host.closed_with() == code


async def test_oversized_message_closes(make_daemon: Make) -> None:
    d = make_daemon({"ws": {"max_message_bytes": 4096}})
    async with connect(d) as host:
        assert ok(await host.call("health_check", {}))["result"]["ok"] is True
        await host.send(host.envelope("tool.call", {"toolId": "health_check", "pad": "x" * 5000}))
        assert await host.closed_with() == aiohttp.WSCloseCode.MESSAGE_TOO_BIG


async def test_heartbeat_closes_a_silent_host(make_daemon: Make) -> None:
    d = make_daemon({"ws": {"heartbeat_s": 0.5}})
    async with connect(d, autoping=False) as host:
        ping = await host.recv_raw()
        assert ping.type is aiohttp.WSMsgType.PING  # the daemon asks...
        # ...and, with no pong coming back, gives the connection up.
        assert await host.closed_with() in (aiohttp.WSCloseCode.ABNORMAL_CLOSURE, None)
    closed = [e for e in await logged(d, "ws_closed") if e.get("event") == "ws_closed"]
    assert closed[-1]["close_code"] == aiohttp.WSCloseCode.ABNORMAL_CLOSURE


async def test_host_leaving_mid_call_cancels_it(daemon: DaemonProcess) -> None:
    async with connect(daemon) as host:
        await host.send(
            host.envelope("tool.call", {"toolId": "shell", "arguments": {"command": "sleep 30"}})
        )
        await asyncio.sleep(0.5)  # let the command start; leaving then is the point
    events = await logged(daemon, "tool_invocation")  # the only call: the one cut short
    cut = [e for e in events if e.get("event") == "tool_invocation" and e.get("tool") == "shell"]
    assert cut and cut[-1]["outcome"] == "cancelled"
    async with connect(daemon) as host:
        assert ok(await host.call("health_check"))["result"]["ok"] is True


async def test_daemon_stop_says_going_away(daemon: DaemonProcess) -> None:
    async with connect(daemon) as host:
        assert ok(await host.call("health_check"))["result"]["ok"] is True
        assert daemon.proc is not None
        daemon.proc.terminate()
        assert await host.closed_with() == aiohttp.WSCloseCode.GOING_AWAY
    assert daemon.proc.wait(30) == 0  # a clean exit (no second signal: it is already going)


# -- ASFT binary transfers ------------------------------------------------------------------


async def receive_transfer(host: Host, announced: dict[str, Any]) -> bytes:
    """Read one transfer's frames as a host does and return its bytes."""
    frames = []
    while True:
        msg = await host.recv_raw()
        assert msg.type is aiohttp.WSMsgType.BINARY, msg
        frame = ws_codec.parse_asft(msg.data)
        assert frame.transfer_id == announced["transferId"]
        frames.append(frame)
        if frame.frame_type == ws_codec.FRAME_COMPLETE:
            break
    *chunks, done = frames
    assert [f.sequence for f in frames] == list(range(len(frames)))
    assert all(len(f.payload) <= announced["chunkBytes"] for f in chunks)
    data = b"".join(f.payload for f in chunks)
    assert [f.offset for f in chunks] == list(range(0, len(data), announced["chunkBytes"]))
    assert done.offset == len(data) == announced["sizeBytes"] == announced["size"]
    return data


def announced_transfer(result: dict[str, Any], chunk: int) -> None:
    assert "data" not in result
    assert result["deliveryMode"] == "websocket_binary"
    assert result["wireProtocol"] == "ansight.file-transfer.v1"
    assert result["status"] == "queued" and result["chunkBytes"] == chunk
    assert len(result["transferId"]) == 32 and result["mimeType"] == "image/jpeg"


async def test_screenshot_over_asft(daemon: DaemonProcess) -> None:
    async with connect(daemon) as host:
        reply = ok(
            await host.call("screenshot", {}, deliveryMode="websocket_binary", chunkBytes=4096)
        )
        shot = reply["result"]
        announced_transfer(shot, 4096)
        data = await receive_transfer(host, shot)
        image = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
        assert (image.shape[1], image.shape[0]) == (shot["width"], shot["height"])
        # Evidence screenshots travel the same way, after the result that announces them.
        reply = ok(
            await host.call(
                "health_check",
                {},
                after={"include": ["screenshot"]},
                deliveryMode="websocket_binary",
            )
        )
        evidence = reply["evidence"]["screenshot"]["result"]
        announced_transfer(evidence, 65536)
        assert (await receive_transfer(host, evidence))[:2] == b"\xff\xd8"  # JPEG SOI
        # A HID action's own final screenshot is an artifact too.
        tap = {"type": "tap", "point": {"x": 500, "y": 500}}
        acted = ok(await host.call("touch_gesture", tap, deliveryMode="websocket_binary"))
        announced_transfer(acted["result"], 65536)
        assert (await receive_transfer(host, acted["result"]))[:2] == b"\xff\xd8"
        inline = ok(await host.call("screenshot", {}, deliveryMode="inline"))["result"]
        assert base64.b64decode(inline["data"])[:2] == b"\xff\xd8"


async def test_large_screenshots_go_binary_by_default(make_daemon: Make) -> None:
    d = make_daemon({"ws": {"binary_min_bytes": 1024}})
    async with connect(d) as host:
        shot = ok(await host.call("screenshot", {}))["result"]
        announced_transfer(shot, 65536)
        assert len(await receive_transfer(host, shot)) == shot["size"]
        small = ok(await host.call("screenshot", {"max_width": 16, "quality": 5}))["result"]
        assert small["size"] < 1024 and "data" in small
        forced = ok(await host.call("screenshot", {}, deliveryMode="inline"))["result"]
        assert "data" in forced
