"""The HID tools through the HTTP API against the real daemon and its simulated target.

What the target did is read back from the simulator (GET /api/sim/state); after SIGTERM, when
there is no simulator left to ask, from the daemon's JSON log.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from daemon.sim.layout import make_layout
from gadget import keymap
from tests.service.daemonproc import DaemonProcess, eventually

# Quicker evidence and settles than on a board; the timings of the programs stay the defaults.
FAST: dict[str, Any] = {
    "isolation_settle_ms": 50,
    "evidence_stable_ms": 200,
    "enter_text_delay_ms": 100,
    "search_open_ms": 100,
    "focus_settle_ms": 50,
}
NOTHING_HELD = {"keys_down": [], "modifiers_down": [], "buttons_down": [], "contacts_down": []}

Make = Callable[..., DaemonProcess]


def start(make: Make, device_type: str = "iOS", **tables: dict[str, Any]) -> DaemonProcess:
    overrides: dict[str, dict[str, Any]] = {"device": {"device_type": device_type}}
    overrides["input"] = {**FAST, **tables.pop("input", {})}
    overrides.update(tables)
    return make(overrides)


async def call(
    d: DaemonProcess, tool: str, args: Any, timeout: float = 60
) -> tuple[int, dict[str, Any], Any]:
    """POST one tool call; returns (status, body, decoded output)."""
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as s,
        s.post(f"{d.base}/api/tools/{tool}", json={"input": args}) as r,
    ):
        body = await r.json()
    try:
        out = json.loads(body["output"])
    except ValueError:
        out = body["output"]
    return r.status, body, out


async def ok(d: DaemonProcess, tool: str, args: Any) -> Any:
    status, body, out = await call(d, tool, args)
    assert status == 200 and body["is_error"] is False, body
    return out


async def state(d: DaemonProcess) -> dict[str, Any]:
    async with aiohttp.ClientSession() as s, s.get(f"{d.base}/api/sim/state") as r:
        result: dict[str, Any] = await r.json()
        return result


def held(st: dict[str, Any]) -> dict[str, Any]:
    return {k: st[k] for k in NOTHING_HELD}


def tile(platform: str, name: str) -> dict[str, float]:
    w, h = (1080, 1920) if platform in ("ios", "android") else (1920, 1080)
    t = next(t for t in make_layout(platform, w, h).tiles if t.name == name)
    return {"x": (t.icon.x0 + t.icon.x1) / 2, "y": (t.icon.y0 + t.icon.y1) / 2}


FIELD = {"x": 500, "y": 140}


def assert_evidence(out: dict[str, Any], *, waited: bool = True) -> None:
    assert out["action_output"]["ok"] is True
    assert {"width", "height", "format", "size", "data"} <= set(out)
    assert "screen_changed" in out  # the simulator always gives a baseline
    assert ("screen_stable" in out) is waited and ("stable_wait_ms" in out) is waited


async def wait_for(
    d: DaemonProcess, check: Callable[[dict[str, Any]], bool], timeout: float = 20
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        st = await state(d)
        if check(st):
            return st
        assert time.monotonic() < deadline, st
        await asyncio.sleep(0.05)


# --- the basics: tap, type, swipe ---------------------------------------------------------------


async def test_tap_lands_on_the_named_tile(make_daemon: Make) -> None:
    d = start(make_daemon)
    out = await ok(d, "touch_gesture", {"type": "tap", "point": tile("ios", "Messages")})
    assert_evidence(out)
    assert out["screen_changed"] is True and out["action_output"]["pointer"] == "mouse"
    st = await state(d)
    assert (st["screen"], st["app"]) == ("app", "Messages")
    assert held(st) == NOTHING_HELD
    # Pixels map through the capture size: the Home button, then the Maps tile.
    await ok(
        d, "touch_gesture", {"type": "tap", "point": {"x": 80, "y": 120}, "coord_space": "pixel"}
    )
    p = tile("ios", "Maps")
    pixel = {"x": p["x"] * 1079 / 1000, "y": p["y"] * 1919 / 1000}
    await ok(d, "touch_gesture", {"type": "tap", "point": pixel, "coord_space": "pixel"})
    assert (await state(d))["app"] == "Maps"


async def test_typed_text_appears_in_the_field(make_daemon: Make) -> None:
    d = start(make_daemon)
    await ok(d, "touch_gesture", {"type": "tap", "point": tile("ios", "Notes")})
    out = await ok(d, "enter_text", {"point": FIELD, "text": "Hello, World! ~{x}"})
    assert_evidence(out, waited=False)
    assert out["screen_changed"] is True
    out = await ok(d, "keyboard_text", {"text": " and more"})
    assert out == {
        "ok": True,
        "typed": 9,
        "layout": "us",
        "caps_lock": "off",
        "caps_lock_presses": 0,
    }
    st = await state(d)
    assert st["texts"]["Notes"] == "Hello, World! ~{x} and more"
    # clear + submit: select all (a chord: isolated on iOS), delete, type, Enter.
    out = await ok(d, "enter_text", {"point": FIELD, "text": "fresh", "clear": True})
    assert out["action_output"]["profile_switches"] == ["keyboard-isolated", "full"]
    st = await state(d)
    assert st["texts"]["Notes"] == "fresh" and held(st) == NOTHING_HELD


async def test_a_swipe_scrolls(make_daemon: Make) -> None:
    d = start(make_daemon)
    await ok(d, "touch_gesture", {"type": "tap", "point": tile("ios", "Settings")})
    out = await ok(
        d,
        "touch_gesture",
        {"type": "swipe", "start": {"x": 500, "y": 800}, "end": {"x": 500, "y": 550}},
    )
    # beside the start, at it, press | 24 steps | 3 lifts
    assert out["screen_changed"] is True and out["action_output"]["reports"] == 3 + 24 + 3
    st = await state(d)
    assert abs(st["scroll_px"] - 250 * 1920 / 1000) <= 2  # the content followed the contact
    before = st["scroll_px"]
    await ok(
        d,
        "touch_gesture",
        {"type": "scroll", "point": {"x": 500, "y": 500}, "direction": "up", "distance": 100},
    )
    st = await state(d)
    assert abs(before - st["scroll_px"] - 100 * 1920 / 1000) <= 2
    # The wheel scrolls by rows (down: negative delta).
    before = st["scroll_px"]
    out = await ok(d, "mouse_scroll", {"delta": -2})
    assert_evidence(out)
    assert (await state(d))["scroll_px"] > before
    # An edge swipe from the left is "back" on a phone.
    await ok(d, "quick_action", {"action": "back"})
    assert (await state(d))["screen"] == "home"


async def test_directional_swipe_and_atomic_actions(make_daemon: Make) -> None:
    d = start(make_daemon)
    await ok(d, "touch_gesture", {"type": "tap", "point": tile("ios", "Mail")})
    await ok(
        d,
        "touch_gesture",
        {
            "type": "swipe",
            "start": {"x": 500, "y": 900},
            "direction": "up",
            "speed": 1000,
            "duration_ms": 300,
        },
    )
    st = await state(d)
    assert abs(st["scroll_px"] - 300 * 1920 / 1000) <= 2
    out = await ok(
        d,
        "touch_gesture",
        {
            "actions": [
                {"action": "touch_down", "x": 500, "y": 500},
                {"action": "move_to", "x": 500, "y": 600, "speed": 1000},
                {"action": "wait", "duration_ms": 50},
                {"action": "touch_up"},
            ]
        },
    )
    assert out["action_output"]["type"] == "actions"
    st = await state(d)
    assert abs(st["scroll_px"] - 200 * 1920 / 1000) <= 2 and held(st) == NOTHING_HELD


# --- iOS isolation ---------------------------------------------------------------------------


async def test_ios_cmd_shortcuts_work_because_they_run_isolated(make_daemon: Make) -> None:
    d = start(make_daemon)
    await ok(d, "touch_gesture", {"type": "tap", "point": tile("ios", "Notes")})
    await ok(d, "enter_text", {"point": FIELD, "text": "secret"})
    out = await ok(d, "keyboard_tap", {"keys": ["cmd", "a"]})
    assert_evidence(out)
    assert out["action_output"]["profile_switches"] == ["keyboard-isolated", "full"]
    await ok(d, "keyboard_tap", {"keys": ["cmd", "x"]})
    st = await state(d)
    assert st["clipboard"] == "secret" and st["texts"]["Notes"] == ""
    assert st["chords"] == ["cmd+a", "cmd+x"] and st["swallowed"] == []
    # Each invocation had its own pointer-free phase, and each ended on the full profile.
    assert st["switches"] == ["keyboard-isolated", "full"] * 2 and st["profile"] == "full"
    # open_app: cmd+space, typing and Enter share one phase.
    out = await ok(d, "open_app", {"name": "Maps"})
    assert out["action_output"]["profile_switches"] == ["keyboard-isolated", "full"]
    st = await state(d)
    assert st["app"] == "Maps" and st["switches"] == ["keyboard-isolated", "full"] * 3
    out = await ok(d, "open_url", {"url": "example.com/x?q=1"})
    st = await state(d)
    assert st["app"] == "Safari" and st["url"] == "example.com/x?q=1"
    # Volume is a consumer key: no profile switch for it.
    out = await ok(d, "quick_action", {"action": "volume_up"})
    assert "profile_switches" not in out["action_output"]
    assert (await state(d))["switches"] == ["keyboard-isolated", "full"] * 4


async def test_client_gone_mid_invocation_does_not_stop_it(make_daemon: Make) -> None:
    d = start(make_daemon)
    await ok(d, "touch_gesture", {"type": "tap", "point": tile("ios", "Notes")})
    await ok(d, "enter_text", {"point": FIELD, "text": "x"})
    # Twelve Cmd+A in one isolated phase (~2 s); the client leaves after 0.4 s.
    with pytest.raises(TimeoutError):
        await call(d, "keyboard_tap", {"keys": ["cmd", "a"], "repeat": 12}, timeout=0.4)
    st = await wait_for(d, lambda s: len(s["chords"]) == 12 and s["profile"] == "full")
    assert st["switches"] == ["keyboard-isolated", "full"] and st["swallowed"] == []
    # A long press whose client leaves: it still completes and lifts the button.
    with pytest.raises(TimeoutError):
        await call(
            d,
            "touch_gesture",
            {"type": "long_press", "point": {"x": 500, "y": 600}, "duration_ms": 1500},
            timeout=0.4,
        )
    st = await wait_for(d, lambda s: any("long press" in e for e in s["events"]))
    assert held(st) == NOTHING_HELD and st["profile"] == "full"

    # Each detached invocation is logged once, at its real end (after its evidence), not as
    # cancelled when its client left.
    def logged() -> list[tuple[str, str, bool | None]]:
        return [
            (e["tool"], e["outcome"], e.get("client_gone"))
            for e in d.log_events()
            if e.get("event") == "tool_invocation"
            and e["tool"] in ("keyboard_tap", "touch_gesture")
        ]

    await eventually(lambda: len(logged()) == 3, "three invocations logged")
    assert logged() == [
        ("touch_gesture", "ok", None),
        ("keyboard_tap", "ok", True),
        ("touch_gesture", "ok", True),
    ]


@pytest.mark.parametrize(
    ("tool", "args", "role"),
    [
        (
            "touch_gesture",
            {"type": "long_press", "point": {"x": 500, "y": 500}, "duration_ms": 60000},
            "pointer",
        ),
        ("keyboard_tap", {"keys": ["cmd", "a"]}, "keyboard"),
    ],
)
async def test_sigterm_mid_call_releases_everything(
    make_daemon: Make, tool: str, args: dict[str, Any], role: str
) -> None:
    d = start(
        make_daemon,
        server={"shutdown_grace_s": 0.3},
        input={"chord_hold_ms": 5000},
    )
    pending = asyncio.create_task(call(d, tool, args, timeout=30))
    st = await wait_for(d, lambda s: bool(s["buttons_down"] or s["keys_down"]))
    if role == "pointer":
        assert st["buttons_down"] == ["left"]
    else:
        assert st["keys_down"] == ["a"] and st["profile"] == "keyboard-isolated"
    assert await asyncio.to_thread(d.stop) == 0
    with contextlib.suppress(aiohttp.ClientError):  # the answer, if any, is not the point
        await pending
    events = d.log_events()
    names = [e.get("event") for e in events]
    assert "hid_invocations_cut_at_shutdown" in names
    end = next(e for e in events if e.get("event") == "input_invocation_end" and e["tool"] == tool)
    assert end["released"] == [role] and end["profile"] == "full"
    if role == "keyboard":
        assert end["switches"] == ["keyboard-isolated", "full"]
    stopped = next(e for e in events if e.get("event") == "input_engine_stopped")
    assert stopped["holding"] == [] and stopped["profile"] == "full"


async def test_concurrent_clients_are_serialized(make_daemon: Make) -> None:
    d = start(make_daemon)
    await ok(d, "touch_gesture", {"type": "tap", "point": tile("ios", "Notes")})
    await ok(d, "enter_text", {"point": FIELD, "text": ">"})
    await asyncio.gather(*(ok(d, "keyboard_text", {"text": c * 30}) for c in "abc"))
    text = (await state(d))["texts"]["Notes"]
    assert sorted(text[1:]) == sorted("a" * 30 + "b" * 30 + "c" * 30)
    assert all(text.count(c * 30) == 1 for c in "abc")  # each call's text in one piece


# --- drags -------------------------------------------------------------------------------------


async def test_drag_start_and_release(make_daemon: Make) -> None:
    d = start(make_daemon)
    await ok(d, "touch_gesture", {"type": "tap", "point": tile("ios", "Files")})
    out = await ok(d, "drag_start", {"point": {"x": 300, "y": 500}})
    assert out["screen_stable"] is True and out["drag"]["at"] == {"x": 500.0, "y": 500.0}
    st = await state(d)
    assert st["buttons_down"] == ["left"] and st["pointer"]["x"] == pytest.approx(500, abs=0.1)
    status, body, _ = await call(d, "drag_start", {"point": {"x": 300, "y": 500}})
    assert status == 200 and body["error"]["code"] == "drag_already_in_progress"
    status, body, _ = await call(d, "keyboard_text", {"text": "x"})
    assert body["error"]["code"] == "drag_in_progress"
    out = await ok(d, "drag_release", {"point": {"x": 500, "y": 300}})
    assert_evidence(out)
    st = await state(d)
    assert held(st) == NOTHING_HELD and abs(st["scroll_px"] - 200 * 1920 / 1000) <= 2
    status, body, _ = await call(d, "drag_release", {"point": {"x": 1, "y": 1}})
    assert body["error"]["code"] == "drag_not_in_progress"


async def test_drag_start_on_an_unsettled_screen_is_undone(make_daemon: Make) -> None:
    # The screen cannot count as settled: the stable window is longer than the wait.
    d = start(make_daemon, input={"evidence_timeout_ms": 400, "evidence_stable_ms": 5000})
    await ok(d, "touch_gesture", {"type": "tap", "point": tile("ios", "Files")})
    out = await ok(d, "drag_start", {"point": {"x": 300, "y": 500}})
    assert out["screen_stable"] is False and out["action_output"]["released"] is True
    st = await state(d)
    assert held(st) == NOTHING_HELD and st["pointer"]["x"] == pytest.approx(300, abs=0.1)
    _status, body, _ = await call(d, "drag_release", {"point": {"x": 1, "y": 1}})
    assert body["error"]["code"] == "drag_not_in_progress"


# --- bad input: every case has its code, and nothing reaches the target -------------------------

BAD: list[tuple[str, dict[str, Any], int, str, str]] = [
    # tool, input, HTTP status, error code, a word the message or path must contain
    (
        "touch_gesture",
        {"type": "drag", "point": {"x": 1, "y": 1}},
        400,
        "tool_arguments_invalid",
        "drag_start",
    ),
    ("touch_gesture", {"type": "tap"}, 400, "tool_arguments_invalid", "$.point"),
    ("touch_gesture", {}, 400, "tool_arguments_invalid", "$"),
    (
        "touch_gesture",
        {"type": "swipe", "start": {"x": 1, "y": 1}},
        400,
        "tool_arguments_invalid",
        "$",
    ),
    (
        "touch_gesture",
        {"type": "swipe", "start": {"x": 1, "y": 1}, "end": {"x": 2, "y": 2}, "direction": "up"},
        400,
        "tool_arguments_invalid",
        "$",
    ),
    (
        "touch_gesture",
        {"type": "tap", "point": {"x": 1001, "y": 5}},
        400,
        "tool_arguments_invalid",
        "$.point.x",
    ),
    (
        "touch_gesture",
        {"type": "tap", "point": {"x": 5, "y": -1}},
        400,
        "tool_arguments_invalid",
        "$.point.y",
    ),
    (
        "touch_gesture",
        {"type": "tap", "point": {"x": 5, "y": 1920}, "coord_space": "pixel"},
        400,
        "tool_arguments_invalid",
        "$.point.y",
    ),
    (
        "touch_gesture",
        {
            "actions": [
                {"action": "touch_down", "x": 1, "y": 1},
                {"action": "wait", "duration_ms": 5},
            ]
        },
        400,
        "tool_arguments_invalid",
        "touch_up",
    ),
    (
        "touch_gesture",
        {"actions": [{"action": "jump"}]},
        400,
        "tool_arguments_invalid",
        "$.actions[0]",
    ),
    (
        "touch_gesture",
        {"type": "tap", "point": {"x": 1, "y": 1}, "steps": 0},
        400,
        "tool_arguments_invalid",
        "steps",
    ),
    ("keyboard_tap", {"keys": ["ctrl", "kontrol"]}, 200, "unknown_key", "control"),
    ("keyboard_tap", {"keys": ["KEYCODE_HOME"]}, 400, "tool_arguments_invalid", "$.keys"),
    ("keyboard_tap", {"keys": ["ctrl", "volume_up"]}, 200, "chord_invalid", "volume_up"),
    ("keyboard_tap", {"keys": []}, 400, "tool_arguments_invalid", "$.keys"),
    ("keyboard_text", {"text": "h日llo"}, 200, "untypable_character", "index 1"),
    ("keyboard_text", {"text": ""}, 400, "tool_arguments_invalid", "$.text"),
    (
        "enter_text",
        {"point": {"x": 1, "y": 1}, "text": "日本"},
        200,
        "untypable_character",
        "nothing was typed",
    ),
    ("open_app", {"name": "Café 日本"}, 200, "untypable_character", "日"),
    ("open_url", {"url": "not a url"}, 200, "url_invalid", "spaces"),
    ("quick_action", {"action": "lock"}, 400, "tool_arguments_invalid", "$.action"),
    ("mouse_scroll", {"delta": 0}, 400, "tool_arguments_invalid", "$.delta"),
    ("mouse_move", {"x": 1}, 400, "tool_arguments_invalid", "$.y"),
    ("drag_release", {"point": {"x": 1, "y": 1}}, 200, "drag_not_in_progress", "drag_start"),
    (
        "drag_start",
        {"point": {"x": 1, "y": 1}, "direction": "north"},
        400,
        "tool_arguments_invalid",
        "$.direction",
    ),
]


async def test_bad_input_has_its_code_and_sends_nothing(make_daemon: Make) -> None:
    d = start(make_daemon)
    for tool, args, status, code, word in BAD:
        got, body, _out = await call(d, tool, args)
        assert (got, body["is_error"], body["error"]["code"]) == (status, True, code), (
            tool,
            args,
            body,
        )
        assert word in json.dumps(body["error"], ensure_ascii=False), (tool, args, body["error"])
    st = await state(d)
    assert st["reports"] == {"keyboard": 0, "consumer": 0, "pointer": 0}
    assert st["switches"] == []


# --- platforms ---------------------------------------------------------------------------------


async def tools_by_name(d: DaemonProcess) -> dict[str, Any]:
    async with aiohttp.ClientSession() as s, s.get(f"{d.base}/api/tools") as r:
        return {t["name"]: t for t in (await r.json())["tools"]}


async def test_ios_catalog_lists_what_ios_supports(make_daemon: Make) -> None:
    d = start(make_daemon)
    tools = await tools_by_name(d)
    for name in ("touch_gesture", "drag_start", "drag_release", "keyboard_tap", "keyboard_text"):
        assert tools[name]["policy"] == "write" and tools[name]["category"] == "input"
    assert tools["touch_gesture"]["args_schema"]["properties"]["type"]["enum"] == [
        "tap",
        "double_tap",
        "long_press",
        "swipe",
        "scroll",
    ]
    item = tools["keyboard_tap"]["args_schema"]["properties"]["keys"]["oneOf"][0]
    assert item["anyOf"][0]["enum"] == sorted(keymap.POINTER_SAFE_KEYCODES)
    actions = tools["quick_action"]["args_schema"]["properties"]["action"]["enum"]
    assert {"home", "control_center", "search"} <= set(actions) and "lock" not in actions
    listed = await ok(d, "quick_action", {"list": True})
    assert [a["name"] for a in listed["actions"]] == actions
    assert "ok:true only means" in tools["open_app"]["description"]


async def test_android_touchscreen_and_consumer_keys(make_daemon: Make) -> None:
    d = start(make_daemon, "Android")
    tools = await tools_by_name(d)
    assert tools["mouse_move"]["runtime"]["available"] is False
    assert "anyOf" not in tools["keyboard_tap"]["args_schema"]["properties"]["keys"]["oneOf"][0]
    out = await ok(d, "touch_gesture", {"type": "double_tap", "point": tile("android", "Chrome")})
    assert out["action_output"]["pointer"] == "touchscreen"
    st = await state(d)
    assert st["app"] == "Chrome" and held(st) == NOTHING_HELD
    await ok(d, "quick_action", {"action": "home"})  # consumer AC Home
    assert (await state(d))["screen"] == "home"
    await ok(d, "touch_gesture", {"type": "tap", "point": tile("android", "Clock")})
    await ok(d, "keyboard_tap", {"keys": ["KEYCODE_BACK"]})
    assert (await state(d))["screen"] == "home"
    await ok(d, "touch_gesture", {"type": "tap", "point": tile("android", "Clock")})
    await ok(
        d, "touch_gesture", {"type": "swipe", "start": {"x": 1, "y": 500}, "direction": "right"}
    )
    st = await state(d)
    assert st["screen"] == "home" and "edge swipe back" in st["events"]
    status, body, _ = await call(d, "mouse_move", {"x": 1, "y": 1})
    assert status == 503 and body["error"]["code"] == "tool_unavailable"
    assert (await state(d))["switches"] == []


async def test_desktop_gestures_use_the_wheel(make_daemon: Make) -> None:
    d = start(make_daemon, "macOS")
    tools = await tools_by_name(d)
    assert "long_press" not in tools["touch_gesture"]["args_schema"]["properties"]["type"]["enum"]
    await ok(d, "touch_gesture", {"type": "tap", "point": tile("macos", "Notes")})
    out = await ok(d, "mouse_move", {"x": 500, "y": 600})
    assert out["action_output"]["point"] == {"x": 500.0, "y": 600.0}
    await ok(
        d,
        "touch_gesture",
        {"type": "scroll", "point": {"x": 500, "y": 600}, "direction": "down", "distance": 300},
    )
    st = await state(d)
    assert st["scroll_px"] > 0 and st["switches"] == []
    status, body, _ = await call(
        d, "touch_gesture", {"type": "long_press", "point": {"x": 1, "y": 1}}
    )
    assert status == 400 and body["error"]["code"] == "tool_arguments_invalid"


# --- mouse buttons on computers --------------------------------------------------------------


async def test_computer_mouse_buttons_over_every_transport(make_daemon: Make) -> None:
    """Right, middle, back and forward clicks, a right double click and a right-button drag
    on a computer target, through HTTP, WebSocket and the CLI over IPC; the simulated target
    sees each button go down where asked and nothing stays held. Phones list no button."""
    from tests.service.test_ipc_cli import call as ipc_call
    from tests.service.test_ws import connect
    from tests.service.test_ws import ok as ws_ok

    d = start(make_daemon, "linux")
    tools = await tools_by_name(d)
    assert tools["touch_gesture"]["args_schema"]["properties"]["button"]["enum"] == [
        "left",
        "right",
        "middle",
        "back",
        "forward",
    ]
    assert "button" in tools["drag_start"]["args_schema"]["properties"]

    async def clicks() -> list[str]:
        return [e for e in (await state(d))["events"] if e.startswith("click ")]

    out = await ok(
        d, "touch_gesture", {"type": "tap", "point": {"x": 300, "y": 400}, "button": "right"}
    )
    assert out["action_output"]["button"] == "right"
    assert (await clicks())[-1] == "click right at 300,400"
    async with connect(d) as host:
        args = {"type": "tap", "point": {"x": 500, "y": 500}, "button": "middle"}
        ws_ok(await host.call("touch_gesture", args))
    assert (await clicks())[-1] == "click middle at 500,500"
    for button in ("back", "forward"):
        args = {"type": "tap", "point": {"x": 100, "y": 100}, "button": button}
        reply, _ = ipc_call(Path(d.tables["ipc"]["socket"]), "touch_gesture", args)
        assert reply["type"] == "complete", reply
        assert (await clicks())[-1] == f"click {button} at 100,100"
    before = len(await clicks())
    await ok(
        d, "touch_gesture", {"type": "double_tap", "point": {"x": 700, "y": 300}, "button": "right"}
    )
    assert (await clicks())[before:] == ["click right at 700,300"] * 2
    assert held(await state(d)) == NOTHING_HELD
    # Press and hold: a drag with the right button, held between the calls, then let go.
    out = await ok(d, "drag_start", {"point": {"x": 400, "y": 600}, "button": "right"})
    assert out["drag"]["button"] == "right"
    assert (await state(d))["buttons_down"] == ["right"]
    await ok(d, "drag_release", {"point": {"x": 450, "y": 650}})
    st = await state(d)
    assert held(st) == NOTHING_HELD and st["pointer"]["x"] == pytest.approx(450, abs=0.1)
    # A button is for clicks, double clicks and swipes; an unknown one is refused.
    for bad in (
        {"type": "scroll", "point": {"x": 1, "y": 1}, "direction": "down", "button": "right"},
        {"type": "tap", "point": {"x": 1, "y": 1}, "button": "side"},
    ):
        status, body, _ = await call(d, "touch_gesture", bad)
        assert status == 400 and body["error"]["code"] == "tool_arguments_invalid", body
    assert held(await state(d)) == NOTHING_HELD


async def test_phones_list_no_mouse_buttons(make_daemon: Make) -> None:
    d = start(make_daemon)  # iOS: AssistiveTouch's pointer is a finger
    tools = await tools_by_name(d)
    for tool in ("touch_gesture", "drag_start"):
        assert tools[tool]["args_schema"]["properties"]["button"]["enum"] == ["left"]
    args = {"type": "tap", "point": {"x": 1, "y": 1}, "button": "right"}
    status, body, _ = await call(d, "touch_gesture", args)
    assert status == 400 and body["error"]["code"] == "tool_arguments_invalid", body


async def test_clear_on_a_pc_desktop_selects_the_line_and_checks_the_screen(
    make_daemon: Make,
) -> None:
    """enter_text's clear on Linux: Home, Shift+End, Backspace (Ctrl+A selects all only where
    the app binds it), then the field's row read: it shows the new text alone."""
    d = start(make_daemon, "linux")
    await ok(d, "touch_gesture", {"type": "tap", "point": tile("linux", "Notes")})
    await ok(d, "enter_text", {"point": FIELD, "text": "Old value"})
    out = await ok(d, "enter_text", {"point": FIELD, "text": "fresh", "clear": True})
    clear = out["action_output"]["clear"]
    assert clear["keys"] == "home, shift+end, backspace"
    assert clear["read"] == "fresh" and clear["verified"] is True, clear
    assert "read_first" not in clear  # nothing was left to delete one by one
    st = await state(d)
    assert st["texts"]["Notes"] == "fresh" and held(st) == NOTHING_HELD
    assert "key shift+end" in st["events"] and not any("select_all" in e for e in st["events"])
