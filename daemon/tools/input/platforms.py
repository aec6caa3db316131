"""What differs between targets for the HID tools: gestures, mouse support, quick actions and
the keys that open search or select all. Data only (plus two lookups)."""

from __future__ import annotations

from typing import Any

PHONES = ("ios", "android")
MOUSE_PLATFORMS = frozenset({"ios", "macos", "windows", "linux"})
# Computers: their pointer is a mouse with right, middle, back and forward buttons (iOS's
# AssistiveTouch pointer is a finger, phones have a touchscreen).
BUTTON_PLATFORMS = frozenset({"macos", "windows", "linux"})
PHONE_GESTURES = ("tap", "double_tap", "long_press", "swipe", "scroll")
# A held left button means nothing on a desktop, so long_press is a phone gesture.
DESKTOP_GESTURES = ("tap", "double_tap", "swipe", "scroll")


def gestures_for(platform: str) -> tuple[str, ...]:
    return PHONE_GESTURES if platform in PHONES else DESKTOP_GESTURES


# name -> ("keys", key names) | ("swipe", (start x, start y, direction))
QuickAction = tuple[str, Any]
_MEDIA: dict[str, QuickAction] = {
    "volume_up": ("keys", ["volume_up"]),
    "volume_down": ("keys", ["volume_down"]),
    "mute": ("keys", ["mute"]),
    "brightness_up": ("keys", ["brightness_up"]),
    "brightness_down": ("keys", ["brightness_down"]),
}
QUICK_ACTIONS: dict[str, dict[str, QuickAction]] = {
    "ios": {
        "home": ("keys", ["cmd", "h"]),
        "back": ("swipe", (1, 500, "right")),
        "app_switcher": ("keys", ["cmd", "tab"]),
        "notifications": ("swipe", (300, 1, "down")),
        "control_center": ("swipe", (950, 1, "down")),
        "search": ("keys", ["cmd", "space"]),
        "screenshot": ("keys", ["cmd", "shift", "3"]),
        **_MEDIA,
    },
    "android": {
        "home": ("keys", ["KEYCODE_HOME"]),
        "back": ("keys", ["KEYCODE_BACK"]),
        "app_switcher": ("keys", ["KEYCODE_APP_SWITCH"]),
        "notifications": ("swipe", (500, 1, "down")),
        "search": ("keys", ["KEYCODE_SEARCH"]),
        "screenshot": ("keys", ["KEYCODE_SYSRQ"]),
        "lock": ("keys", ["KEYCODE_POWER"]),
        **_MEDIA,
    },
    "macos": {
        "back": ("keys", ["cmd", "["]),
        "app_switcher": ("keys", ["cmd", "tab"]),
        "search": ("keys", ["cmd", "space"]),
        "screenshot": ("keys", ["cmd", "shift", "3"]),
        "lock": ("keys", ["ctrl", "cmd", "q"]),
        **_MEDIA,
    },
    "windows": {
        "home": ("keys", ["win", "d"]),
        "back": ("keys", ["alt", "left"]),
        "app_switcher": ("keys", ["alt", "tab"]),
        "notifications": ("keys", ["win", "n"]),
        "search": ("keys", ["win"]),
        "screenshot": ("keys", ["printscreen"]),
        "lock": ("keys", ["win", "l"]),
        **_MEDIA,
    },
    "linux": {
        "back": ("keys", ["alt", "left"]),
        "app_switcher": ("keys", ["alt", "tab"]),
        "search": ("keys", ["super"]),
        "screenshot": ("keys", ["printscreen"]),
        "lock": ("keys", ["super", "l"]),
        **_MEDIA,
    },
}
# How each platform opens the search that open_app / open_url type into.
SEARCH_KEYS = {
    "ios": ["cmd", "space"],
    "macos": ["cmd", "space"],
    "android": ["KEYCODE_SEARCH"],
    "windows": ["win"],
    "linux": ["super"],
}
# How enter_text's `clear` empties the field it tapped: chords pressed in order. Select-all is
# Cmd+A on Apple targets and Ctrl+A on Android; on a PC desktop Ctrl+A selects all only where
# the application binds it (Tk's fields and xterm move to the line's start), while Home then
# Shift+End selects a single-line field's text in every toolkit.
_SELECT_LINE = (["home"], ["shift", "end"], ["backspace"])
CLEAR_KEYS: dict[str, tuple[list[str], ...]] = {
    "ios": (["cmd", "a"], ["backspace"]),
    "macos": (["cmd", "a"], ["backspace"]),
    "android": (["ctrl", "a"], ["backspace"]),
    "windows": _SELECT_LINE,
    "linux": _SELECT_LINE,
}
# The caret to the line's end, from where a clear that left text deletes it key by key.
LINE_END = {"ios": ["cmd", "right"], "macos": ["cmd", "right"]}  # others: end


def describe_quick(action: QuickAction) -> str:
    kind, spec = action
    if kind == "keys":
        return "keys " + "+".join(spec)
    x, y, direction = spec
    return f"edge swipe {direction} from {x},{y}"
