"""WebSocket tool protocol round trips (not part of the test suite; no pass/fail on time).

Both servers run as their own processes on loopback and are driven by the same aiohttp client,
in alternating rounds so machine noise hits both alike:
  - tool.call of health_check against the real daemon (simulated target) vs the same text
    sent to a bare aiohttp WebSocket echo server (target <= 1.3x), and, printed in addition as
    a reference, vs an echo that json.loads and json.dumps every message,
  - one tool.batch of 32 health_check calls vs 32 single tool.calls one after another,
  - the floor: an aiohttp server that does only what any tool.call server under the issue's
    rules must (parse the envelope, check arguments and result against their schemas with the
    compiled validator the catalog uses, encode the reply, write one structured log line with
    the daemon's own logging set-up), answering the same health_check result inline, with no
    catalog, task, limit, record or metrics: what the best code could come down to here.
Run: .venv/bin/python tests/bench/bench_ws.py
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.bench.timing import paired, paired_with_cpu
from tests.service.daemonproc import REPO, DaemonProcess, free_port

ROUNDS, N = 15, 200
BATCH_ROUNDS, BATCH_N = 15, 10

ECHO_SERVER = """
import json
import sys
import time

import orjson
from aiohttp import web

sys.path.insert(0, sys.argv[2])
from tests.bench.floor import Floor

FLOOR = Floor(json.loads(sys.stdin.read()), sys.argv[3])  # the daemon's health_check result

async def echo(request):
    ws = web.WebSocketResponse()
    await ws.prepare(request)
    async for msg in ws:
        await ws.send_str(msg.data)
    return ws

async def json_echo(request):
    ws = web.WebSocketResponse()
    await ws.prepare(request)
    async for msg in ws:
        await ws.send_str(json.dumps(json.loads(msg.data)))
    return ws

async def floor(request):
    ws = web.WebSocketResponse()
    await ws.prepare(request)
    async for msg in ws:
        started = time.monotonic()
        env = orjson.loads(msg.data)
        call = env["payload"]
        result = FLOOR.call(call["arguments"])
        payload = {"toolId": call["toolId"], "success": True, "result": result}
        reply = {
            "type": "tool.result",
            "id": env["id"] + ".response",
            "replyTo": env["id"],
            "sessionId": env["sessionId"],
            "sentAt": "2026-08-25T00:00:00.000Z",
            "capability": env["capability"],
            "payload": payload,
        }
        await ws.send_str(orjson.dumps(reply).decode())
        FLOOR.logged(call["toolId"], "ws", started)
    return ws

