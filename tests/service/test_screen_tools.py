"""screenshot and wait_for_stable_screen through the HTTP API on the simulated target (the
daemon in this process: tests/service/inprocess.py)."""

from __future__ import annotations

import base64
import json
from typing import Any

import cv2
import numpy as np

from tests.service.inprocess import InProcess
from tests.service.test_http_api import call, get


def decoded(out: dict[str, Any]) -> np.ndarray:
    data = base64.b64decode(out["data"])
    assert len(data) == out["size"]
    img = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    assert img is not None and img.shape[:2] == (out["height"], out["width"])
    return img


async def sim(d: InProcess, action: str) -> None:
    async with d.client.post(f"/api/sim/{action}") as r:
        assert r.status == 200


async def test_stable_screen(app: InProcess) -> None:
    args = {"timeout_ms": 3000, "stable_ms": 300, "diff_threshold": 2}
    status, body = await call(app, "wait_for_stable_screen", {"input": args})
    assert status == 200, body
    out = json.loads(body["output"])
    assert out["ok"] is True and out["stable"] is True and out["screen_changed"] is False
    assert 300 <= out["elapsed_ms"] < 3000
    assert out["last_diff"]["changed"] is False
    decoded(out)


async def test_never_settling_screen_still_returns_a_screenshot(app: InProcess) -> None:
    await sim(app, "animate_on")
    args = {"timeout_ms": 800, "stable_ms": 400}
    status, body = await call(app, "wait_for_stable_screen", {"input": args})
    assert status == 200, body
    out = json.loads(body["output"])
    assert out["stable"] is False and out["screen_changed"] is True
    assert out["elapsed_ms"] >= 800
    decoded(out)


async def test_capture_gone_is_unavailable_and_comes_back(app: InProcess) -> None:
    await sim(app, "capture_off")
    status, body = await call(app, "screenshot")
    assert status == 503, body
    err = body["error"]
    assert err["code"] == "tool_unavailable" and err["retryable"] is True
    assert err["details"]["code"] == "capture_unavailable" and err["details"]["remediation"]
    _, listing = await get(app, "/api/tools")
    entry = next(t for t in listing["tools"] if t["name"] == "screenshot")
    assert entry["runtime"]["available"] is False
    _, health = await call(app, "health_check")
    assert json.loads(health["output"])["capture"]["available"] is False
    await sim(app, "capture_on")
    status, body = await call(app, "screenshot")
    assert status == 200 and not body["is_error"]
    _, listing = await get(app, "/api/tools")
    assert "runtime" not in next(t for t in listing["tools"] if t["name"] == "screenshot")


async def test_screenshot_scale_and_quality(app: InProcess) -> None:
    _, big = await call(app, "screenshot", {"input": {"quality": 95}})
    _, small = await call(app, "screenshot", {"input": {"quality": 20, "scale": 0.5}})
    b, s = json.loads(big["output"]), json.loads(small["output"])
    assert (s["width"], s["height"]) == (b["width"] // 2, b["height"] // 2)
    assert s["size"] < b["size"]
    assert b["captured_at"].endswith("Z")
    decoded(s)
