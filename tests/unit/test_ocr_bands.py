"""The pure parts of banded detection (daemon/screen/ocr_engine.py): where a frame is cut into
bands, and boxes drawn tight around their ink."""

from __future__ import annotations

import numpy as np

from daemon.screen.ocr_engine import Band, clean_cut, plan_bands, tight


def text_rows(height: int, width: int, lines: list[tuple[int, int]]) -> np.ndarray:
    """An ink mask with a text line (alternating columns, as letters are) in each row span."""
    dark = np.zeros((height, width), bool)
    for top, bottom in lines:
        dark[top:bottom, 40 : width - 40 : 3] = True
    return dark


def test_a_cut_needs_no_ink_around_it_but_a_bar_at_the_side() -> None:
    dark = text_rows(200, 600, [(20, 40), (100, 130)])
    assert clean_cut(dark, 70, 10)  # between the lines
    assert not clean_cut(dark, 110, 10)  # through the second line
    assert not clean_cut(dark, 48, 10)  # too near the first line's bottom
    assert not clean_cut(dark, 5, 10) and not clean_cut(dark, 195, 10)  # no room for margins
    dark[:, 590:596] = True  # a scroll bar: ink all the way, at the right edge
    assert clean_cut(dark, 70, 10)
    dark[:, 300:302] = True  # a rule down the middle (a split view, an icon's edge)
    assert not clean_cut(dark, 70, 10)


def test_bands_end_at_clean_cuts_and_overlap_only_where_there_is_none() -> None:
    # Cuts allowed at 96 and 224 only: bands of at most 128 rows, on a stride of 32.
    plan = plan_bands(320, lambda row: row in (96, 224), 128, 64, 32)
    assert plan == [Band(0, 96, 0, 96), Band(96, 224, 96, 224), Band(224, 320, 224, 320)]
    # No clean cut: each band starts `overlap` rows before the end of the last, the boxes are
    # shared out at the middle of the overlap, and every row is some band's to keep.
    plan = plan_bands(320, lambda row: False, 128, 64, 32)
    assert plan == [Band(0, 128, 0, 96), Band(64, 192, 96, 160), Band(128, 256, 160, 224),
                    Band(192, 320, 224, 320)]  # fmt: skip
    assert plan_bands(100, lambda row: True, 128, 64, 32) == [Band(0, 100, 0, 100)]
    for band in plan_bands(1088, lambda row: row % 96 == 0, 192, 96, 32):
        assert band.top % 32 == 0 and band.bottom - band.top <= 192


def test_a_box_is_drawn_tight_around_its_ink() -> None:
    dark = np.zeros((100, 200), bool)
    dark[40:52, 30:90] = True
    assert tight((20, 30, 110, 70), dark) == (30, 40, 89, 51)
    assert tight((120, 30, 180, 70), dark) == (120, 30, 180, 70)  # no ink inside: as it was
    assert tight((-5, -5, 300, 300), dark) == (30, 40, 89, 51)  # past the frame: clipped
