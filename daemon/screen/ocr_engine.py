"""On-device OCR: the engine (RapidOCR on onnxruntime, models inside the wheel) and the service
the tools share (lazy load, one run at a time off the event loop, a bounded queue, a per-frame
cache).

Why RapidOCR: its PP-OCR detection + recognition models ship in the `rapidocr` wheel (nothing
is downloaded at run time), onnxruntime has manylinux wheels for x86_64 and aarch64, it depends
on opencv-python-headless (the daemon's own OpenCV) and it reads UI text (small, antialiased,
light on dark) far better than Tesseract's page-layout model. Figures: tests/bench/bench_ocr.py.

Nothing here is imported until the first OCR call, so an unused engine costs no memory.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import functools
import importlib.metadata
import importlib.util
import threading
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import structlog

from daemon.errors import ToolError
from daemon.frames import Frame, Image

log = structlog.get_logger("daemon.screen.ocr")

ENGINE_PACKAGES = ("rapidocr", "onnxruntime")
# onnxruntime threads per run. One keeps a core free for capture and HID timing on a small
# board; the speed target (a 1080x1920 frame in <= 1.5 s) is met on one core of this machine.
OCR_THREADS = 1
MAX_QUEUED = 4  # OCR runs waiting behind the running one before callers get ocr_busy
# The detector's input long side: a 1080x1920 frame at 0.57, where the smallest text to read
# (iOS home labels, ~33 px high at 1080 wide; Android's 12 sp) is still ~19 px. Detection's
# time goes with its area: 1280 took 0.9 s, 1088 0.6 s, 960 0.35 s but lost words on macOS
# (bench_ocr's table).
DET_LONG_SIDE = 1088
# Text crops per recognition run. One: a batch is padded to its widest crop, and on one thread
# the padding costs more than the runs it saves (bench_ocr: 1 vs 4 vs 6 vs 16), and less memory.
REC_BATCH = 1
REC_MIN_WIDTH = 48  # recognition input width floor (px at 48 px height): see RapidEngine
CACHED_FRAMES = 8  # trees kept, newest first: a snapshot id stays usable for this many frames


@dataclass(frozen=True)
class Word:
    """One recognized word: its text, confidence and box in frame pixels (x0, y0, x1, y1)."""

    text: str
    confidence: float
    box: tuple[int, int, int, int]


@dataclass(frozen=True)
class Line:
    """One detected text line (the engine's unit) and the words it splits into."""

    text: str
    confidence: float
    box: tuple[int, int, int, int]
    words: tuple[Word, ...]


Crop = tuple[int, int, int, int]  # a rectangle of the frame in pixels (x0, y0, x1, y1)


@dataclass(frozen=True)
class Reading:
    """The OCR of one frame, or of the `crop` of it that was read (boxes are frame pixels)."""

    frame: Frame
    lines: tuple[Line, ...]
    elapsed_ms: int
    crop: Crop | None = None


def _shifted(line: Line, dx: int, dy: int) -> Line:
    def move(b: tuple[int, int, int, int]) -> tuple[int, int, int, int]:
        return b[0] + dx, b[1] + dy, b[2] + dx, b[3] + dy

    words = tuple(Word(w.text, w.confidence, move(w.box)) for w in line.words)
    return Line(line.text, line.confidence, move(line.box), words)


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
        self.params = params
        ocr: Any = RapidOCR(params=params)
        if detect_on_ink:
            # The detector runs on the frame's ink (see ink()); recognition reads the frame
            # itself. RapidOCR 3.x's pipeline calls text_det(img) and crops `img`, so a wrapper
            # there is enough (pyproject keeps rapidocr < 4; deploy ships the version tested).
            ocr.text_det = InkDetector(ocr._load_det_model())
        self._ocr = ocr
        self.version = f"rapidocr {importlib.metadata.version('rapidocr')}, PP-OCRv6 small"

    def read(self, image: Image) -> list[Line]:
        out: Any = self._ocr(image, return_word_box=True)
        if out.boxes is None or out.txts is None or out.scores is None:
            return []
        lines = []
        for points, text, score, words in zip(
            out.boxes, out.txts, out.scores, out.word_results, strict=False
        ):
            lines.append(_line(points, str(text), float(score), words))
        return lines


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


class InkDetector:
    """RapidOCR's text detector, run on ink(img): the boxes are in img's pixels (same size)."""

    def __init__(self, detector: Any) -> None:
        self.detector = detector

    def __call__(self, img: Image) -> Any:
        return self.detector(ink(img))


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


@functools.cache
def _libc() -> Any:
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None


def give_back_memory() -> None:
    """Return the read's freed working memory to the system. Why: glibc keeps what onnxruntime
    freed in the OCR thread's arena, ~250 MB after a 1080x1920 read (RSS 466 -> 214 MB in
    bench_ocr's process); the board's other work needs it more. A no-op without glibc."""
    trim = getattr(_libc(), "malloc_trim", None)
    if trim is not None:
        trim(0)


def engine_installed() -> bool:
    """Whether the engine's packages are installed, without importing them (no memory)."""
    return all(importlib.util.find_spec(p) is not None for p in ENGINE_PACKAGES)


class Ocr:
    """The daemon's OCR service: one engine, loaded on first use; one run at a time in its own
    thread; at most MAX_QUEUED callers waiting; per-frame results shared by concurrent callers
    and kept for the last CACHED_FRAMES frames."""

    def __init__(self, threads: int = OCR_THREADS) -> None:
        self.threads = threads
        self.engine: RapidEngine | None = None
        self.load_error: str | None = None
        self.load_ms: int | None = None
        self._load_lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None  # made on first use: no idle thread
        # Runs by (frame seq, crop); None is the whole frame.
        self._runs: OrderedDict[tuple[int, Crop | None], asyncio.Future[Reading]] = OrderedDict()
        self._waiting = 0

    @property
    def loaded(self) -> bool:
        return self.engine is not None

    def _load(self) -> RapidEngine:
        with self._load_lock:
            if self.engine is None:
                if self.load_error is not None:
                    raise ToolError("ocr_engine_failed", self.load_error)
                started = time.monotonic()
                try:
                    self.engine = RapidEngine(self.threads)
                except Exception as exc:  # a broken install is reported, not retried per call
                    self.load_error = f"the OCR engine failed to load: {exc!r}"
                    log.error("ocr.load_failed", error=repr(exc))
                    raise ToolError("ocr_engine_failed", self.load_error) from None
                self.load_ms = round((time.monotonic() - started) * 1000)
                log.info("ocr.loaded", engine=self.engine.version, load_ms=self.load_ms)
            return self.engine

    def _run(self, frame: Frame, crop: Crop | None) -> Reading:
        engine = self._load()
        started = time.monotonic()
        x0, y0, x1, y1 = crop or (0, 0, frame.width, frame.height)
        try:
            lines = engine.read(np.ascontiguousarray(frame.image[y0:y1, x0:x1]))
        finally:
            give_back_memory()
        lines = [_shifted(ln, x0, y0) for ln in lines] if crop else lines
        ms = round((time.monotonic() - started) * 1000)
        log.info("ocr.read", seq=frame.seq, crop=crop, lines=len(lines), ms=ms)
        return Reading(frame, tuple(lines), ms, crop)

    def cached(self, seq: int, crop: Crop | None = None) -> Reading | None:
        fut = self._runs.get((seq, crop))
        if fut is None or not fut.done() or fut.cancelled() or fut.exception() is not None:
            return None
        return fut.result()

    async def read(self, frame: Frame, crop: Crop | None = None) -> Reading:
        """The OCR of `frame` (of its `crop` only, when given; a reading of the whole frame
        serves any crop): from the cache, joined to a run in progress, or a new run."""
        whole = self._runs.get((frame.seq, None))
        fut = whole if whole is not None else self._runs.get((frame.seq, crop))
        if fut is not None:
            self._runs.move_to_end((frame.seq, None if fut is whole else crop))
            return await asyncio.shield(fut)
        if self._waiting >= MAX_QUEUED + 1:
            raise ToolError(
                "ocr_busy",
                f"{self._waiting} OCR runs are already queued; retry shortly",
                retryable=True,
            )
        loop = asyncio.get_running_loop()
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="ocr")
        self._waiting += 1
        fut = loop.run_in_executor(self._pool, self._run, frame, crop)
        fut.add_done_callback(self._finished)
        self._runs[(frame.seq, crop)] = fut
        while len(self._runs) > CACHED_FRAMES:
            self._runs.popitem(last=False)
        try:
            return await asyncio.shield(fut)
        except ToolError:
            self._runs.pop((frame.seq, crop), None)  # a failed run is not cached
            raise

    def _finished(self, fut: asyncio.Future[Reading]) -> None:
        self._waiting -= 1
        if not fut.cancelled() and fut.exception() is not None:
            for key, f in list(self._runs.items()):
                if f is fut:
                    del self._runs[key]

    async def close(self) -> None:
        """Queued runs are dropped; a running one finishes in its thread (it cannot be cut)."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
