"""TLS against plain HTTP in the same run (issue 36; not part of the test suite).

Two real daemons (simulated target) on loopback, identical but for [server].tls: "off" (plain,
the baseline) and "on" (the board's own ECDSA P-256 certificate, TLS 1.3):

- a tool call (POST /api/tools/health_check) over one kept-alive connection, in alternating
  rounds, round trip and server CPU per call (target: TLS <= 1.2x plain); beside it the
  stack's own share: a bare aiohttp handler answering a body of the same size, plain and with
  the daemon's SSLContext (what Python's asyncio TLS costs a request, whatever the daemon does);
- a fresh connection: TCP connect + TLS handshake alone (what a client pays before its first
  request), and a whole call on a new connection each time, TLS and plain;
- the live stream (fps=30, max_width=540): the daemon's CPU per frame delivered to one viewer,
  TLS and plain, in alternating windows;
- each daemon's resident memory at idle, and whether `cryptography` is mapped in it (it must
  not be: the certificate is made by a child); and what one idle keep-alive connection holds,
  TLS and plain (IDLE_CONNECTIONS of them).
Ratios and medians, never pass/fail. Run: .venv/bin/python tests/bench/bench_tls.py
"""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from daemon.tls import CERT_FILE, KEY_FILE
from tests.bench.timing import paired_with_cpu, per_call_ms, process_cpu_s
from tests.service.daemonproc import REPO, UNPINNED, DaemonProcess, free_port
from tests.service.mjpeg import Stream

ROUNDS, N = 15, 200
HANDSHAKES = 200
IDLE_CONNECTIONS = 100
FRESH_ROUNDS, FRESH_N = 9, 40
STREAM_WINDOW_S = float(os.environ.get("BENCH_WINDOW_S", "6"))
STREAM_ROUNDS = 3
QUERY = "fps=30&quality=70&max_width=540"
BODY = '{"input": {}}'


