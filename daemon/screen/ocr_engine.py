"""The OCR engine: RapidOCR on onnxruntime, with the models its wheel carries. Only the OCR
worker process (daemon.screen.ocr_worker) imports this module; the daemon never does, so the
engine's libraries and its working memory never live in the daemon's process.

Why RapidOCR: its PP-OCR detection + recognition models ship in the `rapidocr` wheel (nothing
is downloaded at run time), onnxruntime has manylinux wheels for x86_64 and aarch64, it depends
on opencv-python-headless (the daemon's own OpenCV) and it reads UI text (small, antialiased,
light on dark) far better than Tesseract's page-layout model. Figures: tests/bench/bench_ocr.py.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import cv2
import numpy as np

from daemon.screen.ocr_types import Line, Word

if TYPE_CHECKING:
    from daemon.frames import Image

# onnxruntime threads per run. One keeps a core free for capture and HID timing on a small
# board; the speed target (a 1080x1920 frame in <= 1.5 s) is met on one core of this machine.
OCR_THREADS = 1
# The detector's input long side: a 1080x1920 frame at 0.57, where the smallest text to read
# (iOS home labels, ~33 px high at 1080 wide; Android's 12 sp) is still ~19 px. Detection's
# time goes with its area: 1280 took 0.9 s, 1088 0.6 s, 960 0.35 s but lost words on macOS
# (bench_ocr's table).
DET_LONG_SIDE = 1088
# Text crops per recognition run. One: a batch is padded to its widest crop, and on one thread
# the padding costs more than the runs it saves (bench_ocr: 1 vs 4 vs 6 vs 16), and less memory.
REC_BATCH = 1
REC_MIN_WIDTH = 48  # recognition input width floor (px at 48 px height): see RapidEngine


def _box(points: Any) -> tuple[int, int, int, int]:
    xs = [float(p[0]) for p in points]
    ys = [float(p[1]) for p in points]
    return round(min(xs)), round(min(ys)), round(max(xs)), round(max(ys))


class RapidEngine:
    """RapidOCR, configured for the models its wheel carries and one onnxruntime thread."""

    name = "rapidocr"

    def __init__(
        self,
        threads: int = OCR_THREADS,
        det_long_side: int = DET_LONG_SIDE,
        detect_on_ink: bool = True,
        rec_batch: int = REC_BATCH,
        rec_min_width: int = REC_MIN_WIDTH,
    ) -> None:
        from rapidocr import RapidOCR  # heavy: onnxruntime and the models load here

        models = Path(importlib.util.find_spec("rapidocr").origin or "").parent / "models"  # type: ignore[union-attr]
        ort = "EngineConfig.onnxruntime"
        params: dict[str, Any] = {
            "Global.log_level": "error",
            "Global.use_cls": False,  # screens are upright: the angle model only costs time
            f"{ort}.intra_op_num_threads": threads,
            f"{ort}.inter_op_num_threads": 1,
            # Explicit paths into the wheel: never the downloader.
            "Det.model_path": str(models / "PP-OCRv6_det_small.onnx"),
            "Rec.model_path": str(models / "PP-OCRv6_rec_small.onnx"),
            # Detection on the frame scaled to a long side of det_long_side (RapidOCR's default
            # keeps the short side >= 736 px, i.e. a phone frame at full size). Accuracy and
            # speed per setting: tests/bench/bench_ocr.py.
            "Det.limit_type": "max",
            "Det.limit_side_len": det_long_side,
            "Rec.rec_batch_num": rec_batch,
            # Each crop is padded to at least this width at the model's 48 px height.
            # RapidOCR's 320 pads a short label ("Notes", ~140 px) to 320, and on one thread
            # the model's time is linear in width (bench_ocr: 12 ms at 96 px, 36 ms at 320).
            "Rec.rec_img_shape": [3, 48, rec_min_width],
        }
        ocr: Any = RapidOCR(params=params)
        if detect_on_ink:
            # The detector runs on the frame's ink (see ink()); recognition reads the frame
            # itself. RapidOCR 3.x's pipeline calls text_det(img) and crops `img`, so a wrapper
            # there is enough (pyproject keeps rapidocr < 4; deploy ships the version tested).
            ocr.text_det = InkDetector(ocr._load_det_model(), det_long_side)
        from rapidocr.utils.process_img import get_rotate_crop_image

        ocr.return_word_box = True
        self._ocr = ocr
        self._crop = get_rotate_crop_image
        self._lines: dict[bytes, Line | None] = {}  # the last read's lines by box and pixels
        self.counts = {"lines": 0, "recognized": 0}  # how many lines were read, how many afresh
        self.version = f"rapidocr {importlib.metadata.version('rapidocr')}, PP-OCRv6 small"

    def read(self, image: Image) -> list[Line]:
        """The lines of `image`. A whole screen is read line by line (see _read_lines), so a
        read of a frame much like the last one reuses what did not change; anything RapidOCR
        would first resize or pad (a frame over 2000 px, a thin strip) takes its own path."""
        ocr = self._ocr
        h, w = image.shape[:2]
        resized = max(h, w) > ocr.max_side_len or min(h, w) < ocr.min_side_len
        padded = ocr.cfg.Global.use_vertical_padding and (
            h <= ocr.min_height or (ocr.width_height_ratio != -1 and w / h > ocr.width_height_ratio)
        )
        if resized or padded or not isinstance(ocr.text_det, InkDetector):
            return self._read_whole(image)
        return self._read_lines(image)

    def _read_whole(self, image: Image) -> list[Line]:
        out: Any = self._ocr(image, return_word_box=True)
        if out.boxes is None or out.txts is None or out.scores is None:
            return []
        dark = ink(image)[:, :, 0] < BLANK_LEVEL  # the image's own: the detector's is padded
        lines = []
        for points, text, score, words in zip(
            out.boxes, out.txts, out.scores, out.word_results, strict=False
        ):
            lines.append(tightened(_line(points, str(text), float(score), words), dark))
        return lines

    def _read_lines(self, image: Image) -> list[Line]:
        """RapidOCR's pipeline with its steps in our hands: detection (banded, each band's
        result kept by the digest of its input), then each box's crop recognized alone (as
        a batch of one is) and kept by the digest of the box and its pixels. Both are pure
        functions of those inputs, so what the last read kept answers for whatever did not
        change, and the result is the very one a fresh read gives."""
        ocr = self._ocr
        found = ocr.text_det(image)
        dark = ocr.text_det.dark
        kept: dict[bytes, Line | None] = {}
        lines = []
        for box in found.boxes if found.boxes is not None else ():
            crop = self._crop(image, box.copy())
            x0, y0, x1, y1 = _clip(_box(box), dark.shape)
            ink_here = np.packbits(dark[y0:y1, x0:x1]).tobytes()
            key = _digest(box.tobytes(), crop.tobytes(), ink_here)
            line = self._lines.get(key, _MISSING)
            if line is _MISSING:
                line = self._recognize(crop, box)
                if line is not None:
                    line = tightened(line, dark)
                self.counts["recognized"] += 1
            kept[key] = line
            if isinstance(line, Line):
                lines.append(line)
        self._lines = kept  # only the last read's: bounded by one screen's lines
        self.counts["lines"] += len(kept)
        return lines

    def _recognize(self, crop: Image, box: Any) -> Line | None:
        """One box's line, as RapidOCR's pipeline makes it: None for empty text or a score
        under its text_score."""
        ocr = self._ocr
        rec = ocr.recognize_txt([crop])
        text, score = str(rec.txts[0]), float(rec.scores[0])
        if not text.strip() or score < ocr.text_score:
            return None
        words = ocr.calc_word_boxes([crop], box[np.newaxis], rec)
        return _line(box, text, score, words[0] if words else None)


_MISSING: Any = object()


def _clip(box: tuple[int, int, int, int], shape: tuple[int, ...]) -> tuple[int, int, int, int]:
    h, w = shape[0], shape[1]
    x0, y0, x1, y1 = box
    return max(0, x0), max(0, y0), min(w, x1 + 1), min(h, y1 + 1)


def tight(box: tuple[int, int, int, int], dark: Any) -> tuple[int, int, int, int]:
    """`box` shrunk to the ink inside it (kept as it is when it holds none). Why: the detector
    draws a line's box with a margin that depends on what else its input holds (how the frame
    was cut into bands, what is around), while the ink is the ink: tight boxes sit on the text
    whatever the context, and their centers where a finger should land.

    A streak at the box's top or bottom, apart from the rest by blank rows, is not the line's:
    ink() leaves such thin vertical streaks where its background changes (the opening's
    antialiased edge beside large text, e.g. in a field above its text), and counting one
    made a line's box reach as far as the detector's margin did, ~10 rows past the text on
    the 'desktop huge' frame (issue 49). Pure."""
    x0, y0, x1, y1 = _clip(box, dark.shape)
    inside = dark[y0:y1, x0:x1]
    rows = np.flatnonzero(inside.any(axis=1))
    if not len(rows):
        return box
    runs = np.split(rows, np.flatnonzero(np.diff(rows) > 1) + 1)  # ink rows, blank rows apart
    while len(runs) > 1 and _streak(inside[runs[0]], cut=runs[0][0] == 0):
        runs.pop(0)
    while len(runs) > 1 and _streak(inside[runs[-1]], cut=runs[-1][-1] == len(inside) - 1):
        runs.pop()
    top, bottom = int(runs[0][0]), int(runs[-1][-1])
    cols = np.flatnonzero(inside[top : bottom + 1].any(axis=0))
    return x0 + int(cols[0]), y0 + top, x0 + int(cols[-1]), y0 + bottom


STREAK_WIDTH = 2  # columns: ink() streaks are 1-2 wide; a glyph's detached part (a dot) is
# about as tall as it is wide, a streak STREAK_RATIO times taller or more
STREAK_RATIO = 3


def _streak(block: Any, cut: bool) -> bool:
    """Whether rows of ink (rows x columns, bool) are only a thin vertical streak; `cut`: the
    box's edge cuts them, so they may be any part of a streak's height."""
    cols = np.flatnonzero(block.any(axis=0))
    width = int(cols[-1] - cols[0]) + 1
    return width <= STREAK_WIDTH and (cut or len(block) >= STREAK_RATIO * width)


def tightened(line: Line, dark: Any) -> Line:
    words = tuple(Word(w.text, w.confidence, tight(w.box, dark)) for w in line.words)
    return Line(line.text, line.confidence, tight(line.box, dark), words)


def _digest(*parts: bytes) -> bytes:
    h = hashlib.blake2b(digest_size=16)
    for part in parts:
        h.update(part)
    return h.digest()


# ink()'s windows, in pixels. The stroke window is wider than text strokes and the gaps between
# letters (a 12 pt label at 3x is ~25 px high; an icon's glyph strokes ~15 px) and far narrower
# than app icons (~160 px on a 1080-wide phone). The polarity window is wider, so inside an icon
# the icon's colour, not its glyph's, is the background.
STROKE_WINDOW = 31
POLARITY_WINDOW = 61


def ink(image: Image) -> Image:
    """The frame as dark text on white, for the detector. Why: beside large flat coloured areas
    (app icons) PP-OCR's detector loses small text: on a 1080x1920 home screen it missed a
    quarter of the labels under the icons and half the icons' glyphs, at every input scale tried.

    Each pixel's distance from its local background, inverted. The background of dark text is
    the grey closing (the text filled in), of light text the opening; the median of a wider
    window tells which one this pixel sits in. Flat areas of any colour, corners included (a
    rectangle is its own opening and closing), come out white like the page.
    """
    grey = cv2.cvtColor(image, cv2.COLOR_BGR2GRAY) if image.ndim == 3 else image
    kernel = cv2.getStructuringElement(cv2.MORPH_RECT, (STROKE_WINDOW, STROKE_WINDOW))
    closed = cv2.morphologyEx(grey, cv2.MORPH_CLOSE, kernel)
    opened = cv2.morphologyEx(grey, cv2.MORPH_OPEN, kernel)
    median = cv2.medianBlur(grey, POLARITY_WINDOW)
    on_light = cv2.absdiff(closed, median) <= cv2.absdiff(opened, median)
    background = np.where(on_light, closed, opened).astype(np.uint8)
    out = cv2.cvtColor(cv2.bitwise_not(cv2.absdiff(grey, background)), cv2.COLOR_GRAY2BGR)
    return np.asarray(out, np.uint8)


@dataclass(frozen=True)
class Band:
    """Rows [top, bottom) of the detection input detected in one run."""

    top: int
    bottom: int


def plan_bands(
    height: int, cuttable: Callable[[int], bool], rows: int, overlap: int, step: int
) -> list[Band]:
    """Horizontal bands of at most `rows` rows covering an image `height` rows high, cut only
    at multiples of `step` (the network's stride: a band is then the very pixels, on the very
    grid, that the whole image's run sees). A band ends at the lowest row of its lower half
    where `cuttable` says no text crosses, so the bands need not overlap. Where there is none
    (a photo, a wall of text), the next band starts `overlap` rows (at most half a band) before
    the end of this one, and join_bands makes one box of each line seen by both. Pure."""
    rows = max(step, rows // step * step)
    overlap = min(-(-overlap // step) * step, rows // 2 // step * step)
    bands: list[Band] = []
    top = 0
    while height - top > rows:
        end = top + rows
        cut = next((c for c in range(end, top + rows // 2 - 1, -step) if cuttable(c)), None)
        if cut is not None:
            bands.append(Band(top, cut))
            top = cut
        else:
            bands.append(Band(top, end))
            top = end - overlap
    bands.append(Band(top, height))
    return bands


def clean_cut(dark: Any, row: int, margin: int) -> bool:
    """Whether no text or picture crosses `row` of an image whose ink is `dark` (rows x
    columns, bool): within `margin` rows above and below it there is no ink, but for columns
    near the left and right edges that are ink all the way (a scroll bar, a frame's border).
    Pure."""
    if row - margin < 0 or row + margin > dark.shape[0]:
        return False
    window = dark[row - margin : row + margin]
    edge = max(1, round(dark.shape[1] * EDGE_SHARE))
    inner = window[:, edge:-edge]
    if inner.any():
        return False
    sides = np.concatenate([window[:, :edge], window[:, -edge:]], axis=1)
    return not bool(np.any(sides.any(axis=0) & ~sides.all(axis=0)))


EDGE_SHARE = 0.04  # where clean_cut lets a vertical bar cross a cut: the outer 4 % of each side


# Detection's working memory goes with the area of its input (the DB-net's activations: about
# 165 MB over a 608x1088 input, a whole 1080x1920 frame, on one thread), and so does its time.
# Where the whole frame's input would be larger, that input is detected in horizontal bands of
# at most this many pixels: the same pixels on the same grid as the whole frame's run. A band
# whose input did not change since the last read is not detected again, so a read after a
# small change costs about one band: 192 rows, ~110 ms of ~950 here (384 rows took ~220 ms).
# Measured in bench_memory.py (the worker's peak) and bench_incremental.py (time).
DET_MAX_PIXELS = 608 * 192
BLANK_LEVEL = 192  # a pixel of the ink image darker than this is ink
# Rows of the detection input. A cut needs this many blank rows on either side: the detector's
# boxes reach ~8 rows past a line's ink, and a cut must not clip them.
BAND_MARGIN = 10
BAND_OVERLAP = 96  # taller than any UI text line (iOS large titles: ~60 rows)
STRIDE = 32  # the detection network takes inputs whose sides are multiples of this


def det_size(height: int, width: int, long_side: int) -> tuple[int, int]:
    """The detection input's size for a frame: RapidOCR's resize ("max" limit, sides rounded
    to the stride), done here once for the whole frame so that bands are slices of it."""
    ratio = long_side / max(height, width) if max(height, width) > long_side else 1.0
    return (
        max(STRIDE, round(int(height * ratio) / STRIDE) * STRIDE),
        max(STRIDE, round(int(width * ratio) / STRIDE) * STRIDE),
    )


class InkDetector:
    """RapidOCR's text detector, run on ink(img), in bands when the whole frame's detection
    input would hold more than DET_MAX_PIXELS: the boxes are in img's pixels (same size)."""

    def __init__(self, detector: Any, det_long_side: int, max_pixels: int = DET_MAX_PIXELS) -> None:
        from rapidocr.ch_ppocr_det import TextDetOutput

        self.detector = detector
        self.long_side = det_long_side
        self.max_pixels = max_pixels
        self._output = TextDetOutput
        self.dark: Any = None
        self._bands: dict[bytes, list[tuple[Any, float]]] = {}  # the last read's, by input
        self.counts = {"bands": 0, "bands_detected": 0}

    def __call__(self, img: Image) -> Any:
        inked = ink(img)
        self.dark = inked[:, :, 0] < BLANK_LEVEL  # where the last frame's ink is, for tight()
        height, width = inked.shape[:2]
        det_h, det_w = det_size(height, width, self.long_side)
        if det_h * det_w <= self.max_pixels:
            self.detector.limit_side_len = self.long_side
            return self.detector(inked)
        small = cv2.resize(inked, (det_w, det_h))
        dark = small[:, :, 0] < BLANK_LEVEL
        rows = max(STRIDE, self.max_pixels // det_w)
        sx, sy = width / det_w, height / det_h
        boxes, scores = [], []
        kept: dict[bytes, list[tuple[Any, float]]] = {}

        def cuttable(row: int) -> bool:
            return clean_cut(dark, row, BAND_MARGIN)

        plan = plan_bands(det_h, cuttable, rows, BAND_OVERLAP, STRIDE)
        per_band = []
        for band in plan:
            part = small[band.top : band.bottom]
            pad = -part.shape[0] % STRIDE  # white rows: blank page to the detector
            if pad:
                part = cv2.copyMakeBorder(part, 0, pad, 0, 0, cv2.BORDER_CONSTANT, value=255)
            # A band's boxes are a pure function of its input and where it sits: what the
            # last read found for the same band answers again.
            key = _digest(part.tobytes(), repr(band).encode())
            found = self._bands.get(key)
            if found is None:
                found = self._detect(part, band)
                self.counts["bands_detected"] += 1
            kept[key] = found
            self.counts["bands"] += 1
            per_band.append(found)
        self._bands = kept  # only the last read's: bounded by one frame's bands
        self.detector.limit_side_len = self.long_side
        for box, score in join_bands(plan, per_band):
            frame_box = box * np.array([sx, sy])
            boxes.append(frame_box.astype(box.dtype))
            scores.append(score)
        if not boxes:
            return self._output()
        return self._output(inked, self.detector.sorted_boxes(np.array(boxes)), scores)

    def _detect(self, part: Any, band: Band) -> list[tuple[Any, float]]:
        """Every box of the band, in the detection input's rows (not the band's)."""
        self.detector.limit_side_len = max(part.shape[:2])  # no resize: it is the input
        found = self.detector(part)
        if found.boxes is None:
            return []
        shift = np.array([0, band.top])
        return [
            ((box + shift).astype(box.dtype), float(score))
            for box, score in zip(found.boxes, found.scores, strict=True)
        ]


# A box reaching this near a band's edge (detection input rows) may be a line the edge cut.
CUT_EDGE = 3


def join_bands(
    plan: list[Band], found: list[list[tuple[Any, float]]], edge: int = CUT_EDGE
) -> list[tuple[Any, float]]:
    """The boxes of overlapping bands as one frame's: each line once, and whole.

    Two bands that overlap may both see a line in the overlap, each whole or cut by its edge
    (a line taller than the overlap is cut by both). Boxes of the two bands are views of one
    line when they overlap by half the narrower one's width and half the shorter one's
    height. Of two such views, one that the shared edge does not cut is the line: the other
    (a fragment, or the same line again) is dropped. Two views both cut there are parts of a
    line that crosses the whole overlap: they become one box around both. Bands cut at a clean
    row (no overlap) share no line. Boxes are 4x2 point arrays in detection rows. Pure."""
    boxes = [(i, box, score) for i, band_boxes in enumerate(found) for box, score in band_boxes]
    parent = list(range(len(boxes)))
    dropped: set[int] = set()

    def root(k: int) -> int:
        while parent[k] != k:
            parent[k] = parent[parent[k]]
            k = parent[k]
        return k

    def cut(k: int, row: int) -> bool:
        ys = boxes[k][1][:, 1]
        return bool(ys.min() <= row + edge and ys.max() >= row - edge)

    for i in range(len(plan) - 1):
        upper, lower = plan[i], plan[i + 1]
        if lower.top >= upper.bottom:
            continue
        ups = [k for k, b in enumerate(boxes) if b[0] == i and b[1][:, 1].max() > lower.top]
        downs = [
            k for k, b in enumerate(boxes) if b[0] == i + 1 and b[1][:, 1].min() < upper.bottom
        ]
        for a in ups:
            for b in downs:
                if not same_line(boxes[a][1], boxes[b][1]):
                    continue
                a_cut, b_cut = cut(a, upper.bottom), cut(b, lower.top)
                if a_cut and b_cut:
                    parent[root(b)] = root(a)
                elif not a_cut:
                    dropped.add(b)
                else:
                    dropped.add(a)
    groups: dict[int, list[int]] = {}
    for k in range(len(boxes)):
        if k not in dropped:
            groups.setdefault(root(k), []).append(k)
    out = []
    for members in groups.values():
        if len(members) == 1:
            _, box, score = boxes[members[0]]
            out.append((box, score))
            continue
        points = np.concatenate([boxes[k][1] for k in members])
        (x0, y0), (x1, y1) = points.min(axis=0), points.max(axis=0)
        around = np.array([[x0, y0], [x1, y0], [x1, y1], [x0, y1]], dtype=points.dtype)
        out.append((around, max(boxes[k][2] for k in members)))
    return out


def same_line(a: Any, b: Any) -> bool:
    """Whether two boxes (4x2 points) overlap by half the narrower one's width and half the
    shorter one's height: two views of one text line. Pure."""
    (ax0, ay0), (ax1, ay1) = a.min(axis=0), a.max(axis=0)
    (bx0, by0), (bx1, by1) = b.min(axis=0), b.max(axis=0)
    across = min(ax1, bx1) - max(ax0, bx0)
    down = min(ay1, by1) - max(ay0, by0)
    return bool(
        across >= 0.5 * min(ax1 - ax0, bx1 - bx0) and down >= 0.5 * min(ay1 - ay0, by1 - by0)
    )


def _line(points: Any, text: str, score: float, word_results: Any) -> Line:
    """A line with its words: RapidOCR's word boxes, merged where a word was split into
    characters (it boxes CJK per character), else the words spread over the line's box."""
    box = _box(points)
    words: list[Word] = []
    for item in word_results or ():
        w_text, w_score, w_points = item
        if not str(w_text).strip() or w_points is None:
            continue
        words.append(Word(str(w_text).strip(), float(w_score), _box(w_points)))
    if [w.text for w in words] != text.split():
        words = _spread(text, score, box)
    return Line(text, score, box, tuple(words))


def _spread(text: str, score: float, box: tuple[int, int, int, int]) -> list[Word]:
    """Word boxes by character share of the line box (when the engine gave none)."""
    x0, y0, x1, y1 = box
    n = max(1, len(text))
    out, pos = [], 0
    for part in text.split():
        start = text.index(part, pos)
        pos = start + len(part)
        a = x0 + (x1 - x0) * start // n
        b = x0 + (x1 - x0) * pos // n
        out.append(Word(part, score, (a, y0, b, y1)))
    return out
