"""The Tool Lab page end to end: the real daemon (simulated target) and Debian's headless
Chromium driven by Playwright. Installed by `make browser-setup`; never `playwright install`."""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable
from typing import Any

import cv2
import numpy as np
from playwright.sync_api import Browser, Page, expect

from daemon.sim.layout import make_layout
from tests.service.daemonproc import REPO, DaemonProcess

ARTIFACTS = REPO / "test-artifacts"
FAST_INPUT = {"input": {"evidence_timeout_ms": 1500, "evidence_stable_ms": 200}}


def tile_point(d: DaemonProcess, name: str) -> tuple[int, int]:
    state = d.sim_state()
    width, height = state["size"]
    tile = next(t for t in make_layout(state["platform"], width, height).tiles if t.name == name)
    return round((tile.icon.x0 + tile.icon.x1) / 2), round((tile.icon.y0 + tile.icon.y1) / 2)


def decode(src: str) -> Any:
    assert src.startswith("data:image/jpeg;base64,"), src[:40]
    return decode_jpeg(base64.b64decode(src.split(",", 1)[1]))


def decode_jpeg(data: bytes) -> Any:
    return cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_GRAYSCALE).astype(np.float32)


def difference(a: Any, b: Any) -> float:
    """Mean absolute grey-level difference, after scaling b to a's size."""
    b = cv2.resize(b, (a.shape[1], a.shape[0]), interpolation=cv2.INTER_AREA)
    return float(np.abs(a - b).mean())


def wait_for_screen(page: Page) -> None:
    """The live screen's first stream frame. (No wait_for_function: the page's CSP forbids the
    string evaluation it polls with, and the tests keep that CSP on.)"""
    expect(page.locator("#screen")).to_have_attribute("data-frames", re.compile(r"^\d+$"))
    expect(page.locator("#screen")).to_have_attribute("src", re.compile(r"^blob:"))


def click_on_screen(page: Page, point: tuple[int, int]) -> None:
    """Click the live screen where `point` (normalized 0..1000) is: takeover taps there."""
    box = page.locator("#screen").bounding_box()
    assert box is not None
    page.locator("#screen").click(
        position={"x": point[0] / 1000 * box["width"], "y": point[1] / 1000 * box["height"]}
    )


def invoke(page: Page, tool: str, text: str) -> None:
    page.locator(f'button.tool[data-tool="{tool}"]').click()
    expect(page.locator("#tool-name")).to_have_text(tool)
    page.fill("#tool-input", text)
    page.locator("#invoke").click()


def test_lists_tools_invokes_and_shows_the_evidence(
    make_daemon: Callable[..., DaemonProcess], browser: Browser
) -> None:
    d = make_daemon(FAST_INPUT)
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    page.goto(d.base + "/")

    # The catalog, grouped by category, exactly as GET /api/tools lists it.
    listed = d.get_json("/api/tools")["tools"]
    expect(page.locator("#tool-list section.category")).to_have_count(
        len({t["category"] for t in listed})
    )
    for category in sorted({t["category"] for t in listed}):
        section = page.locator(f'#tool-list section[data-category="{category}"]')
        names = section.locator("button.tool").all_inner_texts()
        assert names == sorted(t["name"] for t in listed if t["category"] == category)

    # Picking a tool shows its description and prefills its example.
    page.locator('button.tool[data-tool="health_check"]').click()
    expect(page.locator("#tool-name")).to_have_text("health_check")
    page.locator("#invoke").click()
    expect(page.locator("#response-status")).to_have_text("200 ok")
    expect(page.locator("#response-output")).to_contain_text('"platform": "ios"')

    wait_for_screen(page)
    before = decode_jpeg(d.get_bytes("/api/snapshot"))
    assert d.sim_state()["app"] is None
    x, y = tile_point(d, "Settings")
    invoke(page, "touch_gesture", json.dumps({"type": "tap", "point": {"x": x, "y": y}}))
    expect(page.locator("#response-status")).to_have_text("200 ok", timeout=20000)
    assert d.sim_state()["app"] == "Settings"  # the page's call reached the target
    evidence = page.locator("#evidence")
    expect(evidence).to_be_visible()
    after = decode(str(evidence.get_attribute("src")))
    # The new screen: unlike the one before the tap, like the target's screen now.
    now = decode_jpeg(d.get_bytes("/api/snapshot"))
    assert difference(after, now) < difference(after, before) / 4
    expect(page.locator("#response-output")).to_contain_text('"screen_changed": true')
    expect(page.locator("#response-output")).to_contain_text("<base64,")  # elided, not dumped

    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "toollab.png"), full_page=True)
    page.close()


def test_token_is_asked_once_and_kept(
    make_daemon: Callable[..., DaemonProcess], browser: Browser, offloop_addr: str
) -> None:
    d = make_daemon({**FAST_INPUT, "server": {"listen": ["127.0.0.1", offloop_addr]}})
    # Off loopback the page is served over HTTPS with the board's self-signed certificate:
    # the browser takes it as a user's one-time exception does.
    context = browser.new_context(viewport={"width": 1400, "height": 900}, ignore_https_errors=True)
    page = context.new_page()
    base = d.url(offloop_addr)
    assert base.startswith("https://")
    page.goto(base + "/")
    # Off loopback the screen is private: no frame without the token.
    expect(page.locator("#token-state")).to_have_text("the screen needs the token")
    expect(page.locator("#live-state")).to_contain_text("auth_required")
    assert page.get_attribute("#screen", "data-frames") is None
    point = tile_point(d, "Clock")
    tap = {"type": "tap", "point": {"x": point[0], "y": point[1]}}
    invoke(page, "touch_gesture", json.dumps(tap))
    expect(page.locator("#response-status")).to_have_text("401 auth_required")
    expect(page.locator("#token-state")).to_have_text("this tool needs the token")
    assert d.sim_state()["app"] is None

    page.fill("#token", d.token)
    page.locator("#token-form button").click()
    expect(page.locator("#token-state")).to_have_text("saved")
    wait_for_screen(page)  # the stream reconnects with the token
    page.reload()  # kept in the browser's storage
    wait_for_screen(page)
    expect(page.locator("#token")).to_have_value(d.token)
    click_on_screen(page, point)  # takeover: the click is the tap
    expect(page.locator("#takeover-status")).to_contain_text("200 ok", timeout=20000)
    assert d.sim_state()["app"] == "Clock"
    context.close()


def test_the_header_shows_what_the_usb_drive_holds(
    make_daemon: Callable[..., DaemonProcess], browser: Browser
) -> None:
    d = make_daemon()
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    page.goto(d.base + "/")
    expect(page.locator("#media")).to_have_text("USB drive: empty")
    drop = {"files": [{"name": "a.txt", "content_base64": "YQo="}], "read_only": True}
    invoke(page, "media_drop", json.dumps(drop))
    expect(page.locator("#response-status")).to_have_text("200 ok", timeout=20000)
    expect(page.locator("#media")).to_have_text("USB drive: drop.img (flash, read-only)")
    invoke(page, "media_detach", "{}")
    expect(page.locator("#media")).to_have_text("USB drive: empty")
    page.close()
