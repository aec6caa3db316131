"""HTTP tool-call overhead, and the daemon's idle cost (not part of the test suite).

- POST /api/tools/health_check on the real daemon (simulated target) vs a bare aiohttp handler
  that returns a JSON body of the same size, both in their own processes on loopback, driven by
  one keep-alive aiohttp client in alternating rounds (target <= 1.2x, issue 16);
- the floor, against the same bare handler: a handler that does only what any tool-call server
  under the issue's rules must (parse the body, check arguments and result against their schemas
  with the compiled validator the catalog uses, encode the reply, write one structured log line
  with the daemon's own logging set-up), answering the same body, with no catalog: what the
  best code could come down to here;
- the daemon's CPU time over an idle stretch with no client, and its resident memory.
Run: .venv/bin/python tests/bench/bench_http.py
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.bench.timing import paired, paired_with_cpu, process_cpu_s
from tests.service.daemonproc import REPO, DaemonProcess, free_port

ROUNDS, N = 15, 200
IDLE_S = 5.0

BARE_SERVER = """
import asyncio
import sys
import time

import orjson
from aiohttp import web

sys.path.insert(0, sys.argv[2])
from tests.bench.floor import Floor

BODY = sys.stdin.read()
SAMPLE = orjson.loads(BODY)
FLOOR = Floor(orjson.loads(SAMPLE["output"]), sys.argv[3])  # the daemon's health_check result

async def handler(request):
    await request.read()
    return web.Response(text=BODY, content_type="application/json")

async def floor(request):
    started = time.monotonic()
    args = orjson.loads(await request.read()).get("input", {})
    result = FLOOR.call(args)
    body = dict(SAMPLE, raw_input=orjson.dumps(args).decode(), output=orjson.dumps(result).decode())
    response = web.Response(body=orjson.dumps(body), content_type="application/json")
    # written after the reply, as the catalog writes its line
    asyncio.get_running_loop().call_soon(FLOOR.logged, "health_check", "http", started)
    return response

app = web.Application()
app.add_routes([web.post("/api/tools/health_check", handler), web.post("/floor", floor)])
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=lambda *a: print("up", flush=True))
"""
BODY = json.dumps({"input": {}})


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def run(daemon: DaemonProcess, bare_port: int, bare_pid: int) -> None:
    async with aiohttp.ClientSession() as session:

        async def post(base: str, path: str = "/api/tools/health_check") -> object:
            async with session.post(
                f"{base}{path}",
                data=BODY,
                headers={"Content-Type": "application/json"},
            ) as resp:
                return await resp.json()

        reply = await post(daemon.base)
        assert isinstance(reply, dict) and reply["is_error"] is False, reply
        bare_base = f"http://127.0.0.1:{bare_port}"
        assert daemon.proc is not None
        (base, tool, ratio), (base_cpu, tool_cpu, cpu_ratio) = await paired_with_cpu(
            lambda: post(bare_base),
            lambda: post(daemon.base),
            (bare_pid, daemon.proc.pid),
            ROUNDS,
            N,
        )
        print(f"medians of {ROUNDS} alternating rounds of {N} requests (loopback, keep-alive)")
        print(f"  bare aiohttp JSON handler        {base:7.3f} ms  baseline")
        print(f"  POST /api/tools/health_check     {tool:7.3f} ms  {ratio:6.2f}x  (target <= 1.2x)")
        print("server CPU per request over the same rounds")
        print(f"  bare aiohttp JSON handler        {base_cpu:7.0f} us  baseline")
        print(f"  fingertipd                       {tool_cpu:7.0f} us  {cpu_ratio:6.2f}x")
        # The floor against the same bare handler: if it is above the target already, no code
        # that keeps the rules can meet the target on this machine's stack.
        base, floor, ratio = await paired(
            lambda: post(bare_base), lambda: post(bare_base, "/floor"), ROUNDS, N
        )
        print(f"  bare aiohttp JSON handler        {base:7.3f} ms  baseline")
        print(f"  floor: parse, check, log, encode {floor:7.3f} ms  {ratio:6.2f}x  (no catalog)")


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="ft-bench-") as tmp:
        # The board's log level: one info line per invocation, as in production.
        daemon = DaemonProcess(Path(tmp), {"log": {"level": "info"}}).start()
        try:
            assert daemon.proc is not None
            pid = daemon.proc.pid
            time.sleep(1.0)  # let start-up work settle
            before = process_cpu_s(pid)
            time.sleep(IDLE_S)
            idle_cpu = process_cpu_s(pid) - before
            print(
                f"idle daemon, no client, {IDLE_S:g} s: {idle_cpu * 1000:.1f} ms CPU "
                f"({idle_cpu / IDLE_S * 100:.2f} % of a core), RSS {rss_mib(pid):.1f} MiB"
            )
            sample = json.dumps(daemon.post_json("/api/tools/health_check", {"input": {}}))
            port = free_port()
            bare = subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    BARE_SERVER,
                    str(port),
                    str(REPO),
                    str(Path(tmp) / "floor.log"),
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            try:
                assert bare.stdin is not None and bare.stdout is not None
                bare.stdin.write(sample)
                bare.stdin.close()
                assert bare.stdout.readline().strip() == "up"
                asyncio.run(run(daemon, port, bare.pid))
            finally:
                bare.terminate()
                bare.wait()
            print(f"daemon RSS after the run: {rss_mib(pid):.1f} MiB")
        finally:
            daemon.stop()


if __name__ == "__main__":
    main()
