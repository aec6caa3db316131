"""enter_text's clear (issue 49): the keys per platform, and how the field's row read back
tells the new text alone from the new text beside what the clear left."""

from __future__ import annotations

from daemon.engine import program as prog
from daemon.tools.input.handlers import reads_as
from daemon.tools.input.platforms import CLEAR_KEYS


def test_each_platform_clears_with_keys_that_select_there() -> None:
    assert CLEAR_KEYS["macos"][0] == ["cmd", "a"] and CLEAR_KEYS["ios"][0] == ["cmd", "a"]
    assert CLEAR_KEYS["android"][0] == ["ctrl", "a"]
    for desktop in ("windows", "linux"):  # Ctrl+A is Tk's and xterm's line start
        assert CLEAR_KEYS[desktop] == (["home"], ["shift", "end"], ["backspace"])
    for keys in CLEAR_KEYS.values():
        assert keys[-1] == ["backspace"]
        for chord in keys:
            prog.resolve_keys(chord)  # every name is a key


def test_the_new_text_alone_reads_as_typed_and_beside_the_old_does_not() -> None:
    assert reads_as("Ada", "Ada") and reads_as("ada", "Ada")
    assert reads_as("Jurgen GroB", "Jürgen Groß")  # OCR misreads a letter now and then
    assert reads_as("Ada Lovelace", "Ada  Lovelace")
    assert not reads_as("Old valuAda", "Ada")  # one letter deleted, the new text after
    assert not reads_as("AdaOld value", "Ada")  # Ctrl+A at the line's start, typed before
    assert not reads_as("Old value", "Ada")
    # A label beside the field is a word apart.
    assert reads_as("Name Jurgen GroB", "Jürgen Groß") and reads_as("Plain Ada Term", "Ada")
    assert not reads_as("Plain Old valuAda Term", "Ada")
