"""The mouse cursor's own glyph is left out of what OCR read (daemon/screen/visual_tree.py)."""

from __future__ import annotations

from daemon.screen.ocr_types import Line, Word
from daemon.screen.visual_tree import without_pointer


def line(text: str, box: tuple[int, int, int, int]) -> Line:
    return Line(text, 0.8, box, (Word(text, 0.8, box),))


W, H = 1080, 1920
TIP = (500.0, 600.0)  # normalized: pixel (539.5, 1151.4)


def test_a_short_line_in_the_pointers_box_is_the_pointer() -> None:
    arrow = line("不", (538, 1151, 574, 1201))
    assert without_pointer([arrow], W, H, TIP) == ()


def test_text_beyond_the_pointers_box_or_longer_stays() -> None:
    kept = [
        line("Notes", (520, 1140, 700, 1190)),  # a word under the cursor: longer, wider
        line("不", (538, 1151, 620, 1201)),  # reaches past the box
        line("A", (100, 100, 140, 150)),  # elsewhere
        line("OK", (500, 1120, 530, 1140)),  # above-left, outside the centred margin
    ]
    assert without_pointer(kept, W, H, TIP) == tuple(kept)


def test_no_known_pointer_keeps_everything() -> None:
    arrow = line("不", (538, 1151, 574, 1201))
    assert without_pointer([arrow], W, H, None) == (arrow,)
