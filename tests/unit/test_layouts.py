"""The target's keyboard layouts: the generated data is what XKB says, and every character each
layout can type, planned by gadget.layouts, comes back exactly from an independent xkbcommon
state of that layout (daemon.sim.xkbtext: keysyms, levels and Compose of its own), with Caps
Lock off and on."""

from __future__ import annotations

import pytest

from daemon.config import ConfigError, from_mapping
from daemon.engine import program as prog
from daemon.errors import ToolError
from daemon.sim.xkbtext import XkbText
from gadget import keymap, layouts, xkbgen

ALL = [(name, family) for name in layouts.NAMES for family in layouts.FAMILIES]
CAPS = keymap.key("capslock").usage

# One sentence per language, typable on both of its families (checked below).
SENTENCES = {
    "us": 'The quick brown fox jumps over the lazy dog; 1+1=2 ("ok") #50 @home ~/a_b|c\\d {x}',
    "gb": '£5 for the café? It\'s 10% off, "quoted" @ 3pm #tag',
    "de": "Grüße aus Zürich, 10 € @ 12:30 — Äpfel, Öl, Übermaß; é è ê à ô",
    "fr": "Où est la gare ? ça coûte 5 € à l'été, élève déjà prêt : « ï ë ô » @ 9h",
    "es": "¿Dónde está el niño? ¡Señor, año 2024! Pingüino, 5 € @ casa",
    "it": "Perché è così? Città, più, già: 5 € @ casa #1",
    "pt": "Ação, coração, não, avó, você; São Paulo à noite, 5 € @ ç",
    "ch": "Grüezi mitenand! Café crème, Zürich: 12.50 Fr. @ Bahnhof, ä ö ü é è à",
    "se": "Hej! Åsa köper smörgåsar för 50 kr @ 12:30",
    "no": "Blåbærsyltetøy på Ærø koster 30 kr @ kl. 12, é",
    "dk": "Rødgrød med fløde på Ærø, 25 kr @ 12:00, é",
    "pl": "Zażółć gęślą jaźń! Łódź, Kraków: 10 zł @ 12:30",
}


def typed(x: XkbText, strokes: list[tuple[int, int]]) -> str:
    """Each stroke as one press report (modifiers with the key) and one all-up report."""
    out = ""
    for usage, mods in strokes:
        out += x.type_report(mods, (usage,), ())
        out += x.type_report(0, (), (usage,))
    return out


def caps_on(layout: layouts.Layout) -> XkbText:
    x = XkbText(layout.xkb)
    typed(x, [(CAPS, 0)])
    assert x.caps_lock
    return x


def test_regenerating_the_data_gives_the_same_bytes() -> None:
    assert xkbgen.generate() == xkbgen.DATA.read_bytes(), "run python -m gadget.xkbgen"


@pytest.mark.parametrize(("name", "family"), ALL)
def test_every_character_of_the_layout_round_trips(name: str, family: str) -> None:
    layout = layouts.load(name, family)
    x = XkbText(layout.xkb)
    wrong = {}
    for ch in layout.chars:
        got = typed(x, layout.plan(ch))
        if got != ch:
            wrong[ch] = got
    assert wrong == {}
    assert len(layout.chars) > 95  # ASCII at least (Apple Polish: ASCII plus the letters)


@pytest.mark.parametrize(("name", "family"), ALL)
def test_with_caps_lock_on_only_the_caps_characters_change(name: str, family: str) -> None:
    """The plan is for Caps Lock off; on, every character outside `caps` still comes out as
    planned, and those in it come out right when Caps Lock is pressed around them (what the
    engine does) with Caps Lock on again after."""
    layout = layouts.load(name, family)
    x = caps_on(layout)
    wrong = {}
    for ch in layout.chars:
        plan = layout.plan(ch)
        if ch in layout.caps:
            assert typed(x, plan) != ch or ch.lower() == ch.upper(), ch
            plan = [(CAPS, 0), *plan, (CAPS, 0)]
        got = typed(x, plan)
        if got != ch or not x.caps_lock:
            wrong[ch] = got
    assert wrong == {}
    assert "a" in layout.caps and not {" ", "\n"} & layout.caps


@pytest.mark.parametrize(("name", "family"), ALL)
def test_a_sentence_of_the_language_types_exactly(name: str, family: str) -> None:
    layout = layouts.load(name, family)
    text = SENTENCES[name] + "\n\t" + SENTENCES["us"]
    assert typed(XkbText(layout.xkb), layout.plan(text)) == text
    assert layout.caps_sensitive(text)
    wrapped = [(CAPS, 0), *layout.plan(text), (CAPS, 0)]
    x = caps_on(layout)
    assert typed(x, wrapped) == text and x.caps_lock


