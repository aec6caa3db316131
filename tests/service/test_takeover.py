"""Takeover in the Tool Lab (issue 19), end to end: the real daemon (simulated target), Debian's
headless Chromium under Playwright. The live screen is the MJPEG stream; a click taps, a drag
swipes, the wheel scrolls, typing reaches the focused field; the "driving" badge shows another
caller's invocation. Leaves test-artifacts/toollab-takeover.png."""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections.abc import Callable
from typing import Any

from playwright.sync_api import Browser, Page, expect

from tests.service.daemonproc import DaemonProcess
from tests.service.test_toollab import ARTIFACTS, FAST_INPUT, click_on_screen, tile_point

VIEWPORT = {"width": 1400, "height": 900}


def until(check: Callable[[], Any], timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := check()):
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.05)
    return value


def frames(page: Page) -> int:
    return int(page.get_attribute("#screen", "data-frames") or 0)


def open_lab(d: DaemonProcess, browser: Browser) -> Page:
    page = browser.new_page(viewport=VIEWPORT)
    page.goto(d.base + "/")
    until(lambda: frames(page) >= 1)
    return page


def test_the_screen_streams_and_takes_clicks_drags_wheel_and_keys(
    make_daemon: Callable[..., DaemonProcess], browser: Browser
) -> None:
    d = make_daemon(FAST_INPUT)
    d.post_json("/api/sim/animate_on")
    page = open_lab(d, browser)

    # Changing frames at >= 10 fps (the page asks for 25): counted by the page, over 2 s.
    seq0, n0, t0 = page.get_attribute("#screen", "data-seq"), frames(page), time.monotonic()
    until(lambda: time.monotonic() - t0 >= 2.0 and frames(page) > n0)
    fps = (frames(page) - n0) / (time.monotonic() - t0)
    assert fps >= 10, f"{fps:.1f} fps"
    assert page.get_attribute("#screen", "data-seq") != seq0  # new frames, not one repeated
    shot_a = page.locator("#screen").screenshot()
    until(lambda: page.locator("#screen").screenshot() != shot_a)  # and they look different
    d.post_json("/api/sim/animate_off")
    # Watching costs no invocation: nothing but the stream runs.
    assert d.get_json("/api/live")["stream"]["viewers"] == 1

    # A click taps the target at the clicked normalized point.
    x, y = tile_point(d, "Settings")
    click_on_screen(page, (x, y))
    until(lambda: d.sim_state()["app"] == "Settings")
    pointer = d.sim_state()["pointer"]
    assert abs(pointer["x"] - x) <= 3 and abs(pointer["y"] - y) <= 3, pointer
    expect(page.locator("#takeover-status")).to_contain_text("touch_gesture", timeout=20000)
    expect(page.locator("#takeover-status")).to_contain_text("200 ok", timeout=20000)
    expect(page.locator("#latency")).to_contain_text(
        "input → changed frame:", timeout=20000
    )  # the time from the click to the frame that showed the new app

    # Keys typed while the screen has focus go to the target's focused field.
    field = d.sim_state()
    fx, fy = (round(v * 1000) for v in _field_center(d))
    click_on_screen(page, (fx, fy))
    until(lambda: d.sim_state()["focused"] is not None)
    expect(page.locator("#screen-box")).to_be_focused()
    page.keyboard.type("hello")
    until(lambda: d.sim_state()["field_text"] == "hello")
    page.keyboard.press("Backspace")
    until(lambda: d.sim_state()["field_text"] == "hell")
    assert field["app"] == "Settings"

    # A drag swipes (the list follows the contact) and the wheel scrolls it.
    box = page.locator("#screen").bounding_box()
    assert box is not None
    cx, cy = box["x"] + box["width"] / 2, box["y"] + box["height"] * 0.8
    page.mouse.move(cx, cy)
    page.mouse.down()
    page.mouse.move(cx, cy - box["height"] * 0.3, steps=8)
    page.mouse.up()
    until(lambda: d.sim_state()["scroll_px"] > 0)
    scrolled = d.sim_state()["scroll_px"]
    page.mouse.move(cx, box["y"] + box["height"] * 0.6)
    page.mouse.wheel(0, 300)
    until(lambda: d.sim_state()["scroll_px"] > scrolled)

    expect(page.locator("#takeover-status")).to_contain_text("200 ok", timeout=20000)
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "toollab-takeover.png"), full_page=True)
    assert d.sim_state()["keys_down"] == [] and d.sim_state()["contacts_down"] == []
    page.close()


