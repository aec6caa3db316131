"""The Tool Lab's History view (daemon/toollab/history.js) in Debian's headless Chromium: the
flight recorder's timeline, and one input invocation's before/after screenshots side by side."""

from __future__ import annotations

import re
import time
from collections.abc import Callable

from playwright.sync_api import Browser, expect

from tests.service.daemonproc import DaemonProcess
from tests.service.test_toollab import FAST_INPUT, decode, difference, tile_point

Make = Callable[..., DaemonProcess]


def test_history_shows_the_timeline_and_before_after(make_daemon: Make, browser: Browser) -> None:
    d = make_daemon(FAST_INPUT)
    x, y = tile_point(d, "Notes")
    d.post_json("/api/tools/touch_gesture", {"input": {"type": "tap", "point": {"x": x, "y": y}}})
    d.post_json("/api/tools/health_check", {"input": {}})
    deadline = time.monotonic() + 20  # the writer batches: wait until both are on file
    while len(d.get_json("/api/trace")["invocations"]) < 2:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    page = browser.new_page()
    page.goto(d.base + "/")
    page.locator("#history-section summary").click()
    rows = page.locator("#history-rows tr")  # the page's own live screenshots are there too
    tap = rows.filter(has_text="touch_gesture")
    expect(tap).to_have_count(1)
    expect(rows.filter(has_text="health_check")).to_have_count(1)
    expect(page.locator("#history-state")).to_contain_text("shown")
    tap.click()
    expect(page.locator("#history-title")).to_contain_text("touch_gesture · http · ok")
    for kind in ("before", "after"):
        expect(page.locator(f"#history-{kind}")).to_have_attribute(
            "src", re.compile(r"^data:image/jpeg;base64,")
        )
    before = decode(str(page.get_attribute("#history-before", "src")))
    after = decode(str(page.get_attribute("#history-after", "src")))
    assert before.shape == after.shape and before.shape[1] == 360
    assert difference(before, after) > 5  # home screen, then the Notes app
    expect(page.locator("#history-json")).to_contain_text('"type": "tap"')
    # A filter narrows the timeline.
    page.fill("#history-tool", "health_check")
    page.click("#history-refresh")
    expect(rows).to_have_count(1)
    expect(rows.nth(0)).to_contain_text("health_check")


def test_history_pages_with_more(make_daemon: Make, browser: Browser) -> None:
    """A page of the timeline is bounded (100 rows, 1 MiB): "More" appends the next one."""
    d = make_daemon(FAST_INPUT)
    for _ in range(104):
        d.post_json("/api/tools/health_check", {"input": {}})
    deadline = time.monotonic() + 20  # the writer batches: wait until all are on file
    while d.get_json("/api/trace?limit=1000")["count"] < 104:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    page = browser.new_page()
    page.goto(d.base + "/")
    page.locator("#history-section summary").click()
    rows = page.locator("#history-rows tr")
    expect(rows).to_have_count(100)
    more = page.locator("#history-more")
    expect(more).to_be_visible()
    expect(page.locator("#history-state")).to_contain_text("(more)")
    more.click()
    expect(more).to_be_hidden()
    assert rows.count() >= 104
    ids = page.eval_on_selector_all("#history-rows tr", "trs => trs.map(t => t.dataset.id)")
    assert len(ids) == len(set(ids))  # each record once
