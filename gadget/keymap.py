"""Key names, Android KEYCODE_* aliases and the US layout, as data.

Typing goes through gadget.layouts (the target's layout, from XKB); the US table here serves
the key names (a one-character name is its key) and the raw kernel-tier keyboard test.

Name rules:

- Names are case-insensitive, and "_", "-" and spaces inside a name are ignored
  ("Page-Up", "page_up" and "PAGEUP" are one key). A one-character name is that character's
  key ("a", "1", "/"); "A" is the A key too: a key name is a key, not a character, so
  characters that need Shift ("!", "?") are not key names (type them as text, or chord
  "shift" with the key).
- A name that is a key on a standard keyboard means the keyboard key; media and system
  names mean consumer usages. So "home" is the keyboard's Home key (start of line), and the
  target's home button is "ac_home" (or KEYCODE_HOME, which is Android's home button).
- KEYCODE_* aliases follow what an Android kernel makes of each usage (hid-input's mapping,
  then Android's Generic.kl), so the target sees that keycode. KEYCODE_MEDIA_PAUSE is left
  out on purpose: the consumer Pause usage arrives on Android as KEYCODE_BREAK.
"""

from __future__ import annotations

import difflib
import string
from dataclasses import dataclass
from typing import Literal

from gadget import reports
from gadget.errors import UnknownKey, UntypableCharacter

Page = Literal["keyboard", "consumer"]


@dataclass(frozen=True)
class Key:
    name: str  # canonical name: every alias of a key resolves to the same Key
    page: Page
    usage: int
    modifier: int  # its bit in the keyboard report's modifier byte for modifier keys, else 0


# --- keyboard page (HID Usage Tables, page 0x07) ----------------------------------------------

_MODIFIERS = {
    # canonical name: (usage, modifier bit)
    "left_ctrl": (0xE0, reports.MOD_LCTRL),
    "left_shift": (0xE1, reports.MOD_LSHIFT),
    "left_alt": (0xE2, reports.MOD_LALT),
    "left_meta": (0xE3, reports.MOD_LMETA),
    "right_ctrl": (0xE4, reports.MOD_RCTRL),
    "right_shift": (0xE5, reports.MOD_RSHIFT),
    "right_alt": (0xE6, reports.MOD_RALT),
    "right_meta": (0xE7, reports.MOD_RMETA),
}

# What people call each modifier; the bare word means the left one.
_MODIFIER_WORDS = {
    "ctrl": ("ctrl", "control"),
    "shift": ("shift",),
    "alt": ("alt", "option", "opt"),
    "meta": ("meta", "cmd", "command", "win", "windows", "super", "gui"),
}

_KEYBOARD: dict[str, tuple[int, tuple[str, ...]]] = {
    # canonical name: (usage, aliases)
    "enter": (0x28, ("return", "\n")),
    "escape": (0x29, ("esc",)),
    "backspace": (0x2A, ()),
    "tab": (0x2B, ("\t",)),
    "space": (0x2C, ("spacebar", " ")),
    "minus": (0x2D, ("-", "hyphen", "dash")),
    "equal": (0x2E, ("=", "equals")),
    "left_bracket": (0x2F, ("[", "bracket_left")),
    "right_bracket": (0x30, ("]", "bracket_right")),
    "backslash": (0x31, ("\\",)),
    # The ISO key between left Shift and Z (Non-US \ and |); evdev KEY_102ND.
    "non_us_backslash": (0x64, ("iso_backslash", "intl_backslash", "102nd")),
    "semicolon": (0x33, (";",)),
    "apostrophe": (0x34, ("'", "quote")),
    "grave": (0x35, ("`", "backtick", "backquote")),
    "comma": (0x36, (",",)),
    "period": (0x37, (".", "dot")),
    "slash": (0x38, ("/",)),
    "capslock": (0x39, ("caps",)),
    "printscreen": (0x46, ("prtsc", "print", "sysrq")),
    "scrolllock": (0x47, ()),
    "pause": (0x48, ("break", "pause_break")),
    "insert": (0x49, ("ins",)),
    "home": (0x4A, ()),
    "pageup": (0x4B, ("pgup",)),
    "delete": (0x4C, ("del", "forward_delete")),
    "end": (0x4D, ()),
    "pagedown": (0x4E, ("pgdn",)),
    "right": (0x4F, ("arrowright", "right_arrow")),
    "left": (0x50, ("arrowleft", "left_arrow")),
    "down": (0x51, ("arrowdown", "down_arrow")),
    "up": (0x52, ("arrowup", "up_arrow")),
    "numlock": (0x53, ()),
    "kp_divide": (0x54, ("kp_slash",)),
    "kp_multiply": (0x55, ("kp_asterisk",)),
    "kp_minus": (0x56, ("kp_subtract",)),
    "kp_plus": (0x57, ("kp_add",)),
    "kp_enter": (0x58, ()),
    "kp_dot": (0x63, ("kp_period", "kp_decimal")),
    "menu": (0x65, ("application", "apps", "context_menu", "compose")),
    "kp_equals": (0x67, ("kp_equal",)),
    **{c: (0x04 + i, ()) for i, c in enumerate(string.ascii_lowercase)},
    **{str(d): (0x1E + (d - 1) % 10, ()) for d in range(10)},  # 1..9 then 0
    **{f"kp_{d}": (0x59 + (d - 1) % 10, ()) for d in range(10)},
    **{f"f{n}": (0x3A + n - 1, ()) for n in range(1, 13)},
    **{f"f{n}": (0x68 + n - 13, ()) for n in range(13, 25)},
}

