"""What a client can make the daemon hold is bounded by construction (issue 44): the real daemon
on loopback (a 1080x1920 simulated phone), real WebSocket hosts.

The attack that found it: one host sending 32 `tool.batch` messages of 32 inline quality-100
screenshots took the daemon from 145 to 795 MB (here: 103 -> 798 MB RSS), because a batch
counted as one request against [ws].max_inflight and each batch result was built whole. Then
the rule's general form, as a property over request shapes (sockets, batches per socket, calls
per batch, inline or binary images): whatever the shape, every reply comes (a result, or a
retryable refusal), and the peak of the daemon's process tree stays under PEAK_BOUND_MIB.

Peaks are the kernel's: each process's VmHWM, reset to its VmRSS before the work (clear_refs
5) and summed over the daemon and its children afterwards (an upper bound of the tree's peak).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from daemon.transports import ws_codec
from tests.service.daemonproc import DaemonProcess
from tests.service.test_ipc_cli import cli

# What any shape of requests may add to the daemon's peak over its warm state. The limits
# admit at most 32 calls from one host at once (a batch counts each call); a streamed batch
# holds about one screenshot at a time, 32 single calls at most their 32 replies (a dict and
# its text each while it is sent): 32 x 3 MB at most for this phone's frames. Measured: 6-20
# MiB over the corpus below; the attack alone was +695 MiB before the limits.
PEAK_BOUND_MIB = 96
SHOT = {"toolId": "screenshot", "arguments": {"quality": 100}}
INLINE = SHOT | {"deliveryMode": "inline"}
REFUSED = {"tool_protocol_busy", "too_many_calls"}


def tree(pid: int) -> list[int]:
    """The daemon and its children (the OCR worker, shell commands)."""
    out = [pid]
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        try:
            out += [int(c) for c in task.read_text().split()]
        except OSError:
            continue
    return out


def status_kib(pid: int, field: str) -> int:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0  # gone meanwhile
    return next(int(line.split()[1]) for line in text.splitlines() if line.startswith(field))


class Peak:
    """The tree's RSS before, and its peak (summed VmHWM) since `reset`, in MiB."""

    def __init__(self, d: DaemonProcess) -> None:
        assert d.proc is not None
        self.pid = d.proc.pid
        self.before = 0.0

    def reset(self) -> None:
        for pid in tree(self.pid):
            try:
                Path(f"/proc/{pid}/clear_refs").write_text("5")  # VmHWM := VmRSS
            except OSError:
                continue
        self.before = sum(status_kib(p, "VmRSS:") for p in tree(self.pid)) / 1024

    def grown(self) -> float:
        return sum(status_kib(p, "VmHWM:") for p in tree(self.pid)) / 1024 - self.before


@pytest.fixture(scope="module")
def phone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    d = DaemonProcess(
        tmp_path_factory.mktemp("bounds"),
        {"backend": {"sim_width": 1080, "sim_height": 1920}, "log": {"level": "info"}},
    )
    d.start()
    # Warm: the encoder, the renderer's caches, both deliveries and a streamed batch, so the
    # bound is on what the requests hold, not on the daemon's first screenshot.
    asyncio.run(run_shape(d, [[[SHOT] * 4, [INLINE] * 8]]))
    yield d
    d.kill()


def envelope(n: int, kind: str, payload: Any) -> str:
    return json.dumps(
        {"type": kind, "id": f"r{n}", "sentAt": "2026-01-01T00:00:00Z", "payload": payload}
    )


async def run_shape(d: DaemonProcess, sockets: list[list[list[dict[str, Any]]]]) -> list[str]:
    """Each socket sends all its requests at once (a list of one call is a tool.call, more a
    tool.batch), then reads until every request has its reply (and every announced transfer
    its frames). Returns each reply's type, or its error code."""
    auth = {"Authorization": f"Bearer {d.token}"}

    async def one(
        session: aiohttp.ClientSession, requests: list[list[dict[str, Any]]]
    ) -> list[str]:
        async with session.ws_connect(f"{d.base}/api/ws", headers=auth, max_msg_size=0) as ws:
            for n, calls in enumerate(requests):
                if len(calls) == 1:
                    await ws.send_str(envelope(n, "tool.call", calls[0]))
                else:
                    await ws.send_str(envelope(n, "tool.batch", {"calls": calls}))
            out, transfers = [], 0
            while len(out) < len(requests) or transfers:
                msg = await ws.receive(timeout=300)
                if msg.type is aiohttp.WSMsgType.BINARY:
                    transfers -= msg.data[5] == 2  # an ASFT transfer's complete frame
                    continue
                assert msg.type is aiohttp.WSMsgType.TEXT, msg
                env = json.loads(msg.data)
                payload = ws_codec.unwrap_payload(env["payload"], 1 << 30)
                transfers += json.dumps(payload).count('"transferId"')
                if env["type"] == "tool.error":
                    assert payload["code"] in REFUSED and payload["retryable"], payload
                    out.append(payload["code"])
                else:
                    results = payload.get("results", [payload])
                    assert all(r["success"] for r in results), payload
                    out.append(env["type"])
            return out

    async with aiohttp.ClientSession() as session:
        replies = await asyncio.gather(*(one(session, requests) for requests in sockets))
    return [kind for kinds in replies for kind in kinds]


