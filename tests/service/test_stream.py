"""GET /api/stream, /api/snapshot and /api/live (issue 19) against the real daemon and its
simulated target: shared frames, capture only while watched, stalled readers, capture loss,
the token rule off loopback, hostile query strings. The query and viewer rules, which are the
application's, run on the daemon in this process (tests/service/inprocess.py)."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import Callable
from typing import Any

import aiohttp
import cv2
import numpy as np
import pytest

from tests.service.daemonproc import DaemonProcess, eventually
from tests.service.inprocess import InProcess, MakeApp
from tests.service.mjpeg import Part, Stream


async def health_stream(d: DaemonProcess | InProcess) -> dict[str, Any]:
    if isinstance(d, InProcess):
        return dict((await d.health())["stream"])
    reply = await asyncio.to_thread(d.post_json, "/api/tools/health_check")
    return dict(json.loads(reply["output"])["stream"])


def jpeg_image(part: Part) -> Any:
    assert part.content_type == "image/jpeg"
    image = cv2.imdecode(np.frombuffer(part.body, np.uint8), cv2.IMREAD_COLOR)
    assert image is not None, "not a JPEG"
    return image


async def test_viewers_share_one_feed_and_capture_stops_after_the_last(
    make_daemon: Callable[..., DaemonProcess],
) -> None:
    d = make_daemon()
    d.post_json("/api/sim/animate_on")
    idle = await health_stream(d)
    assert idle["viewers"] == 0 and idle["capturing"] is False
    url = d.base + "/api/stream?fps=20&quality=60&max_width=360"
    async with aiohttp.ClientSession() as s, s.get(url) as r1, s.get(url) as r2:
        assert r1.status == 200 and r1.content_type == "multipart/x-mixed-replace"
        a, b = Stream(r1), Stream(r2)
        parts = [p for _ in range(5) for p in (await a.next(), await b.next()) if p]
        assert len(parts) == 10
        images = [jpeg_image(p) for p in parts]
        assert all(img.shape[1] == 360 for img in images)  # max_width honoured
        seqs = [p.seq for p in parts[::2]]
        assert seqs == sorted(seqs) and len(set(seqs)) == 5  # new frames, in order
        # Animated, so the frames differ: the stream is live, not one frame repeated.
        assert float(np.abs(images[0].astype(int) - images[-2].astype(int)).mean()) > 0
        during = await health_stream(d)
        assert during["viewers"] == 2 and during["feeds"] == 1 and during["capturing"]
        # One encode per frame, however many viewers: encoded ~ frames of one viewer.
        assert during["frames_encoded"] <= during["frames_delivered"] / 2 + 2
    # After the last viewer: no feed, no capture, and the target renders nothing more.
    await eventually(lambda: _idle(d))
    rendered = d.sim_state()["frames_rendered"]
    for _ in range(10):  # ten frame intervals of 30 fps, watched, not slept through blindly
        await asyncio.sleep(1 / 30)
        assert d.sim_state()["frames_rendered"] == rendered


async def _idle(d: DaemonProcess) -> bool:
    m = await health_stream(d)
    return m["viewers"] == 0 and m["feeds"] == 0 and not m["capturing"]


async def test_different_params_get_their_own_feed_and_joining_late_works(
    make_daemon: Callable[..., DaemonProcess],
) -> None:
    d = make_daemon()
    async with aiohttp.ClientSession() as s, s.get(d.base + "/api/stream?fps=10") as r1:
        assert (await Stream(r1).next()) is not None
        async with s.get(d.base + "/api/stream?fps=10&quality=30") as r2:
            part = await Stream(r2).next()
            assert part is not None
            jpeg_image(part)
            assert (await health_stream(d))["feeds"] == 2
        await eventually(lambda: _feeds(d, 1))
        assert (await Stream(r1).next()) is not None  # the first viewer goes on
    await eventually(lambda: _idle(d))


async def _feeds(d: DaemonProcess, n: int) -> bool:
    return (await health_stream(d))["feeds"] == n


STALLED = 5  # stalled readers of one feed: a pile-up would be five times as plain


def stalled_reader(port: int, query: str) -> socket.socket:
    """A client that asks for the stream and never reads: the daemon's writes block."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    sock.sendall(f"GET /api/stream?{query} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
    return sock


def closed_by_daemon(sock: socket.socket, timeout: float = 30.0) -> bool:
    """Read what the daemon had sent until it closes the connection (True), or until it sends
    nothing more for `timeout` with the connection still open (False)."""
    sock.settimeout(timeout)
    try:
        while sock.recv(1 << 16):
            pass
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
    return True


