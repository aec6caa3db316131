"""What an action changed in the screen's text (issue 37), over every transport against the real
daemon, its simulated target and the real OCR engine: screen_text's `since` (HTTP, MCP), the
WebSocket `after` visual tree with `since: "before"`, and the text_changes of tap_text and
enter_text; hostile `since` values get an explanation, never a failed read."""

from __future__ import annotations

from typing import Any

import pytest

from daemon.screen.ocr import engine_installed
from daemon.sim.layout import ROW_H, make_layout
from tests.service.daemonproc import DaemonProcess
from tests.service.test_input_tools import Make, call, ok, start, state
from tests.service.test_mcp import mcp_client, text_json
from tests.service.test_ws import connect
from tests.service.test_ws import ok as ws_ok

pytestmark = pytest.mark.skipif(not engine_installed(), reason="OCR engine missing")


def texts(found: dict[str, Any], kind: str) -> list[str]:
    return [x["text"] for x in found[kind]]


def wifi_row() -> dict[str, float]:
    lay = make_layout("android", 1080, 1920)
    return {"x": 500, "y": lay.viewport.y0 + ROW_H / 2}


async def settings(make_daemon: Make) -> DaemonProcess:
    d = start(make_daemon, "Android")
    await ok(d, "open_app", {"name": "Settings"})
    assert (await state(d))["toggles"]["Wi-Fi"] is True
    return d


async def test_since_over_http_says_the_switch_went_off(make_daemon: Make) -> None:
    d = await settings(make_daemon)
    first = await ok(d, "screen_text", {})
    await ok(d, "touch_gesture", {"type": "tap", "point": wifi_row()})
    assert (await state(d))["toggles"]["Wi-Fi"] is False
    second = await ok(d, "screen_text", {"since": first["snapshot_id"]})
    found = second["changes"]
    assert found["since"] == first["snapshot_id"] and found["snapshot_id"] == second["snapshot_id"]
    assert texts(found, "appeared") == ["OFF"] and texts(found, "disappeared") == ["ON"]
    assert found["moved"] == [] and found["unchanged"] >= 10
    off = found["appeared"][0]
    assert off["center"]["x"] > 850 and abs(off["center"]["y"] - wifi_row()["y"]) < 20
    # since the same screen: nothing changed
    again = await ok(d, "screen_text", {"since": second["snapshot_id"]})
    changes = again["changes"]
    assert (changes["appeared"], changes["disappeared"], changes["moved"]) == ([], [], [])
    # a region keeps the changes to it, as it keeps the lines
    left = {"x0": 0, "y0": 200, "x1": 500, "y1": 1000}  # the rows' names, not their values
    await ok(d, "touch_gesture", {"type": "tap", "point": wifi_row()})
    part = await ok(d, "screen_text", {"since": second["snapshot_id"], "region": left})
    assert part["changes"]["appeared"] == [] and part["changes"]["disappeared"] == []


async def test_a_scroll_moves_the_rows(make_daemon: Make) -> None:
    d = start(make_daemon, "Android")
    await ok(d, "open_app", {"name": "Notes"})
    first = await ok(d, "screen_text", {})
    swipe = {"type": "swipe", "start": {"x": 500, "y": 700}, "end": {"x": 500, "y": 600}}
    await ok(d, "touch_gesture", swipe)
    second = await ok(d, "screen_text", {"since": first["snapshot_id"]})
    moved = second["changes"]["moved"]
    assert moved and all(m["center"]["y"] < m["from"]["center"]["y"] for m in moved), moved


async def test_tap_text_and_enter_text_report_their_text_changes(make_daemon: Make) -> None:
    d = await settings(make_daemon)
    tapped = await ok(d, "tap_text", {"query": "Wi-Fi", "match": "exact", "text_changes": True})
    found = tapped["text_changes"]
    assert texts(found, "appeared") == ["OFF"] and texts(found, "disappeared") == ["ON"], found
    plain = await ok(d, "tap_text", {"query": "Wi-Fi", "match": "exact"})
    assert "text_changes" not in plain
    typed = await ok(
        d,
        "enter_text",
        {"point": {"x": 500, "y": 140}, "text": "hello", "text_changes": True},
    )
    found = typed["text_changes"]
    assert texts(found, "appeared") == ["hello"], found
    assert (await state(d))["field_text"] == "hello"


async def test_the_websocket_after_tree_says_what_the_action_changed(make_daemon: Make) -> None:
    d = await settings(make_daemon)
    async with connect(d) as host:
        after = {"include": ["visualTree"], "visualTreeArguments": {"since": "before"}}
        reply = ws_ok(
            await host.call("touch_gesture", {"type": "tap", "point": wifi_row()}, after=after)
        )
        tree = reply["evidence"]["visualTree"]["result"]
        found = tree["changes"]
        assert texts(found, "appeared") == ["OFF"] and texts(found, "disappeared") == ["ON"]
        assert found["snapshot_id"] == tree["snapshot_id"]
        # "before" outside an action's evidence names nothing: said, the read still answers
        alone = ws_ok(await host.call("screen_text", {"since": "before"}))["result"]
        assert alone["changes"]["error"]["code"] == "text_changes_unavailable"
        assert alone["lines"]


async def test_since_over_mcp(make_daemon: Make) -> None:
    d = await settings(make_daemon)
    async with mcp_client(d.base, d.token) as client:
        first = text_json(await client.call_tool("screen_text", {}))
        text_json(await client.call_tool("touch_gesture", {"type": "tap", "point": wifi_row()}))
        second = text_json(await client.call_tool("screen_text", {"since": first["snapshot_id"]}))
        assert texts(second["changes"], "appeared") == ["OFF"]


@pytest.mark.parametrize(
    "since", ["f1-2", "f99999999999999999999-1", "nonsense", "f1-2-r1.2.3.4", "x" * 64]
)
async def test_a_since_nobody_read_is_explained_and_the_read_answers(
    make_daemon: Make, since: str
) -> None:
    d = start(make_daemon)
    out = await ok(d, "screen_text", {"since": since})
    assert out["lines"] and out["changes"]["since"] == since
    assert out["changes"]["error"]["code"] == "text_changes_unavailable"


async def test_hostile_since_values_are_refused_at_the_edge(make_daemon: Make) -> None:
    d = start(make_daemon)
    for since in ("\ud800", "", "x" * 65, 7, None, ["f1-2"], {"a": 1}, float("nan")):
        status, body, _ = await call(d, "screen_text", {"since": since})
        code = body["error"]["code"]  # a lone surrogate or NaN is no JSON value: the payload
        assert status == 400 and code in ("tool_arguments_invalid", "tool_call_payload_invalid")


async def test_a_since_naming_a_read_frame_at_another_time_is_not_taken_for_it(
    make_daemon: Make,
) -> None:
    """The id names the frame by its sequence number and its capture time, exactly: one that
    only starts like a real id (its time with a digit more) names no reading."""
    d = start(make_daemon)
    first = await ok(d, "screen_text", {})
    for since in (first["snapshot_id"] + "7", first["snapshot_id"][:-1]):
        out = await ok(d, "screen_text", {"since": since})
        assert out["changes"]["error"]["code"] == "text_changes_unavailable", since
    out = await ok(d, "screen_text", {"since": first["snapshot_id"]})
    assert "error" not in out["changes"] and out["changes"]["since"] == first["snapshot_id"]
