"""Key chords inside a real application: Ctrl+A selects all, Ctrl+C copies, Ctrl+V pastes
(through the X server's CLIPBOARD selection, which the Tk application owns), and Ctrl+S, a key
the application binds itself."""

from __future__ import annotations

import pytest
from conftest import Desktop
from desktop import Fingertip, assert_shows, evidence
from test_typing import focus

SAVED_BGR = (102, 224, 255)  # the status line after Ctrl+S, #ffe066


@pytest.fixture
def ft(desk: Desktop) -> Fingertip:
    return desk.target("linux", "us")


def test_select_all_copy_paste(desk: Desktop, ft: Fingertip) -> None:
    focus(desk, ft, "notes")
    text = "Copied through the clipboard, 42 times."
    ft.ok("keyboard_text", {"text": text})
    before = ft.screenshot("chords-before")
    mark = desk.app.mark()
    selected = ft.ok("keyboard_tap", {"keys": ["ctrl", "a"]})
    assert desk.app.wait_events(mark, "select_all")
    # Evidence: the selection's highlight changed the notes' pixels.
    after = evidence(selected, "chords-select-all-after")
    x0, y0, x1, y1 = desk.app.state()["rects"]["notes"]
    assert (before[y0:y1, x0:x1] != after[y0:y1, x0:x1]).any(), "no selection is shown"
    ft.ok("keyboard_tap", {"keys": ["ctrl", "c"]})
    focus(desk, ft, "paste")
    pasted = ft.ok("keyboard_tap", {"keys": ["ctrl", "v"]})
    desk.app.wait_state("paste", text)
    assert desk.app.state()["notes"] == text, "copying changed the source"
    evidence(pasted, "chords-paste-after")


def test_a_key_the_app_binds(desk: Desktop, ft: Fingertip) -> None:
    focus(desk, ft, "notes")
    mark = desk.app.mark()
    reply = ft.ok("keyboard_tap", {"keys": ["ctrl", "s"]})
    (saved,) = desk.app.wait_events(mark, "saved")
    assert desk.app.state()["status"] == f"Saved {saved['count']}"
    assert desk.app.state()["notes"] == "", "Ctrl+S typed into the text"
    evidence(reply, "chords-ctrl-s-after")
    _, y0, x1, y1 = desk.app.state()["rects"]["status"]
    assert_shows(reply, (x1 - 60, y0 + 4, x1 - 4, y1 - 4), SAVED_BGR, "the saved status line")