async def test_stalled_readers_are_dropped_and_memory_stays_flat(
    make_daemon: Callable[..., DaemonProcess],
) -> None:
    d = make_daemon({"stream": {"stall_timeout_s": 15.0}})
    d.post_json("/api/sim/animate_on")
    query = "fps=30&quality=95"
    async with aiohttp.ClientSession() as s:
        async with s.get(f"{d.base}/api/snapshot?quality=95") as r:
            frame_bytes = len(await r.read())  # about one part of the stalled readers' feed
        async with s.get(d.base + "/api/stream?fps=30") as r:
            live = Stream(r)
            stalled = [stalled_reader(d.port, query) for _ in range(STALLED)]
            try:
                await eventually(lambda: _viewers(d, 1 + STALLED))
                samples = []
                for _ in range(12):  # eight seconds of frames, the stalled readers reading none
                    for _ in range(20):
                        assert (await live.next()) is not None
                    samples.append(d.memory_kib("VmRSS"))
                # The allocator's own noise is about +-10 MB (two feeds encoding in worker
                # threads); frames piling up per viewer would be this much, and growing.
                grown = float(np.median(samples[-3:]) - np.median(samples[:3]))
                piled_kib = STALLED * 180 * frame_bytes / 1024
                assert grown < piled_kib / 4, f"RSS grew {grown} KiB; piled up: {piled_kib}"
                metrics = await eventually(lambda: _stalled(d, STALLED))  # then they are dropped
                assert metrics["viewers"] == 1  # the good one stays
                for sock in stalled:  # and their connections with them, not held for good
                    assert await asyncio.to_thread(closed_by_daemon, sock)
            finally:
                for sock in stalled:
                    sock.close()
            assert (await live.next()) is not None
    await eventually(lambda: _idle(d))


async def _viewers(d: DaemonProcess, n: int) -> bool:
    return (await health_stream(d))["viewers"] == n


async def _stalled(d: DaemonProcess, n: int) -> dict[str, Any] | None:
    m = await health_stream(d)
    return m if m["stalled_viewers"] >= n else None


async def test_capture_loss_ends_the_stream_and_a_new_one_starts_when_it_is_back(
    make_daemon: Callable[..., DaemonProcess],
) -> None:
    d = make_daemon()
    async with aiohttp.ClientSession() as s:
        async with s.get(d.base + "/api/stream") as r:
            stream = Stream(r)
            assert (await stream.next()) is not None
            d.post_json("/api/sim/capture_off")
            part = await stream.next()
            while part is not None and part.content_type == "image/jpeg":
                part = await stream.next()  # frames already on their way
            assert part is not None and part.content_type == "application/json"
            error = json.loads(part.body)
            assert error["code"] == "capture_unavailable" and error["retryable"] is True
            assert (await stream.next()) is None  # the closing boundary: a clean end
        async with s.get(d.base + "/api/stream") as r:
            assert r.status == 503
            body = await r.json()
            assert body["error"]["code"] == "capture_unavailable" and body["is_error"]
        async with s.get(d.base + "/api/snapshot") as r:
            assert r.status == 503
        d.post_json("/api/sim/capture_on")
        async with s.get(d.base + "/api/stream") as r:
            assert r.status == 200
            part = await Stream(r).next()
            assert part is not None
            jpeg_image(part)
    # Both feeds that met the loss: the live one, and the one started for the refused request.
    assert (await health_stream(d))["ended_by_capture_loss"] == 2


async def test_snapshot_is_one_jpeg(app: InProcess) -> None:
    async with app.client.get("/api/snapshot?max_width=200") as r:
        assert r.status == 200 and r.content_type == "image/jpeg"
        assert int(r.headers["X-Frame-Seq"]) >= 1
        image = cv2.imdecode(np.frombuffer(await r.read(), np.uint8), cv2.IMREAD_COLOR)
        assert image is not None and image.shape[1] == 200


HOSTILE = [
    "fps=0",
    "fps=31",
    "fps=nan",
    "fps=inf",
    "fps=-1",
    "fps=",
    "fps=1e309",
    "quality=101",
    "quality=9",
    "quality=7.5",
    "quality=%00",
    "max_width=15",
    "max_width=abc",
    "max_width=99999999999999999999",
    "width=100",
    "fps=10&fps=x",
    "quality=" + "9" * 5000,
    "fps=1_0",  # what int() and float() take beyond plain ASCII digits
    "fps=%D9%A3",
    "fps=%20%205",
    "quality=%2B80",
    "max_width=%EF%BC%91%EF%BC%96%EF%BC%90",
    "fps=nan",
]