def test_german_plans_altgr_and_dead_keys_and_apple_plans_option() -> None:
    ralt, shift = 0x40, 0x02
    pc, apple = layouts.load("de", "pc"), layouts.load("de", "apple")
    q, e, l_, acute = (keymap.key(c).usage for c in ("q", "e", "l", "equal"))
    assert pc.plan("@") == [(q, ralt)]  # AltGr+Q
    assert apple.plan("@") == [(l_, ralt)]  # Option+L
    assert pc.plan("é") == [(acute, 0), (e, 0)]  # dead acute, then e
    assert pc.plan("y") == [(keymap.key("z").usage, 0)]  # QWERTZ
    assert pc.plan("É") == [(acute, 0), (e, shift)]
    fr = layouts.load("fr", "pc")
    assert fr.plan("é") == [(keymap.key("2").usage, 0)]  # its own key
    us_mac = layouts.load("us", "apple")
    assert us_mac.plan("é") == [(e, ralt), (e, 0)]  # Option+E, then E


@pytest.mark.parametrize("text", ["hi 😀", "日本", "ñ"])
def test_untypable_characters_are_refused_whole(text: str) -> None:
    layout = layouts.load("de", "pc")
    with pytest.raises(ToolError) as e:
        prog.text_strokes(text, "$.text", layout)
    bad = next(i for i, c in enumerate(text) if c not in layout.chars)
    assert e.value.code == "untypable_character"
    assert e.value.details == {
        "path": "$.text",
        "character": text[bad],
        "index": bad,
        "layout": "German (PC, de)",
    }
    assert "German (PC, de)" in e.value.message and "nothing was typed" in e.value.message


def test_the_platform_chooses_the_family() -> None:
    assert layouts.for_target("de", "ios").family == "apple"
    assert layouts.for_target("de", "macos").xkb["variant"] == "mac"
    assert layouts.for_target("ch", "macos").xkb["variant"] == "de_mac"
    for p in ("android", "windows", "linux"):
        assert layouts.for_target("de", p).xkb == {
            "rules": "evdev",
            "model": "pc105",
            "layout": "de",
            "variant": "",
            "options": "",
        }


def test_an_unknown_layout_stops_the_config_with_the_key_and_the_choices() -> None:
    with pytest.raises(ConfigError) as e:
        from_mapping({"device": {"keyboard_layout": "qwertz"}}, "f.toml")
    line = str(e.value)
    assert "\n" not in line and line.startswith("f.toml: device.keyboard_layout: 'qwertz'")
    assert all(repr(n) in line for n in layouts.NAMES)
    cfg = from_mapping({"device": {"keyboard_layout": "fr", "device_type": "macOS"}})
    assert cfg.device.layout.label == "French (Apple, fr)"


def test_key_names_name_keys_on_every_layout() -> None:
    de = layouts.load("de", "pc")
    z, y = (k.usage for k in prog.resolve_keys(["z", "y"], de))
    assert (z, y) == (keymap.key("y").usage, keymap.key("z").usage)
    assert [k.usage for k in prog.resolve_keys(["ü"], de)] == [keymap.key("[").usage]
    for names in (["ctrl", "enter", "f5", "KEYCODE_DPAD_UP", "volume_up"], ["/"]):
        usages = [(k.page, k.usage) for k in prog.resolve_keys(names, de)]
        assert usages == [(k.page, k.usage) for k in prog.resolve_keys(names)]


def test_us_pc_types_ascii_with_the_keys_of_a_us_keyboard() -> None:
    """The same strokes as the US table the kernel tier checks key by key: the ISO key (which a
    US keyboard lacks, and Windows reads as backslash there) is never used for ASCII."""
    us = layouts.load("us", "pc")
    ascii_text = "".join(chr(c) for c in range(0x20, 0x7F)) + "\n\t"
    assert us.plan(ascii_text) == keymap.text_strokes(ascii_text)


@pytest.mark.parametrize("name", ["ch", "es"])
def test_standalone_accents_are_a_dead_key_twice_or_then_space(name: str) -> None:
    """Issue 49: ´ and ¨ alone were refused on Swiss German and Spanish, whose only stroke for
    them is the dead key pressed twice (X's Compose) or then space (Windows, macOS, Android)."""
    linux = layouts.for_target(name, "linux")
    x = XkbText(linux.xkb)
    for ch in "´¨":
        strokes = linux.plan(ch)
        assert len(strokes) == 2 and strokes[0] == strokes[1], (ch, strokes)
        assert typed(x, strokes) == ch
        for platform in ("windows", "macos", "android"):
            dead, then = layouts.for_target(name, platform).plan(ch)
            assert dead[0] == layouts.for_target(name, platform).chars[ch][0][0]
            assert then == (keymap.key("space").usage, 0), (platform, ch)
    text = "Café ´ crème ¨ ^"
    assert typed(XkbText(linux.xkb), linux.plan(text)) == text
    # What a space after the dead key already typed stays as it was (^ on a PC).
    assert layouts.for_target(name, "windows").plan("^") == linux.plan("^")
