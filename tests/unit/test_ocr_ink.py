"""ink(): the detector's view of a frame. Flat areas of any colour (app icons, bars) become page
white, corners included; text of either polarity becomes dark ink of its own contrast."""

from __future__ import annotations

import cv2
import numpy as np

from daemon.screen.ocr_engine import ink


def frame() -> np.ndarray:
    img = np.full((400, 400, 3), (242, 242, 242), np.uint8)
    cv2.rectangle(img, (40, 40), (200, 200), (40, 160, 230), -1)  # an icon: a flat square
    cv2.putText(img, "M", (60, 180), cv2.FONT_HERSHEY_SIMPLEX, 3, (242, 242, 242), 6)  # its glyph
    cv2.putText(img, "Photos", (60, 260), cv2.FONT_HERSHEY_SIMPLEX, 0.8, (30, 30, 30), 2)
    return img


def test_flat_areas_turn_white_and_text_of_both_polarities_turns_to_ink() -> None:
    out = ink(frame())
    assert out.shape == (400, 400, 3) and out.dtype == np.uint8
    grey = out[:, :, 0]
    # The icon's flat inside and its corners, beside the letter: white as the page.
    for y, x in ((45, 45), (45, 195), (195, 195), (120, 180), (300, 300)):
        assert grey[y, x] >= 250, (y, x, grey[y, x])
    # The dark label on the page and the light glyph on the icon are both ink, each as dark as
    # its own contrast (the glyph is 75 grey levels from the icon's grey 167).
    label = grey[240:265, 60:160]
    glyph = grey[100:180, 60:130]
    assert label.min() < 60 and glyph.min() <= 255 - 70


def test_any_size_and_a_blank_frame() -> None:
    for shape in ((1, 1, 3), (2, 3, 3), (5, 4000, 3), (64, 64)):
        img = np.random.default_rng(1).integers(0, 256, shape, np.uint8)
        assert ink(img).shape[:2] == shape[:2]
    blank = np.full((100, 80, 3), 17, np.uint8)
    assert int(ink(blank).min()) == 255  # nothing to read: no ink at all
