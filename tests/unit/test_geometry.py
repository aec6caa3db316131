"""Screen geometry: the detector on frames with bars of every kind, the live value's rules (a
dark screen keeps the last good rectangle, detection only when the edges change), the HID map
per platform and the crop."""

from __future__ import annotations

from typing import TYPE_CHECKING

import cv2
import numpy as np
import pytest

from daemon.frames import Frame
from daemon.screen.geometry import (
    HID_SPAN,
    IDENTITY,
    Geometry,
    Rect,
    ScreenGeometry,
    crop,
    detect,
    fit,
    parse_setting,
    span_setting,
)
from gadget import reports

if TYPE_CHECKING:
    from daemon.frames import Image

FW, FH = 1920, 1080


def picture(w: int, h: int, *, seed: int = 1, dark: bool = False) -> Image:
    """A screen's picture: a light (or dark-mode) background, a status bar, text-like blocks."""
    rng = np.random.default_rng(seed)
    bg = 28 if dark else 242
    img = np.full((h, w, 3), bg, np.uint8)
    ink = (235, 235, 235) if dark else (30, 30, 30)
    for _ in range(40):
        x, y = int(rng.integers(0, w - 60)), int(rng.integers(0, h - 20))
        cv2.rectangle(img, (x, y), (x + int(rng.integers(10, 60)), y + 8), ink, -1)
    return img