app = web.Application()
app.add_routes([web.get("/ws", echo), web.get("/json", json_echo), web.get("/floor", floor)])
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=lambda *a: print("up", flush=True))
"""


def envelope(kind: str, n: int, payload: object) -> str:
    return json.dumps(
        {
            "type": kind,
            "id": f"bench_{n}",
            "sessionId": "bench",
            "sentAt": "2026-08-25T00:00:00Z",
            "capability": "tool.exec",
            "payload": payload,
        }
    )


CALL = envelope("tool.call", 1, {"toolId": "health_check", "arguments": {}})
# Answered by the protocol layer alone (tool.error, no catalog work): the codec's own cost.
UNKNOWN = envelope("tool.ping", 3, {})
BATCH = envelope("tool.batch", 2, {"calls": [{"toolId": "health_check", "arguments": {}}] * 32})


async def round_trip(ws: aiohttp.ClientWebSocketResponse, text: str) -> object:
    """What a host does per request: send the envelope, read and parse the reply."""
    await ws.send_str(text)
    msg = await ws.receive()
    assert msg.type is aiohttp.WSMsgType.TEXT, msg
    return json.loads(msg.data)


async def run(daemon: DaemonProcess, echo_port: int, echo_pid: int) -> None:
    headers = {"Authorization": f"Bearer {daemon.token}"}
    async with (
        aiohttp.ClientSession() as session,
        session.ws_connect(f"{daemon.base}/api/ws", headers=headers) as tool_ws,
        session.ws_connect(f"http://127.0.0.1:{echo_port}/ws") as echo_ws,
        session.ws_connect(f"http://127.0.0.1:{echo_port}/json") as json_ws,
        session.ws_connect(f"http://127.0.0.1:{echo_port}/floor") as floor_ws,
    ):
        reply = await round_trip(tool_ws, CALL)
        assert isinstance(reply, dict) and reply["type"] == "tool.result", reply
        assert daemon.proc is not None
        (echo, call, ratio), cpu = await paired_with_cpu(
            lambda: round_trip(echo_ws, CALL),
            lambda: round_trip(tool_ws, CALL),
            (echo_pid, daemon.proc.pid),
            ROUNDS,
            N,
        )
        print(f"medians of {ROUNDS} alternating rounds of {N} round trips (loopback)")
        print(f"  bare aiohttp WS echo             {echo:7.3f} ms  baseline")
        print(f"  tool.call health_check           {call:7.3f} ms  {ratio:6.2f}x  (target <= 1.3x)")
        print(f"  server CPU per message: echo {cpu[0]:.0f} us, fingertipd {cpu[1]:.0f} us")
        print(f"  (CPU ratio {cpu[2]:.2f}x)")
        # A second reference, printed in addition: the least any JSON protocol server does per
        # message (parse it, serialize an answer), so the ratio above can be read against it.
        echo, call, ratio = await paired(
            lambda: round_trip(json_ws, CALL), lambda: round_trip(tool_ws, CALL), ROUNDS, N
        )
        print(f"  WS echo with json.loads+dumps    {echo:7.3f} ms  reference")
        print(
            f"  tool.call health_check           {call:7.3f} ms  {ratio:6.2f}x  (vs the JSON echo)"
        )
        # The floor against the same echo: if it is above the target already, no code that
        # keeps the rules can meet the target on this machine's stack.
        echo, floor, ratio = await paired(
            lambda: round_trip(echo_ws, CALL), lambda: round_trip(floor_ws, CALL), ROUNDS, N
        )
        print(f"  bare aiohttp WS echo             {echo:7.3f} ms  baseline")
        print(f"  floor: parse, check, log, encode {floor:7.3f} ms  {ratio:6.2f}x  (no catalog)")
        echo, bare, ratio = await paired(
            lambda: round_trip(echo_ws, UNKNOWN), lambda: round_trip(tool_ws, UNKNOWN), ROUNDS, N
        )
        print(f"  bare echo, short message         {echo:7.3f} ms  baseline")
        print(f"  protocol layer only (tool.error) {bare:7.3f} ms  {ratio:6.2f}x  (no catalog)")

        async def singles() -> None:
            for _ in range(32):
                await round_trip(tool_ws, CALL)

        reply = await round_trip(tool_ws, BATCH)
        assert isinstance(reply, dict) and reply["payload"]["completed"] == 32, reply
        one_by_one, batch, ratio = await paired(
            singles, lambda: round_trip(tool_ws, BATCH), BATCH_ROUNDS, BATCH_N
        )
        print(f"medians of {BATCH_ROUNDS} alternating rounds of {BATCH_N}")
        print(f"  32 single tool.calls in a row    {one_by_one:7.3f} ms  baseline")
        print(f"  one tool.batch of 32 calls       {batch:7.3f} ms  {ratio:6.2f}x")


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="ft-bench-") as tmp:
        # The board's log level: one info line per invocation, as in production.
        daemon = DaemonProcess(Path(tmp), {"log": {"level": "info"}}).start()
        try:
            result = daemon.post_json("/api/tools/health_check", {"input": {}})["output"]
            echo_port = free_port()
            floor_log = str(Path(tmp) / "floor.log")
            echo = subprocess.Popen(
                [sys.executable, "-c", ECHO_SERVER, str(echo_port), str(REPO), floor_log],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            try:
                assert echo.stdin is not None and echo.stdout is not None
                echo.stdin.write(result)
                echo.stdin.close()
                assert echo.stdout.readline().strip() == "up"
                asyncio.run(run(daemon, echo_port, echo.pid))
            finally:
                echo.terminate()
                echo.wait()
        finally:
            daemon.stop()


if __name__ == "__main__":
    main()