# --- consumer page (0x0C); the evdev code Linux's hid-input gives each is in the comment -----

CONSUMER_USAGES: dict[str, int] = {
    "power": 0x0030,  # KEY_POWER
    "sleep": 0x0032,  # KEY_SLEEP
    "select": 0x0041,  # KEY_SELECT (Android DPAD_CENTER)
    "camera": 0x0065,  # KEY_CAMERA
    "brightness_up": 0x006F,  # KEY_BRIGHTNESSUP
    "brightness_down": 0x0070,  # KEY_BRIGHTNESSDOWN
    "play": 0x00B0,  # KEY_PLAY
    "record": 0x00B2,  # KEY_RECORD
    "fast_forward": 0x00B3,  # KEY_FASTFORWARD
    "rewind": 0x00B4,  # KEY_REWIND
    "next_track": 0x00B5,  # KEY_NEXTSONG
    "previous_track": 0x00B6,  # KEY_PREVIOUSSONG
    "stop": 0x00B7,  # KEY_STOPCD
    "eject": 0x00B8,  # KEY_EJECTCD
    "play_pause": 0x00CD,  # KEY_PLAYPAUSE
    "voice_command": 0x00CF,  # KEY_VOICECOMMAND (Android VOICE_ASSIST)
    "mute": 0x00E2,  # KEY_MUTE
    "volume_up": 0x00E9,  # KEY_VOLUMEUP
    "volume_down": 0x00EA,  # KEY_VOLUMEDOWN
    "mail": 0x018A,  # KEY_MAIL
    "calculator": 0x0192,  # KEY_CALC
    "browser": 0x0196,  # KEY_WWW
    "assistant": 0x01CB,  # KEY_ASSISTANT
    "copy": 0x021B,  # KEY_COPY
    "cut": 0x021C,  # KEY_CUT
    "paste": 0x021D,  # KEY_PASTE
    "search": 0x0221,  # KEY_SEARCH
    "ac_home": 0x0223,  # KEY_HOMEPAGE (Android HOME)
    "back": 0x0224,  # KEY_BACK
    "forward": 0x0225,  # KEY_FORWARD
    "refresh": 0x0227,  # KEY_REFRESH
    "bookmarks": 0x022A,  # KEY_BOOKMARKS
    "zoom_in": 0x022D,  # KEY_ZOOMIN
    "zoom_out": 0x022E,  # KEY_ZOOMOUT
    "app_switch": 0x029F,  # KEY_SCALE (Android RECENT_APPS)
}

_CONSUMER_ALIASES: dict[str, tuple[str, ...]] = {
    "volume_up": ("vol_up",),
    "volume_down": ("vol_down",),
    "mute": ("volume_mute",),
    "play_pause": ("media_play_pause",),
    "next_track": ("next", "media_next"),
    "previous_track": ("prev_track", "previous", "prev", "media_previous"),
    "stop": ("media_stop",),
    "play": ("media_play",),
    "ac_home": ("home_button",),
    "back": ("ac_back",),
    "forward": ("ac_forward",),
    "app_switch": ("app_switcher", "recent_apps", "recents", "overview"),
    "search": ("ac_search",),
    "brightness_up": ("brightnessup",),
    "brightness_down": ("brightnessdown",),
}

# --- Android KEYCODE_* aliases ----------------------------------------------------------------