def _field_center(d: DaemonProcess) -> tuple[float, float]:
    from daemon.sim.layout import make_layout

    state = d.sim_state()
    f = make_layout(state["platform"], *state["size"]).field
    return (f.x0 + f.x1) / 2000, (f.y0 + f.y1) / 2000


def test_the_driving_badge_shows_another_callers_invocation(
    make_daemon: Callable[..., DaemonProcess], browser: Browser
) -> None:
    d = make_daemon(FAST_INPUT)
    page = open_lab(d, browser)
    badge = page.locator("#driving")
    expect(badge).to_be_hidden()

    # The page's own invocation is not "another caller".
    page.locator('button.tool[data-tool="wait_for_stable_screen"]').click()
    page.fill("#tool-input", json.dumps({"timeout_ms": 1500, "stable_ms": 1400}))
    d.post_json("/api/sim/animate_on")  # never stable: the wait lasts its whole timeout
    page.locator("#invoke").click()
    until(lambda: d.get_json("/api/live")["running"])
    expect(page.locator("#response-status")).to_have_text("200 ok", timeout=20000)
    expect(badge).to_be_hidden()

    # Another caller (an agent over HTTP) runs a tool: the badge says who drives, then goes.
    body = json.dumps({"input": {"timeout_ms": 3000, "stable_ms": 2900}}).encode()

    def agent() -> None:
        req = urllib.request.Request(
            d.base + "/api/tools/wait_for_stable_screen",
            data=body,
            headers={"Content-Type": "application/json", "X-Fingertip-Caller": "agent"},
        )
        with urllib.request.urlopen(req, timeout=30) as resp:
            resp.read()

    worker = threading.Thread(target=agent)
    worker.start()
    try:
        expect(badge).to_be_visible(timeout=10000)
        expect(badge).to_contain_text("wait_for_stable_screen (http 127.0.0.1/agent)")
        # It keeps the header on one line: the badge sits beside the heading, not below it.
        head, mark = page.locator("#live .live-head h2").bounding_box(), badge.bounding_box()
        assert (
            head
            and mark
            and abs((head["y"] + head["height"] / 2) - (mark["y"] + mark["height"] / 2)) < 6
        ), (head, mark)
    finally:
        worker.join()
    expect(badge).to_be_hidden(timeout=10000)
    page.close()


def test_the_live_view_is_the_screen_inside_an_hdmi_frame(
    make_daemon: Callable[..., DaemonProcess], browser: Browser
) -> None:
    """With the simulated target's picture inside an HDMI frame (bars, overscan) and Android's
    touchscreen spanning the whole frame, the live view shows the screen without the bars, a
    click lands where it was clicked, and the page says where the screen sits."""
    backend = {"kind": "simulated", "sim_hdmi": True, "sim_overscan": 0.03}
    d = make_daemon({**FAST_INPUT, "device": {"device_type": "Android"}, "backend": backend})
    page = open_lab(d, browser)
    _, _, w, h = d.sim_state()["hdmi"]
    size = page.evaluate("() => [$('screen').naturalWidth, $('screen').naturalHeight]")
    assert abs(size[0] - w) <= 1 and abs(size[1] - h) <= 1, (size, (w, h))
    expect(page.locator("#geometry")).to_contain_text("portrait · detected", timeout=20000)
    expect(page.locator("#geometry")).to_contain_text("of the 1920×1080 frame")

    tx, ty = tile_point(d, "Settings")
    click_on_screen(page, (tx, ty))
    until(lambda: d.sim_state()["app"] == "Settings")
    pointer = d.sim_state()["pointer"]
    assert abs(pointer["x"] - tx) <= 6 and abs(pointer["y"] - ty) <= 6, (pointer, (tx, ty))
    page.close()


def test_the_usb_badge_shows_a_sleeping_target(
    make_daemon: Callable[..., DaemonProcess], browser: Browser
) -> None:
    """/api/live's usb: the badge says the target sleeps and names wake_target, and goes when
    it is awake again."""
    d = make_daemon(FAST_INPUT)
    page = open_lab(d, browser)
    badge = page.locator("#usb-state")
    expect(badge).to_be_hidden()
    d.post_json("/api/sim/suspend")
    expect(badge).to_be_visible(timeout=10000)
    expect(badge).to_contain_text("target asleep")
    expect(badge).to_contain_text("wake_target")
    d.post_json("/api/sim/resume")
    expect(badge).to_be_hidden(timeout=10000)
    page.close()
