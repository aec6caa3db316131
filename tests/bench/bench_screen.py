"""Screen pipeline costs at 1080p (not part of the test suite; no pass/fail on time).

Prints each measurement next to a baseline taken in the same run on the same frame:
  - Screen.screenshot end to end vs cv2.imencode alone (target <= 1.3x),
  - the detector per frame pair, i.e. one signature plus one compare (target <= 2 ms),
  - MJPEG passthrough vs decode + encode, and the full vs reduced JPEG decode,
  - process CPU of an idle V4L2Capture (one request, then idle) vs plain sleeping.
Run: .venv/bin/python tests/bench/bench_screen.py
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import resource
import statistics
import time
from collections.abc import Callable

import cv2
import numpy as np

from daemon.config import CaptureConfig
from daemon.errors import ToolError
from daemon.frames import Frame
from daemon.screen.capture import V4L2Capture
from daemon.screen.detector import compare, signature
from daemon.screen.encode import encode
from daemon.screen.service import Screen

W, H, ROUNDS, N = 1920, 1080, 5, 40


def screen_like() -> np.ndarray:
    """A 1080p frame with what screens have: flat areas, gradients, text, a photo-ish patch."""
    img = np.zeros((H, W, 3), np.uint8)
    img[:] = np.linspace(30, 220, W, dtype=np.uint8)[None, :, None]
    cv2.rectangle(img, (0, 0), (W, 60), (25, 25, 25), -1)
    for i in range(30):
        cv2.putText(img, f"Settings  Wi-Fi  Bluetooth  {i:02d}", (60, 120 + i * 30),
                    cv2.FONT_HERSHEY_SIMPLEX, 0.8, (250, 250, 250), 2)  # fmt: skip
    patch = np.random.default_rng(3).integers(0, 256, (400, 600, 3), dtype=np.uint8)
    img[500:900, 1200:1800] = cv2.GaussianBlur(patch, (9, 9), 0)
    return img


def paired(
    baseline: Callable[[], object], subject: Callable[[], object]
) -> tuple[float, float, float]:
    """(baseline ms, subject ms, ratio) per call: medians over rounds that alternate between
    the two, so both see the same load on a shared machine. Either may return an awaitable."""

    async def timed(fn: Callable[[], object]) -> float:
        start = time.perf_counter()
        for _ in range(N):
            result = fn()
            if inspect.isawaitable(result):
                await result
        return (time.perf_counter() - start) * 1000 / N

    async def run() -> tuple[float, float, float]:
        await timed(baseline), await timed(subject)  # warm-up
        base_ms, subj_ms = [], []
        for _ in range(ROUNDS):
            base_ms.append(await timed(baseline))
            subj_ms.append(await timed(subject))
        ratios = [b / a for a, b in zip(base_ms, subj_ms, strict=True)]
        med = statistics.median
        return med(base_ms), med(subj_ms), med(ratios)

    return asyncio.run(run())


class FixedFrameSource:
    """BENCH DOUBLE for a FrameSource: hands out one prepared frame, instantly."""

    def __init__(self, frame: Frame) -> None:
        self.frame_ = frame

    async def frame(self, *, newer_than: float | None = None, timeout: float = 2.0) -> Frame:
        return self.frame_

    def available(self) -> tuple[bool, str]:
        return True, ""


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def idle_cpu(seconds: float, prepare: Callable[[], None] | None = None) -> float:
    if prepare:
        prepare()
    before = cpu_seconds()
    time.sleep(seconds)
    return cpu_seconds() - before


def main() -> None:
    img = screen_like()
    frame = Frame(img, 1, time.monotonic(), time.time())
    jpeg = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, 80])[1].tobytes()
    mjpeg_frame = Frame(img, 1, time.monotonic(), time.time(), jpeg=jpeg)
    buf = np.frombuffer(jpeg, np.uint8)
    print(f"screen pipeline at {W}x{H}; medians of {ROUNDS} alternating rounds of {N} calls")

    def imencode() -> object:
        return cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, 80])

    base, shot, ratio = paired(imencode, Screen(FixedFrameSource(frame)).screenshot)
    print(f"  cv2.imencode q80 alone           {base:7.2f} ms  baseline")
    print(f"  Screen.screenshot end to end     {shot:7.2f} ms  {ratio:6.2f}x  (target <= 1.3x)")

    other = img.copy()
    other[300:700, 200:900] = 255 - other[300:700, 200:900]
    prev = signature(img)
    _, pair, ratio = paired(imencode, lambda: compare(prev, signature(other), 2.0))
    print(f"  detector per frame pair          {pair:7.2f} ms  {ratio:6.2f}x  (target <= 2 ms)")
    _, area, ratio = paired(
        lambda: signature(other),
        lambda: cv2.resize(other[87:], (80, 40), interpolation=cv2.INTER_AREA),
    )
    print(f"    INTER_AREA grid instead        {area:7.2f} ms  {ratio:6.2f}x of signature()")

    def decode_encode() -> object:
        image = cv2.imdecode(buf, cv2.IMREAD_COLOR)
        return cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, 80])

    base, passed, ratio = paired(decode_encode, lambda: encode(mjpeg_frame))
    print(f"  MJPEG decode + re-encode         {base:7.2f} ms  baseline")
    print(f"  MJPEG passthrough encode()       {passed:7.4f} ms  {ratio:6.4f}x")
    _, passed, ratio = paired(decode_encode, Screen(FixedFrameSource(mjpeg_frame)).screenshot)
    print(f"  MJPEG passthrough screenshot     {passed:7.2f} ms  {ratio:6.4f}x  (base64, thread)")
    full, reduced, ratio = paired(
        lambda: cv2.imdecode(buf, cv2.IMREAD_COLOR),
        lambda: cv2.imdecode(buf, cv2.IMREAD_REDUCED_COLOR_8),
    )
    print(f"  JPEG decode, full size           {full:7.2f} ms  baseline (once per asked frame)")
    print(f"  JPEG decode, IMREAD_REDUCED_8    {reduced:7.2f} ms  {ratio:6.2f}x  (unused)")

    sleeping = idle_cpu(3.0)
    cap = V4L2Capture(CaptureConfig(device="/dev/null", idle_stop_s=0.5), retry_s=0.2)

    def ask_once_then_idle() -> None:
        async def ask() -> None:
            # No capture device here: /dev/null starts the reader, which then idles out.
            with contextlib.suppress(ToolError):
                await cap.frame(timeout=1.0)

        asyncio.run(ask())
        while cap.running:
            time.sleep(0.05)

    idle = idle_cpu(3.0, ask_once_then_idle)
    cap.close()
    print(f"  process CPU in 3 s, sleeping     {sleeping * 1000:7.2f} ms  baseline")
    print(f"  ... with an idle V4L2Capture     {idle * 1000:7.2f} ms  "
          f"(+{(idle - sleeping) * 1000:.2f} ms; reader stopped: {not cap.running})")  # fmt: skip


if __name__ == "__main__":
    main()
