"""Text tools over on-device OCR: screen_text, find_text (read) and tap_text (a HID tool).

The OCR service (daemon.screen.ocr, rt.ocr) runs the engine in a worker process started on the
first read, so a daemon that never reads text never loads it, and one that read a while ago
holds none of it. A snapshot id from an earlier screen_text lets
find_text/tap_text reuse that OCR while the screen still shows the same thing, and refuses
with stale_snapshot once it does not.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

from daemon.catalog import Availability, CallContext, ToolSpec, object_schema
from daemon.engine import HidInvocation
from daemon.engine import program as prog
from daemon.errors import ToolError
from daemon.frames import Frame
from daemon.runtime import Runtime
from daemon.screen import ocr as ocr_mod
from daemon.screen import text_changes
from daemon.screen.ocr import Ocr, Reading
from daemon.screen.visual_tree import (
    MATCH_MODES,
    Region,
    Tree,
    changes,
    find,
    kept,
    snapshot_id,
    snapshot_key,
    without_pointer,
)
from daemon.tools.input.handlers import InputTools
from daemon.tools.input.schemas import (
    EVIDENCE_RESULT,
    PLACED,
    TEXT_CHANGES,
    TEXT_CHANGES_ARG,
)
from daemon.tools.screen import capture_availability

_NORM = {"type": "number", "minimum": 0, "maximum": 1000}
REGION = object_schema(
    {"x0": _NORM, "y0": _NORM, "x1": _NORM, "y1": _NORM},
    ["x0", "y0", "x1", "y1"],
    description="normalized 0..1000 rectangle: only it (and a small margin) is read, which is "
    "faster than the whole screen; text whose center lies inside it is kept",
)
MIN_CONFIDENCE = {
    "type": "number",
    "minimum": 0,
    "maximum": 1,
    "default": 0.5,
    "description": "leave out text OCR read with less confidence than this (0..1)",
}
SNAPSHOT = {
    "type": "string",
    "minLength": 1,
    "maxLength": 64,
    "description": "snapshot_id of an earlier screen_text: reuse its reading while the screen "
    "still shows it; stale_snapshot when it does not",
}
TREE_FIELDS = {"region": REGION, "min_confidence": MIN_CONFIDENCE}
SINCE = {
    "type": "string",
    "minLength": 1,
    "maxLength": 64,
    "description": "say what text changed since then: the snapshot_id of an earlier "
    'screen_text, or "before" in an action\'s evidence (the WebSocket after.visualTreeArguments):'
    " the screen the action started on",
}
SCREEN_TEXT_ARGS = object_schema({**TREE_FIELDS, "since": SINCE})
QUERY_FIELDS: dict[str, Any] = {
    "query": {
        "type": "string",
        "minLength": 1,
        "maxLength": 500,
        "description": "the text to look for; match says how it compares",
    },
    "match": {
        "enum": list(MATCH_MODES),
        "default": "contains",
        "description": "exact (case-sensitive, whole words), contains (case-insensitive "
        "substring) or regex (a regular expression, searched in each line)",
    },
    **TREE_FIELDS,
    "snapshot_id": SNAPSHOT,
}
FIND_ARGS = object_schema(
    {
        **QUERY_FIELDS,
        "limit": {
            "type": "integer",
            "minimum": 1,
            "maximum": 100,
            "default": 20,
            "description": "at most this many matches, best first (count says how many there are)",
        },
    },
    ["query"],
)
TAP_ARGS = object_schema(
    {
        **QUERY_FIELDS,
        "index": {
            "type": "integer",
            "minimum": 0,
            "maximum": 999,
            "description": "which of several matches to tap (find_text's ranking); without it "
            "more than one match is text_ambiguous",
        },
        "text_changes": TEXT_CHANGES_ARG,
    },
    ["query"],
)

MATCH = object_schema(
    {
        "index": {"type": "integer"},
        "text": {"type": "string"},
        "line_text": {"type": "string"},
        "line": {"type": "string"},
        "confidence": {"type": "number"},
        "whole_line": {"type": "boolean"},
        **PLACED,
    },
    ["index", "text", "line_text", "confidence", "box", "center"],
)
TREE_RESULT = object_schema(
    {
        "snapshot_id": {"type": "string"},
        "changes": TEXT_CHANGES,
        "frame": object_schema(
            {
                "seq": {"type": "integer"},
                "captured_at": {"type": "string"},
                "width": {"type": "integer"},
                "height": {"type": "integer"},
            },
            ["seq", "width", "height"],
        ),
        "ocr_ms": {"type": "integer"},
        "text": {"type": "string"},
        "lines": {
            "type": "array",
            "items": object_schema(
                {
                    "id": {"type": "string"},
                    "text": {"type": "string"},
                    "confidence": {"type": "number"},
                    "words": {"type": "array", "items": {"type": "string"}},
                    **PLACED,
                },
                ["id", "text", "confidence", "box", "center", "words"],
            ),
        },
        "elements": {
            "type": "array",
            "items": object_schema(
                {
                    "id": {"type": "string"},
                    "type": {"const": "text"},
                    "text": {"type": "string"},
                    "confidence": {"type": "number"},
                    "line": {"type": "string"},
                    **PLACED,
                },
                ["id", "type", "text", "confidence", "box", "center", "line"],
            ),
        },
    },
    ["snapshot_id", "frame", "text", "lines", "elements"],
)
FIND_RESULT = object_schema(
    {
        "snapshot_id": {"type": "string"},
        "count": {"type": "integer"},
        "matches": {"type": "array", "items": MATCH},
    },
    ["snapshot_id", "count", "matches"],
)
TAP_RESULT = {
    **EVIDENCE_RESULT,
    "properties": {
        **EVIDENCE_RESULT["properties"],
        "match": MATCH,
        "snapshot_id": {"type": "string"},
        "text_changes": TEXT_CHANGES,
    },
}

# A screen "still shows" a snapshot when no more than this share of its pixels moved by more
# than PIXEL_DELTA grey levels (capture noise stays under both; one changed word does not).
PIXEL_DELTA = 40
CHANGED_SHARE = 0.0005


def same_screen(a: Frame, b: Frame) -> bool:
    """Whether two frames show the same screen, text included (blocking: call in a thread).
    Full resolution: one absdiff is cheaper than downscaling two frames (~2.5 ms at 1080p)."""
    if a.seq == b.seq:
        return True
    if a.image.shape != b.image.shape:
        return False
    import cv2  # there are frames, so capture has imported it already

    # The usual answer, ~5x cheaper: no channel of any pixel moved past the delta, so no grey
    # level did either (grey is a weighted mean of the channels).
    if cv2.norm(a.image, b.image, cv2.NORM_INF) <= PIXEL_DELTA:
        return True
    grey = cv2.cvtColor(cv2.absdiff(a.image, b.image), cv2.COLOR_BGR2GRAY)
    _, moved = cv2.threshold(grey, PIXEL_DELTA, 255, cv2.THRESH_BINARY)
    return bool(cv2.countNonZero(moved) <= CHANGED_SHARE * grey.size)


def ocr_availability(rt: Runtime) -> Availability:
    service = rt.ocr
    if not service.enabled:
        return Availability(
            False,
            "ocr_disabled",
            "on-device OCR is off on this board ([ocr] enabled)",
            required_state='[ocr] enabled = true (or "auto" on a board with >= 512 MB of RAM) '
            "and the OCR packages installed",
            remediation="set [ocr] enabled = true in /etc/fingertip/fingertip.toml, then make "
            "deploy (it installs the OCR packages) or restart the daemon",
            retryable=False,
        )
    if service.load_error is not None:
        return Availability(
            False,
            "ocr_engine_failed",
            service.load_error,
            required_state="the OCR engine (rapidocr + onnxruntime) loads",
            remediation="reinstall the daemon's packages (make deploy) and restart it",
            retryable=False,
        )
    if not ocr_mod.engine_installed():
        return Availability(
            False,
            "ocr_engine_missing",
            "the OCR engine packages (rapidocr, onnxruntime) are not installed",
            required_state="rapidocr and onnxruntime installed beside the daemon",
            remediation="make deploy with [ocr] enabled (it installs them), or on this machine "
            "make setup",
            retryable=False,
        )
    return capture_availability(rt)


class TextTools:
    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.screen = rt.screen
        # The last same_screen answer: callers in a loop on one frame compare it once.
        self._last_check: tuple[tuple[float, float], bool] | None = None

    @property
    def ocr(self) -> Ocr:
        return self.rt.ocr

    async def reading(self, args: dict[str, Any]) -> Reading:
        """The OCR to answer from: the snapshot's, while the screen still shows it, else the
        current frame's; without the mouse cursor read as text where the daemon put it."""
        return self.without_pointer(await self.read(args))

    def without_pointer(self, reading: Reading) -> Reading:
        at = self.rt.engine.pointer_at
        frame = reading.frame
        pointer = None if at is None else (at.x, at.y)
        lines = without_pointer(reading.lines, frame.width, frame.height, pointer)
        return reading if len(lines) == len(reading.lines) else replace(reading, lines=lines)

    async def read(self, args: dict[str, Any]) -> Reading:
        frame = await self.screen.source.frame(timeout=self.screen.frame_timeout_s)
        wanted = args.get("snapshot_id")
        if wanted is None:
            region = Region.of(args.get("region"))
            crop = region.crop(frame.width, frame.height) if region is not None else None
            return await self.ocr.read(frame, crop)
        snap = self.snapshot(wanted)
        if snap is None or not await self.still_shows(snap, frame):
            raise ToolError(
                "stale_snapshot",
                f"snapshot {wanted} no longer matches the screen; call screen_text again",
                details={"snapshot_id": wanted, "current_frame": frame.seq},
            )
        return snap

    async def still_shows(self, snap: Reading, frame: Frame) -> bool:
        pair = (snap.frame.captured_at, frame.captured_at)  # monotonic: one frame each
        if self._last_check is None or self._last_check[0] != pair:
            self._last_check = (pair, await asyncio.to_thread(same_screen, snap.frame, frame))
        return self._last_check[1]

    def snapshot(self, wanted: str) -> Reading | None:
        """The cached reading a snapshot id names, if it is still cached."""
        key = snapshot_key(wanted)
        reading = self.ocr.cached(*key) if key is not None else None
        return reading if reading is not None and snapshot_id(reading) == wanted else None

    @staticmethod
    def tree(reading: Reading, args: dict[str, Any]) -> Tree:
        region = Region.of(args.get("region"))
        return Tree.of(reading, region, float(args["min_confidence"]))

    async def screen_text(self, args: dict[str, Any], ctx: CallContext) -> Any:
        reading = await self.reading(args)
        tree = self.tree(reading, args)
        out = tree.to_dict()
        since = args.get("since")
        if since is not None:
            out["changes"] = await self.since(since, reading, tree, args, ctx)
        return out

    async def since(
        self, since: str, reading: Reading, tree: Tree, args: dict[str, Any], ctx: CallContext
    ) -> dict[str, Any]:
        """What changed from `since` (a snapshot id, or the screen the action started on) to
        `reading` (its `tree`); what kept it from being said, inside."""
        region, floor = Region.of(args.get("region")), float(args["min_confidence"])
        if since == text_changes.BEFORE:
            found = await text_changes.of_action(
                self.ocr,
                ctx.evidence,
                reading.frame,
                region,
                floor,
                missing='"before" is the screen an action started on: it names one only in an '
                "action's evidence (a WebSocket call's after.visualTreeArguments)",
            )
            return {"since": since, **found} if "error" in found else found
        key = snapshot_key(since)
        old = self.ocr.remembered(*key) if key is not None else None
        if old is None or old.snapshot_id != since:
            return {"since": since, "error": text_changes.unavailable(
                f"snapshot {since} is not one of the last {ocr_mod.REMEMBERED} readings"
            )}  # fmt: skip
        w, h = reading.frame.width, reading.frame.height
        if (old.width, old.height) != (w, h):
            return {"since": since, "error": text_changes.unavailable(
                f"the screen was {old.width}x{old.height} then and is {w}x{h} now"
            )}  # fmt: skip
        then = kept(old.lines, w, h, region, floor)
        found = await asyncio.to_thread(changes, then, tree.lines, w, h)
        return {"since": since, "snapshot_id": snapshot_id(reading), **found}

    async def matches(self, args: dict[str, Any]) -> tuple[Reading, list[dict[str, Any]]]:
        reading = await self.reading(args)
        return reading, find(self.tree(reading, args), args["query"], args["match"])

    async def find_text(self, args: dict[str, Any], ctx: CallContext) -> Any:
        reading, found = await self.matches(args)
        limit = args["limit"]
        return {
            "snapshot_id": snapshot_id(reading),
            "count": len(found),
            "matches": found[:limit],
        }

    async def tap_text(self, args: dict[str, Any], ctx: CallContext) -> Any:
        # OCR before the HID invocation: other callers' input is not held behind a 1 s read.
        reading, found = await self.matches(args)
        index = args.get("index")
        query = args["query"]
        if not found:
            raise ToolError(
                "text_not_found",
                f"no text on the screen matches {query!r}",
                retryable=True,
                details={"query": query, "snapshot_id": snapshot_id(reading)},
            )
        if index is None and len(found) > 1:
            raise ToolError(
                "text_ambiguous",
                f"{len(found)} places match {query!r}; pass index (0 = best) or a narrower "
                "query or region",
                details={"query": query, "matches": found[:10], "count": len(found)},
            )
        if index is not None and index >= len(found):
            raise ToolError(
                "text_index_out_of_range",
                f"index {index} but only {len(found)} match(es) for {query!r}",
                details={"query": query, "count": len(found)},
            )
        match = found[index or 0]
        center = match["center"]
        point = prog.normalize(float(center["x"]), float(center["y"]), "$.query", None)
        tools = InputTools(self.rt)

        async def act(s: HidInvocation) -> dict[str, Any]:
            program = prog.tap(tools.cfg, tools.pointer, point, s.pointer_at)
            await s.run(program)
            return {"ok": True, "type": "tap", "point": point.to_dict(), "text": match["text"]}

        result = await tools.with_evidence("tap_text", act)
        out = {**result, "match": match, "snapshot_id": snapshot_id(reading)}
        if args["text_changes"]:  # read after the HID flow is let go: nobody waits behind it
            out["text_changes"] = await text_changes.of_action(self.ocr, ctx.evidence)
        return out


