"""Draws a View of the virtual device to a BGR image with OpenCV.

The scene (everything but pointer, touches and animation) is drawn once per distinct Scene value
and cached, so a frame of an unchanged screen costs one copy plus the overlay. Nothing here
depends on the clock: the same View always gives the same pixels.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import cv2
import numpy as np

from daemon.screen.geometry import Rect as FrameRect
from daemon.sim.device import Scene, View
from daemon.sim.layout import STATUS_BOTTOM, Rect, ScreenLayout, make_layout

if TYPE_CHECKING:
    from daemon.frames import Image

Color = tuple[int, int, int]
FONT = cv2.FONT_HERSHEY_SIMPLEX
BG: Color = (242, 242, 242)
INK: Color = (30, 30, 30)
MUTED: Color = (120, 120, 120)
ACCENT: Color = (200, 120, 20)
SELECTION: Color = (250, 215, 170)
PALETTE: tuple[Color, ...] = (
    (90, 90, 90),
    (230, 140, 30),
    (80, 200, 80),
    (220, 120, 60),
    (70, 170, 90),
    (60, 120, 230),
    (80, 80, 80),
    (40, 40, 40),
    (60, 200, 240),
    (90, 60, 230),
    (60, 60, 220),
    (220, 170, 60),
    (200, 130, 40),
    (120, 120, 120),
    (50, 50, 50),
    (40, 160, 240),
)
# The cursor as AssistiveTouch / a desktop draws it: an arrow, tip at the position.
ARROW = np.array([(0, 0), (0, 34), (9, 26), (15, 40), (21, 37), (15, 24), (27, 24)], np.float64)


@dataclass(frozen=True)
class DrawnWord:
    """One word the renderer drew, with its ink box in pixels (x0, y0, x1, y1): the ground
    truth OCR tests check positions against. A word the list's viewport clips is `whole`
    False and its box is the part shown: a tap there still hits it, but nobody can be asked to
    read it."""

    text: str
    box: tuple[int, int, int, int]
    whole: bool = True


class Renderer:
    """Renders Views; keeps the last scene image so static screens are cheap."""

    def __init__(self) -> None:
        self._scene: Scene | None = None
        self._base: Image | None = None
        self._layout: ScreenLayout | None = None
        self.drawn: tuple[DrawnWord, ...] = ()  # the last scene's words (overlay excluded)

    def render(self, view: View) -> Image:
        scene = view.scene
        if self._base is None or self._scene != scene:
            if self._layout is None or (self._layout.width, self._layout.height) != (
                scene.width,
                scene.height,
            ):
                self._layout = make_layout(scene.platform, scene.width, scene.height)
            drawn: list[DrawnWord] = []
            self._base = _draw_scene(scene, self._layout, drawn)
            self._scene, self.drawn = scene, tuple(drawn)
        img = self._base.copy()
        _draw_overlay(img, view)
        return img


def _px(scene: Scene, x: float, y: float) -> tuple[int, int]:
    return round(x * scene.width / 1000), round(y * scene.height / 1000)


def _rect(img: Image, scene: Scene, r: Rect, color: Color, thickness: int = -1) -> None:
    cv2.rectangle(img, _px(scene, r.x0, r.y0), _px(scene, r.x1, r.y1), color, thickness)


def _text(
    img: Image,
    text: str,
    org: tuple[int, int],
    scale: float,
    color: Color,
    drawn: list[DrawnWord],
    dy: int = 0,
) -> None:
    """Draw `text` with its baseline at `org`, and record each word's box (shifted by `dy`
    when `img` is a view lower in the frame; a word the view clips is recorded with the part
    shown, not whole; one wholly outside it is not recorded)."""
    thickness = max(1, round(scale * 2))
    cv2.putText(img, text, org, FONT, scale, color, thickness, cv2.LINE_AA)
    (_, above), below = cv2.getTextSize(text, FONT, scale, thickness)
    top, bottom = org[1] - above, org[1] + below
    whole = top >= 0 and bottom <= img.shape[0]
    top, bottom = max(0, top), min(img.shape[0], bottom)
    if bottom <= top:
        return
    pos = 0
    for word in text.split():
        start = text.index(word, pos)
        pos = start + len(word)
        x0 = org[0] + (_width(text[:start], scale) if start else 0)
        box = (x0, top + dy, x0 + _width(word, scale), bottom + dy)
        drawn.append(DrawnWord(word, box, whole))


def _width(text: str, scale: float) -> int:
    (w, _), _ = cv2.getTextSize(text, FONT, scale, max(1, round(scale * 2)))
    return int(w)


def _fit_tail(text: str, scale: float, max_w: int) -> str:
    """The longest tail of `text` that fits in `max_w` pixels (the caret end stays visible)."""
    lo, hi = 0, len(text)
    while lo < hi:
        mid = (lo + hi) // 2
        if _width(text[mid:], scale) <= max_w:
            hi = mid
        else:
            lo = mid + 1
    return text[lo:]


def _draw_scene(scene: Scene, lay: ScreenLayout, drawn: list[DrawnWord]) -> Image:
    w, h = scene.width, scene.height
    s = min(w, h) / 1080
    img = np.empty((h, w, 3), np.uint8)
    cv2.rectangle(img, (0, 0), (w, h), BG, -1)  # 40x faster than np.full with a BGR triple
    # status bar
    _rect(img, scene, Rect(0, 0, 1000, STATUS_BOTTOM), (40, 40, 40))
    status = f"9:41  {scene.platform}  usb:{scene.profile}" + ("  CAPS" if scene.caps_lock else "")
    status_org = (round(16 * s), round(STATUS_BOTTOM * h / 1000 * 0.75))
    _text(img, status, status_org, 0.7 * s, BG, drawn)
    if scene.screen == "home":
        for i, tile in enumerate(lay.tiles):
            _rect(img, scene, tile.icon, PALETTE[i % len(PALETTE)])
            letter_org = _px(scene, tile.icon.x0 + 3, tile.icon.y1 - 8)
            _text(img, tile.name[0], letter_org, 3 * s, BG, drawn)
            cx, cy = _px(scene, (tile.label.x0 + tile.label.x1) / 2, tile.label.y1)
            _text(img, tile.name, (cx - _width(tile.name, 0.8 * s) // 2, cy), 0.8 * s, INK, drawn)
        return img
    # header with the way home, title, the one text field, then the list
    _rect(img, scene, lay.header, (255, 255, 255))
    header_base = _px(scene, 0, lay.header.y1 - 22)[1]
    _text(img, "< Home", (round(16 * s), header_base), 1.0 * s, ACCENT, drawn)
    title_w = _width(scene.title, 1.4 * s)
    _text(img, scene.title, ((w - title_w) // 2, header_base), 1.4 * s, INK, drawn)
    _draw_field(img, scene, lay, s, drawn)
    _draw_rows(img, scene, lay, s, drawn)
    if scene.keyboard:
        _draw_keyboard(img, scene, lay, s, drawn)
    return img


def _draw_keyboard(
    img: Image, scene: Scene, lay: ScreenLayout, s: float, drawn: list[DrawnWord]
) -> None:
    """The on-screen keyboard over the bottom of the screen (what it covers is not drawn: a
    drawn word under it would be ground truth nobody can read)."""
    _rect(img, scene, lay.keyboard, (210, 212, 218))
    top = _px(scene, 0, lay.keyboard.y0)[1]
    drawn[:] = [d for d in drawn if d.box[3] < top]
    for name, rect in lay.key_rects():
        x0, y0 = _px(scene, rect.x0, rect.y0)
        x1, y1 = _px(scene, rect.x1, rect.y1)
        pad = max(2, round(5 * s))
        cv2.rectangle(img, (x0 + pad, y0 + pad), (x1 - pad, y1 - pad), (255, 255, 255), -1)
        label = "space" if name == "space" else name
        scale = 1.0 * s
        org = ((x0 + x1) // 2 - _width(label, scale) // 2, (y0 + y1) // 2 + round(12 * s))
        _text(img, label, org, scale, INK, drawn)


def _draw_field(
    img: Image, scene: Scene, lay: ScreenLayout, s: float, drawn: list[DrawnWord]
) -> None:
    f = lay.field
    _rect(img, scene, f, (255, 255, 255))
    _rect(img, scene, f, ACCENT if scene.focused else MUTED, max(2, round(3 * s)))
    x0, y0 = _px(scene, f.x0, f.y0)
    x1, y1 = _px(scene, f.x1, f.y1)
    pad, scale = round(14 * s), 1.0 * s
    base = (y0 + y1) // 2 + round(12 * s)
    if not scene.field_text:
        if not scene.focused:
            _text(img, scene.field_label, (x0 + pad, base), scale, MUTED, drawn)
        shown = ""
    else:
        shown = _fit_tail(scene.field_text, scale, x1 - x0 - 3 * pad)
        if scene.selected:
            cv2.rectangle(
                img,
                (x0 + pad - 4, y0 + 6),
                (x0 + pad + _width(shown, scale) + 4, y1 - 6),
                SELECTION,
                -1,
            )
        _text(img, shown, (x0 + pad, base), scale, INK, drawn)
    if scene.focused and not scene.selected:
        caret = x0 + pad + _width(shown, scale) + 3
        cv2.line(img, (caret, y0 + 10), (caret, y1 - 10), ACCENT, max(2, round(3 * s)))


def _draw_rows(
    img: Image, scene: Scene, lay: ScreenLayout, s: float, drawn: list[DrawnWord]
) -> None:
    top, bottom = _px(scene, 0, lay.viewport.y0)[1], _px(scene, 0, lay.viewport.y1)[1]
    vp = img[top:bottom]  # a view: drawing here is clipped to the list's viewport
    row = lay.row_px
    first = scene.scroll_px // row
    for i in range(first, len(scene.rows)):
        y = i * row - scene.scroll_px
        if y >= vp.shape[0]:
            break
        if i % 2:
            cv2.rectangle(vp, (0, y), (scene.width, y + row - 1), (250, 250, 250), -1)
        cv2.line(vp, (0, y + row - 1), (scene.width, y + row - 1), (220, 220, 220), 1)
        org = (round(30 * s), y + row // 2 + round(12 * s))
        _text(vp, scene.rows[i], org, 1.0 * s, INK, drawn, dy=top)
        if i < len(scene.values):  # a switch: its state at the row's right end
            value = scene.values[i]
            right = scene.width - round(60 * s) - _width(value, 1.0 * s)
            colour = ACCENT if value == "ON" else INK
            _text(vp, value, (right, org[1]), 1.0 * s, colour, drawn, dy=top)
    total = len(scene.rows) * row
    if total > vp.shape[0]:  # scroll indicator, so scrolling is visible even in a uniform list
        bar = max(20, vp.shape[0] * vp.shape[0] // total)
        y = (vp.shape[0] - bar) * scene.scroll_px // max(1, total - vp.shape[0])
        cv2.rectangle(vp, (scene.width - 12, y), (scene.width - 4, y + bar), MUTED, -1)


def _draw_overlay(img: Image, view: View) -> None:
    scene = view.scene
    s = min(scene.width, scene.height) / 1080
    if view.tick is not None:
        # A "video" below the status bar that changes every frame: big enough (about 4 % of
        # the detector's blocks) that a stability wait sees a real change, as a phone playing
        # a clip would show.
        width, height = round(360 * s), round(220 * s)
        span = scene.width - width
        left = (view.tick * round(47 * s)) % max(1, span)
        top = round(scene.height * 0.80)
        shade = 40 + (view.tick * 97) % 180
        colour = (shade, 255 - shade, 120)
        cv2.rectangle(img, (left, top), (left + width, top + height), colour, -1)
    for contact in view.contacts:
        c = _px(scene, *contact)
        cv2.circle(img, c, round(40 * s), (210, 210, 210), -1, cv2.LINE_AA)
        cv2.circle(img, c, round(40 * s), (60, 60, 60), max(2, round(3 * s)), cv2.LINE_AA)
    if view.pointer is not None:
        tip = np.array(_px(scene, *view.pointer), np.float64)
        pts = np.round(ARROW * max(1.0, 1.2 * s) + tip).astype(np.int32)
        cv2.fillPoly(img, [pts], (150, 150, 150) if view.pressed else (255, 255, 255))
        cv2.polylines(img, [pts], True, (0, 0, 0), max(1, round(2 * s)), cv2.LINE_AA)


def hdmi_frame(image: Image, rect: FrameRect, size: tuple[int, int]) -> Image:
    """`image` scaled into `rect` of a black frame of `size` (width, height): what a phone's
    HDMI adapter sends (the picture fitted, bars and overscan black)."""
    frame = np.zeros((size[1], size[0], 3), np.uint8)
    scaled = cv2.resize(image, (rect.w, rect.h), interpolation=cv2.INTER_AREA)
    frame[rect.y : rect.y + rect.h, rect.x : rect.x + rect.w] = scaled
    return frame
