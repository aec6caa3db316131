"""From what a report carries back to key names and actions.

Built from gadget.keymap's key names. Characters are not here: the simulated target reads them
through its own XKB state of the configured layout (daemon.sim.xkbtext).
"""

from __future__ import annotations

from gadget import keymap, reports

SHIFT = reports.MOD_LSHIFT | reports.MOD_RSHIFT
GUI = reports.MOD_LMETA | reports.MOD_RMETA
_MODIFIERS = (
    (reports.MOD_LCTRL | reports.MOD_RCTRL, "ctrl"),
    (reports.MOD_LALT | reports.MOD_RALT, "alt"),
    (SHIFT, "shift"),
    (GUI, "gui"),
)
_GUI_WORD = {"ios": "cmd", "macos": "cmd", "windows": "win", "linux": "super", "android": "meta"}
_BUTTONS = (
    (reports.BUTTON_LEFT, "left"),
    (reports.BUTTON_RIGHT, "right"),
    (reports.BUTTON_MIDDLE, "middle"),
    (reports.BUTTON_BACK, "back"),
    (reports.BUTTON_FORWARD, "forward"),
)
BUTTON_LEFT = reports.BUTTON_LEFT
LAST_ERROR_USAGE = 0x03  # 1..3 are ErrorRollOver, POSTFail, ErrorUndefined: not keys

ENTER = keymap.key("enter").usage
BACKSPACE = keymap.key("backspace").usage
ESCAPE = keymap.key("escape").usage
CAPS_LOCK = keymap.key("capslock").usage
HOME = keymap.key("home").usage
END = keymap.key("end").usage

CONSUMER_ACTIONS: dict[int, str] = {
    keymap.key("ac_home").usage: "home",
    keymap.key("back").usage: "back",
    keymap.key("app_switch").usage: "app_switch",
    keymap.key("search").usage: "search",
}


_LABELS: dict[int, str] = {}
for _name in keymap.names():
    _k = keymap.key(_name)
    if _k.page == "keyboard" and not _k.modifier:
        _LABELS.setdefault(_k.usage, _k.name)


def label(usage: int) -> str:
    """The canonical key name of a keyboard usage ("a", "enter", "f4"), or its hex."""
    return _LABELS.get(usage, f"0x{usage:02x}")


def modifier_names(bits: int) -> frozenset[str]:
    return frozenset(name for mask, name in _MODIFIERS if bits & mask)


def chord_name(mods: frozenset[str], key_label: str, platform: str) -> str:
    """As people write it: "cmd+a" on apple targets, "ctrl+shift+z", "win" for a bare Win tap."""
    words = [_GUI_WORD[platform] if m == "gui" else m for _, m in _MODIFIERS if m in mods]
    return "+".join([*words, key_label] if key_label else words)


def button_names(bits: int) -> str:
    return "+".join(name for mask, name in _BUTTONS if bits & mask)


def norm(a: int) -> float:
    return reports.abs_to_norm(a)