def test_the_batch_attack_is_bounded(phone: DaemonProcess) -> None:
    """32 batches of 32 inline quality-100 screenshots on one socket: before the limits counted
    calls, +695 MB here; now one batch runs (a socket's 32 calls) and the rest are refused."""
    peak = Peak(phone)
    peak.reset()
    batches = [[INLINE] * 32] * 32
    replies = asyncio.run(run_shape(phone, [batches]))
    grown = peak.grown()
    assert replies.count("tool.batch.result") >= 1
    assert set(replies) <= {"tool.batch.result"} | REFUSED
    assert grown < PEAK_BOUND_MIB, f"the daemon's peak grew {grown:.0f} MiB"


calls = st.builds(
    lambda delivery, quality: {
        "toolId": "screenshot",
        "arguments": {"quality": quality},
        **({"deliveryMode": delivery} if delivery else {}),
    },
    st.sampled_from(["inline", "websocket_binary", None]),
    st.sampled_from([30, 100]),
)
requests = st.lists(calls, min_size=1, max_size=32)  # a tool.call, or a batch of up to 32
shapes = st.lists(st.lists(requests, min_size=1, max_size=12), min_size=1, max_size=4)


def test_any_request_shape_is_bounded(phone: DaemonProcess) -> None:
    @settings(
        max_examples=8,  # each example is up to 4 sockets x 12 requests of 32 screenshots
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(shapes)
    # The heaviest shapes the limits allow, always tried: 32 single inline calls on one socket
    # (each reply held whole), and four sockets of one host racing full batches.
    @example([[[INLINE]] * 40])
    @example([[[INLINE] * 32] * 4] * 4)
    def run(sockets: list[list[list[dict[str, Any]]]]) -> None:
        peak = Peak(phone)
        peak.reset()
        replies = asyncio.run(run_shape(phone, sockets))
        grown = peak.grown()
        assert len(replies) == sum(len(s) for s in sockets)
        assert grown < PEAK_BOUND_MIB, f"the daemon's peak grew {grown:.0f} MiB: {replies}"

    run()


def test_every_transport_counts_calls_against_one_budget(make_daemon: Any) -> None:
    """HTTP, MCP and the IPC socket are admitted by the same budget as the WebSocket: two calls
    for one client and three in all here; a third from the same host, whichever way it comes,
    is refused (retryable) while they run, a fourth from another client past the total too,
    and both are served once the calls have ended."""
    d = make_daemon({"server": {"max_client_calls": 2, "max_calls": 3}})
    slow = {"command": "sleep 3"}

    async def http(tool: str, args: Any) -> dict[str, Any]:
        async with (
            aiohttp.ClientSession() as s,
            s.post(f"{d.base}/api/tools/{tool}", json={"input": args}) as r,
        ):
            return dict(await r.json())

    async def mcp(tool: str, args: Any) -> dict[str, Any]:
        rpc = {"jsonrpc": "2.0", "id": 1, "method": "tools/call"}
        rpc["params"] = {"name": tool, "arguments": args}
        headers = {"Accept": "application/json, text/event-stream"}
        async with (
            aiohttp.ClientSession() as s,
            s.post(f"{d.base}/mcp", json=rpc, headers=headers) as r,
        ):
            reply = await r.json()
            assert "result" in reply, reply
            return dict(reply["result"])

    async def scenario() -> None:
        running = [asyncio.create_task(http("shell", slow)) for _ in range(2)]
        await asyncio.sleep(1)  # both admitted (each sleeps 3 s)
        refused = await http("health_check", {})
        assert refused["error"]["code"] == "too_many_calls", refused
        assert refused["error"]["retryable"] is True
        assert refused["error"]["details"] == {"max_client_calls": 2}
        over_mcp = await mcp("health_check", {})
        assert over_mcp["isError"] is True and "too_many_calls" in json.dumps(over_mcp)
        # The IPC socket's client is its uid: admitted beside the host's two, up to the total.
        sock = d.tmp / "ipc.sock"
        third = asyncio.create_task(
            asyncio.to_thread(cli, sock, "call", "shell", stdin=json.dumps(slow).encode())
        )
        await asyncio.sleep(1)
        full, _ = await asyncio.to_thread(cli, sock, "call", "health_check", stdin=b"{}")
        assert "too_many_calls" in json.dumps(full) and "max_calls" in json.dumps(full), full
        assert (await third)[0]["type"] == "complete"
        assert [r["is_error"] for r in await asyncio.gather(*running)] == [False, False]
        assert (await http("health_check", {}))["is_error"] is False  # places given back

    asyncio.run(scenario())
