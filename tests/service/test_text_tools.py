"""screen_text, find_text and tap_text against the real daemon, its simulated target and the
real OCR engine; positions are checked against what the simulator draws (its own layout)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp

from daemon.sim.layout import make_layout
from tests.service.daemonproc import DaemonProcess, eventually
from tests.service.test_input_tools import Make, call, ok, start, state, tools_by_name
from tests.service.test_mcp import mcp_client, text_json


async def err(d: DaemonProcess, tool: str, args: Any) -> dict[str, Any]:
    """Call a tool that must fail; its error object."""
    _, body, _ = await call(d, tool, args)
    assert body["is_error"] is True, body
    error: dict[str, Any] = body["error"]
    return error


async def open_notes(d: DaemonProcess) -> None:
    await ok(d, "open_app", {"name": "Notes"})
    assert (await state(d))["app"] == "Notes"


async def test_screen_text_reads_the_home_screen_with_positions(make_daemon: Make) -> None:
    d = start(make_daemon)
    tree = await ok(d, "screen_text", {})
    assert tree["frame"]["width"] == 1080 and tree["frame"]["height"] == 1920
    assert tree["snapshot_id"].startswith(f"f{tree['frame']['seq']}-")
    words = {e["text"]: e for e in tree["elements"]}
    lay = make_layout("ios", 1080, 1920)
    for name in ("Settings", "Notes", "Files"):
        # The word's center is on its app's tile (the label is drawn on the label's bottom
        # edge, descenders below it: a tap there opens the app, as tap_text does).
        tile = next(t for t in lay.tiles if t.name == name)
        center = words[name]["center"]
        assert tile.hit(center["x"], center["y"]), (name, words[name])
    # ids are unique and every word belongs to a listed line
    ids = [e["id"] for e in tree["elements"]]
    assert len(ids) == len(set(ids))
    line_ids = {ln["id"] for ln in tree["lines"]}
    assert all(e["line"] in line_ids for e in tree["elements"])
    # a region keeps only text centered inside it; a high confidence floor keeps fewer. The
    # icons' one-letter glyphs are left out of the comparison: which of them read as letters
    # depends on the crop and on the CPU's kernels (an AVX-512 machine read an "s" in the band
    # that the whole frame lacked).
    top = await ok(d, "screen_text", {"region": {"x0": 0, "y0": 0, "x1": 1000, "y1": 200}})
    assert {e["text"] for e in top["elements"] if len(e["text"]) > 1} < set(words)
    assert all(e["center"]["y"] <= 200 for e in top["elements"])
    assert "Settings" in {e["text"] for e in top["elements"]}
    assert "Files" not in {e["text"] for e in top["elements"]}
    # a region's reading (only its pixels, read) serves find_text by its snapshot id
    found = await ok(d, "find_text", {"query": "Settings", "snapshot_id": top["snapshot_id"]})
    assert found["snapshot_id"] == top["snapshot_id"] and found["count"] >= 1


async def test_find_and_tap_text_open_the_app_with_evidence(make_daemon: Make) -> None:
    d = start(make_daemon)
    found = await ok(d, "find_text", {"query": "settings"})  # contains, case-insensitive
    assert found["count"] >= 1 and found["matches"][0]["text"] == "Settings"
    exact = await ok(d, "find_text", {"query": "settings", "match": "exact"})
    assert exact["count"] == 0  # exact is case-sensitive
    out = await ok(d, "tap_text", {"query": "Settings", "match": "exact"})
    assert out["match"]["text"] == "Settings"
    assert out["action_output"]["type"] == "tap"
    assert out["format"] == "jpeg" and out["screen_changed"] is True
    st = await state(d)
    assert st["app"] == "Settings" and st["contacts_down"] == [] and st["buttons_down"] == []


async def test_tap_text_refuses_nothing_and_ambiguity_unless_indexed(make_daemon: Make) -> None:
    d = start(make_daemon)
    await open_notes(d)
    e = await err(d, "tap_text", {"query": "no such words here"})
    assert e["code"] == "text_not_found", e
    e = await err(d, "tap_text", {"query": "Notes row"})
    assert e["code"] == "text_ambiguous", e
    matches = e["details"]["matches"]
    assert e["details"]["count"] > 1 and len(matches) == min(10, e["details"]["count"])
    e = await err(d, "tap_text", {"query": "Notes row", "index": 999})
    assert e["code"] == "text_index_out_of_range", e
    # "Notes row 3" is exactly one line: tapping it is an event the simulator records
    tapped = await ok(d, "tap_text", {"query": r"^Notes row 3$", "match": "regex"})
    assert tapped["match"]["line_text"] == "Notes row 3"
    assert "tap Notes row 3" in (await state(d))["events"]


async def test_snapshot_is_reused_while_current_and_stale_after_a_change(
    make_daemon: Make,
) -> None:
    d = start(make_daemon)
    tree = await ok(d, "screen_text", {})
    snap = tree["snapshot_id"]
    again = await ok(d, "find_text", {"query": "Mail", "snapshot_id": snap})
    assert again["snapshot_id"] == snap and again["count"] >= 1
    await open_notes(d)

    async def capture_shows_notes() -> bool:
        # The target's state changes before the capture shows it (a frame lasts a period, and
        # under load the stability wait can settle before the launch lands): a snapshot goes
        # stale when the capture changes, so wait for a fresh reading without the home screen.
        fresh = await ok(d, "screen_text", {})
        return "Mail" not in {e["text"] for e in fresh["elements"]}

    await eventually(capture_shows_notes, "a capture that shows Notes")
    e = await err(d, "find_text", {"query": "Mail", "snapshot_id": snap})
    assert e["code"] == "stale_snapshot", e
    e = await err(d, "tap_text", {"query": "Mail", "snapshot_id": snap})
    assert e["code"] == "stale_snapshot", e
    e = await err(d, "find_text", {"query": "x", "snapshot_id": "f1-2"})
    assert e["code"] == "stale_snapshot", e
    assert (await state(d))["app"] == "Notes"  # nothing was tapped


async def test_hostile_queries_get_clear_codes(make_daemon: Make) -> None:
    d = start(make_daemon)
    await open_notes(d)
    e = await err(d, "find_text", {"query": "(unclosed", "match": "regex"})
    assert e["code"] == "query_invalid", e
    # catastrophic backtracking is cut by the match timeout, not by the daemon hanging
    evil = "(x+x+)+y"
    status, body, _ = await call(d, "find_text", {"query": evil, "match": "regex"})
    assert status == 200 or body["error"]["code"] == "query_too_expensive", body
    # counted repeats are written out when a pattern compiles: this one took 262 MB and 360 ms
    # of the loop (and with {30} after it, a MemoryError), so it is refused before compiling
    for huge in ("(?:(?:a{1000}){1000})", "(?:(?:a{1000}){1000}){30}", "a{" + "9" * 400 + "}"):
        e = await err(d, "find_text", {"query": huge, "match": "regex"})
        assert e["code"] == "query_invalid" and "counted repeats" in e["message"], e
    counted = await ok(d, "find_text", {"query": r"Notes row \d{1,2}", "match": "regex"})
    assert counted["count"] >= 1, counted
    for bad in ({"query": ""}, {"query": "a" * 501}, {"query": "a", "match": "glob"}):
        e = await err(d, "find_text", bad)
        assert e["code"] == "tool_arguments_invalid", (bad, e)
    region = {"x0": 500, "y0": 0, "x1": 100, "y1": 100}
    e = await err(d, "screen_text", {"region": region})
    assert e["code"] == "region_invalid", e
    e = await err(d, "find_text", {"query": "a", "snapshot_id": "../../etc"})
    assert e["code"] == "stale_snapshot", e


BROKEN_ENGINE = "raise ImportError('simulated broken OCR install')\n"


async def test_a_broken_engine_is_listed_unavailable(make_daemon: Make, tmp_path: Path) -> None:
    shim = tmp_path / "shim" / "rapidocr"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text(BROKEN_ENGINE)
    folder = tmp_path / "broken"
    folder.mkdir()
    env = {"PYTHONPATH": f"{shim.parent}:{Path.cwd()}"}
    d = DaemonProcess(folder, {"device": {"device_type": "iOS"}}, env=env).start()
    try:
        e = await err(d, "screen_text", {})
        assert e["code"] == "ocr_engine_failed", e
        listed = await tools_by_name(d)
        for name in ("screen_text", "find_text", "tap_text"):
            runtime = listed[name]["runtime"]
            assert runtime["available"] is False and runtime["code"] == "ocr_engine_failed"
            assert runtime["requiredState"] and runtime["remediation"]
        e = await err(d, "tap_text", {"query": "Settings"})
        assert e["code"] == "tool_unavailable" and e["details"]["code"] == "ocr_engine_failed"
    finally:
        d.kill()


async def test_mcp_and_the_skill_bundle_teach_the_text_tools(make_daemon: Make) -> None:
    d = start(make_daemon)
    async with mcp_client(d.base) as client:
        listed = {t.name: t for t in (await client.list_tools()).tools}
        assert {"screen_text", "find_text", "tap_text"} <= set(listed)
        assert "query" in listed["tap_text"].input_schema["properties"]
        found = text_json(await client.call_tool("find_text", {"query": "Mail"}))
        assert found["matches"][0]["text"] == "Mail"
    async with aiohttp.ClientSession() as s, s.get(f"{d.base}/api/tool-skills") as r:
        skill = await r.text()
    assert "## tap_text" in skill and "stale_snapshot" in skill and "screen_text" in skill
    # ... and how to tell whether an action worked: since, text_changes
    assert "`since`" in skill and "text_changes" in skill and '"since": "before"' in skill


async def test_the_mouse_cursor_is_not_read_as_text(make_daemon: Make) -> None:
    """The simulated arrow read as "不" (0.6-0.9) where the daemon had put the pointer; the
    text tools leave the pointer's own glyph out, and the screen's other text in."""
    d = start(make_daemon)
    home = await ok(d, "screen_text", {})
    for point in ({"x": 500, "y": 600}, {"x": 700, "y": 450}):
        await ok(d, "mouse_move", point)
        tree = await ok(d, "screen_text", {})
        tip = (point["x"] * 1079 / 1000, point["y"] * 1919 / 1000)
        at_tip = [
            ln
            for ln in tree["lines"]
            if abs(ln["box"]["x0"] - tip[0]) < 40 and abs(ln["box"]["y0"] - tip[1]) < 40
        ]
        assert at_tip == [], at_tip
        assert "不" not in {e["text"] for e in tree["elements"]}
        assert {ln["text"] for ln in tree["lines"]} == {ln["text"] for ln in home["lines"]}
        found = await ok(d, "find_text", {"query": "不"})
        assert found["count"] == 0
