"""Reading a screen at the cost of what changed (issue 37), with the real engine: a read of a
frame that follows another reuses the last read's band detections and lines wherever their
inputs are the same, and gives exactly what a fresh engine reads from that frame, on every edit
of the set (typing, a switch, a one-row scroll, the on-screen keyboard, another app) and every
simulated screen. And visual_tree.changes, the text that appeared, disappeared and moved."""

from __future__ import annotations

import pytest

from daemon.screen.ocr import Line, Word, engine_installed
from daemon.screen.visual_tree import changes
from tests.ocr_screens import edits, sim_screens

needs_engine = pytest.mark.skipif(not engine_installed(), reason="OCR engine missing")


@pytest.fixture(scope="module")
def engines() -> tuple[object, object]:
    from daemon.screen.ocr_engine import RapidEngine

    return RapidEngine(), RapidEngine()


@needs_engine
@pytest.mark.parametrize("platform", ["ios", "android"])
def test_a_read_after_an_edit_is_a_fresh_read(engines: tuple, platform: str) -> None:
    following, fresh = engines
    for edit in edits(platform):
        following.read(edit.before)
        before = dict(following.counts), dict(following._ocr.text_det.counts)
        after = following.read(edit.after)
        lines = following.counts["lines"] - before[0]["lines"]
        recognized = following.counts["recognized"] - before[0]["recognized"]
        detected = following._ocr.text_det.counts["bands_detected"] - before[1]["bands_detected"]
        bands = following._ocr.text_det.counts["bands"] - before[1]["bands"]
        fresh._lines, fresh._ocr.text_det._bands = {}, {}  # nothing kept: a first read
        assert after == fresh.read(edit.after), edit.name  # the very same lines, boxes, words
        if edit.name in ("typing into a field", "a switch flipped"):
            # A change in one row: its band detected again, and only the lines whose box or
            # pixels changed recognized again (a band detected again may move a neighbour's
            # box by a pixel).
            assert detected == 1 < bands, (edit.name, detected, bands)
            assert recognized <= 3 < lines, (edit.name, recognized, lines)


@needs_engine
def test_a_repeated_frame_reads_nothing_again(engines: tuple) -> None:
    following, _ = engines
    for screen in sim_screens():
        first = following.read(screen.image)
        recognized = following.counts["recognized"]
        detected = following._ocr.text_det.counts["bands_detected"]
        assert following.read(screen.image) == first
        assert following.counts["recognized"] == recognized
        assert following._ocr.text_det.counts["bands_detected"] == detected


def line(text: str, x: int, y: int, h: int = 40) -> Line:
    box = (x, y, x + 20 * len(text), y + h)
    return Line(text, 0.99, box, (Word(text, 0.99, box),))


def test_changes_names_what_appeared_disappeared_and_moved() -> None:
    before = [line("Wi-Fi", 30, 400), line("ON", 960, 400), line("Row 1", 30, 600)]
    after = [
        line("Wi-Fi", 30, 402),  # re-detected 2 px lower: not a move
        line("OFF", 950, 400),
        line("Row 1", 30, 734),  # scrolled by a row
    ]
    found = changes(before, after, 1080, 1920)
    assert [x["text"] for x in found["appeared"]] == ["OFF"]
    assert [x["text"] for x in found["disappeared"]] == ["ON"]
    assert [(x["text"], x["from"]["box"]["y0"], x["box"]["y0"]) for x in found["moved"]] == [
        ("Row 1", 600, 734)
    ]
    assert found["unchanged"] == 1
    appeared = found["appeared"][0]
    assert appeared["box"] == {"x0": 950, "y0": 400, "x1": 1010, "y1": 440}
    assert 0 <= appeared["center"]["x"] <= 1000 and 0 <= appeared["box_normalized"]["y1"] <= 1000


def test_changes_pairs_repeated_text_by_the_nearest() -> None:
    before = [line("OFF", 950, 300), line("OFF", 950, 500), line("Row", 30, 800)]
    after = [line("ON", 960, 300), line("OFF", 950, 500), line("Row", 30, 900)]
    found = changes(before, after, 1080, 1920)
    # The OFF at 500 stayed; the one at 300 became ON; the row moved down.
    assert found["unchanged"] == 1
    assert [(x["text"], x["box"]["y0"]) for x in found["appeared"]] == [("ON", 300)]
    assert [(x["text"], x["box"]["y0"]) for x in found["disappeared"]] == [("OFF", 300)]
    assert [(x["text"], x["box"]["y0"]) for x in found["moved"]] == [("Row", 900)]
    after = [line("OFF", 950, 500), line("ON", 960, 300), line("Row", 30, 800)]
    assert changes(after, after, 1080, 1920) == {
        "appeared": [],
        "disappeared": [],
        "moved": [],
        "unchanged": 3,
    }
