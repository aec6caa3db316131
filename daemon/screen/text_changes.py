"""What text changed on the screen: between the screen an action started on and the one it ended
on (the evidence of tap_text and enter_text with `text_changes`, and of a WebSocket call's
`after` visual tree with `since: "before"`), or since an earlier screen_text (`since`).

Two readings of the OCR service and visual_tree.changes between them. A read of a frame much
like one just read costs what changed (the OCR worker reuses the rest), so the second reading of
an action is cheap where the action changed little.
"""

from __future__ import annotations

from typing import Any

from daemon.errors import ToolError
from daemon.frames import Frame
from daemon.screen.ocr import Ocr
from daemon.screen.visual_tree import Region, Tree, changes, snapshot_id

BEFORE = "before"  # `since`: the screen the running action started on


def noted_frame(notes: list[tuple[str, Any]], kind: str) -> Frame | None:
    """The last frame the running invocation noted as `kind` ("before" or "after")."""
    for noted, value in reversed(notes):
        if noted == kind and isinstance(value, Frame):
            return value
    return None


async def between(
    ocr: Ocr,
    before: Frame,
    after: Frame,
    region: Region | None = None,
    min_confidence: float = 0.0,
) -> dict[str, Any]:
    """The text changes from `before` to `after` (each read whole, then kept to `region` and
    `min_confidence` alike)."""
    old, new = await ocr.read(before), await ocr.read(after)
    a, b = Tree.of(old, region, min_confidence), Tree.of(new, region, min_confidence)
    return {
        "since": snapshot_id(old),
        "snapshot_id": snapshot_id(new),
        **changes(a.lines, b.lines, after.width, after.height),
    }


async def of_action(ocr: Ocr, notes: list[tuple[str, Any]]) -> dict[str, Any]:
    """An action's text changes, from the frames it noted; what kept them from being read is
    said inside (the action happened: its evidence never fails it)."""
    before, after = noted_frame(notes, "before"), noted_frame(notes, "after")
    if before is None or after is None:
        return {"error": unavailable("no screen was captured before and after the action")}
    try:
        return await between(ocr, before, after)
    except ToolError as exc:
        return {"error": exc.to_dict()}


def unavailable(reason: str) -> dict[str, Any]:
    return ToolError("text_changes_unavailable", reason, retryable=True).to_dict()
