"""Generates gadget/layouts.json from the authority: XKB's layouts and Compose table.

Run on a development machine (never on a board): `python -m gadget.xkbgen` rewrites the data
file, `python -m gadget.xkbgen --check` fails when regenerating would change a byte. It needs
the `xkbcommon` Python bindings (built against Debian's libxkbcommon-dev), Debian's xkb-data
(/usr/share/X11/xkb) and libx11-data (the Compose table); `make setup` installs all three.

How a layout becomes data:

- XKB compiles the layout (rules evdev, model pc105, the layout and variant of LAYOUTS).
- HID usage -> XKB keycode goes through Linux's own mapping: the evdev code hid-input gives a
  keyboard usage (named by evdev's ecodes, matched to the key names of gadget.keymap), plus 8.
- For each key of the main block and each modifier set the target's keyboard can hold for a
  character (none, Shift, AltGr/Option = right Alt, Shift+AltGr) a fresh xkbcommon state is
  fed the modifier key presses and asked which keysym the key gives; that keysym's character,
  if any, is typable with that one stroke. The fewest modifiers win, then the lowest usage;
  the ISO key (between left Shift and Z) comes after all others, as US keyboards lack it.
- A character no stroke gives may still come from a dead key then a base key: the Compose
  table's two-keysym sequences that start with a dead key (`<dead_acute> <e> : "é"`), when
  both keysyms are typable with one stroke each; where nothing else types it, the dead key
  twice (`<dead_acute> <dead_acute> : "´"`: Swiss German's and Spanish's standalone accents).
- `caps`: the characters whose strokes give something else while Caps Lock is on (XKB's own
  key types say which keys Lock affects).

Apple's layouts are XKB's `mac` variants, with Option as the level 3 key (right Alt; the
`lv3:ralt_switch` option, since a few mac variants leave the switch out). XKB has no
Apple Polish: Apple's "Polish Pro" is the US layout with Option giving the Polish letters on
the keys where XKB's pl puts them on AltGr, so Apple pl is XKB pl with level 3 and 4 kept for
letters only.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from gadget import keymap, reports
from gadget.layouts import LAYOUTS

DATA = Path(__file__).with_name("layouts.json")
COMPOSE = Path("/usr/share/X11/locale/en_US.UTF-8/Compose")

LETTERS_ONLY_ON_LEVEL3 = {("pl", "apple")}

# gadget.keymap's name of each main-block key -> the evdev key Linux's hid-input gives its usage.
EVDEV_NAMES: dict[str, str] = {
    **{c: f"KEY_{c.upper()}" for c in "abcdefghijklmnopqrstuvwxyz0123456789"},
    "space": "KEY_SPACE",
    "minus": "KEY_MINUS",
    "equal": "KEY_EQUAL",
    "left_bracket": "KEY_LEFTBRACE",
    "right_bracket": "KEY_RIGHTBRACE",
    "backslash": "KEY_BACKSLASH",
    "semicolon": "KEY_SEMICOLON",
    "apostrophe": "KEY_APOSTROPHE",
    "grave": "KEY_GRAVE",
    "comma": "KEY_COMMA",
    "period": "KEY_DOT",
    "slash": "KEY_SLASH",
    "non_us_backslash": "KEY_102ND",
}
# The character modifier sets, fewest first: report bits and the evdev keys that hold them.
LEVEL_MODS: tuple[tuple[int, tuple[str, ...]], ...] = (
    (0, ()),
    (reports.MOD_LSHIFT, ("KEY_LEFTSHIFT",)),
    (reports.MOD_RALT, ("KEY_RIGHTALT",)),
    (reports.MOD_LSHIFT | reports.MOD_RALT, ("KEY_LEFTSHIFT", "KEY_RIGHTALT")),
)
CONTROL_CHARS = {"\n": "enter", "\t": "tab"}


def split_xkb(spec: str) -> tuple[str, str]:
    """ "de(mac)" -> ("de", "mac"); "de" -> ("de", "")."""
    m = re.fullmatch(r"([a-z]+)(?:\(([a-z_]+)\))?", spec)
    if m is None:
        raise ValueError(f"bad XKB layout {spec!r}")
    return m.group(1), m.group(2) or ""


def xkb_names(spec: str, family: str) -> dict[str, str]:
    """The XKB rules, model, layout, variant and options a target of this family uses."""
    layout, variant = split_xkb(spec)
    # Option is level 3 on every Apple layout; a few XKB mac variants leave the switch out.
    options = "lv3:ralt_switch" if family == "apple" else ""
    return {
        "rules": "evdev",
        "model": "pc105",
        "layout": layout,
        "variant": variant,
        "options": options,
    }


def hid_to_xkb() -> dict[int, int]:
    """HID usage -> XKB keycode (evdev code + 8) for the keys typing may use."""
    from evdev import ecodes

    return {keymap.key(n).usage: ecodes.ecodes[e] + 8 for n, e in EVDEV_NAMES.items()}


def _char(sym: int) -> str | None:
    from xkbcommon import xkb

    text: str | None = xkb.keysym_to_string(sym)
    if text is None or len(text) != 1 or not text.isprintable():
        return None
    return text


def compose_pairs(path: Path = COMPOSE) -> list[tuple[str, str, str]]:
    """(dead keysym name, base keysym name, character) of the table's dead-key sequences."""
    pattern = re.compile(r'^<(dead_\w+)>\s+<(\w+)>\s*:\s*"((?:[^"\\]|\\.)+)"')
    pairs = []
    for line in path.read_text(encoding="utf-8").splitlines():
        m = pattern.match(line)
        if m is None:
            continue
        dead, base, text = m.groups()
        text = re.sub(r"\\(.)", r"\1", text)  # \" and \\ are the file's only escapes
        # A dead key pressed twice gives its accent alone (<dead_acute> <dead_acute>: ´).
        if len(text) == 1 and text.isprintable() and (base == dead or not base.startswith("dead_")):
            pairs.append((dead, base, text))
    return pairs


