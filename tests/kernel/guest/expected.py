"""What the target must see, written from the HID Usage Tables, Linux's hid-input mapping and
the US layout, independently of gadget/'s own tables (the tests compare the two)."""

from __future__ import annotations

import string

from evdev import ecodes


def codes(*names: str) -> set[int]:
    return {ecodes.ecodes[n] for n in names}


_OTHER_KEYS = (
    "ENTER ESC BACKSPACE TAB SPACE MINUS EQUAL LEFTBRACE RIGHTBRACE BACKSLASH SEMICOLON "
    "APOSTROPHE GRAVE COMMA DOT SLASH CAPSLOCK SYSRQ SCROLLLOCK PAUSE INSERT HOME PAGEUP "
    "DELETE END PAGEDOWN RIGHT LEFT DOWN UP NUMLOCK KPSLASH KPASTERISK KPMINUS KPPLUS "
    "KPENTER KPDOT COMPOSE KPEQUAL"
)
# The boot keyboard's promise: every key of a full-size keyboard, F13..F24 included.
KEYBOARD_KEYS = codes(
    *(f"KEY_{c}" for c in string.ascii_uppercase),
    *(f"KEY_{d}" for d in range(10)),
    *(f"KEY_F{n}" for n in range(1, 25)),
    *(f"KEY_KP{d}" for d in range(10)),
    *(f"KEY_{side}{mod}" for side in ("LEFT", "RIGHT") for mod in ("CTRL", "SHIFT", "ALT", "META")),
    *(f"KEY_{name}" for name in _OTHER_KEYS.split()),
)
KEYBOARD_LEDS = codes("LED_NUML", "LED_CAPSL", "LED_SCROLLL", "LED_COMPOSE", "LED_KANA")

# Every consumer name we document -> the evdev key Linux's hid-input gives its usage.
CONSUMER_KEYS = {
    "power": "KEY_POWER",
    "sleep": "KEY_SLEEP",
    "select": "KEY_SELECT",
    "camera": "KEY_CAMERA",
    "brightness_up": "KEY_BRIGHTNESSUP",
    "brightness_down": "KEY_BRIGHTNESSDOWN",
    "play": "KEY_PLAY",
    "record": "KEY_RECORD",
    "fast_forward": "KEY_FASTFORWARD",
    "rewind": "KEY_REWIND",
    "next_track": "KEY_NEXTSONG",
    "previous_track": "KEY_PREVIOUSSONG",
    "stop": "KEY_STOPCD",
    "eject": "KEY_EJECTCD",
    "play_pause": "KEY_PLAYPAUSE",
    "voice_command": "KEY_VOICECOMMAND",
    "mute": "KEY_MUTE",
    "volume_up": "KEY_VOLUMEUP",
    "volume_down": "KEY_VOLUMEDOWN",
    "mail": "KEY_MAIL",
    "calculator": "KEY_CALC",
    "browser": "KEY_WWW",
    "assistant": "KEY_ASSISTANT",
    "copy": "KEY_COPY",
    "cut": "KEY_CUT",
    "paste": "KEY_PASTE",
    "search": "KEY_SEARCH",
    "ac_home": "KEY_HOMEPAGE",
    "back": "KEY_BACK",
    "forward": "KEY_FORWARD",
    "refresh": "KEY_REFRESH",
    "bookmarks": "KEY_BOOKMARKS",
    "zoom_in": "KEY_ZOOMIN",
    "zoom_out": "KEY_ZOOMOUT",
    "app_switch": "KEY_SCALE",
}

# US layout: evdev key -> (character unshifted, character with Shift).
US_LAYOUT: dict[int, tuple[str, str]] = {
    **{ecodes.ecodes[f"KEY_{c.upper()}"]: (c, c.upper()) for c in string.ascii_lowercase},
    **{ecodes.ecodes[f"KEY_{d}"]: (d, s) for d, s in zip("1234567890", "!@#$%^&*()", strict=True)},
    **{
        ecodes.ecodes[name]: (plain, shifted)
        for name, plain, shifted in (
            ("KEY_SPACE", " ", " "),
            ("KEY_MINUS", "-", "_"),
            ("KEY_EQUAL", "=", "+"),
            ("KEY_LEFTBRACE", "[", "{"),
            ("KEY_RIGHTBRACE", "]", "}"),
            ("KEY_BACKSLASH", "\\", "|"),
            ("KEY_SEMICOLON", ";", ":"),
            ("KEY_APOSTROPHE", "'", '"'),
            ("KEY_GRAVE", "`", "~"),
            ("KEY_COMMA", ",", "<"),
            ("KEY_DOT", ".", ">"),
            ("KEY_SLASH", "/", "?"),
        )
    },
}
SHIFTS = codes("KEY_LEFTSHIFT", "KEY_RIGHTSHIFT")


def us_decode(key_events: list[tuple[int, int]]) -> str:
    """Text a US-layout host makes of (code, value) key events."""
    shift: set[int] = set()
    out = []
    for code, value in key_events:
        if code in SHIFTS:
            (shift.add if value else shift.discard)(code)
        elif value == 1:
            plain, shifted = US_LAYOUT[code]
            out.append(shifted if shift else plain)
    return "".join(out)


def us_strokes(text: str) -> list[tuple[int, bool]]:
    """(evdev key, needs shift) per character, from the layout above."""
    inverse: dict[str, tuple[int, bool]] = {}
    for code, (plain, shifted) in US_LAYOUT.items():
        inverse.setdefault(shifted, (code, True))
        inverse[plain] = (code, False)
    return [inverse[ch] for ch in text]
