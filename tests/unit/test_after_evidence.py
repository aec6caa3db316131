"""Post-call evidence (catalog AfterCall): taken by the screenshot tool's own path inside the
same invocation; for a HID tool while the invocation still holds the HID flow, so another
client's action queued behind it cannot be in the picture; logged in the call's one line."""

from __future__ import annotations

import asyncio
from typing import Any

from structlog.testing import capture_logs

from daemon.catalog import (
    AVAILABLE,
    AfterCall,
    Availability,
    CallContext,
    Catalog,
    ToolSpec,
    object_schema,
)
from daemon.engine.flow import InputEngine
from daemon.sim.target import SimTarget
from tests.unit.test_engine import FAST

SHOT_ARGS = object_schema({"quality": {"type": "integer", "minimum": 1, "maximum": 100}})


def setup(events: list[Any], capture: list[Availability]) -> tuple[Catalog, InputEngine]:
    sim = SimTarget("android")
    engine = InputEngine(sim, sim, FAST, "android")

    async def screenshot(args: dict[str, Any], ctx: CallContext) -> Any:
        events.append(("shot", engine.busy, args))
        return {"format": "jpeg", "data": "", "width": 1, "height": 1, "size": 0}

    async def tap(args: dict[str, Any], ctx: CallContext) -> Any:
        async with engine.invocation("tap"):
            events.append(("tap", engine.busy))
        await asyncio.sleep(0)  # after the flow: the evidence must not wait for here
        events.append(("tap_done",))
        return {"ok": True}

    async def other(args: dict[str, Any], ctx: CallContext) -> Any:
        async with engine.invocation("other"):
            events.append(("other", engine.busy))
        return {"ok": True}

    async def tree(args: dict[str, Any], ctx: CallContext) -> Any:
        events.append(("tree", engine.busy, args))
        return {"elements": []}

    async def note(args: dict[str, Any], ctx: CallContext) -> Any:
        events.append(("note", engine.busy))
        return {"ok": True}

    async def broken(args: dict[str, Any], ctx: CallContext) -> Any:
        raise RuntimeError("boom")

    catalog = Catalog(
        "android",
        [
            ToolSpec(
                "screenshot",
                "",
                "screen",
                "read",
                screenshot,
                SHOT_ARGS,
                availability=lambda: capture[0],
            ),
            ToolSpec(
                "screen_text",
                "",
                "screen",
                "read",
                tree,
                object_schema({"min_confidence": {"type": "number", "minimum": 0}}),
            ),
            ToolSpec("tap", "", "input", "write", tap, hid=True),
            ToolSpec("other", "", "input", "write", other, hid=True),
            ToolSpec("note", "", "system", "read", note),
            ToolSpec("broken", "", "system", "read", broken),
        ],
    )
    return catalog, engine


async def test_hid_evidence_is_taken_inside_the_flow() -> None:
    events: list[Any] = []
    catalog, _ = setup(events, [AVAILABLE])
    with capture_logs() as logs:
        first = asyncio.create_task(catalog.call("tap", {}, after=AfterCall({"quality": 5}, 20)))
        await asyncio.sleep(0.005)  # the tap holds the flow (its delay); another client queues
        second = asyncio.create_task(catalog.call("other", {}))
        done, queued = await asyncio.gather(first, second)
        await asyncio.sleep(0)  # the log lines are written after the call (Catalog._emit)
    assert done.ok and queued.ok
    names = [e[0] for e in events]
    # The shot comes right after the tap, with the flow still held: before the queued action,
    # and before the tap's handler even returned.
    assert names[:3] == ["tap", "shot", "other"] and set(names) == {
        "tap",
        "shot",
        "other",
        "tap_done",
    }
    assert events[1] == ("shot", True, {"quality": 5})
    assert done.evidence is not None and done.evidence.ok and done.evidence.result["size"] == 0
    lines = [e for e in logs if e["event"] == "tool_invocation"]
    assert [(e["tool"], e.get("evidence")) for e in lines] == [("tap", "ok"), ("other", None)]


async def test_evidence_of_other_tools_and_its_failures() -> None:
    events: list[Any] = []
    capture = [AVAILABLE]
    catalog, _ = setup(events, capture)
    out = await catalog.call("note", {}, after=AfterCall({}))
    assert events == [("note", False), ("shot", False, {})] and out.evidence is not None
    # The screenshot tool's own checks: its argument schema, its availability.
    bad = await catalog.call("note", {}, after=AfterCall({"quality": 0}))
    assert bad.ok and bad.evidence is not None
    assert bad.evidence.error is not None and bad.evidence.error.code == "tool_arguments_invalid"
    capture[0] = Availability(False, "capture_unavailable", "no signal")
    blind = await catalog.call("note", {}, after=AfterCall({}))
    assert blind.ok and blind.evidence is not None and blind.evidence.error is not None
    assert blind.evidence.error.code == "capture_unavailable"
    # A failed call has no evidence; no call, no evidence.
    failed = await catalog.call("broken", {}, after=AfterCall({}))
    assert failed.error is not None and failed.evidence is None
    assert (await catalog.call("note", {})).evidence is None


async def test_the_visual_tree_is_taken_beside_the_screenshot_inside_the_flow() -> None:
    events: list[Any] = []
    catalog, _ = setup(events, [AVAILABLE])
    with capture_logs() as logs:
        after = AfterCall({"quality": 5}, 0, {"min_confidence": 0.7})
        done = await catalog.call("tap", {}, after=after)
        await asyncio.sleep(0)  # the log line is written after the call (Catalog._emit)
    # Both while the tap still holds the flow, the screenshot first, each with its arguments.
    assert events[:3] == [
        ("tap", True),
        ("shot", True, {"quality": 5}),
        ("tree", True, {"min_confidence": 0.7}),
    ]
    assert done.evidence is not None and done.evidence.ok
    assert done.tree is not None and done.tree.ok and done.tree.result == {"elements": []}
    line = next(e for e in logs if e["event"] == "tool_invocation")
    assert (line.get("evidence"), line.get("tree_evidence")) == ("ok", "ok")
    # The tree alone (a screenshot call's own result is its screenshot), and its own checks.
    events.clear()
    only = await catalog.call("note", {}, after=AfterCall(None, 0, {}))
    assert events == [("note", False), ("tree", False, {})]
    assert only.evidence is None and only.tree is not None and only.tree.ok
    bad = await catalog.call("note", {}, after=AfterCall(None, 0, {"min_confidence": -1}))
    assert bad.ok and bad.tree is not None and bad.tree.error is not None
    assert bad.tree.error.code == "tool_arguments_invalid"
