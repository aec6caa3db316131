"""A target that sleeps, through the real daemon and its simulated target: the USB state in
health_check, /metrics and the flight recorder, input refused while it sleeps, wake_target and
[input].wake_first (the simulated target's /api/sim/suspend and /api/sim/resume stand for a
host that suspends its bus)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp

from tests.service.daemonproc import DaemonProcess
from tests.service.test_input_tools import (
    FIELD,
    NOTHING_HELD,
    Make,
    call,
    held,
    ok,
    start,
    state,
    tile,
)
from tests.service.test_metrics import samples, value


async def sim(d: DaemonProcess, action: str, args: dict[str, Any] | None = None) -> Any:
    async with (
        aiohttp.ClientSession() as s,
        s.post(f"{d.base}/api/sim/{action}", json=args or {}) as r,
    ):
        assert r.status == 200, await r.text()
        return await r.json()


async def usb(d: DaemonProcess) -> dict[str, Any]:
    out: dict[str, Any] = (await ok(d, "health_check", {}))["usb"]
    return out


async def in_notes(d: DaemonProcess) -> None:
    await ok(d, "touch_gesture", {"type": "tap", "point": tile("ios", "Notes")})
    await ok(d, "touch_gesture", {"type": "tap", "point": FIELD})


async def test_input_while_asleep_is_refused_and_wake_target_brings_it_back(
    make_daemon: Make,
) -> None:
    d = start(make_daemon)
    await in_notes(d)
    assert (await usb(d))["state"] == "configured" and (await usb(d))["can_wake"] is True
    await sim(d, "suspend")
    assert (await usb(d))["state"] == "suspended"
    async with aiohttp.ClientSession() as s, s.get(f"{d.base}/api/live") as r:
        assert (await r.json())["usb"]["state"] == "suspended"  # the Tool Lab's badge
    before = await state(d)
    for tool, args in (
        ("keyboard_text", {"text": "z"}),
        ("keyboard_tap", {"keys": ["ctrl", "a"]}),
        ("touch_gesture", {"type": "tap", "point": FIELD}),
    ):
        status, body, _ = await call(d, tool, args)
        assert status == 200 and body["is_error"] is True, body
        err = body["error"]
        assert err["code"] == "target_suspended" and err["retryable"] is True, err
        assert "wake_target" in err["details"]["remediation"]
        assert body["duration_ms"] < 100
    after = await state(d)
    assert after["reports"] == before["reports"] and after["queued_while_suspended"] == []
    out = await ok(d, "wake_target", {})
    assert out["woke"] is True and out["usb_state"] == "configured"
    assert (await usb(d))["state"] == "configured"
    await ok(d, "keyboard_text", {"text": "awake"})
    st = await state(d)
    assert st["field_text"] == "awake" and held(st) == NOTHING_HELD
    again = await ok(d, "wake_target", {})  # awake already: nothing to do
    assert again["woke"] is False
    snap = await samples(d)
    assert value(snap, "fingertip_usb_state", state="configured") == 1
    assert value(snap, "fingertip_usb_state", state="suspended") == 0
    assert value(snap, "fingertip_usb_state_changes_total", state="suspended") == 1
    assert value(snap, "fingertip_usb_can_wake") == 1


async def test_the_flight_recorder_keeps_each_usb_state_change(make_daemon: Make) -> None:
    d = start(make_daemon)
    await sim(d, "suspend")
    await sim(d, "resume")
    deadline = time.monotonic() + 60  # a bound for a busy machine (the writer batches)
    while True:
        async with (
            aiohttp.ClientSession() as s,
            s.get(f"{d.base}/api/trace?tool=usb_state") as r,
        ):
            rows = [x for x in (await r.json())["invocations"] if x["tool"] == "usb_state"]
        if len(rows) >= 2 or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.05)
    assert len(rows) == 2, rows
    assert {r["transport"] for r in rows} == {"daemon"}


async def test_wake_first_and_a_host_that_did_not_enable_wakeup(make_daemon: Make) -> None:
    d = start(make_daemon, input={"wake_first": True})
    await in_notes(d)
    await sim(d, "suspend", {"wakeup": True})
    out = await ok(d, "keyboard_text", {"text": "once"})
    assert out["typed"] == 4
    st = await state(d)
    assert st["usb_state"] == "configured" and st["field_text"] == "once"
    await sim(d, "suspend", {"wakeup": False})
    t0 = time.monotonic()
    _, body, _ = await call(d, "keyboard_text", {"text": "never"})
    assert body["is_error"] is True and body["error"]["code"] == "wakeup_not_enabled", body
    assert time.monotonic() - t0 < 30  # answered, not hung (wake_timeout_s is 1 s)
    _, body, _ = await call(d, "wake_target", {})
    assert body["error"]["code"] == "wakeup_not_enabled", body
    await sim(d, "resume")
    st = await state(d)
    assert st["field_text"] == "once" and held(st) == NOTHING_HELD


async def test_sim_suspend_rejects_a_bad_argument(make_daemon: Make) -> None:
    d = start(make_daemon)
    for bad in ({"wakeup": "yes"}, {"wakeup": 1}, {"wakeup": None}):
        async with (
            aiohttp.ClientSession() as s,
            s.post(f"{d.base}/api/sim/suspend", json=bad) as r,
        ):
            assert r.status == 400 and (await r.json())["code"] == "tool_call_payload_invalid"
    assert (await usb(d))["state"] == "configured"


async def post_raw(d: DaemonProcess, path: str, body: bytes) -> tuple[int, dict[str, Any]]:
    async with (
        aiohttp.ClientSession() as s,
        s.post(f"{d.base}{path}", data=body, headers={"Content-Type": "application/json"}) as r,
    ):
        return r.status, await r.json()


DEEP = "[" * 400 + "]" * 400
HOSTILE = ("NaN", "Infinity", "-Infinity", '"\\ud800"', DEEP, "1e999")


async def test_hostile_arguments_to_the_new_paths_are_refused_and_change_nothing(
    make_daemon: Make,
) -> None:
    """wake_target's arguments and /api/sim/suspend's: NaN, ±Infinity, a lone surrogate, deep
    nesting and an overflowing number are refused with a stable code; a sleeping target is not
    woken by them, an awake one not put to sleep, and nothing is held or queued after."""
    d = start(make_daemon)
    for x in HOSTILE:
        status, doc = await post_raw(d, "/api/sim/suspend", f'{{"wakeup":{x}}}'.encode())
        assert status == 400 and doc["code"] == "tool_call_payload_invalid", (x, doc)
    assert (await usb(d))["state"] == "configured"
    await sim(d, "suspend")
    for x in HOSTILE:
        status, doc = await post_raw(
            d, "/api/tools/wake_target", f'{{"input":{{"x":{x}}}}}'.encode()
        )
        code = doc["error"]["code"]
        assert status == 400 and code in ("tool_call_payload_invalid", "tool_arguments_invalid"), (
            x,
            doc,
        )
    st = await state(d)
    assert st["usb_state"] == "suspended" and st["queued_while_suspended"] == []
    assert (await ok(d, "wake_target", {}))["woke"] is True
    assert held(await state(d)) == NOTHING_HELD


async def test_a_sleep_mid_gesture_cuts_it_and_leaves_nothing_held(make_daemon: Make) -> None:
    """The target falls asleep while a long press holds its button down: the call answers
    target_suspended, and once the target is back the button is released (nothing waits in
    the gadget to arrive late, nothing stays down)."""
    d = start(make_daemon)
    press = asyncio.create_task(
        call(d, "touch_gesture", {"type": "long_press", "point": FIELD, "duration_ms": 20000})
    )
    deadline = time.monotonic() + 30
    while held(await state(d)) == NOTHING_HELD:  # an iPhone's pointer is a mouse: its button
        assert time.monotonic() < deadline and not press.done(), "the press never went down"
        await asyncio.sleep(0.02)
    await sim(d, "suspend")
    _, body, _ = await asyncio.wait_for(press, 10)
    assert body["is_error"] is True and body["error"]["code"] == "target_suspended", body
    st = await state(d)
    assert st["usb_state"] == "suspended" and st["queued_while_suspended"] == []
    await sim(d, "resume")
    deadline = time.monotonic() + 30
    while held(st := await state(d)) != NOTHING_HELD:
        assert time.monotonic() < deadline, held(st)
        await asyncio.sleep(0.02)
    await ok(d, "keyboard_text", {"text": "x"})  # input goes again, as one call
