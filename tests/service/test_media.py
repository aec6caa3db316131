"""Virtual media on the real daemon (simulated backend, whose drive is a SIMULATION that records
what is attached): streamed uploads bounded by quota, disk and Content-Length; names that are
paths refused; the attached image never written, replaced or deleted; file drops built and read
back byte-exact; token rules; the flight recorder's record of an upload; and the daemon's
memory while an upload streams."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.service.daemonproc import DaemonProcess
from tests.service.test_http_api import call
from tests.service.test_trace import traced

MB = 1 << 20


def media_dir(d: DaemonProcess) -> Path:
    return d.state_dir / "media"


async def tool(d: DaemonProcess, name: str, args: dict[str, Any], **kw: Any) -> dict[str, Any]:
    status, body = await call(d, name, {"input": args}, **kw)
    assert status == 200, body
    out: dict[str, Any] = body
    return out


async def ok(d: DaemonProcess, name: str, args: dict[str, Any]) -> Any:
    body = await tool(d, name, args)
    assert not body.get("is_error"), body
    return json.loads(body["output"])


async def refused(d: DaemonProcess, name: str, args: dict[str, Any]) -> str:
    """The error code of a refused call: the tool's error, or the schema's 400."""
    status, body = await call(d, name, {"input": args})
    assert status in (200, 400), body
    assert status == 400 or body.get("is_error"), body
    code: str = body["error"]["code"]
    return code


async def put(
    d: DaemonProcess,
    name: str,
    data: bytes | AsyncIterator[bytes],
    headers: dict[str, str] | None = None,
) -> tuple[int, Any]:
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=300)) as s,
        s.put(f"{d.base}/api/media/images/{name}", data=data, headers=headers or {}) as r,
    ):
        if r.content_type != "application/json":
            return r.status, await r.text()  # aiohttp's own 404 where no route matched
        return r.status, await r.json()


def pattern(size: int) -> bytes:
    return hashlib.sha256(str(size).encode()).digest() * (size // 32) + b"x" * (size % 32)


def folder(d: DaemonProcess) -> list[str]:
    return sorted(os.listdir(media_dir(d)))


async def test_upload_list_attach_and_the_attached_image_is_never_touched(
    daemon: DaemonProcess,
) -> None:
    d = daemon
    image = pattern(3 * MB + 17)
    status, body = await put(d, "disk.img", image)
    assert status == 200, body
    assert body == {
        "name": "disk.img",
        "size": len(image),
        "sha256": hashlib.sha256(image).hexdigest(),
    }
    assert (media_dir(d) / "disk.img").read_bytes() == image
    listed = await ok(d, "media_list", {})
    assert [(i["name"], i["size"], i["attached"]) for i in listed["images"]] == [
        ("disk.img", len(image), False)
    ]
    assert listed["attached"] is None and listed["drive"] is True

    drive = await ok(d, "media_attach", {"name": "disk.img", "mode": "cdrom"})
    assert drive["attached"] == {"name": "disk.img", "mode": "cdrom", "read_only": True}
    assert (await d_health(d))["media"]["attached"]["name"] == "disk.img"
    # An upload never replaces the attached image; a delete and a second attach are refused.
    status, body = await put(d, "disk.img", b"other bytes")
    assert (status, body["error"]["code"]) == (409, "media_attached")
    assert await refused(d, "media_delete", {"name": "disk.img"}) == "media_attached"
    status, body = await put(d, "second.img", b"2" * 4096)
    assert status == 200
    assert await refused(d, "media_attach", {"name": "second.img"}) == "media_busy"
    assert (media_dir(d) / "disk.img").read_bytes() == image
    assert folder(d) == ["disk.img", "second.img"]  # no temporary file left

    gone = await ok(d, "media_detach", {})
    assert gone["detached"] == "disk.img" and gone["attached"] is None
    assert (await ok(d, "media_detach", {"force": True}))["detached"] is None
    await ok(d, "media_delete", {"name": "disk.img"})
    assert folder(d) == ["second.img"]
    assert await refused(d, "media_attach", {"name": "disk.img"}) == "media_not_found"


async def d_health(d: DaemonProcess) -> dict[str, Any]:
    out: dict[str, Any] = await ok(d, "health_check", {})
    return out


@pytest.mark.parametrize(
    "name",
    [
        "..",
        "...",
        ".hidden",
        "..%2Fescape",
        "a%2F..%2F..%2Fx",
        "a%5Cb",
        "%00x",
        "x" * 101,
        "%C3%A9",
        "%ED%A0%80",  # a lone surrogate, as UTF-8 would carry one
        "x%EF%BF%BE",
    ],
)
async def test_a_name_that_is_not_one_file_is_refused(daemon: DaemonProcess, name: str) -> None:
    status, body = await put(daemon, name, b"data")
    assert status in (400, 404, 405), body  # 404/405: the router matched no image name at all
    if status == 400:
        assert body["error"]["code"] == "media_name_invalid"
    assert folder(daemon) == []
    assert not list(daemon.state_dir.parent.glob("escape*")) and not (daemon.tmp / "x").exists()
    for hostile in ("../x", "a/b", "\ud800", ".", ""):
        code = await refused(daemon, "media_attach", {"name": hostile})
        assert code in ("media_name_invalid", "tool_arguments_invalid", "tool_call_payload_invalid")


async def test_a_hostile_content_length_is_refused_and_recorded_nowhere(
    daemon: DaemonProcess,
) -> None:
    """NaN, Infinity, a sign, an exponent, a number past any disk, two lengths: refused as bad
    HTTP before any route (nothing written, nothing in the trail), and the daemon goes on."""
    d = daemon
    for length in ("NaN", "Infinity", "-1", "1e3", "9" * 40, "4, 5"):
        reader, writer = await asyncio.open_connection("127.0.0.1", d.port)
        writer.write(
            b"PUT /api/media/images/h.img HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            + f"Content-Length: {length}\r\nConnection: close\r\n\r\ndata".encode()
        )
        await writer.drain()
        head = await asyncio.wait_for(reader.readline(), 60)
        writer.close()
        await writer.wait_closed()
        assert head.split()[1:2] == [b"400"], (length, head)
    assert not media_dir(d).exists() or folder(d) == []
    assert await traced(d, "?tool=media_upload") == []
    status, body = await put(d, "h.img", b"data")
    assert status == 200 and body["size"] == 4, body


async def test_uploads_past_the_quota_the_disk_or_their_length_leave_nothing(
    make_daemon: Any,
) -> None:
    d = make_daemon({"media": {"quota_mb": 4}})
    # Announced too big: refused before a byte is written.
    status, body = await put(d, "big.img", b"0" * (5 * MB))
    assert (status, body["error"]["code"]) == (413, "media_quota_exceeded")
    assert body["error"]["details"]["room"] <= 4 * MB

    # Chunked (no length): cut once past the room.
    async def endless() -> AsyncIterator[bytes]:
        for _ in range(10 * 16):
            yield b"1" * (64 << 10)

    status, body = await put(d, "big.img", endless())
    assert (status, body["error"]["code"]) == (413, "media_quota_exceeded")
    assert folder(d) == []

    # A body that ends short of its Content-Length (the client left): nothing kept, and the
    # upload restarts from the beginning.
    _, writer = await asyncio.open_connection("127.0.0.1", d.port)
    writer.write(
        b"PUT /api/media/images/cut.img HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Length: 1000000\r\n\r\n" + b"2" * 300_000
    )
    await writer.drain()
    writer.close()
    await writer.wait_closed()
    deadline = time.monotonic() + 30  # a bound for a busy machine, not a timing
    while True:  # until the daemon has seen the cut upload end (it is busy until then)
        status, body = await put(d, "cut.img", b"3" * 1000)
        if status != 409 or time.monotonic() > deadline:
            break
        assert body["error"]["code"] == "media_busy"
        await asyncio.sleep(0.05)
    assert status == 200 and folder(d) == ["cut.img"]
    assert (media_dir(d) / "cut.img").read_bytes() == b"3" * 1000
    events = [e for e in d.log_events() if e.get("tool") == "media_upload"]
    assert any(e.get("error_code") == "media_upload_incomplete" for e in events), events


async def test_a_full_disk_is_refused_with_its_own_code(make_daemon: Any, tmp_path: Path) -> None:
    from tests.service.daemonproc import DaemonProcess as Proc

    folder_ = tmp_path / "full"
    folder_.mkdir()
    d = Proc(folder_, fsize=2 * MB).start()  # a write past 2 MB fails, as on a full disk
    try:
        status, body = await put(d, "big.img", pattern(3 * MB))
        assert (status, body["error"]["code"]) == (507, "media_disk_full")
        assert folder(d) == []
        assert d.proc is not None and d.proc.poll() is None  # the daemon lives on
    finally:
        d.kill()


async def test_a_file_drop_holds_exactly_its_files_and_reads_back_byte_exact(
    daemon: DaemonProcess,
) -> None:
    d = daemon
    files = {
        "Hello World.txt": b"hello from fingertip\n",
        "photo.jpg": pattern(300_000),
        "empty": b"",
    }
    args = {
        "files": [
            {"name": n, "content_base64": base64.b64encode(b).decode()} for n, b in files.items()
        ],
        "free_mb": 2,
    }
    made = await ok(d, "media_drop", args)
    assert made["name"] == "drop.img" and made["files"] == 3
    assert made["drive"]["attached"] == {"name": "drop.img", "mode": "flash", "read_only": False}
    # Attached writable: its files are not read (the target may be writing).
    assert await refused(d, "media_files", {"name": "drop.img"}) == "media_attached"
    await ok(d, "media_detach", {})
    listed = await ok(d, "media_files", {"name": "drop.img"})
    assert {f["path"]: f["size"] for f in listed["files"]} == {
        "/" + n: len(b) for n, b in files.items()
    }
    for name, data in files.items():
        got = await ok(d, "media_file_read", {"name": "drop.img", "path": name})
        assert base64.b64decode(got["content_base64"]) == data
        assert got["sha256"] == hashlib.sha256(data).hexdigest()
    assert await refused(d, "media_file_read", {"name": "drop.img", "path": "nope"}) == (
        "media_not_found"
    )
    for path in ("../state", "/a/../b", "a//b"):
        code = await refused(d, "media_file_read", {"name": "drop.img", "path": path})
        assert code in ("media_name_invalid", "media_not_found")


@pytest.mark.parametrize(
    "files",
    [
        [{"name": "../evil.txt", "content_base64": "eA=="}],
        [{"name": "a/b", "content_base64": "eA=="}],
        [{"name": "x\ud800", "content_base64": "eA=="}],
        [{"name": "..", "content_base64": "eA=="}],
        [{"name": "ok", "content_base64": "not base64!"}],
        [{"name": "Same", "content_base64": "eA=="}, {"name": "same", "content_base64": "eA=="}],
    ],
)
async def test_a_hostile_file_drop_is_refused_and_builds_nothing(
    daemon: DaemonProcess, files: list[dict[str, str]]
) -> None:
    code = await refused(daemon, "media_drop", {"files": files})
    assert code in (
        "media_name_invalid",
        "media_files_invalid",
        "tool_arguments_invalid",
        "tool_call_payload_invalid",
    )
    assert folder(daemon) == []
    assert (await ok(daemon, "media_list", {}))["attached"] is None


async def test_hostile_numbers_are_refused(daemon: DaemonProcess) -> None:
    for free in ("NaN", "Infinity", "1e308", "-1"):
        raw = '{"input":{"files":[{"name":"a","content_base64":"eA=="}],"free_mb":' + free + "}}"
        status, body = await call(daemon, "media_drop", raw=raw.encode())
        assert status == 400 or body.get("is_error"), body
    assert folder(daemon) == []


READER = "r" * 24  # a client token limited to read tools


async def test_token_rules_and_the_flight_recorder(make_daemon: Any) -> None:
    d = make_daemon(
        {
            "auth": {
                "require_on_loopback": True,
                "client_tokens": [{"token": READER, "max_policy": "read"}],
            },
            "media": {"quota_mb": 1},
        }
    )
    bearer = {"Authorization": f"Bearer {d.token}"}
    status, body = await put(d, "x.img", b"data")
    assert (status, body["error"]["code"]) == (401, "auth_required")
    status, body = await put(d, "x.img", b"data", headers={"Authorization": f"Bearer {READER}"})
    assert (status, body["error"]["code"]) == (403, "tool_execution_denied"), body
    # A token of bytes no text holds (a lone surrogate's UTF-8, 0xff): refused, recorded alike.
    reader, writer = await asyncio.open_connection("127.0.0.1", d.port)
    writer.write(
        b"PUT /api/media/images/x.img HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
        b"Authorization: Bearer \xed\xa0\x80\xff\r\nContent-Length: 4\r\n\r\ndata"
    )
    await writer.drain()
    head = await asyncio.wait_for(reader.readline(), 60)
    writer.close()
    await writer.wait_closed()
    assert head.split()[1:2] == [b"401"], head
    status, body = await put(d, "x.img", b"0" * (2 * MB), headers=bearer)
    assert (status, body["error"]["code"]) == (413, "media_quota_exceeded")
    status, body = await put(d, "..%2Fescape", b"data", headers=bearer)
    assert (status, body["error"]["code"]) == (400, "media_name_invalid")
    assert folder(d) == []
    status, body = await put(d, "x.img", b"data", headers=bearer)
    assert status == 200
    status, body = await call(d, "media_files", {"input": {"name": "x.img"}})
    assert status == 401  # private: what the target saved
    status, body = await call(d, "media_attach", {"input": {"name": "x.img"}})
    assert status == 401  # a write
    # Every upload is in the trail, refused ones as a refused tool call is (issue 47): the code,
    # who (the reader's token id), the request's size, never its arguments nor "trusted"; the
    # ones that ran with theirs.
    rows = await traced(d, "?tool=media_upload", count=6, token=d.token)
    got = sorted(
        (r["error_code"] or "", r["args"] is None, r["trusted"], r["request_bytes"]) for r in rows
    )
    assert got == [
        ("", False, True, 4),
        ("auth_required", True, False, 4),
        ("auth_required", True, False, 4),
        ("media_name_invalid", True, False, 4),
        ("media_quota_exceeded", False, True, 2 * MB),
        ("tool_execution_denied", True, False, 4),
    ], rows
    denied = next(r for r in rows if r["error_code"] == "tool_execution_denied")
    assert denied["token_id"] and denied["token_id"] != next(
        r["token_id"] for r in rows if r["error_code"] is None
    ), rows
    # A refused call over the tools API is recorded the same way.
    calls = await traced(d, "?tool=media_attach", count=1, token=d.token)
    assert [(r["error_code"], r["args"]) for r in calls] == [("auth_required", None)], calls


async def test_the_daemons_memory_stays_flat_while_an_upload_streams(
    daemon: DaemonProcess,
) -> None:
    """A 96 MB upload sent slowly enough to sample: the daemon holds one chunk at a time."""
    d = daemon
    before = d.memory_kib("VmRSS")
    samples: list[int] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            samples.append(d.memory_kib("VmRSS"))
            stop.wait(0.02)

    sampler = threading.Thread(target=sample)
    sampler.start()
    block = pattern(MB)

    async def body() -> AsyncIterator[bytes]:
        for _ in range(96):
            yield block

    try:
        status, out = await put(d, "big.img", body())
    finally:
        stop.set()
        sampler.join()
    assert status == 200, out
    assert out["size"] == 96 * MB
    peak = max(samples)
    print(
        f"daemon VmRSS before {before / 1024:.1f} MB, peak during a 96 MB upload "
        f"{peak / 1024:.1f} MB (+{(peak - before) / 1024:.1f} MB, {len(samples)} samples)"
    )
    assert peak - before < 16 * 1024, (before, peak)


async def test_the_whole_image_comes_back_privately_and_not_while_attached_writable(
    make_daemon: Any,
) -> None:
    d = make_daemon({"auth": {"require_on_loopback": True}})
    bearer = {"Authorization": f"Bearer {d.token}"}
    image = pattern(2 * MB + 5)
    assert (await put(d, "w.img", image, headers=bearer))[0] == 200
    async with aiohttp.ClientSession() as s:
        url = f"{d.base}/api/media/images/w.img"
        async with s.get(url) as r:
            assert r.status == 401  # private: no token, no image
        async with s.post(
            f"{d.base}/api/tools/media_attach",
            json={"input": {"name": "w.img"}},
            headers=bearer,
        ) as r:
            assert r.status == 200 and not (await r.json()).get("is_error")
        async with s.get(url, headers=bearer) as r:
            assert r.status == 409 and (await r.json())["error"]["code"] == "media_attached"
        async with s.post(
            f"{d.base}/api/tools/media_detach", json={"input": {}}, headers=bearer
        ) as r:
            assert r.status == 200
        async with s.get(url, headers=bearer) as r:
            assert r.status == 200
            assert hashlib.sha256(await r.read()).digest() == hashlib.sha256(image).digest()
        async with s.get(f"{d.base}/api/media/images/..%2Fpairing-token", headers=bearer) as r:
            assert r.status in (400, 404)
            assert d.token not in await r.text()