@pytest.mark.parametrize("query", HOSTILE)
async def test_bad_query_parameters_are_a_clear_400(app: InProcess, query: str) -> None:
    for path in ("/api/stream", "/api/snapshot"):
        async with app.client.get(f"{path}?{query}") as r:
            assert r.status == 400, (path, query)
            body = await r.json()
            assert body["error"]["code"] == "stream_params_invalid"
    assert (await health_stream(app))["feeds"] == 0


async def test_too_many_viewers_is_503(make_app: MakeApp) -> None:
    d = await make_app({"stream": {"max_viewers": 1}})
    async with d.client.get("/api/stream") as r1:
        assert (await Stream(r1).next()) is not None
        async with d.client.get("/api/stream") as r2:
            assert r2.status == 503
            assert (await r2.json())["error"]["code"] == "too_many_viewers"


async def test_token_host_and_origin_rules_off_loopback(
    make_daemon: Callable[..., DaemonProcess], offloop_addr: str
) -> None:
    d = make_daemon({"server": {"listen": ["127.0.0.1", offloop_addr]}})
    far = d.url(offloop_addr)  # https: TLS off loopback (the certificate: test_tls.py)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=False)) as s:
        for path in ("/api/stream", "/api/snapshot"):
            async with s.get(far + path) as r:  # a phone's screen is private
                assert r.status == 401
                assert (await r.json())["error"]["code"] == "auth_required"
            async with s.get(far + path, headers={"Authorization": "Bearer wrong"}) as r:
                assert r.status == 401
            async with s.get(f"{far}{path}?token=wrong") as r:
                assert r.status == 401
            async with s.get(far + path, headers={"Authorization": f"Bearer {d.token}"}) as r:
                assert r.status == 200
                if path == "/api/stream":
                    assert (await Stream(r).next()) is not None
            async with s.get(f"{far}{path}?token={d.token}") as r:  # a plain <img>
                assert r.status == 200
            async with s.get(d.base + path) as r:  # loopback: like a write tool, no token
                assert r.status == 200
            async with s.get(d.base + path, headers={"Host": "evil.example"}) as r:
                assert r.status == 403
                assert (await r.json())["error"]["code"] == "host_not_allowed"
            async with s.get(d.base + path, headers={"Origin": "http://evil.example"}) as r:
                assert r.status == 403
                assert (await r.json())["error"]["code"] == "origin_not_allowed"
        async with s.get(far + "/api/live") as r:  # no screen in it: read like health_check
            assert r.status == 200


async def test_live_lists_running_invocations_with_their_caller(
    make_daemon: Callable[..., DaemonProcess],
) -> None:
    d = make_daemon()
    d.post_json("/api/sim/animate_on")  # never stable: the wait runs its whole timeout
    body = json.dumps({"input": {"timeout_ms": 3000, "stable_ms": 2000}}).encode()

    def call() -> None:
        import urllib.request

        req = urllib.request.Request(
            d.base + "/api/tools/wait_for_stable_screen",
            data=body,
            headers={"Content-Type": "application/json", "X-Fingertip-Caller": "agent<7>"},
        )
        with urllib.request.urlopen(req, timeout=30) as resp:
            resp.read()

    worker = threading.Thread(target=call)
    worker.start()
    try:

        async def running() -> list[dict[str, Any]]:
            return list(d.get_json("/api/live")["running"])

        entries = await eventually(running)
        assert entries[0]["tool"] == "wait_for_stable_screen"
        assert entries[0]["transport"] == "http"
        assert entries[0]["caller"] == "127.0.0.1/agent7"  # the label, cleaned
    finally:
        await asyncio.to_thread(worker.join)
    assert d.get_json("/api/live")["running"] == []


async def test_stopping_the_daemon_ends_open_streams_cleanly(
    make_daemon: Callable[..., DaemonProcess],
) -> None:
    d = make_daemon()
    async with aiohttp.ClientSession() as s, s.get(d.base + "/api/stream") as r:
        stream = Stream(r)
        assert (await stream.next()) is not None
        stopping = asyncio.create_task(asyncio.to_thread(d.stop))
        part = await stream.next()
        while part is not None and part.content_type == "image/jpeg":
            part = await stream.next()
        assert part is not None and json.loads(part.body)["code"] == "stream_closed"
        assert (await stream.next()) is None
        assert await stopping == 0