def build_one(name: str, family: str, spec: str, pairs: list[tuple[str, str, str]]) -> Any:
    from evdev import ecodes
    from xkbcommon import xkb

    rmlvo = xkb_names(spec, family)
    km = xkb.Context().keymap_new_from_names(**rmlvo)
    codes = hid_to_xkb()
    letters_only = (name, family) in LETTERS_ONLY_ON_LEVEL3
    caps = ecodes.KEY_CAPSLOCK + 8

    def sym_of(keycode: int, held: tuple[str, ...], locked: bool) -> int:
        state = km.state_new()
        if locked:
            state.update_key(caps, xkb.XKB_KEY_DOWN)
            state.update_key(caps, xkb.XKB_KEY_UP)
        for k in held:
            state.update_key(ecodes.ecodes[k] + 8, xkb.XKB_KEY_DOWN)
        return int(state.key_get_one_sym(keycode))

    # keysym -> (stroke, caps-sensitive): the first found has the fewest modifiers.
    by_sym: dict[int, tuple[int, bool]] = {}
    # The ISO key (between left Shift and Z) last: a US (ANSI) keyboard has none, and Windows
    # reads its usage as backslash on the US layout, so it types only what no other key does.
    iso = keymap.key("non_us_backslash").usage
    order = [(mods, held, u) for mods, held in LEVEL_MODS for u in sorted(codes) if u != iso]
    order += [(mods, held, iso) for mods, held in LEVEL_MODS]
    for mods, held, usage in order:
        sym = sym_of(codes[usage], held, False)
        if sym == 0 or sym in by_sym:
            continue
        if letters_only and mods & reports.MOD_RALT:
            ch = _char(sym)
            if ch is None or not ch.isalpha():
                continue
        locked = sym_of(codes[usage], held, True) != sym
        by_sym[sym] = (usage | mods << 8, locked)

    chars: dict[str, list[int]] = {ch: [keymap.key(key).usage] for ch, key in CONTROL_CHARS.items()}
    sensitive: set[str] = set()
    for sym, (stroke, locked) in by_sym.items():
        ch = _char(sym)
        if ch is not None and ch not in chars:
            chars[ch] = [stroke]
            if locked:
                sensitive.add(ch)
    composed: dict[str, tuple[int, list[int], bool]] = {}
    # A dead key twice only for what nothing else types (German ^ stays dead key then space):
    # Swiss German's and Spanish's standalone ´ and ¨.
    for dead, base, ch in sorted(pairs, key=lambda p: p[0] == p[1]):
        if ch in chars or (dead == base and ch in composed):
            continue
        d, b = xkb.keysym_from_name(dead), xkb.keysym_from_name(base)
        if d not in by_sym or b not in by_sym:
            continue
        (ds, dl), (bs, bl) = by_sym[d], by_sym[b]
        cost = bin(ds >> 8).count("1") + bin(bs >> 8).count("1")
        best = composed.get(ch)
        if best is None or cost < best[0]:
            composed[ch] = (cost, [ds, bs], dl or bl)
    for ch, (_, strokes, locked) in composed.items():
        chars[ch] = strokes
        if locked:
            sensitive.add(ch)
    return {
        "xkb": rmlvo,
        "chars": dict(sorted(chars.items())),
        "caps": "".join(sorted(sensitive)),
    }


def source_versions() -> dict[str, str]:
    """The Debian packages the data came from (regenerate with the same ones)."""
    out = {}
    for pkg in ("xkb-data", "libx11-data"):
        done = subprocess.run(
            ["dpkg-query", "-W", "-f=${Version}", pkg], capture_output=True, text=True, check=False
        )
        out[pkg] = done.stdout.strip() or "unknown"
    return out


def generate() -> bytes:
    pairs = compose_pairs()
    data = {
        "generator": "python -m gadget.xkbgen",
        "sources": source_versions(),
        "stroke": "usage | modifier bits << 8 (HID keyboard page, boot report modifier byte)",
        "layouts": {
            name: {
                "description": desc,
                "pc": build_one(name, "pc", pc, pairs),
                "apple": build_one(name, "apple", apple, pairs),
            }
            for name, (desc, pc, apple) in LAYOUTS.items()
        },
    }
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), sort_keys=False)
    return (text + "\n").encode("utf-8")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m gadget.xkbgen", description=__doc__)
    ap.add_argument("--check", action="store_true", help="fail if regenerating changes a byte")
    ap.add_argument("--out", type=Path, default=DATA)
    args = ap.parse_args(argv)
    fresh = generate()
    if args.check:
        if args.out.read_bytes() != fresh:
            print(f"{args.out} is stale: run python -m gadget.xkbgen", file=sys.stderr)
            return 1
        return 0
    args.out.write_bytes(fresh)
    print(f"wrote {args.out} ({len(fresh)} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
