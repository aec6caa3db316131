"""What text changed on the screen: between the screen an action started on and the one it ended
on (the evidence of tap_text and enter_text with `text_changes`, and of a WebSocket call's
`after` visual tree with `since: "before"`), or since an earlier screen_text (`since`).

Two readings of the OCR service and visual_tree.changes between them. A read of a frame much
like one just read costs what changed (the OCR worker reuses the rest), so the second reading of
an action is cheap where the action changed little.
"""

from __future__ import annotations

import asyncio
from typing import Any

from daemon.errors import ToolError
from daemon.frames import Frame
from daemon.screen.ocr import Ocr
from daemon.screen.ocr_types import Crop
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
    """The text changes from `before` to `after`, each read as screen_text reads it: `region`'s
    rectangle only (so a reading of `after` made for the same region is reused), lines kept to
    `region` and `min_confidence`."""

    def crop(frame: Frame) -> Crop | None:
        return region.crop(frame.width, frame.height) if region is not None else None

    old, new = await ocr.read(before, crop(before)), await ocr.read(after, crop(after))
    a, b = Tree.of(old, region, min_confidence), Tree.of(new, region, min_confidence)
    # Off the event loop: pairing lines of the same text is quadratic in how many share one.
    found = await asyncio.to_thread(changes, a.lines, b.lines, after.width, after.height)
    return {"since": snapshot_id(old), "snapshot_id": snapshot_id(new), **found}


async def of_action(
    ocr: Ocr,
    notes: list[tuple[str, Any]],
    after: Frame | None = None,
    region: Region | None = None,
    min_confidence: float = 0.0,
    missing: str = "no screen was captured before and after the action",
) -> dict[str, Any]:
    """An action's text changes, from the frame it noted before to `after` (by default the one
    it noted after); what kept them from being read is said inside (`missing`, or the read's
    error: the action happened, and its evidence never fails it)."""
    before, after = noted_frame(notes, "before"), after or noted_frame(notes, "after")
    if before is None or after is None:
        return {"error": unavailable(missing)}
    try:
        return await between(ocr, before, after, region, min_confidence)
    except ToolError as exc:
        return {"error": exc.to_dict()}


def unavailable(reason: str) -> dict[str, Any]:
    return ToolError("text_changes_unavailable", reason, retryable=True).to_dict()
