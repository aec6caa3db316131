"""OCR in its worker process, against the real daemon and the simulated target: a worker that
is killed (as the kernel's OOM killer does) or hangs in the middle of a read costs only that
read, answered ocr_unavailable (retryable), while health_check, taps and the live stream go on;
the next read starts a new worker. An idle worker exits and gives its memory back. OCR turned
off lists the text tools as unavailable, with the state they need and how to get there."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from daemon.screen.ocr import engine_installed
from tests.service.daemonproc import DaemonProcess, eventually
from tests.service.test_input_tools import Make, call, ok, start, state, tile

pytestmark = pytest.mark.skipif(not engine_installed(), reason="OCR engine missing")
TEXT_TOOLS = ("screen_text", "find_text", "tap_text")


def cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


async def ocr_status(d: DaemonProcess) -> dict[str, Any]:
    status: dict[str, Any] = (await ok(d, "health_check", {}))["ocr"]
    return status


async def worker_reading(d: DaemonProcess, tool: str, args: dict[str, Any]) -> tuple[Any, int]:
    """Start `tool` on a screen not read yet; once its worker is busy reading, return the call
    (still running) and the worker's pid."""
    pid = (await ocr_status(d))["worker_pid"]
    ticks = cpu_ticks(pid)
    # Another screen, so the read is a new run and not the cached one.
    await ok(d, "touch_gesture", {"type": "tap", "point": tile("ios", "Notes")})
    pending = asyncio.ensure_future(call(d, tool, args))
    await eventually(lambda: cpu_ticks(pid) > ticks + 5, "the worker reads")
    return pending, pid


async def still_serving(d: DaemonProcess) -> None:
    """health_check answers, a tap lands on the target and the live stream delivers."""
    started = time.monotonic()
    await ok(d, "health_check", {})
    assert time.monotonic() - started < 5
    await ok(d, "touch_gesture", {"type": "tap", "point": {"x": 80, "y": 60}})  # back home
    st = await state(d)
    assert st["screen"] == "home" and st["contacts_down"] == [] and st["buttons_down"] == []
    url = f"{d.base}/api/stream?fps=5&token={d.token}"
    async with aiohttp.ClientSession() as s, s.get(url) as r:
        assert r.status == 200
        seen = b""
        while seen.count(b"Content-Type: image/jpeg") < 2:
            seen += await r.content.readany()


async def test_a_worker_killed_mid_read_costs_that_read_and_nothing_else(make_daemon: Make) -> None:
    d = start(make_daemon)
    await ok(d, "screen_text", {"region": {"x0": 0, "y0": 0, "x1": 300, "y1": 100}})
    pending, pid = await worker_reading(d, "screen_text", {})
    os.kill(pid, signal.SIGKILL)  # what the OOM killer does
    status, body, _ = await pending
    assert body["is_error"] is True and status == 200, body  # a tool failure in a 200
    error = body["error"]
    assert error["code"] == "ocr_unavailable" and error["retryable"] is True, error
    assert "SIGKILL" in error["details"]["worker"]
    await eventually(lambda: gone(pid), "the killed worker reaped")
    await still_serving(d)
    ocr = await ocr_status(d)
    assert ocr["worker_failures"] == 1 and "SIGKILL" in ocr["last_failure"]
    # The next read starts another worker and reads.
    tree = await ok(d, "screen_text", {})
    assert "Settings" in {e["text"] for e in tree["elements"]}
    assert (await ocr_status(d))["worker_pid"] != pid
    logs = d.logs()
    assert "ocr.worker_lost" in logs


async def test_a_hung_worker_is_cut_at_the_read_timeout(make_daemon: Make) -> None:
    d = start(make_daemon, ocr={"read_timeout_s": 20.0})
    await ok(d, "screen_text", {"region": {"x0": 0, "y0": 0, "x1": 300, "y1": 100}})
    pending, pid = await worker_reading(d, "tap_text", {"query": "Notes row 3"})
    os.kill(pid, signal.SIGSTOP)  # starved: it never answers
    try:
        _, body, _ = await pending
        assert body["error"]["code"] == "ocr_unavailable", body
        assert "no answer within 20 s" in body["error"]["details"]["worker"]
    finally:
        if not gone(pid):
            os.kill(pid, signal.SIGKILL)
    await still_serving(d)
    found = await ok(d, "find_text", {"query": "Settings"})
    assert found["count"] >= 1


async def test_an_idle_worker_exits_and_its_memory_goes_with_it(make_daemon: Make) -> None:
    d = start(make_daemon, ocr={"idle_exit_s": 2.0})
    await ok(d, "find_text", {"query": "Settings"})
    pid = (await ocr_status(d))["worker_pid"]
    assert not gone(pid)

    async def stopped() -> bool:
        return bool((await ocr_status(d))["worker"] == "stopped") and gone(pid)

    await eventually(stopped, "the idle worker exits")
    assert (await ocr_status(d))["worker_failures"] == 0
    assert "ocr.worker_retired" in d.logs()


async def test_ocr_off_lists_the_text_tools_as_unavailable(make_daemon: Make) -> None:
    d = start(make_daemon, ocr={"enabled": False})
    async with aiohttp.ClientSession() as s, s.get(f"{d.base}/api/tools") as r:
        listed = {t["name"]: t for t in (await r.json())["tools"]}
    for name in TEXT_TOOLS:
        runtime = listed[name].get("runtime") or listed[name]["tool"]["runtime"]
        assert runtime["available"] is False and runtime["code"] == "ocr_disabled", runtime
        assert "[ocr] enabled" in runtime["requiredState"] and runtime["remediation"]
    status, body, _ = await call(d, "screen_text", {})
    error = body["error"]
    assert status == 503 and error["code"] == "tool_unavailable", body
    assert error["details"]["code"] == "ocr_disabled" and error["retryable"] is False
    assert (await ocr_status(d))["enabled"] is False
    # Nothing was started for it.
    assert (await ocr_status(d))["worker_starts"] == 0
