"""The target's screen inside an HDMI frame: the simulated target's HDMI view puts its picture
into a 1920x1080 frame with black bars and an overscan border (portrait and landscape), as a
phone's HDMI adapter does. Through the real daemon: screenshots carry no bars, health_check
shows the geometry, and every word screen_text reports, tapped with tap_text, lands on that
word (the simulated target records what each tap hit), with iOS's mapping (the pointer spans
the phone's screen) and Android's (the touchscreen spans the whole frame)."""

from __future__ import annotations

import base64
import difflib
import re
from typing import Any

import cv2
import numpy as np
import pytest

from tests.service.daemonproc import DaemonProcess
from tests.service.test_input_tools import Make, call, ok, start, state

OVERSCAN = 0.03
NOTE = "Meet Anna at 10:30 tomorrow"  # as on the OCR accuracy screen "Notes with text"
HOME = {"iOS": ["cmd", "h"], "Android": ["KEYCODE_HOME"]}


def hdmi(make: Make, device_type: str, landscape: bool) -> DaemonProcess:
    size = {"sim_width": 1920, "sim_height": 1080} if landscape else {}
    backend = {"kind": "simulated", "sim_hdmi": True, "sim_overscan": OVERSCAN, **size}
    return start(make, device_type, backend=backend)


def decode(shot: dict[str, Any]) -> Any:
    data = np.frombuffer(base64.b64decode(shot["data"]), np.uint8)
    return cv2.imdecode(data, cv2.IMREAD_COLOR)


def same_word(read: str, drawn: str | None) -> bool:
    """OCR's text against the word the simulated target drew (a letter may be misread)."""
    if drawn is None:
        return False
    a, b = (re.sub(r"\W", "", s.lower()) for s in (read, drawn))
    return a == b or difflib.SequenceMatcher(None, a, b).ratio() >= 0.6


def distance(a: dict[str, float], b: dict[str, float]) -> float:
    return float(np.hypot(a["x"] - b["x"], a["y"] - b["y"]))


async def locate(d: DaemonProcess, word: dict[str, Any]) -> dict[str, Any]:
    """tap_text's arguments for `word` on the screen as it is now: its text and the index of
    the match at its place (a re-read after a restore may read a letter differently)."""
    for text in (word["text"], None):
        if text is None:  # read again: the word at the same place, as read now
            tree = await ok(d, "screen_text", {})
            near = min(tree["elements"], key=lambda e: distance(e["center"], word["center"]))
            text = near["text"]
        found = await ok(d, "find_text", {"query": text, "match": "exact", "limit": 50})
        if found["matches"]:
            m = min(found["matches"], key=lambda m: distance(m["center"], word["center"]))
            if distance(m["center"], word["center"]) < 10:
                return {"query": text, "match": "exact", "index": m["index"]}
    raise AssertionError(f"{word} is no longer on the screen")


async def tap_every_word(d: DaemonProcess, platform: str, restore: Any) -> int:
    """Tap each word of the screen as screen_text reads it; returns how many were tapped.
    `restore(tapped)` puts the screen back after each tap (tap_text's answer: where it
    tapped)."""
    tree = await ok(d, "screen_text", {})
    words = [e for e in tree["elements"] if len(re.sub(r"\W", "", e["text"])) >= 2]
    assert len(words) >= 5, tree["text"]
    missed = []
    for word in words:
        tapped = await ok(d, "tap_text", await locate(d, word))
        assert distance(tapped["match"]["center"], word["center"]) < 10
        hit = (await state(d))["hits"][-1]
        if not same_word(word["text"], hit["word"]):
            missed.append((word["text"], word["center"], hit))
        await restore(tapped)
    assert not missed, f"{platform}: taps that missed their word: {missed}"
    return len(words)