_KEYCODES: dict[str, str] = {
    # KEYCODE_ suffix: canonical key name
    "ENTER": "enter",
    "DEL": "backspace",
    "FORWARD_DEL": "delete",
    "TAB": "tab",
    "SPACE": "space",
    "ESCAPE": "escape",
    "DPAD_UP": "up",
    "DPAD_DOWN": "down",
    "DPAD_LEFT": "left",
    "DPAD_RIGHT": "right",
    "DPAD_CENTER": "select",
    "MOVE_HOME": "home",
    "MOVE_END": "end",
    "PAGE_UP": "pageup",
    "PAGE_DOWN": "pagedown",
    "INSERT": "insert",
    "MINUS": "minus",
    "EQUALS": "equal",
    "LEFT_BRACKET": "left_bracket",
    "RIGHT_BRACKET": "right_bracket",
    "BACKSLASH": "backslash",
    "SEMICOLON": "semicolon",
    "APOSTROPHE": "apostrophe",
    "GRAVE": "grave",
    "COMMA": "comma",
    "PERIOD": "period",
    "SLASH": "slash",
    "CTRL_LEFT": "left_ctrl",
    "CTRL_RIGHT": "right_ctrl",
    "SHIFT_LEFT": "left_shift",
    "SHIFT_RIGHT": "right_shift",
    "ALT_LEFT": "left_alt",
    "ALT_RIGHT": "right_alt",
    "META_LEFT": "left_meta",
    "META_RIGHT": "right_meta",
    "CAPS_LOCK": "capslock",
    "NUM_LOCK": "numlock",
    "SCROLL_LOCK": "scrolllock",
    "SYSRQ": "printscreen",
    "BREAK": "pause",
    "MENU": "menu",
    "NUMPAD_DIVIDE": "kp_divide",
    "NUMPAD_MULTIPLY": "kp_multiply",
    "NUMPAD_SUBTRACT": "kp_minus",
    "NUMPAD_ADD": "kp_plus",
    "NUMPAD_ENTER": "kp_enter",
    "NUMPAD_DOT": "kp_dot",
    "NUMPAD_EQUALS": "kp_equals",
    "HOME": "ac_home",
    "BACK": "back",
    "FORWARD": "forward",
    "APP_SWITCH": "app_switch",
    "SEARCH": "search",
    "POWER": "power",
    "SLEEP": "sleep",
    "CAMERA": "camera",
    "VOLUME_UP": "volume_up",
    "VOLUME_DOWN": "volume_down",
    "VOLUME_MUTE": "mute",
    "MEDIA_PLAY_PAUSE": "play_pause",
    "MEDIA_PLAY": "play",
    "MEDIA_STOP": "stop",
    "MEDIA_NEXT": "next_track",
    "MEDIA_PREVIOUS": "previous_track",
    "MEDIA_FAST_FORWARD": "fast_forward",
    "MEDIA_REWIND": "rewind",
    "MEDIA_RECORD": "record",
    "MEDIA_EJECT": "eject",
    "BRIGHTNESS_UP": "brightness_up",
    "BRIGHTNESS_DOWN": "brightness_down",
    "VOICE_ASSIST": "voice_command",
    "ASSIST": "assistant",
    "ENVELOPE": "mail",
    "CALCULATOR": "calculator",
    "EXPLORER": "browser",
    "BOOKMARK": "bookmarks",
    "REFRESH": "refresh",
    "ZOOM_IN": "zoom_in",
    "ZOOM_OUT": "zoom_out",
    "COPY": "copy",
    "CUT": "cut",
    "PASTE": "paste",
    **{c.upper(): c for c in string.ascii_lowercase},
    **{str(d): str(d) for d in range(10)},
    **{f"NUMPAD_{d}": f"kp_{d}" for d in range(10)},
    **{f"F{n}": f"f{n}" for n in range(1, 13)},
}

POINTER_SAFE_KEYCODES: frozenset[str] = frozenset(
    f"KEYCODE_{suffix}"
    for suffix in (
        "VOLUME_UP",
        "VOLUME_DOWN",
        "VOLUME_MUTE",
        "MEDIA_PLAY_PAUSE",
        "MEDIA_PLAY",
        "MEDIA_STOP",
        "MEDIA_NEXT",
        "MEDIA_PREVIOUS",
        "MEDIA_FAST_FORWARD",
        "MEDIA_REWIND",
        "MEDIA_RECORD",
        "MEDIA_EJECT",
        "SYSRQ",
        "BRIGHTNESS_UP",
        "BRIGHTNESS_DOWN",
    )
)
"""KEYCODE_* aliases with the same meaning on every platform (media, volume, screenshot,
brightness): what keyboard_tap may list for a non-Android target."""

# --- the tables, built once -------------------------------------------------------------------


def _squash(name: str) -> str:
    """The lookup form of a name: one character stays itself (lowercased), else separators go."""
    lowered = name.lower()
    if len(name) == 1:
        return lowered
    return lowered.replace("_", "").replace("-", "").replace(" ", "")