def per_connection_kib(d: DaemonProcess, tls: bool) -> float:
    """The daemon's RSS growth for each of IDLE_CONNECTIONS idle keep-alive connections."""
    before = d.memory_kib("VmRSS")
    conns: list[socket.socket] = []
    try:
        for _ in range(IDLE_CONNECTIONS):
            conn = socket.create_connection(("127.0.0.1", d.port))
            conns.append(UNPINNED.wrap_socket(conn) if tls else conn)
            conns[-1].sendall(b"GET /api/tools HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            conns[-1].recv(1 << 20)
        time.sleep(1.0)
        return (d.memory_kib("VmRSS") - before) / IDLE_CONNECTIONS
    finally:
        for conn in conns:
            conn.close()


def handshake_ms(port: int, tls: bool) -> float:
    """Median time of a TCP connect (+ a TLS handshake) on loopback, client side."""
    times = []
    for _ in range(HANDSHAKES):
        start = time.perf_counter()
        with socket.create_connection(("127.0.0.1", port)) as raw:
            if tls:
                with UNPINNED.wrap_socket(raw) as conn:
                    conn.version()
            times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


async def keepalive(plain: DaemonProcess, secure: DaemonProcess) -> None:
    connector = aiohttp.TCPConnector(ssl=False, limit=1)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def post(base: str) -> object:
            async with session.post(
                f"{base}/api/tools/health_check",
                data=BODY,
                headers={"Content-Type": "application/json"},
            ) as resp:
                return await resp.json()

        assert plain.proc is not None and secure.proc is not None
        (base, tls, ratio), (base_cpu, tls_cpu, cpu_ratio) = await paired_with_cpu(
            lambda: post(plain.base),
            lambda: post(secure.base),
            (plain.proc.pid, secure.proc.pid),
            ROUNDS,
            N,
        )
    print(f"a tool call on one kept-alive connection: medians of {ROUNDS} alternating rounds")
    print(f"  plain HTTP                 {base:7.3f} ms  baseline")
    print(f"  TLS 1.3                    {tls:7.3f} ms  {ratio:5.2f}x  (target <= 1.2x)")
    print("  server CPU per call over the same rounds")
    print(f"  plain HTTP                 {base_cpu:7.0f} us  baseline")
    print(f"  TLS 1.3                    {tls_cpu:7.0f} us  {cpu_ratio:5.2f}x")


BARE_SERVER = """
import sys
from pathlib import Path

from aiohttp import web

from daemon.tls import server_context

BODY = "x" * int(sys.argv[2])


async def handler(request):
    await request.read()
    return web.Response(text=BODY, content_type="application/json")


app = web.Application()
app.add_routes([web.post("/api/tools/health_check", handler)])
ctx = server_context(Path(sys.argv[3]), Path(sys.argv[4])) if len(sys.argv) > 3 else None
web.run_app(
    app, host="127.0.0.1", port=int(sys.argv[1]), ssl_context=ctx, access_log=None,
    print=lambda *a: print("up", flush=True),
)
"""


def bare(port: int, size: int, secure: DaemonProcess | None) -> subprocess.Popen[str]:
    cert = [] if secure is None else [str(secure.state_dir / n) for n in (CERT_FILE, KEY_FILE)]
    proc = subprocess.Popen(
        [sys.executable, "-c", BARE_SERVER, str(port), str(size), *cert],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "up"
    return proc


async def stack_share(secure: DaemonProcess) -> None:
    """The same keep-alive calls against a bare aiohttp handler, plain and TLS."""
    size = len(secure.post_json("/api/tools/health_check", {"input": {}})["output"]) + 1200
    plain_port, tls_port = free_port(), free_port()
    servers = [bare(plain_port, size, None), bare(tls_port, size, secure)]
    try:
        connector = aiohttp.TCPConnector(ssl=False, limit=1)
        async with aiohttp.ClientSession(connector=connector) as session:

            async def post(base: str) -> object:
                async with session.post(f"{base}/api/tools/health_check", data=BODY) as resp:
                    return await resp.read()

            (base, tls, ratio), (base_cpu, tls_cpu, cpu_ratio) = await paired_with_cpu(
                lambda: post(f"http://127.0.0.1:{plain_port}"),
                lambda: post(f"https://127.0.0.1:{tls_port}"),
                (servers[0].pid, servers[1].pid),
                ROUNDS,
                N,
            )
    finally:
        for server in servers:
            server.terminate()
            server.wait()
    print(f"  the stack alone: a bare aiohttp handler, {size} B answers")
    print(f"  plain HTTP                 {base:7.3f} ms  {base_cpu:5.0f} us CPU  baseline")
    print(
        f"  TLS 1.3                    {tls:7.3f} ms  {tls_cpu:5.0f} us CPU  {ratio:5.2f}x, "
        f"CPU {cpu_ratio:.2f}x (+{tls_cpu - base_cpu:.0f} us a request)"
    )


async def fresh(plain: DaemonProcess, secure: DaemonProcess) -> None:
    """A whole call on a new connection each time (no keep-alive, no session reuse)."""

    async def once(base: str) -> object:
        connector = aiohttp.TCPConnector(ssl=False, force_close=True)
        async with (
            aiohttp.ClientSession(connector=connector) as session,
            session.post(f"{base}/api/tools/health_check", data=BODY) as resp,
        ):
            return await resp.read()

    plain_ms, tls_ms = [], []
    for _ in range(FRESH_ROUNDS):
        plain_ms.append(await per_call_ms(lambda: once(plain.base), FRESH_N))
        tls_ms.append(await per_call_ms(lambda: once(secure.base), FRESH_N))
    p, t = statistics.median(plain_ms), statistics.median(tls_ms)
    print(f"a tool call on a new connection each time: medians of {FRESH_ROUNDS} rounds")
    print(f"  plain HTTP                 {p:7.3f} ms  baseline")
    print(f"  TLS 1.3 (full handshake)   {t:7.3f} ms  {t / p:5.2f}x")


async def stream_cpu(d: DaemonProcess) -> tuple[float, int]:
    """(daemon CPU ms per frame, frames) for one viewer over one window."""
    assert d.proc is not None
    auth = {"Authorization": f"Bearer {d.token}"}
    connector = aiohttp.TCPConnector(ssl=False)
    async with (
        aiohttp.ClientSession(connector=connector) as session,
        session.get(f"{d.base}/api/stream?{QUERY}", headers=auth) as resp,
    ):
        stream = Stream(resp)
        await stream.next()  # the feed is up
        frames = 0
        before = process_cpu_s(d.proc.pid)
        end = time.monotonic() + STREAM_WINDOW_S
        while time.monotonic() < end:
            await stream.next()
            frames += 1
        used = process_cpu_s(d.proc.pid) - before
    return used * 1000 / max(frames, 1), frames


async def streams(plain: DaemonProcess, secure: DaemonProcess) -> None:
    plain_ms, tls_ms, counts = [], [], []
    for _ in range(STREAM_ROUNDS):
        ms, n = await stream_cpu(plain)
        plain_ms.append(ms)
        counts.append(n)
        ms, n = await stream_cpu(secure)
        tls_ms.append(ms)
        counts.append(n)
    p, t = statistics.median(plain_ms), statistics.median(tls_ms)
    rate = statistics.median(counts) / STREAM_WINDOW_S
    print(f"the live stream ({QUERY}, one viewer, ~{rate:.0f} frames/s delivered), daemon CPU")
    print(f"  plain HTTP                 {p:7.2f} ms per frame  baseline")
    print(f"  TLS 1.3                    {t:7.2f} ms per frame  {t / p:5.2f}x")


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="ft-bench-tls-") as tmp:
        common = {"log": {"level": "info"}}  # the board's level: a line per invocation
        plain_dir, tls_dir = Path(tmp) / "plain", Path(tmp) / "tls"
        plain_dir.mkdir()
        tls_dir.mkdir()
        plain = DaemonProcess(plain_dir, {**common, "server": {"tls": "off"}}).start()
        secure = DaemonProcess(tls_dir, {**common, "server": {"tls": "on"}}).start()
        try:
            assert plain.proc is not None and secure.proc is not None
            time.sleep(2.0)  # start-up work settles
            for name, d in (("plain", plain), ("TLS", secure)):
                assert d.proc is not None
                maps = Path(f"/proc/{d.proc.pid}/maps").read_text()
                loaded = "cryptography" in maps or "_rust.abi3" in maps
                print(
                    f"idle daemon ({name}): RSS {d.memory_kib('VmRSS') / 1024:.1f} MiB, "
                    f"cryptography mapped: {'yes' if loaded else 'no'}"
                )
            plain_kib = per_connection_kib(plain, tls=False)
            tls_kib = per_connection_kib(secure, tls=True)
            print(f"an idle keep-alive connection ({IDLE_CONNECTIONS} of them), daemon RSS")
            print(f"  plain HTTP                 {plain_kib:7.0f} KiB")
            print(f"  TLS 1.3                    {tls_kib:7.0f} KiB")
            with (
                socket.create_connection(("127.0.0.1", secure.port)) as raw,
                UNPINNED.wrap_socket(raw) as conn,
            ):
                print(f"TLS: {conn.version()}, {conn.cipher()[0]}")
            tcp = handshake_ms(plain.port, tls=False)
            full = handshake_ms(secure.port, tls=True)
            print(f"a fresh connection, client side: medians of {HANDSHAKES}")
            print(f"  TCP connect                {tcp:7.3f} ms")
            print(f"  TCP connect + handshake    {full:7.3f} ms  (handshake {full - tcp:.3f} ms)")
            asyncio.run(keepalive(plain, secure))
            asyncio.run(stack_share(secure))
            asyncio.run(fresh(plain, secure))
            asyncio.run(streams(plain, secure))
            for name, d in (("plain", plain), ("TLS", secure)):
                print(f"daemon RSS after the run ({name}): {d.memory_kib('VmRSS') / 1024:.1f} MiB")
        finally:
            plain.stop()
            secure.stop()


if __name__ == "__main__":
    ssl.create_default_context()  # the client's own ssl set-up, before anything is timed
    main()