@pytest.mark.parametrize(
    ("device_type", "landscape"),
    [("iOS", False), ("Android", False), ("iOS", True), ("Android", True)],
    ids=["ios-portrait", "android-portrait", "ios-landscape", "android-landscape"],
)
async def test_tap_text_hits_every_word_through_the_hdmi_frame(
    make_daemon: Make, device_type: str, landscape: bool
) -> None:
    d = hdmi(make_daemon, device_type, landscape)
    sim = await state(d)
    x, y, w, h = sim["hdmi"]
    assert (w < 1920 and h < 1080) and (x > 0 and y > 0)  # bars and overscan on every side

    # Screenshots are the phone's screen: its size, no black bar on any side.
    shot = await ok(d, "screenshot", {"format": "png"})
    assert abs(shot["width"] - w) <= 1 and abs(shot["height"] - h) <= 1, (shot, sim["hdmi"])
    image = decode(shot)
    for edge in (image[0], image[-1], image[:, 0], image[:, -1]):
        assert edge.max(axis=-1).mean() > 30  # the picture's own edge (a dark status bar: 40)
    whole = await ok(d, "screenshot", {"area": "frame"})
    assert (whole["width"], whole["height"]) == (1920, 1080)

    _, _, health = await call(d, "health_check", {})
    screen = health["screen"]
    assert screen["source"] == "detected", screen
    assert screen["orientation"] == ("landscape" if landscape else "portrait")
    got = screen["screen"]
    assert abs(got["x"] - x) <= 1 and abs(got["width"] - w) <= 1, (screen, sim["hdmi"])
    assert screen["hid_span"] == ("frame" if device_type == "Android" else "screen")

    platform = device_type.lower()

    async def home(_: object = None) -> None:
        if (await state(d))["screen"] != "home":
            await ok(d, "keyboard_tap", {"keys": HOME[device_type]})
            assert (await state(d))["screen"] == "home"

    tapped = await tap_every_word(d, platform, home)

    # The other accuracy screens (tests/ocr_screens.py): Notes with typed text, then scrolled
    # (rows cut at the list's top and bottom edges), in one portrait and one landscape run,
    # Settings in the other two (time). A row tap only records which row, but on Settings it
    # flips the row's switch: a second tap at the same place flips it back.
    app = "Notes" if (device_type, landscape) in (("iOS", False), ("Android", True)) else "Settings"
    toggles, flipped, scroll, note = sim["toggles"], [], 0, ""

    async def in_app(done: dict[str, Any] | None = None) -> None:
        st = await state(d)
        if st["screen"] != "app" or st["app"] != app:
            await home()
            await ok(d, "open_app", {"name": app})
            st = await state(d)
        if st["toggles"] != toggles and done is not None:
            await ok(d, "touch_gesture", {"type": "tap", "point": done["match"]["center"]})
            st = await state(d)
            flipped.append(done["match"]["text"])
        assert st["app"] == app and st["toggles"] == toggles, st
        assert st["scroll_px"] == scroll and st["texts"].get("Notes", "") == note, st

    await in_app()
    if app == "Notes":
        field = next(e for e in (await ok(d, "screen_text", {}))["elements"] if e["text"] == "Text")
        await ok(d, "touch_gesture", {"type": "tap", "point": field["center"]})
        await ok(d, "keyboard_text", {"text": NOTE})
        note = NOTE
    tapped += await tap_every_word(d, platform, in_app)
    if app == "Notes":
        rows = next(e for e in (await ok(d, "screen_text", {}))["elements"] if e["text"] == "row")
        gesture = {"type": "scroll", "point": rows["center"], "direction": "down", "distance": 150}
        await ok(d, "touch_gesture", gesture)
        scroll = (await state(d))["scroll_px"]
        assert scroll > 0
        tapped += await tap_every_word(d, platform, in_app)
    assert tapped >= 15
    assert (len(flipped) >= 4) == (app == "Settings"), flipped  # each switch's name and value


async def test_calibration_measures_the_map_through_the_hdmi_frame(make_daemon: Make) -> None:
    """iOS: the cursor is found at five HID positions and the fitted map's residual is within
    2 px; taps then use it (and the kept file survives a restart). Android: no cursor."""
    d = hdmi(make_daemon, "iOS", landscape=False)
    await ok(d, "screenshot", {})  # the geometry, from a first frame
    out = await ok(d, "calibrate_pointer", {})
    assert out["residual_px"] <= 2.0, out
    assert len(out["points"]) == 5 and out["hid_map"]["from"] == "calibration"
    # The simulated iPhone's pointer spans its screen: the fit says (about) the identity.
    assert abs(out["hid_map"]["x0"]) < 3 and abs(out["hid_map"]["sx"] - 1) < 0.01, out
    _, _, health = await call(d, "health_check", {})
    assert health["screen"]["calibration"]["holds"] is True
    # A tap through the measured map opens the app under it.
    tree = await ok(d, "screen_text", {})
    notes = next(e for e in tree["elements"] if e["text"] == "Notes")
    await ok(d, "touch_gesture", {"type": "tap", "point": notes["center"]})
    assert (await state(d))["hits"][-1]["word"] == "Notes"
    forgotten = await ok(d, "calibrate_pointer", {"forget": True})
    assert forgotten["forgotten"] is True and forgotten["hid_map"]["from"] == "platform"

    a = hdmi(make_daemon, "Android", landscape=False)
    _, body, _ = await call(a, "calibrate_pointer", {})
    assert body["is_error"] is True and body["error"]["code"] == "calibration_unavailable"