def _modifier_aliases(canonical: str) -> list[str]:
    side, word = canonical.split("_")
    spellings = []
    for w in _MODIFIER_WORDS[word]:
        spellings += [f"{side}_{w}", f"{side[0]}{w}", f"{w}_{side}"]
        if side == "left":
            spellings.append(w)
    if word == "alt" and side == "right":
        spellings.append("altgr")
    return spellings


def _build() -> tuple[dict[str, Key], dict[str, Key], list[str]]:
    """(lookup by squashed name, KEYCODE_* table, every name people may use)."""
    entries: list[tuple[Key, list[str]]] = []
    for name, (usage, bit) in _MODIFIERS.items():
        entries.append((Key(name, "keyboard", usage, bit), _modifier_aliases(name)))
    for name, (usage, aliases) in _KEYBOARD.items():
        entries.append((Key(name, "keyboard", usage, 0), list(aliases)))
    for name, usage in CONSUMER_USAGES.items():
        entries.append((Key(name, "consumer", usage, 0), list(_CONSUMER_ALIASES.get(name, ()))))

    lookup: dict[str, Key] = {}
    listed: list[str] = []
    for k, spellings in entries:
        for spelling in (k.name, *spellings):
            squashed = _squash(spelling)
            if lookup.get(squashed, k) != k:
                raise AssertionError(f"key name {spelling!r} names two keys")
            lookup[squashed] = k
            if spelling.isprintable() and not spelling.isspace():
                listed.append(spelling)
    by_name = {k.name: k for k, _ in entries}
    keycodes = {f"KEYCODE_{suffix}": by_name[target] for suffix, target in _KEYCODES.items()}
    for code, k in keycodes.items():
        lookup[_squash(code)] = k
    return lookup, keycodes, sorted(set(listed)) + sorted(keycodes)


_LOOKUP, _KEYCODE_TABLE, _NAMES = _build()


def key(name: str) -> Key:
    """The key a name means (see the module docstring for the rules)."""
    found = _LOOKUP.get(_squash(name))
    if found is None:
        raise UnknownKey(name, _suggestions(name))
    return found


def _suggestions(name: str) -> list[str]:
    if len(name) == 1 and name in _SHIFTED:
        base = next(n for n, k in _KEYBOARD.items() if k[0] == _SHIFTED[name])
        return [base, "shift"]
    by_lower = {n.lower(): n for n in _NAMES}
    close = difflib.get_close_matches(name.lower(), list(by_lower), n=3, cutoff=0.6)
    return [by_lower[c] for c in close]


def names() -> list[str]:
    """Every key name key() accepts (up to case and separators), KEYCODE_* aliases last."""
    return list(_NAMES)


def keycode_aliases() -> dict[str, Key]:
    return dict(_KEYCODE_TABLE)


# --- US layout: characters to strokes ---------------------------------------------------------

# Shifted characters and the usage of the key they are on.
_SHIFTED: dict[str, int] = {
    **{c.upper(): 0x04 + i for i, c in enumerate(string.ascii_lowercase)},
    **dict(zip("!@#$%^&*()", range(0x1E, 0x28), strict=True)),
    "_": 0x2D,
    "+": 0x2E,
    "{": 0x2F,
    "}": 0x30,
    "|": 0x31,
    ":": 0x33,
    '"': 0x34,
    "~": 0x35,
    "<": 0x36,
    ">": 0x37,
    "?": 0x38,
}

_UNSHIFTED: dict[str, int] = {
    ch: usage
    for name, (usage, aliases) in _KEYBOARD.items()
    for ch in (name, *aliases)
    if len(ch) == 1 and (ch in string.printable)
}

_STROKES: dict[str, tuple[int, int]] = {
    **{ch: (usage, 0) for ch, usage in _UNSHIFTED.items()},
    **{ch: (usage, reports.MOD_LSHIFT) for ch, usage in _SHIFTED.items()},
}


def char_stroke(ch: str) -> tuple[int, int]:
    """(key usage, modifier bits) that types ch on a US layout: printable ASCII, "\\n", "\\t"."""
    if len(ch) != 1:
        raise ValueError(f"char_stroke takes one character, got {len(ch)}")
    stroke = _STROKES.get(ch)
    if stroke is None:
        raise UntypableCharacter(ch, 0)
    return stroke


def text_strokes(text: str) -> list[tuple[int, int]]:
    """Strokes for the whole text, checked before any is returned, so nothing half-types."""
    for index, ch in enumerate(text):
        if ch not in _STROKES:
            raise UntypableCharacter(ch, index)
    return [_STROKES[ch] for ch in text]
