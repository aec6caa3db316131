"""Typing through the HTTP API on the simulated target, which reads keys as a host with the
configured layout does (its own xkbcommon state): Caps Lock on, a German target, untypable
text, and health_check's keyboard."""

from __future__ import annotations

from tests.service.test_input_tools import FIELD, Make, call, ok, start, state, tile


async def open_notes(d: object, platform: str = "ios") -> None:
    await ok(d, "touch_gesture", {"type": "tap", "point": tile(platform, "Notes")})  # type: ignore[arg-type]


async def test_caps_lock_on_still_types_hello_world(make_daemon: Make) -> None:
    d = start(make_daemon, "Android")
    await open_notes(d, "android")
    await ok(d, "enter_text", {"point": FIELD, "text": "x", "clear": True})
    await ok(d, "keyboard_tap", {"keys": ["capslock"]})
    assert (await state(d))["caps_lock"] is True
    health = await ok(d, "health_check", {})
    assert health["keyboard"] == {
        "layout": "us",
        "layout_name": "English US (PC, us)",
        "caps_lock": True,
        "num_lock": False,
        "scroll_lock": False,
    }
    out = await ok(d, "keyboard_text", {"text": " Hello World"})
    assert out["caps_lock"] == "on" and out["caps_lock_presses"] == 2
    st = await state(d)
    assert st["texts"]["Notes"] == "x Hello World" and st["caps_lock"] is True
    out = await ok(d, "enter_text", {"point": FIELD, "text": "abc", "clear": True})
    assert out["action_output"]["caps_lock"] == "on"
    st = await state(d)
    assert st["texts"]["Notes"] == "abc" and st["caps_lock"] is True


async def test_a_german_target_types_german(make_daemon: Make) -> None:
    d = start(make_daemon, "iOS", device={"device_type": "iOS", "keyboard_layout": "de"})
    await open_notes(d)
    text = "Grüße aus Zürich, 10 € @ 12:30"
    out = await ok(d, "enter_text", {"point": FIELD, "text": text})
    assert out["action_output"]["layout"] == "de"
    # @ and € need Option on Apple's German: the text ran in one pointer-free phase.
    assert out["action_output"]["profile_switches"] == ["keyboard-isolated", "full"]
    assert (await state(d))["texts"]["Notes"] == text
    await ok(d, "keyboard_tap", {"keys": ["ctrl", "z"]})  # names keys: z is where German has it
    assert (await state(d))["chords"][-1] == "ctrl+z"
    health = await ok(d, "health_check", {})
    assert health["keyboard"]["layout_name"] == "German (Apple, de)"
    status, body, _ = await call(d, "keyboard_text", {"text": "Grüße 😀"})
    assert status == 200 and body["is_error"] is True
    assert body["error"]["code"] == "untypable_character"
    assert body["error"]["details"]["character"] == "😀"
    assert body["error"]["details"]["index"] == 6
    assert body["error"]["details"]["layout"] == "German (Apple, de)"
    tools = {t["name"]: t for t in (await _tools(d))}
    assert "German (Apple, de)" in tools["keyboard_text"]["description"]


async def test_untypable_text_types_nothing(make_daemon: Make) -> None:
    d = start(make_daemon, "linux", device={"device_type": "linux", "keyboard_layout": "fr"})
    await open_notes(d, "linux")
    await ok(d, "enter_text", {"point": FIELD, "text": "é"})
    for text in ("ça 日本", "façade ñ", "ok 🙂"):
        status, body, _ = await call(d, "keyboard_text", {"text": text})
        assert status == 200
        assert body["is_error"] is True and body["error"]["code"] == "untypable_character"
        assert "French (PC, fr)" in body["error"]["message"]
    assert (await state(d))["texts"]["Notes"] == "é"


async def _tools(d: object) -> list[dict[str, object]]:
    import aiohttp

    async with aiohttp.ClientSession() as s, s.get(f"{d.base}/api/tools") as r:  # type: ignore[attr-defined]
        body = await r.json()
    tools: list[dict[str, object]] = body["tools"]
    return tools
