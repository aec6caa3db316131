"""Key names, KEYCODE_* aliases and the US layout, checked against the HID Usage Tables.

hid-tools ships the usage tables (HUT); their keyboard-page names ("1 and !", "a and A")
spell the US layout out, so the layout is checked against them rather than against a copy
of our own table.
"""

from __future__ import annotations

import re
import string

import pytest
from hidtools.hut import HUT

from gadget import keymap, reports
from gadget.errors import UnknownKey, UntypableCharacter
from gadget.keymap import Key

PRINTABLE = [chr(c) for c in range(0x20, 0x7F)]


def hut_layout() -> dict[str, tuple[int, int]]:
    """Character -> (usage, modifiers) from the keyboard page's "x and X" names."""
    spelled = {"(underscore)": "_", "Grave Accent": "`", "Tilde": "~", "Keyboard,": ","}
    layout: dict[str, tuple[int, int]] = {"\n": (0x28, 0), "\t": (0x2B, 0), " ": (0x2C, 0)}
    for u in range(0x04, 0x39):
        name = HUT[0x07][u].name
        if name.startswith("Non-US"):
            continue
        match = re.fullmatch(r"(.+) and (.+)", name)
        if match is None:
            continue
        plain, shifted = (spelled.get(part, part) for part in match.groups())
        layout[plain] = (u, 0)
        layout[shifted] = (u, reports.MOD_LSHIFT)
    return layout


def test_every_printable_ascii_char_matches_the_usage_tables() -> None:
    expected = hut_layout()
    assert set(expected) == {*PRINTABLE, "\n", "\t"}
    for ch, stroke in expected.items():
        assert keymap.char_stroke(ch) == stroke, repr(ch)


def test_shifted_chars_carry_shift() -> None:
    shifted = set(string.ascii_uppercase + '~!@#$%^&*()_+{}|:"<>?')
    for ch in PRINTABLE:
        usage, modifiers = keymap.char_stroke(ch)
        assert modifiers == (reports.MOD_LSHIFT if ch in shifted else 0), repr(ch)
        assert 0x04 <= usage <= 0x38


@pytest.mark.parametrize("ch", ["é", "\r", "\x00", "€", "\x7f"])
def test_untypable_characters(ch: str) -> None:
    with pytest.raises(UntypableCharacter) as err:
        keymap.char_stroke(ch)
    assert err.value.char == ch and err.value.code == "untypable_character"


def test_text_strokes_checks_the_whole_text_first() -> None:
    assert keymap.text_strokes("Hi!\n") == [
        (0x0B, reports.MOD_LSHIFT),
        (0x0C, 0),
        (0x1E, reports.MOD_LSHIFT),
        (0x28, 0),
    ]
    with pytest.raises(UntypableCharacter) as err:
        keymap.text_strokes("abc\u00e9de\u00e8")
    assert (err.value.char, err.value.index) == ("\u00e9", 3)
    assert "index 3" in err.value.message
    assert keymap.text_strokes("") == []


def test_every_name_resolves() -> None:
    names = keymap.names()
    assert len(names) == len(set(names)) > 300
    for name in names:
        found = keymap.key(name)
        assert found == keymap.key(found.name), f"{name} -> {found.name} is not canonical"
        assert (found.modifier != 0) == (found.page == "keyboard" and 0xE0 <= found.usage <= 0xE7)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("ctrl", Key("left_ctrl", "keyboard", 0xE0, reports.MOD_LCTRL)),
        ("Control", Key("left_ctrl", "keyboard", 0xE0, reports.MOD_LCTRL)),
        ("rctrl", Key("right_ctrl", "keyboard", 0xE4, reports.MOD_RCTRL)),
        ("shift", Key("left_shift", "keyboard", 0xE1, reports.MOD_LSHIFT)),
        ("right_shift", Key("right_shift", "keyboard", 0xE5, reports.MOD_RSHIFT)),
        ("option", Key("left_alt", "keyboard", 0xE2, reports.MOD_LALT)),
        ("alt", Key("left_alt", "keyboard", 0xE2, reports.MOD_LALT)),
        ("altgr", Key("right_alt", "keyboard", 0xE6, reports.MOD_RALT)),
        ("CMD", Key("left_meta", "keyboard", 0xE3, reports.MOD_LMETA)),
        ("super", Key("left_meta", "keyboard", 0xE3, reports.MOD_LMETA)),
        ("right_win", Key("right_meta", "keyboard", 0xE7, reports.MOD_RMETA)),
        ("rgui", Key("right_meta", "keyboard", 0xE7, reports.MOD_RMETA)),
        ("KEYCODE_META_RIGHT", Key("right_meta", "keyboard", 0xE7, reports.MOD_RMETA)),
    ],
)
def test_modifier_names(name: str, expected: Key) -> None:
    assert keymap.key(name) == expected


