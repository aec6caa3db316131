"""Typing through the engine into the simulated target, whose host reads keys with its own
xkbcommon state: the text comes out exactly whatever Caps Lock is, Caps Lock is left as found,
and what the engine knew of it (on, off, unknown) is in the result."""

from __future__ import annotations

from typing import Any

import pytest

from daemon.config import InputConfig
from daemon.engine import program as prog
from daemon.engine.flow import InputEngine
from daemon.engine.program import Point
from gadget import layouts

FAST = InputConfig(
    tap_hold_ms=5,
    ios_cursor_settle_ms=5,
    key_hold_ms=5,
    chord_hold_ms=5,
    key_step_ms=1,
    release_interval_ms=1,
    typing_rate_cps=1000,
    isolation_settle_ms=0,
    caps_lock_hold_ms=5,
    caps_lock_wait_ms=100,
)


async def focused(platform: str, layout: str = "us", **sim: Any) -> tuple[Any, InputEngine]:
    from daemon.sim.target import SimTarget

    target = SimTarget(
        platform, reenumerate_s=0.0, xkb_names=layouts.for_target(layout, platform).xkb, **sim
    )
    engine = InputEngine(target, target, FAST, platform)
    async with engine.invocation("setup") as s:
        for x, y in (target.tile_center("Notes"), target.field_center()):
            await s.run(prog.tap(FAST, engine.pointer, Point(x, y), s.pointer_at))
    assert target.state()["focused"] == "text"
    return target, engine


async def type_text(
    engine: InputEngine, text: str, layout: str
) -> tuple[dict[str, Any], list[str]]:
    lay = layouts.for_target(layout, engine.platform)
    program = prog.typing(FAST, prog.text_strokes(text, "$.text", lay))
    async with engine.invocation("keyboard_text") as s:
        info = await s.type_text(program, caps_sensitive=lay.caps_sensitive(text))
    return info, s.switches


async def press_caps(engine: InputEngine) -> None:
    async with engine.invocation("keyboard_tap") as s:
        await s.run(prog.chord(FAST, prog.resolve_keys(["capslock"])))


@pytest.mark.parametrize("platform", ["linux", "macos", "android"])
@pytest.mark.parametrize("caps", [False, True])
async def test_text_comes_out_as_asked_and_caps_lock_stays(platform: str, caps: bool) -> None:
    target, engine = await focused(platform)
    if caps:
        await press_caps(engine)
    assert target.state()["caps_lock"] is caps
    info, _ = await type_text(engine, " Hello World", "us")
    assert target.state()["field_text"] == " Hello World"
    assert target.state()["caps_lock"] is caps
    assert info == {"caps_lock": "on" if caps else "off", "caps_lock_presses": 2 if caps else 0}
    info, _ = await type_text(engine, "123 .,-", "us")  # nothing Caps Lock changes
    assert info == {"caps_lock": "on" if caps else "off"}
    assert target.state()["field_text"] == " Hello World123 .,-"


@pytest.mark.parametrize("caps", [False, True])
async def test_unknown_caps_lock_is_found_by_one_press(caps: bool) -> None:
    """A host that reports its LEDs only when they change: the first press tells."""
    target, engine = await focused("linux", "de", leds_at_enumeration=False)
    if caps:
        await press_caps(engine)
        target._enumerated()  # as after a re-enumeration: nothing reported since
    assert engine.hid.led_reports() == (0, None)
    info, _ = await type_text(engine, "Grüße, Zürich", "de")
    assert target.state()["field_text"] == "Grüße, Zürich"
    assert target.state()["caps_lock"] is caps
    assert info == {"caps_lock": "on" if caps else "off", "caps_lock_presses": 2}


async def test_a_host_that_never_reports_leds_is_typed_as_off_and_said_so() -> None:
    target, engine = await focused("windows", "fr", led_reports=False)
    info, _ = await type_text(engine, "élève à l'été", "fr")
    assert info == {"caps_lock": "unknown", "caps_lock_presses": 2}
    assert target.state()["field_text"] == "élève à l'été"
    assert target.state()["caps_lock"] is False
    info, _ = await type_text(engine, " ça", "fr")  # not probed again: it does not answer
    assert info == {"caps_lock": "unknown", "caps_lock_presses": 0}
    assert target.state()["field_text"] == "élève à l'été ça"


async def test_ios_option_text_types_in_one_isolated_phase() -> None:
    """Option (right Alt) makes a keyboard program isolated on iOS: the whole text is one phase
    (one switch there, one back), with Caps Lock handled inside it."""
    target, engine = await focused("ios", "fr")
    await press_caps(engine)
    text = "Où est l'été ? 5 € @ « ï » — ça"
    info, switches = await type_text(engine, text, "fr")
    assert switches == ["keyboard-isolated", "full"]
    assert target.state()["field_text"] == text
    assert target.state()["caps_lock"] is True
    assert info == {"caps_lock": "on", "caps_lock_presses": 2}
