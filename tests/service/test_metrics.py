"""GET /metrics against the real daemon (simulated target): parsed with prometheus_client's own
parser; each kind of invocation moves its counters by exactly one; the HTTP rules off loopback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from tests.service.daemonproc import DaemonProcess
from tests.service.test_mcp import mcp_client
from tests.service.test_ws import connect, ok

FINGERTIP = Path(sys.executable).with_name("fingertip")
FAST = {"input": {"isolation_settle_ms": 50, "evidence_stable_ms": 100}}
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]
Make = Callable[..., DaemonProcess]


async def scrape(d: DaemonProcess, base: str | None = None, **headers: str) -> tuple[int, str]:
    async with (
        aiohttp.ClientSession() as s,
        s.get(f"{base or d.base}/metrics", headers=headers, ssl=False) as r,
    ):
        return r.status, await r.text()


async def samples(d: DaemonProcess) -> Samples:
    status, text = await scrape(d)
    assert status == 200, text
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(snap: Samples, name: str, **labels: str) -> float:
    return snap.get((name, frozenset(labels.items())), 0.0)


def moved(before: Samples, after: Samples, prefix: str) -> dict[tuple[str, frozenset], float]:
    """Every sample under `prefix` that changed, and by how much."""
    keys = {k for k in (*before, *after) if k[0].startswith(prefix)}
    deltas = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in keys}
    return {k: v for k, v in deltas.items() if v}


def labels(**kw: str) -> frozenset[tuple[str, str]]:
    return frozenset(kw.items())


async def http_call(d: DaemonProcess, tool: str, body: Any) -> dict[str, Any]:
    async with (
        aiohttp.ClientSession() as s,
        s.post(f"{d.base}/api/tools/{tool}", data=json.dumps(body)) as r,
    ):
        reply: dict[str, Any] = await r.json()
        return reply


def cli_call(d: DaemonProcess, tool: str) -> dict[str, Any]:
    proc = subprocess.run(
        [str(FINGERTIP), "call", tool],
        input=b"{}",
        capture_output=True,
        env={**os.environ, "FINGERTIP_SOCKET": str(d.tmp / "ipc.sock")},
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    reply: dict[str, Any] = json.loads(proc.stdout)
    return reply


async def test_each_invocation_moves_its_counters_by_exactly_one(make_daemon: Make) -> None:
    d = make_daemon({**FAST, "guard": {"mcp": "full-access"}})
    invocations = "fingertip_tool_invocations_total"
    before = await samples(d)

    # One invocation of each kind: per transport, an error with its code, an unknown tool.
    assert not (await http_call(d, "health_check", {}))["is_error"]
    bad = await http_call(d, "shell", {"input": {"command": 1}})
    assert bad["error"]["code"] == "tool_arguments_invalid"
    async with connect(d) as host:
        ok(await host.call("health_check", {}))
        missing = await host.call("no_such_tool_x1", {})
        assert missing["payload"]["code"] == "tool_not_found", missing
    async with mcp_client(d.base) as client:
        assert (await client.call_tool("health_check", {})).is_error is False
    assert cli_call(d, "health_check")["type"] == "complete"

    after = await samples(d)
    assert moved(before, after, invocations) == {
        (invocations, labels(tool="health_check", transport=t, outcome="ok", code="")): 1.0
        for t in ("http", "ws", "mcp", "ipc")
    } | {
        (
            invocations,
            labels(tool="shell", transport="http", outcome="error", code="tool_arguments_invalid"),
        ): 1.0,
        # The name a client sent is not a label value: hostile names cannot grow the series.
        (
            invocations,
            labels(tool="_unknown", transport="ws", outcome="error", code="tool_not_found"),
        ): 1.0,
    }
    latency = "fingertip_tool_invocation_duration_seconds_count"
    for transport in ("http", "ws", "mcp", "ipc"):
        delta = value(after, latency, tool="health_check", transport=transport) - value(
            before, latency, tool="health_check", transport=transport
        )
        assert delta == 1.0
    # The scrape itself is no invocation, and it captured no frame.
    assert moved(after, await samples(d), invocations) == {}
    assert moved(after, await samples(d), "fingertip_capture_frames") == {}
    assert value(after, "fingertip_open_connections", transport="http") >= 1
    assert value(after, "process_resident_memory_bytes") > 0
    assert value(
        after, "fingertip_build_info", version="0.1.0", platform="ios", backend="simulated"
    )


async def test_hid_profile_and_capture_counters(make_daemon: Make) -> None:
    d = make_daemon(FAST)
    before = await samples(d)
    # An iOS chord runs isolated: two switches (keyboard-isolated, then full) and its reports.
    out = await http_call(d, "keyboard_tap", {"input": {"keys": ["cmd", "a"]}})
    assert not out["is_error"], out
    mid = await samples(d)
    switches = moved(before, mid, "fingertip_profile_switches_total")
    assert switches == {
        ("fingertip_profile_switches_total", labels(profile=p, outcome="switched")): 1.0
        for p in ("keyboard-isolated", "full")
    }
    timed = moved(before, mid, "fingertip_profile_switch_duration_seconds_count")
    assert sorted(timed.values()) == [1.0, 1.0]
    keyboard = "fingertip_hid_reports_written_total"
    assert value(mid, keyboard, role="keyboard") - value(before, keyboard, role="keyboard") >= 4
    # The post-action screenshot took frames from the source.
    assert value(mid, "fingertip_capture_frames_total") > value(
        before, "fingertip_capture_frames_total"
    )
    assert value(mid, "fingertip_capture_frame_age_seconds_count") > 0
    assert value(mid, "fingertip_capture_last_frame_age_seconds") >= 0

    # Unplugged: the writes fail, each one counted with its code.
    assert d.post_json("/api/sim/unplug")
    failed = await http_call(d, "keyboard_tap", {"input": {"keys": ["a"]}})
    assert failed["is_error"] and failed["error"]["code"] == "target_not_attached", failed
    # Capture off: the before-and-after frames of an action fail, each request counted.
    assert d.post_json("/api/sim/plug") and d.post_json("/api/sim/capture_off")
    await http_call(d, "keyboard_tap", {"input": {"keys": ["a"]}})
    after = await samples(d)
    errors = moved(mid, after, "fingertip_hid_write_errors_total")
    assert errors and all(k[1] >= labels(code="target_not_attached") for k in errors), errors
    faults = moved(mid, after, "fingertip_capture_faults_total")
    assert list(faults) == [("fingertip_capture_faults_total", labels(code="capture_unavailable"))]


async def test_http_rules_off_loopback(make_daemon: Make, offloop_addr: str) -> None:
    d = make_daemon(
        {
            "server": {"listen": ["127.0.0.1", offloop_addr]},
            "discovery": {"enabled": False},
            "auth": {"client_tokens": [{"token": "r" * 20, "max_policy": "read"}]},
        }
    )
    base = d.url(offloop_addr)  # https: TLS off loopback
    # A read: no token needed off loopback, and a read-limited client token is enough.
    status, text = await scrape(d, base)
    assert status == 200 and "fingertip_tool_invocations" in text
    status, _ = await scrape(d, base, Authorization="Bearer " + "r" * 20)
    assert status == 200
    # A page on the target cannot read it: foreign Host, foreign Origin.
    status, text = await scrape(d, base, Host="evil.example")
    assert status == 403 and json.loads(text)["error"]["code"] == "host_not_allowed"
    status, text = await scrape(d, base, Origin="https://evil.example")
    assert status == 403 and json.loads(text)["error"]["code"] == "origin_not_allowed"

    off = make_daemon({"guard": {"http": "disabled"}})
    status, text = await scrape(off)
    assert status == 403 and json.loads(text)["error"]["code"] == "tool_execution_denied"
