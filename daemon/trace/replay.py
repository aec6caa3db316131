"""Replay: recorded input invocations run again, in order, through the catalog.

With checkpoints, before each step the live screen is compared with that step's recorded
"before" by the structural change detector (daemon/screen/detector.py); the first mismatch
stops the replay with a report naming the step and carrying both images. Both sides are
brought to the same form first (the recorded image's size and JPEG quality), so the
comparison sees the screen, not the compression.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from daemon.catalog import CallContext, Catalog, Guard
from daemon.errors import ToolError
from daemon.frames import Frame
from daemon.screen.detector import Diff, compare, signature
from daemon.screen.encode import encode
from daemon.screen.service import Screen
from daemon.trace.recorder import REDACTED, is_truncated
from daemon.trace.store import Image

DEFAULT_THRESHOLD = 2.0  # the detector's own default (0..255 units of block-mean difference)


@dataclass(frozen=True)
class ReplayStep:
    record: dict[str, Any]
    before: Image | None


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def checkpoint(recorded: Image, live: Frame, quality: int, threshold: float) -> tuple[Diff, bytes]:
    """Compare the live frame with a recorded image (blocking: run it in a thread). Returns
    the detector's diff and the live frame as compared (JPEG)."""
    import cv2
    import numpy as np

    enc = encode(live, fmt="jpeg", quality=quality, max_width=recorded.width)
    ours = cv2.imdecode(np.frombuffer(enc.data, np.uint8), cv2.IMREAD_COLOR)
    theirs = cv2.imdecode(np.frombuffer(recorded.jpeg, np.uint8), cv2.IMREAD_COLOR)
    if ours is None or theirs is None:
        raise ToolError("trace_image_unreadable", "a recorded image could not be decoded")
    return compare(
        signature(theirs.astype(np.uint8)), signature(ours.astype(np.uint8)), threshold
    ), enc.data


def _replayable(record: dict[str, Any]) -> str | None:
    """Why a recorded invocation cannot be run again, else None."""
    if not record["hid"]:
        return "not an input invocation"
    if record["transport"] == "replay":  # its original is in the range too, or was replayed
        return "a replayed step"
    if record["outcome"] != "ok":
        return f"it did not succeed when recorded ({record['error_code']})"
    args = record["args"]
    if is_truncated(args) or (isinstance(args, dict) and REDACTED in args.values()):
        return "its arguments were not recorded whole"
    return None


async def replay(
    catalog: Catalog,
    screen: Screen,
    ids: list[str],
    load: Callable[[str], Awaitable[ReplayStep | None]],
    *,
    guard: Guard,
    client: str,
    token_id: str,
    checkpoints: bool,
    threshold: float,
    quality: int,
) -> dict[str, Any]:
    done: list[dict[str, Any]] = []
    skipped: list[dict[str, Any]] = []

    def report(stopped: dict[str, Any] | None = None) -> dict[str, Any]:
        return {"ok": stopped is None, "completed": done, "skipped": skipped, "stopped": stopped}

    for index, inv_id in enumerate(ids):
        step = await load(inv_id)  # one step in memory at a time, read as its turn comes
        if step is None:  # pruned since the replay began: what follows may depend on it
            return report({"index": index, "id": inv_id, "reason": "trace_not_found"})
        rec = step.record
        entry: dict[str, Any] = {"index": index, "id": rec["id"], "tool": rec["tool"]}
        why = _replayable(rec)
        if why is not None:
            skipped.append({**entry, "reason": why})
            continue
        if checkpoints and step.before is not None:
            try:
                live = await screen.source.frame(timeout=screen.frame_timeout_s)
            except ToolError as exc:  # no screen to check against: stop, do not act blind
                return report({**entry, "reason": "capture_unavailable", "error": exc.to_dict()})
            diff, live_jpeg = await asyncio.to_thread(
                checkpoint, step.before, live, quality, threshold
            )
            if diff.changed:
                return report(
                    {
                        **entry,
                        "reason": "screen_mismatch",
                        "diff": diff.to_dict(),
                        "recorded_before": {"format": "jpeg", "data": _b64(step.before.jpeg)},
                        "live": {"format": "jpeg", "data": _b64(live_jpeg)},
                    }
                )
        outcome = await catalog.call(
            rec["tool"],
            rec["args"],
            guard=guard,
            ctx=CallContext("replay", client=client, token_id=token_id),
        )
        entry["ok"] = outcome.ok
        if outcome.error is not None:
            return report({**entry, "reason": "step_failed", "error": outcome.error.to_dict()})
        done.append(entry)
    return report()