def with_black_status_bar(img: Image, bar: int = 60) -> Image:
    """A black status bar with a white clock and battery: what a dark app's top looks like."""
    img = img.copy()
    img[:bar] = 0
    w = img.shape[1]
    cv2.putText(img, "9:41", (w // 12, bar * 2 // 3), cv2.FONT_HERSHEY_SIMPLEX, 0.8, (255,) * 3, 2)
    cv2.rectangle(img, (w - w // 8, bar // 3), (w - w // 16, bar * 2 // 3), (255, 255, 255), -1)
    return img


def framed(pic: Image, rect: Rect, *, noise: int = 0, seed: int = 2) -> Image:
    """`pic` scaled into `rect` of a black 1920x1080 frame (bars elsewhere), with capture noise
    up to `noise` in the black (a real adapter's black is not exactly zero)."""
    frame = np.zeros((FH, FW, 3), np.uint8)
    if noise:
        frame[:] = np.random.default_rng(seed).integers(0, noise + 1, (FH, FW, 3), np.uint8)
    scaled = cv2.resize(pic, (rect.w, rect.h), interpolation=cv2.INTER_AREA)
    frame[rect.y : rect.y + rect.h, rect.x : rect.x + rect.w] = scaled
    return frame


PORTRAIT = fit(FW, FH, 1170, 2532)  # an iPhone 13's screen, pillarboxed
PORTRAIT_OVERSCAN = fit(FW, FH, 1170, 2532, overscan=0.03)
LANDSCAPE_OVERSCAN = fit(FW, FH, 2532, 1170, overscan=0.03)
LETTERBOX = fit(FW, FH, 2400, 1000)  # 21:9 content: bars top and bottom only
FOUR_THIRDS = fit(FW, FH, 1024, 768)  # bars left and right only


def test_fit_centres_the_picture_inside_the_overscan() -> None:
    assert PORTRAIT.h == FH and PORTRAIT.x == (FW - PORTRAIT.w) // 2
    assert PORTRAIT_OVERSCAN.y == round(0.03 * FH) or abs(PORTRAIT_OVERSCAN.y - 32) <= 1
    assert LANDSCAPE_OVERSCAN.w == round(FW * 0.94)


@pytest.mark.parametrize(
    ("name", "rect"),
    [
        ("portrait pillarbox", PORTRAIT),
        ("portrait with overscan", PORTRAIT_OVERSCAN),
        ("landscape with overscan", LANDSCAPE_OVERSCAN),
        ("letterbox", LETTERBOX),
        ("4:3 pillarbox", FOUR_THIRDS),
        ("asymmetric: top left", Rect(0, 0, 1280, 720)),
        ("asymmetric: a bar on one side of each axis", Rect(0, 200, 1500, 880)),
        ("asymmetric: bottom right", Rect(640, 360, 1280, 720)),
    ],
)
def test_bars_of_every_kind_are_found_to_the_pixel(name: str, rect: Rect) -> None:
    pic = picture(1170, 2532) if rect.h > rect.w else picture(1600, 900)
    assert detect(framed(pic, rect)) == rect, name
    assert detect(framed(pic, rect, noise=18)) == rect, f"{name}, noisy black"


def test_a_full_frame_picture_has_no_bars() -> None:
    assert detect(picture(FW, FH)) == Rect(0, 0, FW, FH)


def test_a_black_status_bar_is_not_cut() -> None:
    pic = with_black_status_bar(picture(1170, 2532), bar=130)
    # Pillarboxed, no overscan: the status bar reaches the frame's top edge.
    assert detect(framed(pic, PORTRAIT)) == PORTRAIT
    # With overscan: the top takes the bottom's bar, not the status bar's black (to a pixel:
    # a centred picture of odd height has bars one pixel apart).
    got = detect(framed(pic, PORTRAIT_OVERSCAN, noise=12))
    assert got is not None and got.near(PORTRAIT_OVERSCAN, 1)


def test_a_dark_header_is_content_when_the_bars_are_centred() -> None:
    """A dark band across the top of the picture (a header, a status bar without text) ends
    in a solid line just like a bar: bars on both sides are one size, the smaller."""
    pic = picture(1170, 2532)
    pic[:200] = 20
    got = detect(framed(pic, PORTRAIT_OVERSCAN))
    assert got is not None and got.near(PORTRAIT_OVERSCAN, 1), got
    # Bars that really differ on both sides are taken as the smaller (the screen then keeps
    # some black): an adapter centres its picture, so this is the safe reading.
    assert detect(framed(picture(1600, 900), Rect(100, 40, 1500, 900))) == Rect(100, 40, 1720, 1000)


def test_dark_or_black_screens_cannot_tell() -> None:
    assert detect(np.zeros((FH, FW, 3), np.uint8)) is None
    dark = framed(picture(1170, 2532, dark=True), PORTRAIT_OVERSCAN, noise=10)
    assert detect(dark) is None  # dark-mode text on all sides: no edge of a picture
    # A few lit pixels are noise, not a screen.
    speck = np.zeros((FH, FW, 3), np.uint8)
    speck[500:503, 900:903] = 255
    assert detect(speck) is None


def test_sanity_limits_refuse_slivers() -> None:
    sliver = framed(picture(200, 1080), Rect(900, 0, 100, FH))
    assert detect(sliver) is None  # 5 % of the width: not a screen


def frame(image: Image, seq: int) -> Frame:
    return Frame(image, seq, float(seq), float(seq))


def test_live_geometry_keeps_the_last_good_rect_and_detects_only_on_edge_changes() -> None:
    g = ScreenGeometry("auto", "ios")
    bright = framed(picture(1170, 2532), PORTRAIT_OVERSCAN)
    first = g.observe(frame(bright, 1))
    assert first.rect == PORTRAIT_OVERSCAN and first.source == "detected"
    assert first.orientation == "portrait"
    assert g.detections == 1
    # New frames with the same edges (content changed inside): no new detection.
    inside = bright.copy()
    r = PORTRAIT_OVERSCAN
    inside[r.y + 300 : r.y + 400, r.x + 50 : r.x + 300] = 90
    assert g.unchanged(frame(inside, 2)) == first  # what the event loop checks per frame
    assert g.observe(frame(inside, 2)) == first
    assert g.detections == 1
    # The phone locks: a black frame keeps the rectangle.
    assert g.observe(frame(np.zeros((FH, FW, 3), np.uint8), 3)) == first
    # A dark-mode app: kept too.
    dark = framed(picture(1170, 2532, dark=True), PORTRAIT_OVERSCAN)
    assert g.observe(frame(dark, 4)).rect == PORTRAIT_OVERSCAN
    # The app turns to landscape: re-detected.
    assert g.unchanged(frame(framed(picture(1600, 740), LANDSCAPE_OVERSCAN), 5)) is None
    turned = g.observe(frame(framed(picture(1600, 740), LANDSCAPE_OVERSCAN), 5))
    assert turned.rect == LANDSCAPE_OVERSCAN and turned.orientation == "landscape"
    # invalidate(): the same frame is detected afresh.
    n = g.detections
    g.invalidate()
    g.observe(frame(framed(picture(1600, 740), LANDSCAPE_OVERSCAN), 6))
    assert g.detections == n + 1


def test_configured_and_full_settings_never_detect() -> None:
    bright = framed(picture(1170, 2532), PORTRAIT)
    g = ScreenGeometry(parse_setting([10, 20, 300, 400]), "ios")
    got = g.observe(frame(bright, 1))
    assert got.rect == Rect(10, 20, 300, 400) and got.source == "configured"
    g = ScreenGeometry(parse_setting([1800, 0, 500, 5000]), "ios")
    assert g.observe(frame(bright, 1)).rect == Rect(1800, 0, 120, FH)  # clamped to the frame
    g = ScreenGeometry(parse_setting("full"), "android")
    got = g.observe(frame(bright, 1))
    assert got.is_full and got.source == "full" and g.detections == 0
    with pytest.raises(ValueError):
        parse_setting("portrait")
    with pytest.raises(ValueError):
        parse_setting([0, 0, 0, 10])


def test_the_hid_map_per_platform() -> None:
    assert HID_SPAN["ios"] == "screen" and HID_SPAN["android"] == "frame"
    g = Geometry(FW, FH, PORTRAIT_OVERSCAN, "detected")
    assert g.hid_map("screen") == IDENTITY
    m = g.hid_map("frame")
    r = PORTRAIT_OVERSCAN
    # The screen's first and last pixel land on the frame's pixels of those corners.
    for sx, sy, fx, fy in ((0, 0, r.x, r.y), (1000, 1000, r.x + r.w - 1, r.y + r.h - 1)):
        ax, ay = m.to_abs(sx, sy)
        assert abs(ax / reports.ABS_MAX * (FW - 1) - fx) < 0.1
        assert abs(ay / reports.ABS_MAX * (FH - 1) - fy) < 0.1
    x, y = m.from_abs(*m.to_abs(250, 750))
    assert abs(x - 250) < 0.1 and abs(y - 750) < 0.1
    # A full frame maps as it is on every platform.
    assert Geometry(FW, FH, Rect(0, 0, FW, FH), "full").hid_map("frame") == IDENTITY


def test_hid_span_setting_overrides_the_platforms() -> None:
    """A touchscreen on a Linux desktop (the desktop tier's Android profile) spans the desktop's
    screen, not the frame its HDMI output is padded into: [screen] hid_span says so."""
    bright = framed(picture(1170, 2532), PORTRAIT_OVERSCAN)
    platform = ScreenGeometry("auto", "android", hid_span=span_setting("platform"))
    platform.observe(frame(bright, 1))
    assert platform.span == "frame" and not platform.hid_map().identity
    screen = ScreenGeometry("auto", "android", hid_span=span_setting("screen"))
    screen.observe(frame(bright, 1))
    assert screen.span == "screen" and screen.hid_map() == IDENTITY
    assert screen.status()["hid_span"] == "screen"
    assert ScreenGeometry("auto", "ios", hid_span=span_setting("frame")).span == "frame"
    with pytest.raises(ValueError):
        span_setting("bars")


def test_crop_is_the_screen_and_drops_the_devices_jpeg() -> None:
    image = framed(picture(1170, 2532), PORTRAIT)
    f = Frame(image, 1, 1.0, 1.0, jpeg=b"\xff\xd8")
    g = Geometry(FW, FH, PORTRAIT, "detected")
    cut = crop(f, g)
    assert (cut.width, cut.height) == (PORTRAIT.w, PORTRAIT.h) and cut.jpeg is None
    assert np.array_equal(cut.image, image[:, PORTRAIT.x : PORTRAIT.x + PORTRAIT.w])
    ok, _ = cv2.imencode(".jpg", cut.image)  # OpenCV takes the view as it is
    assert ok
    whole = crop(f, Geometry(FW, FH, Rect(0, 0, FW, FH), "full"))
    assert whole is f


def test_the_screen_config_key() -> None:
    from daemon.config import ConfigError, from_mapping

    assert from_mapping({}).screen.geometry == "auto"
    assert from_mapping({"screen": {"geometry": [656, 0, 608, 1080]}}).screen.geometry == [
        656,
        0,
        608,
        1080,
    ]
    for bad in ("portrait", [1, 2, 3], [0, 0, 0, 10], [-1, 0, 10, 10], [0.5, 0, 1, 1], {}):
        with pytest.raises(ConfigError, match="screen"):
            from_mapping({"screen": {"geometry": bad}})


def test_model_aspect_snapping() -> None:
    from daemon.screen.geometry import snap

    model = (1170, 2532)
    # A detection two pixels narrow (a dark edge column) gets the model's width back.
    off = Rect(PORTRAIT.x + 1, PORTRAIT.y, PORTRAIT.w - 2, PORTRAIT.h)
    assert snap(off, model, FW, FH).near(PORTRAIT, 1)
    # Landscape: the same model, turned.
    r = LANDSCAPE_OVERSCAN
    off = Rect(r.x, r.y - 20, r.w, r.h + 40)  # dark content above and below, equally
    assert snap(off, model, FW, FH).near(LANDSCAPE_OVERSCAN, 1)
    # Far from the model's aspect: not its screen, kept as found.
    assert snap(Rect(0, 0, 800, 800), model, FW, FH) == Rect(0, 0, 800, 800)
    g = ScreenGeometry("auto", "ios", model)
    pic = picture(1170, 2532)
    pic[:, -6:] = 10  # the picture's last columns are dark: found 3 px narrow, snapped back
    got = g.observe(frame(framed(pic, PORTRAIT_OVERSCAN), 1)).rect
    assert got.near(PORTRAIT_OVERSCAN, 1), got