def tools(rt: Runtime) -> list[ToolSpec]:
    t = TextTools(rt)

    def available() -> Availability:
        return ocr_availability(rt)

    # Each read (the worker's start included) is cut at [ocr].read_timeout_s; a call may wait
    # behind MAX_QUEUED others first.
    limit = rt.config.ocr.read_timeout_s * (ocr_mod.MAX_QUEUED + 1)
    tree_note = (
        " Text is read from the screen by on-device OCR (the first call starts the engine, "
        "about a second; a full frame takes up to about a second more, a frame that changed "
        "little since the last read much less: only what changed is read again)."
    )
    return [
        ToolSpec(
            name="screen_text",
            title="Screen Text",
            description="Read the text on the target's current screen: a visual tree of text "
            "lines and words, each with text, confidence, box in pixels and in normalized "
            "0..1000 coordinates (what touch_gesture takes) and center, ids stable within the "
            "snapshot, and a snapshot_id naming the frame. Optional region (normalized "
            "rectangle) and min_confidence (default 0.5). With since (the snapshot_id of an "
            "earlier screen_text) it also says what text appeared, disappeared and moved since "
            "then (changes), each line with its box: read, act, read with since, and see "
            "whether the action worked." + tree_note,
            category="screen",
            policy="read",
            handler=t.screen_text,
            args_schema=SCREEN_TEXT_ARGS,
            result_schema=TREE_RESULT,
            example_input={},
            availability=available,
            keywords=("ocr", "text", "read", "visual tree", "elements"),
            timeout_s=limit,
            private=True,
        ),
        ToolSpec(
            name="find_text",
            title="Find Text",
            description="Find text on the current screen: query with match exact "
            "(case-sensitive whole words), contains (case-insensitive, default) or regex. "
            "Returns ranked matches (whole-line matches first, then confidence) with box and "
            "center in normalized 0..1000 coordinates. Pass snapshot_id from screen_text to "
            "search that reading (stale_snapshot once the screen changed)." + tree_note,
            category="screen",
            policy="read",
            handler=t.find_text,
            args_schema=FIND_ARGS,
            result_schema=FIND_RESULT,
            example_input={"query": "Settings"},
            availability=available,
            keywords=("ocr", "search", "locate", "text"),
            timeout_s=limit,
            private=True,
        ),
        ToolSpec(
            name="tap_text",
            title="Tap Text",
            description="Find text on the screen and tap its center in one step (find_text's "
            "query, match, region, min_confidence, snapshot_id). Nothing matching is "
            "text_not_found; more than one match is text_ambiguous (details list them) unless "
            "index picks one. Returns the match, action_output, screen_stable, "
            "stable_wait_ms, screen_changed and the final screenshot; with text_changes, also "
            "what text appeared, disappeared and moved between the screen before and after.",
            category="input",
            policy="write",
            hid=True,
            handler=t.tap_text,
            args_schema=TAP_ARGS,
            result_schema=TAP_RESULT,
            example_input={"query": "Settings", "match": "exact"},
            availability=available,
            keywords=("tap", "click", "press", "text", "button", "ocr"),
            evidence=True,
            timeout_s=limit + 60,
        ),
    ]
