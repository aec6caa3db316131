"""The target's keyboard layout: which keystrokes type a character, as the target reads them.

What a HID key produces is decided by the target's own keyboard setting, so typing plans every
character against the layout the target uses (`[device].keyboard_layout`), in the variant of
its platform family: Apple's layouts (iOS, macOS) differ from the PC ones (Android, Windows,
Linux); on an Apple German keyboard `@` is Option+L, on a PC one AltGr+Q.

The data (layouts.json beside this file) is generated from XKB's layouts and Compose table by
gadget/xkbgen.py (see there how), not typed by hand; a unit test regenerates it and compares
the bytes. The board reads only this file: no libxkbcommon there, and loading one layout takes
about a millisecond.

A stroke is (HID usage, modifier bits): one key press with the modifiers it needs (Shift,
AltGr / Option = right Alt). A character is one stroke, or two for a dead key then its base
key (German `é` = dead acute, then e). Strokes are planned for Caps Lock off; `caps` lists the
characters that come out differently with it on (the engine turns Caps Lock off around a text
holding any, and back on after).
"""

from __future__ import annotations

import dataclasses
import functools
import json
from dataclasses import dataclass
from importlib import resources

from gadget.errors import UntypableCharacter

Stroke = tuple[int, int]

# name: (description, PC family XKB layout(variant), Apple family XKB layout(variant))
LAYOUTS: dict[str, tuple[str, str, str]] = {
    "us": ("English US", "us", "us(mac)"),
    "gb": ("English UK", "gb", "gb(mac)"),
    "de": ("German", "de", "de(mac)"),
    "fr": ("French", "fr", "fr(mac)"),
    "es": ("Spanish", "es", "es(mac)"),
    "it": ("Italian", "it", "it(mac)"),
    "pt": ("Portuguese", "pt", "pt(mac)"),
    "ch": ("Swiss German", "ch", "ch(de_mac)"),
    "se": ("Swedish", "se", "se(mac)"),
    "no": ("Norwegian", "no", "no(mac)"),
    "dk": ("Danish", "dk", "dk(mac)"),
    "pl": ("Polish", "pl", "pl"),
}
NAMES: tuple[str, ...] = tuple(LAYOUTS)
FAMILIES = ("pc", "apple")
_FAMILY = {"ios": "apple", "macos": "apple", "android": "pc", "windows": "pc", "linux": "pc"}


def family_of(platform: str) -> str:
    """apple for ios and macos, pc for android, windows and linux."""
    try:
        return _FAMILY[platform]
    except KeyError:
        raise ValueError(f"unknown platform {platform!r}") from None


@dataclass(frozen=True)
class Layout:
    name: str  # us, de, ...
    family: str  # pc | apple
    description: str
    xkb: dict[str, str]  # the XKB rules/model/layout/variant/options the data came from
    chars: dict[str, tuple[Stroke, ...]]
    caps: frozenset[str]

    @property
    def label(self) -> str:
        """As people read it: "German (Apple, de)"."""
        return f"{self.description} ({'Apple' if self.family == 'apple' else 'PC'}, {self.name})"

    def plan(self, text: str) -> list[Stroke]:
        """Every stroke of `text` with Caps Lock off, checked whole before any is returned (so
        nothing half-types): UntypableCharacter names the first character the layout lacks."""
        chars = self.chars
        try:
            return [stroke for ch in text for stroke in chars[ch]]
        except KeyError:
            index = next(i for i, ch in enumerate(text) if ch not in chars)
            raise UntypableCharacter(text[index], index, self.label) from None

    def key_usage(self, ch: str) -> int | None:
        """The key that types `ch` with no modifier on this layout (German "z": the key US
        calls y), or None."""
        strokes = self.chars.get(ch)
        if strokes is not None and len(strokes) == 1 and strokes[0][1] == 0:
            return strokes[0][0]
        return None

    def caps_sensitive(self, text: str) -> bool:
        """Whether Caps Lock on would change what `text`'s strokes type."""
        return not self.caps.isdisjoint(text)


@functools.cache
def _data() -> dict[str, dict[str, object]]:
    raw = resources.files("gadget").joinpath("layouts.json").read_bytes()
    layouts: dict[str, dict[str, object]] = json.loads(raw)["layouts"]
    return layouts


@functools.cache
def load(name: str, family: str) -> Layout:
    """One layout of one family (KeyError for an unknown name, ValueError for a family)."""
    if family not in FAMILIES:
        raise ValueError(f"family must be one of {', '.join(FAMILIES)}, not {family!r}")
    entry = _data()[name]
    one = entry[family]
    assert isinstance(one, dict) and isinstance(entry["description"], str)
    chars = {ch: tuple((s & 0xFF, s >> 8) for s in strokes) for ch, strokes in one["chars"].items()}
    return Layout(name, family, entry["description"], one["xkb"], chars, frozenset(one["caps"]))


@functools.cache
def for_target(name: str, platform: str) -> Layout:
    """The layout `name` as a target of `platform` reads it. A standalone accent the data types
    as its dead key twice (X's Compose table: ´ is dead acute twice, dead acute then space being
    an apostrophe there) is the dead key then space on other systems: Windows types the accent
    twice for a dead key twice, and Windows, macOS, iOS and Android all give the accent for a
    dead key then space."""
    layout = load(name, family_of(platform))
    if platform == "linux":
        return layout
    space = (SPACE_USAGE, 0)
    chars = {
        ch: (strokes[0], space) if len(strokes) == 2 and strokes[0] == strokes[1] else strokes
        for ch, strokes in layout.chars.items()
    }
    return dataclasses.replace(layout, chars=chars)


SPACE_USAGE = 0x2C  # the HID keyboard page's space bar
