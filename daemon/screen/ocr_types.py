"""What OCR reads, as plain values: words and lines with their boxes in frame pixels. The
engine (in the worker), the wire between worker and daemon, and the daemon's OCR service all
speak these; this module imports none of them."""

from __future__ import annotations

from dataclasses import dataclass

Box = tuple[int, int, int, int]  # x0, y0, x1, y1 in frame pixels
Crop = Box  # a rectangle of the frame that was read


@dataclass(frozen=True)
class Word:
    """One recognized word: its text, confidence and box in frame pixels (x0, y0, x1, y1)."""

    text: str
    confidence: float
    box: Box


@dataclass(frozen=True)
class Line:
    """One detected text line (the engine's unit) and the words it splits into."""

    text: str
    confidence: float
    box: Box
    words: tuple[Word, ...]


def shifted(line: Line, dx: int, dy: int) -> Line:
    def move(b: Box) -> Box:
        return b[0] + dx, b[1] + dy, b[2] + dx, b[3] + dy

    words = tuple(Word(w.text, w.confidence, move(w.box)) for w in line.words)
    return Line(line.text, line.confidence, move(line.box), words)
