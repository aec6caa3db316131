"""The Tool Lab page end to end: the real daemon (simulated target) and Debian's headless
Chromium driven by Playwright. Installed by `make browser-setup`; never `playwright install`."""

from __future__ import annotations

import base64
import json
import re
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from daemon.sim.layout import make_layout
from tests.service.daemonproc import REPO, DaemonProcess

CHROMIUM = Path("/usr/bin/chromium")
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = REPO / "test-artifacts"
FAST_INPUT = {"input": {"evidence_timeout_ms": 1500, "evidence_stable_ms": 200}}


@pytest.fixture
def browser() -> Iterator[Browser]:
    if not CHROMIUM.exists():
        pytest.skip("Debian's chromium is missing: run `make browser-setup`")
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        try:
            yield b
        finally:
            b.close()


def tile_point(d: DaemonProcess, name: str) -> tuple[int, int]:
    state = d.sim_state()
    width, height = state["size"]
    tile = next(t for t in make_layout(state["platform"], width, height).tiles if t.name == name)
    return round((tile.icon.x0 + tile.icon.x1) / 2), round((tile.icon.y0 + tile.icon.y1) / 2)


def decode(src: str) -> Any:
    assert src.startswith("data:image/jpeg;base64,"), src[:40]
    data = base64.b64decode(src.split(",", 1)[1])
    return cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_GRAYSCALE).astype(np.float32)


def difference(a: Any, b: Any) -> float:
    """Mean absolute grey-level difference, after scaling b to a's size."""
    b = cv2.resize(b, (a.shape[1], a.shape[0]), interpolation=cv2.INTER_AREA)
    return float(np.abs(a - b).mean())


def wait_for_screen(page: Page) -> str:
    """The live screen's first image. (No wait_for_function: the page's CSP forbids the
    string evaluation it polls with, and the tests keep that CSP on.)"""
    expect(page.locator("#screen")).to_have_attribute("src", re.compile(r"^data:image/jpeg"))
    return str(page.get_attribute("#screen", "src"))


def tap_on_screen(page: Page, point: tuple[int, int]) -> None:
    """Click the live screen where `point` (normalized) is, then accept the offered tap."""
    box = page.locator("#screen").bounding_box()
    assert box is not None
    page.locator("#screen").click(
        position={"x": point[0] / 1000 * box["width"], "y": point[1] / 1000 * box["height"]}
    )
    offer = page.locator("#tap-go")
    expect(offer).to_be_visible()
    text = offer.inner_text()
    x, y = (int(v) for v in text.removeprefix("Tap (").removesuffix(")").split(", "))
    assert abs(x - point[0]) <= 3 and abs(y - point[1]) <= 3, text  # rounding of the click
    offer.click()


def test_lists_tools_taps_and_shows_the_new_screen(
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

    before = decode(wait_for_screen(page))
    assert d.sim_state()["app"] is None
    tap_on_screen(page, tile_point(d, "Settings"))

    expect(page.locator("#tool-name")).to_have_text("touch_gesture")
    expect(page.locator("#response-status")).to_have_text("200 ok", timeout=20000)
    assert d.sim_state()["app"] == "Settings"  # the page's tap reached the target
    evidence = page.locator("#evidence")
    expect(evidence).to_be_visible()
    after = decode(str(evidence.get_attribute("src")))
    # The new screen: unlike the one before the tap, like the target's screen now.
    shot = json.loads(d.post_json("/api/tools/screenshot")["output"])
    now = decode(f"data:image/jpeg;base64,{shot['data']}")
    assert difference(after, now) < difference(after, before) / 4
    expect(page.locator("#response-output")).to_contain_text('"screen_changed": true')
    expect(page.locator("#response-output")).to_contain_text("<base64,")  # elided, not dumped

    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "toollab.png"), full_page=True)
    page.close()


@pytest.fixture
def offloop_addr() -> Iterator[str]:
    """A non-loopback address on `lo` (link-local /32): the page reaches the daemon from
    outside 127.0.0.0/8 while nothing leaves the machine."""
    addr = "169.254.231.3"
    made = subprocess.run(["ip", "addr", "add", f"{addr}/32", "dev", "lo"], capture_output=True)
    if made.returncode != 0:
        pytest.skip(f"cannot add a test address: {made.stderr.decode().strip()}")
    try:
        yield addr
    finally:
        subprocess.run(["ip", "addr", "del", f"{addr}/32", "dev", "lo"], capture_output=True)


def test_token_is_asked_once_and_kept(
    make_daemon: Callable[..., DaemonProcess], browser: Browser, offloop_addr: str
) -> None:
    d = make_daemon({**FAST_INPUT, "server": {"listen": ["127.0.0.1", offloop_addr]}})
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    base = f"http://{offloop_addr}:{d.port}"
    page.goto(base + "/")
    wait_for_screen(page)  # reading the screen needs no token
    point = tile_point(d, "Clock")

    tap_on_screen(page, point)
    expect(page.locator("#response-status")).to_have_text("401 auth_required")
    expect(page.locator("#token-state")).to_have_text("this tool needs the token")
    assert d.sim_state()["app"] is None

    page.fill("#token", d.token)
    page.locator("#token-form button").click()
    expect(page.locator("#token-state")).to_have_text("saved")
    page.reload()  # kept in the browser's storage
    wait_for_screen(page)
    expect(page.locator("#token")).to_have_value(d.token)
    tap_on_screen(page, point)
    expect(page.locator("#response-status")).to_have_text("200 ok", timeout=20000)
    assert d.sim_state()["app"] == "Clock"
    context.close()
