"""The visual tree of one frame (its OCR as data) and text matching over it.

Pure: a Reading in, dicts out. Ids are stable within a snapshot (reading order: lines top to
bottom, then left to right; words left to right), and the snapshot id names the frame it came
from, so a later call can tell whether the screen still shows it.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

import regex

from daemon.errors import ToolError
from daemon.screen.ocr import Reading
from daemon.screen.ocr_types import Crop, Line, Word

MatchMode = Literal["exact", "contains", "regex"]
MATCH_MODES = ("exact", "contains", "regex")
REGEX_TIMEOUT_S = 0.05  # per line: a hostile pattern cannot hold the daemon
# `regex` writes counted repeats out when it compiles a pattern, nested ones multiplied: 21
# characters, (?:(?:a{1000}){1000}), took 360 ms and 262 MB on the loop, and 26 a MemoryError.
# The query's length times each of its counts bounds what a compile writes out (a sequence
# adds, nesting multiplies); past this bound the query is refused before it is compiled
# (a{65535} took 22 ms and 17 MB; a date, \d{4}-\d{2}-\d{2}, bounds at 17 x 4 x 2 x 2 = 272).
MAX_REGEX_EXPANSION = 20_000
_ESCAPE_OR_COUNT = regex.compile(r"\\(?:[pPNx]\{[^}]*\}|.)|\{(\d*)(?:,(\d*))?\}", regex.DOTALL)
Box = tuple[int, int, int, int]


@dataclass(frozen=True)
class Region:
    """A normalized 0..1000 rectangle; an element belongs to it when its center is inside."""

    x0: float
    y0: float
    x1: float
    y1: float

    @staticmethod
    def of(raw: dict[str, Any] | None) -> Region | None:
        if raw is None:
            return None
        r = Region(float(raw["x0"]), float(raw["y0"]), float(raw["x1"]), float(raw["y1"]))
        if r.x1 <= r.x0 or r.y1 <= r.y0:
            raise ToolError(
                "region_invalid",
                "region needs x0 < x1 and y0 < y1 (normalized 0..1000)",
                details={"region": raw},
            )
        return r

    def holds(self, x: float, y: float) -> bool:
        return self.x0 <= x <= self.x1 and self.y0 <= y <= self.y1

    def crop(self, w: int, h: int) -> Crop | None:
        """The pixels to read for this region: the rectangle grown by CROP_MARGIN of the
        frame's long side (a line whose center is inside keeps the ends that stick out a
        little), clipped to the frame; None when that is the whole frame."""
        m = CROP_MARGIN * max(w, h)
        sx, sy = (w - 1) / 1000, (h - 1) / 1000
        x0, y0 = max(0, int(self.x0 * sx - m)), max(0, int(self.y0 * sy - m))
        x1, y1 = min(w, int(self.x1 * sx + m) + 1), min(h, int(self.y1 * sy + m) + 1)
        return None if (x0, y0, x1, y1) == (0, 0, w, h) else (x0, y0, x1, y1)


# A region is read with this share of the frame's long side around it (~38 px at 1920).
CROP_MARGIN = 0.02
SNAPSHOT_ID = re.compile(r"f(\d+)-(\d+)(?:-r(\d+)\.(\d+)\.(\d+)\.(\d+))?")


def snapshot_id(reading: Reading) -> str:
    """Names the frame a reading is of (Reading.snapshot_id)."""
    return reading.snapshot_id


def snapshot_key(snapshot: str) -> tuple[int, Crop | None] | None:
    """(frame seq, crop) a snapshot id names, or None when it is not one."""
    m = SNAPSHOT_ID.fullmatch(snapshot)
    if m is None:
        return None
    crop = m.group(3, 4, 5, 6)
    return int(m.group(1)), None if crop[0] is None else (
        int(crop[0]),
        int(crop[1]),
        int(crop[2]),
        int(crop[3]),
    )


def _scale(w: int, h: int) -> tuple[float, float]:
    """Pixels to normalized units, as the input tools map them back (0 .. size-1 -> 0..1000)."""
    return 1000 / max(1, w - 1), 1000 / max(1, h - 1)


def _norm(box: Box, w: int, h: int) -> dict[str, float]:
    sx, sy = _scale(w, h)
    x0, y0, x1, y1 = box
    return {
        "x0": round(x0 * sx, 1),
        "y0": round(y0 * sy, 1),
        "x1": round(min(x1 * sx, 1000), 1),
        "y1": round(min(y1 * sy, 1000), 1),
    }


def _center(box: Box, w: int, h: int) -> dict[str, float]:
    sx, sy = _scale(w, h)
    x0, y0, x1, y1 = box
    return {
        "x": round(min((x0 + x1) / 2 * sx, 1000), 1),
        "y": round(min((y0 + y1) / 2 * sy, 1000), 1),
    }


def _px(box: Box) -> dict[str, int]:
    x0, y0, x1, y1 = box
    return {"x0": x0, "y0": y0, "x1": x1, "y1": y1}


def ordered(lines: Iterable[Line]) -> list[Line]:
    """Reading order: by rows (lines whose vertical centers are within half a line height
    share a row), left to right inside a row."""
    rest = sorted(lines, key=lambda ln: (ln.box[1] + ln.box[3]) / 2)
    out: list[Line] = []
    while rest:
        first = rest[0]
        mid, half = (first.box[1] + first.box[3]) / 2, (first.box[3] - first.box[1]) / 2
        row = [ln for ln in rest if abs((ln.box[1] + ln.box[3]) / 2 - mid) <= half]
        out += sorted(row, key=lambda ln: ln.box[0])
        rest = [ln for ln in rest if ln not in row]
    return out


def kept(
    lines: Iterable[Line], w: int, h: int, region: Region | None, min_confidence: float
) -> tuple[Line, ...]:
    """The lines, in reading order, at min_confidence or more, centered inside `region`."""
    out = []
    for line in ordered(lines):
        if line.confidence < min_confidence:
            continue
        if region is not None:
            c = _center(line.box, w, h)
            if not region.holds(c["x"], c["y"]):
                continue
        out.append(line)
    return tuple(out)


# The pointer's own box around where the daemon last put it, in fractions of the frame's short
# side: an arrow hangs right and down from its tip, iOS's AssistiveTouch circle is centred on
# it. A line of at most POINTER_TEXT_CHARS characters wholly inside is the cursor read as a
# glyph (the simulated arrow reads as "不" at 0.8), not text on the target: the cursor is part
# of the picture on a real target too, and nothing on the screen is moved to hide it.
POINTER_BOX = (-0.03, 0.06)
POINTER_TEXT_CHARS = 2


def without_pointer(
    lines: Iterable[Line], w: int, h: int, pointer: tuple[float, float] | None
) -> tuple[Line, ...]:
    """The lines but those that are the pointer at `pointer` (normalized 0..1000; None when
    the daemon does not know where it is, as with a touchscreen, which has no cursor)."""
    if pointer is None:
        return tuple(lines)
    x, y = pointer[0] * (w - 1) / 1000, pointer[1] * (h - 1) / 1000
    near, far = (f * min(w, h) for f in POINTER_BOX)
    x0, y0, x1, y1 = x + near, y + near, x + far, y + far

    def is_pointer(line: Line) -> bool:
        b = line.box
        inside = x0 <= b[0] and y0 <= b[1] and b[2] <= x1 and b[3] <= y1
        return inside and len(line.text.strip()) <= POINTER_TEXT_CHARS

    return tuple(line for line in lines if not is_pointer(line))


@dataclass(frozen=True)
class Tree:
    """A Reading filtered (region, confidence) and numbered: what screen_text returns."""

    reading: Reading
    lines: tuple[Line, ...]

    @staticmethod
    def of(reading: Reading, region: Region | None = None, min_confidence: float = 0.0) -> Tree:
        frame = reading.frame
        return Tree(reading, kept(reading.lines, frame.width, frame.height, region, min_confidence))

    def to_dict(self) -> dict[str, Any]:
        frame = self.reading.frame
        w, h = frame.width, frame.height
        elements: list[dict[str, Any]] = []
        lines: list[dict[str, Any]] = []
        for li, line in enumerate(self.lines):
            ids = []
            for word in line.words:
                wid = f"w{len(elements)}"
                ids.append(wid)
                elements.append(_element(wid, word, f"l{li}", w, h))
            lines.append(
                {
                    "id": f"l{li}",
                    "text": line.text,
                    "confidence": round(line.confidence, 3),
                    **_placed(line.box, w, h),
                    "words": ids,
                }
            )
        return {
            "snapshot_id": snapshot_id(self.reading),
            "frame": {
                "seq": frame.seq,
                "captured_at": datetime.fromtimestamp(frame.captured_at_utc, UTC).isoformat(),
                "width": w,
                "height": h,
            },
            "ocr_ms": self.reading.elapsed_ms,
            "text": "\n".join(line.text for line in self.lines),
            "lines": lines,
            "elements": elements,
        }


def _element(wid: str, word: Word, line_id: str, w: int, h: int) -> dict[str, Any]:
    return {
        "id": wid,
        "type": "text",
        "text": word.text,
        "confidence": round(word.confidence, 3),
        **_placed(word.box, w, h),
        "line": line_id,
    }


# --- matching ---------------------------------------------------------------------------------


def compile_query(query: str, mode: MatchMode) -> regex.Pattern[str]:
    """One pattern for every mode (exact and contains are escaped literals), so matching has
    one path and one span rule."""
    if mode == "regex":
        if _expansion_bound(query) > MAX_REGEX_EXPANSION:
            raise ToolError(
                "query_invalid",
                "query's counted repeats ({m} or {m,n}) could write out more than "
                f"{MAX_REGEX_EXPANSION} items when compiled: use smaller counts",
                details={"query": query},
            )
        try:  # not kept in regex's cache: 500 patterns near the bound could hold GBs
            return regex.compile(query, regex.V1, cache_pattern=False)
        except regex.error as exc:
            raise ToolError(
                "query_invalid",
                f"query is not a valid regular expression: {exc}",
                details={"query": query},
            ) from None
    literal = regex.escape(query.strip())
    if mode == "exact":  # case-sensitive, whole words: a line, or a run of words in one
        return regex.compile(rf"(?<!\S){literal}(?!\S)")
    return regex.compile(literal, regex.IGNORECASE)


def _expansion_bound(query: str) -> int:
    """An upper bound of the items a compile of `query` writes out: its length times each
    count (escapes skipped; a brace in a character class counts too, erring high)."""
    bound = max(len(query), 1)
    for found in _ESCAPE_OR_COUNT.finditer(query):
        low, high = found.group(1), found.group(2)
        if low is None:  # an escape
            continue
        # Seven digits are past the bound already: a longer count is read as its first seven.
        bound *= max([int(n.lstrip("0")[:7] or "0") for n in (low, high) if n] + [1])
        if bound > MAX_REGEX_EXPANSION:  # stop before a long count's product grows further
            break
    return bound


def _span_box(line: Line, start: int, end: int) -> Box:
    """The box of characters start..end of a line: the union of the words they touch."""
    boxes, pos = [], 0
    for word in line.words:
        at = line.text.find(word.text, pos)
        if at < 0:
            return line.box
        pos = at + len(word.text)
        if at < end and pos > start:
            boxes.append(word.box)
    if not boxes:
        return line.box
    return (
        min(b[0] for b in boxes),
        min(b[1] for b in boxes),
        max(b[2] for b in boxes),
        max(b[3] for b in boxes),
    )


def find(tree: Tree, query: str, mode: MatchMode = "contains") -> list[dict[str, Any]]:
    """Every match, ranked: whole-line matches first, then by confidence, then by how little
    else the line says, then reading order. Each has its text, box and center to tap."""
    pattern = compile_query(query, mode)
    frame = tree.reading.frame
    w, h = frame.width, frame.height
    deadline = time.monotonic() + 1.0
    found: list[tuple[tuple[float, ...], dict[str, Any]]] = []
    for li, line in enumerate(tree.lines):
        text = line.text
        try:
            hits = list(pattern.finditer(text, timeout=REGEX_TIMEOUT_S))
        except TimeoutError:
            raise ToolError(
                "query_too_expensive",
                "the regular expression took too long to match; simplify it",
                details={"query": query},
            ) from None
        for m in hits:
            if m.end() == m.start():
                continue  # an empty match says nothing about where to tap
            box = _span_box(line, m.start(), m.end())
            whole = m.start() == 0 and m.end() == len(text)
            rank = (0.0 if whole else 1.0, -line.confidence, len(text) - len(m.group()), li)
            found.append(
                (
                    rank,
                    {
                        "text": m.group(),
                        "line_text": line.text,
                        "line": f"l{li}",
                        "confidence": round(line.confidence, 3),
                        **_placed(box, w, h),
                        "whole_line": whole,
                    },
                )
            )
        if time.monotonic() > deadline:
            raise ToolError("query_too_expensive", "matching took too long; simplify the query")
    found.sort(key=lambda item: item[0])
    return [dict(m, index=i) for i, (_, m) in enumerate(found)]


# --- what changed between two readings --------------------------------------------------------

# A line found again (same text) whose center moved less than this did not move: re-detecting a
# band that changed elsewhere can shift a box by a few pixels.
MOVE_MIN_PX = 8
MOVE_MIN_SHARE = 0.3  # ... or less than this share of the line's height


def _placed(box: Box, w: int, h: int) -> dict[str, Any]:
    """A box in frame pixels, normalized (0..1000), and its center."""
    return {"box": _px(box), "box_normalized": _norm(box, w, h), "center": _center(box, w, h)}


def _distance(a: Line, b: Line) -> float:
    ax, ay = (a.box[0] + a.box[2]) / 2, (a.box[1] + a.box[3]) / 2
    bx, by = (b.box[0] + b.box[2]) / 2, (b.box[1] + b.box[3]) / 2
    return float(((ax - bx) ** 2 + (ay - by) ** 2) ** 0.5)


def changes(before: Iterable[Line], after: Iterable[Line], w: int, h: int) -> dict[str, Any]:
    """What text appeared, disappeared and moved between two readings of a screen of w x h
    pixels, line by line, in reading order, each with its box. A line of `after` is the same as
    a line of `before` with the same text, the nearest ones paired first; a pair further apart
    than MOVE_MIN_PX and MOVE_MIN_SHARE of its height moved. Pure."""
    old, new = ordered(before), ordered(after)
    by_text: dict[str, list[int]] = {}
    for j, b in enumerate(new):
        by_text.setdefault(b.text, []).append(j)
    pairs = sorted(
        (_distance(a, new[j]), i, j) for i, a in enumerate(old) for j in by_text.get(a.text, ())
    )
    paired_old: dict[int, int] = {}
    paired_new: set[int] = set()
    for _, i, j in pairs:
        if i not in paired_old and j not in paired_new:
            paired_old[i] = j
            paired_new.add(j)
    moved = []
    for i, j in sorted(paired_old.items(), key=lambda ij: ij[1]):
        a, b = old[i], new[j]
        height = max(1, b.box[3] - b.box[1])
        if _distance(a, b) > max(MOVE_MIN_PX, MOVE_MIN_SHARE * height):
            moved.append({"text": b.text, "from": _placed(a.box, w, h), **_placed(b.box, w, h)})
    return {
        "appeared": [
            {"text": b.text, **_placed(b.box, w, h)}
            for j, b in enumerate(new)
            if j not in paired_new
        ],
        "disappeared": [
            {"text": a.text, **_placed(a.box, w, h)}
            for i, a in enumerate(old)
            if i not in paired_old
        ],
        "moved": moved,
        "unchanged": len(paired_old) - len(moved),
    }