# Names people use -> the HID Usage Tables name of the key they must press.
KEYBOARD_NAMES = {
    "enter": "Return (ENTER)",
    "Return": "Return (ENTER)",
    "esc": "ESCAPE",
    "escape": "ESCAPE",
    "tab": "Tab",
    "space": "Spacebar",
    "backspace": "DELETE (Backspace)",
    "delete": "Delete Forward",
    "del": "Delete Forward",
    "insert": "Insert",
    "up": "UpArrow",
    "ArrowUp": "UpArrow",
    "down": "DownArrow",
    "arrowdown": "DownArrow",
    "left": "LeftArrow",
    "right": "RightArrow",
    "home": "Home",
    "end": "End",
    "pageup": "PageUp",
    "page_up": "PageUp",
    "Page-Down": "PageDown",
    "capslock": "Caps Lock",
    "numlock": "Keypad Num Lock and Clear",
    "scrolllock": "Scroll Lock",
    "printscreen": "PrintScreen",
    "pause": "Pause",
    "menu": "Application",
    "f1": "F1",
    "F12": "F12",
    "f13": "F13",
    "f24": "F24",
    "a": "a and A",
    "Z": "z and Z",
    "1": "1 and !",
    "0": "0 and )",
    "/": "/ and ?",
    "kp_enter": "Keypad ENTER",
    "kp_5": "Keypad 5",
    "KEYCODE_ENTER": "Return (ENTER)",
    "KEYCODE_DEL": "DELETE (Backspace)",
    "KEYCODE_FORWARD_DEL": "Delete Forward",
    "KEYCODE_A": "a and A",
    "KEYCODE_9": "9 and (",
    "KEYCODE_DPAD_LEFT": "LeftArrow",
    "KEYCODE_MOVE_HOME": "Home",
    "KEYCODE_SYSRQ": "PrintScreen",
    "KEYCODE_F5": "F5",
    "KEYCODE_MENU": "Application",
}

CONSUMER_NAMES = {
    "volume_up": "Volume Up",
    "volumeup": "Volume Up",
    "volume_down": "Volume Down",
    "mute": "Mute",
    "play_pause": "Play/Pause",
    "next_track": "Scan Next Track",
    "previous_track": "Scan Previous Track",
    "stop": "Stop",
    "brightness_up": "Display Brightness Increment",
    "brightness_down": "Display Brightness Decrement",
    "ac_home": "AC Home",
    "back": "AC Back",
    "app_switch": "AC Desktop Show All Windows",
    "search": "AC Search",
    "power": "Power",
    "KEYCODE_HOME": "AC Home",
    "KEYCODE_BACK": "AC Back",
    "KEYCODE_APP_SWITCH": "AC Desktop Show All Windows",
    "KEYCODE_SEARCH": "AC Search",
    "KEYCODE_POWER": "Power",
    "KEYCODE_VOLUME_UP": "Volume Up",
    "KEYCODE_VOLUME_MUTE": "Mute",
    "KEYCODE_MEDIA_PLAY_PAUSE": "Play/Pause",
    "KEYCODE_MEDIA_NEXT": "Scan Next Track",
    "KEYCODE_BRIGHTNESS_UP": "Display Brightness Increment",
    "KEYCODE_BRIGHTNESS_DOWN": "Display Brightness Decrement",
}


