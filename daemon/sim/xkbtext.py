"""What a target with an XKB keyboard makes of key presses: text, through libxkbcommon.

The simulated target (and the tests) read typing with this, independently of the typing planner
(gadget.layouts): an xkbcommon keymap compiled from the layout's XKB names, a state fed every
key going down and up (modifiers and Caps Lock included, so the state keeps its own Lock), and
dead keys composed by xkbcommon's compose API from the system's Compose table. Nothing here
reads the planner's tables; only the layout's XKB names and Linux's usage -> evdev mapping are
shared.

Needs the `xkbcommon` bindings and Debian's libxkbcommon, xkb-data and libx11-data (`make
setup` installs them); the board daemon never runs the simulated target.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

from xkbcommon import xkb

from gadget import keymap

# Modifier bits of the boot report -> the evdev code Linux gives each modifier usage.
_MODIFIER_EVDEV = {
    0x01: 29,  # KEY_LEFTCTRL
    0x02: 42,  # KEY_LEFTSHIFT
    0x04: 56,  # KEY_LEFTALT
    0x08: 125,  # KEY_LEFTMETA
    0x10: 97,  # KEY_RIGHTCTRL
    0x20: 54,  # KEY_RIGHTSHIFT
    0x40: 100,  # KEY_RIGHTALT
    0x80: 126,  # KEY_RIGHTMETA
}
# Other keys the target reads (evdev codes, Linux's hid-input mapping), typing keys aside.
_OTHER_EVDEV = {"enter": 28, "tab": 15, "capslock": 58, "backspace": 14, "escape": 1}


@functools.cache
def usage_to_keycode() -> dict[int, int]:
    """HID keyboard usage -> XKB keycode (evdev code + 8)."""
    from gadget.xkbgen import hid_to_xkb  # the generator's derivation from evdev's ecodes

    table = dict(hid_to_xkb())
    for name, code in _OTHER_EVDEV.items():
        table[keymap.key(name).usage] = code + 8
    return table


class XkbText:
    """One keyboard's XKB state and compose state."""

    def __init__(self, names: Mapping[str, str], locale: str = "en_US.UTF-8") -> None:
        ctx = xkb.Context()
        self.keymap = ctx.keymap_new_from_names(**dict(names))
        self.state = self.keymap.state_new()
        self.compose = ctx.compose_table_new_from_locale(locale).compose_state_new()
        self.modifiers = 0
        self.composing = False

    @property
    def caps_lock(self) -> bool:
        return bool(self.state.led_name_is_active("Caps Lock"))

    @property
    def num_lock(self) -> bool:
        return bool(self.state.led_name_is_active("Num Lock"))

    @property
    def scroll_lock(self) -> bool:
        return bool(self.state.led_name_is_active("Scroll Lock"))

    def set_modifiers(self, bits: int) -> None:
        """The report's modifier byte: press and release modifier keys to match it."""
        for bit, code in _MODIFIER_EVDEV.items():
            if (bits ^ self.modifiers) & bit:
                down = xkb.XKB_KEY_DOWN if bits & bit else xkb.XKB_KEY_UP
                self.state.update_key(code + 8, down)
        self.modifiers = bits

    def base_char(self, usage: int) -> str | None:
        """What the key types with no modifier (its label on this layout), if a character."""
        code = usage_to_keycode().get(usage)
        if code is None:
            return None
        syms = self.keymap.key_get_syms_by_level(code, 0, 0)
        text: str | None = xkb.keysym_to_string(syms[0]) if syms else None
        return text if text is not None and len(text) == 1 and text.isprintable() else None

    def key_up(self, usage: int) -> None:
        code = usage_to_keycode().get(usage)
        if code is not None:
            self.release(code)

    def key_down(self, usage: int) -> str:
        """The text one key press types ("" for none, or while a dead key waits)."""
        code = usage_to_keycode().get(usage)
        return "" if code is None else self.press(code)

    def release(self, code: int) -> None:
        """XKB keycode `code` (evdev + 8) went up."""
        self.state.update_key(code, xkb.XKB_KEY_UP)

    def press(self, code: int) -> str:
        """XKB keycode `code` (evdev + 8) went down: the text it types."""
        sym = self.state.key_get_one_sym(code)
        text = self.state.key_get_string(code)
        self.state.update_key(code, xkb.XKB_KEY_DOWN)
        if sym == 0:
            return ""
        self.compose.feed(sym)
        status = self.compose.get_status()
        if status == xkb.XKB_COMPOSE_COMPOSING:
            self.composing = True
            return ""
        if status == xkb.XKB_COMPOSE_COMPOSED:
            composed = str(self.compose.get_utf8())
            self.compose.reset()
            self.composing = False
            return composed
        if status == xkb.XKB_COMPOSE_CANCELLED:
            self.compose.reset()
            self.composing = False
            return ""
        text = str(text or "")
        return "\n" if text == "\r" else text  # Return types a newline into a field

    def type_report(self, modifiers: int, pressed: tuple[int, ...], held: tuple[int, ...]) -> str:
        """A whole boot report after `held`: modifiers first (as hid-input reports them), keys
        released, then keys pressed; returns the text they typed."""
        self.set_modifiers(modifiers)
        for usage in held:
            if usage not in pressed:
                self.key_up(usage)
        return "".join(self.key_down(u) for u in pressed if u not in held)