@pytest.mark.parametrize(("name", "hut_name"), KEYBOARD_NAMES.items())
def test_keyboard_names_press_the_right_key(name: str, hut_name: str) -> None:
    found = keymap.key(name)
    assert found.page == "keyboard" and found.modifier == 0
    assert HUT[0x07][found.usage].name == hut_name


@pytest.mark.parametrize(("name", "hut_name"), CONSUMER_NAMES.items())
def test_consumer_names_press_the_right_usage(name: str, hut_name: str) -> None:
    found = keymap.key(name)
    assert found.page == "consumer"
    assert HUT[0x0C][found.usage].name == hut_name
    assert keymap.CONSUMER_USAGES[found.name] == found.usage


def test_home_is_the_keyboard_key_and_ac_home_the_home_button() -> None:
    assert keymap.key("home").page == "keyboard"
    assert keymap.key("ac_home") == keymap.key("KEYCODE_HOME")
    assert keymap.key("ac_home").usage == 0x0223


def test_consumer_usages_fit_the_consumer_report() -> None:
    for name, code in keymap.CONSUMER_USAGES.items():
        assert 0 < code <= reports.CONSUMER_USAGE_MAX
        assert keymap.key(name) == Key(name, "consumer", code, 0)


def test_keycode_aliases() -> None:
    aliases = keymap.keycode_aliases()
    assert all(name.startswith("KEYCODE_") for name in aliases)
    for letter in string.ascii_uppercase:
        assert aliases[f"KEYCODE_{letter}"] == keymap.key(letter.lower())
    for name, found in aliases.items():
        assert keymap.key(name) == found
    assert "KEYCODE_MEDIA_PAUSE" not in aliases  # arrives on Android as KEYCODE_BREAK


def test_pointer_safe_keycodes_are_media_volume_screenshot_brightness() -> None:
    aliases = keymap.keycode_aliases()
    assert set(aliases) >= keymap.POINTER_SAFE_KEYCODES
    assert {
        "KEYCODE_VOLUME_UP",
        "KEYCODE_VOLUME_DOWN",
        "KEYCODE_VOLUME_MUTE",
        "KEYCODE_MEDIA_PLAY_PAUSE",
        "KEYCODE_SYSRQ",
        "KEYCODE_BRIGHTNESS_UP",
        "KEYCODE_BRIGHTNESS_DOWN",
    } <= keymap.POINTER_SAFE_KEYCODES
    for unsafe in ("KEYCODE_HOME", "KEYCODE_BACK", "KEYCODE_APP_SWITCH", "KEYCODE_A"):
        assert unsafe not in keymap.POINTER_SAFE_KEYCODES


@pytest.mark.parametrize(
    ("typo", "suggested"),
    [
        ("volum_up", "volume_up"),
        ("pgae_up", "pageup"),
        ("ctlr", "ctrl"),
        ("escap", "escape"),
        ("KEYCODE_VOLUME_UPP", "KEYCODE_VOLUME_UP"),
        ("KEYCODE_MEDIA_PAUSE", "KEYCODE_MEDIA_PLAY_PAUSE"),
    ],
)
def test_unknown_names_suggest_close_ones(typo: str, suggested: str) -> None:
    with pytest.raises(UnknownKey) as err:
        keymap.key(typo)
    assert err.value.name == typo and suggested in err.value.suggestions
    assert suggested in err.value.message and err.value.code == "unknown_key"


def test_shifted_characters_are_not_key_names() -> None:
    """A key name is a key; "!" needs Shift, so the error names the key and the modifier."""
    with pytest.raises(UnknownKey) as err:
        keymap.key("!")
    assert err.value.suggestions == ["1", "shift"]
    with pytest.raises(UnknownKey):
        keymap.key("")
