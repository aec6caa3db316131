"""Screen geometry's cost against a screenshot's, measured in the same run (no pass/fail on
time; target: under 5 % of a screenshot).

The frame: 1080p from a phone's HDMI adapter (an iPhone's portrait screen pillarboxed inside a
3 % overscan border). Every call gets a new frame (a new sequence number), as a live capture
does, so the geometry runs its per-frame edge probe each time; a full detection runs only when
the probe sees the edges change, and is timed on its own as well.

Prints, per call (medians of alternating rounds):
  - screenshot: Screen.screenshot through ScreenFrames (probe, crop, JPEG encode, base64),
  - per-frame geometry (ScreenGeometry.unchanged on a new frame: the edge probe) and its
    share of the screenshot,
  - a full detection (detect() on the frame) and its share, the cost when the edges change,
  - for reference, the screenshot of the whole frame (bars included) as before the geometry.
Run: .venv/bin/python tests/bench/bench_geometry.py
"""

from __future__ import annotations

import asyncio
import itertools
import sys
from pathlib import Path

import cv2
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from daemon.frames import Frame
from daemon.screen.geometry import ScreenFrames, ScreenGeometry, detect, fit
from daemon.screen.service import Screen
from tests.bench.timing import paired

W, H, ROUNDS, N = 1920, 1080, 5, 30


def hdmi_frame() -> np.ndarray:
    """A phone's screen (status bar, text rows, a photo) fitted into a black 1080p frame."""
    pw, ph = 1170, 2532
    pic = np.full((ph, pw, 3), 242, np.uint8)
    cv2.rectangle(pic, (0, 0), (pw, 140), (30, 30, 30), -1)
    for i in range(40):
        cv2.putText(pic, f"Settings row {i:02d}  Wi-Fi", (60, 260 + i * 55),
                    cv2.FONT_HERSHEY_SIMPLEX, 1.2, (20, 20, 20), 2)  # fmt: skip
    patch = np.random.default_rng(3).integers(0, 256, (500, 900, 3), dtype=np.uint8)
    pic[1900:2400, 130:1030] = cv2.GaussianBlur(patch, (9, 9), 0)
    r = fit(W, H, pw, ph, overscan=0.03)
    frame = np.zeros((H, W, 3), np.uint8)
    frame[r.y : r.y + r.h, r.x : r.x + r.w] = cv2.resize(pic, (r.w, r.h), cv2.INTER_AREA)
    return frame


class NewFrames:
    """A FrameSource handing out the same picture as a new frame on every call."""

    def __init__(self, image: np.ndarray) -> None:
        self.image = image
        self.seq = itertools.count(1)

    async def frame(self, *, newer_than: float | None = None, timeout: float = 2.0) -> Frame:
        n = next(self.seq)
        return Frame(self.image, n, float(n), float(n))

    def available(self) -> tuple[bool, str]:
        return True, ""


async def main() -> None:
    image = hdmi_frame()
    raw = NewFrames(image)
    geometry = ScreenGeometry("auto", "ios")
    screen = Screen(ScreenFrames(raw, geometry))
    whole = Screen(raw)
    first = await screen.screenshot()
    g = geometry.current
    assert g is not None and not g.is_full, g
    print(f"frame {W}x{H}, screen {g.rect.to_list()} ({g.orientation}), JPEG q80")
    print(f"screenshot of the screen: {first['width']}x{first['height']}")

    async def shot() -> object:
        return await screen.screenshot()

    async def observe() -> object:  # what ScreenFrames does per frame when nothing changed
        known = geometry.unchanged(await raw.frame())
        assert known is not None
        return known

    async def detection() -> object:
        return detect(image)

    async def shot_whole() -> object:
        return await whole.screenshot()

    before = geometry.detections
    base, per_frame, ratio = await paired(shot, observe, ROUNDS, N)
    assert geometry.detections == before, "the edges did not change: no detection should run"
    print(f"screenshot (cut to the screen)      {base:7.3f} ms")
    print(f"geometry per new frame (edge probe)  {per_frame:7.3f} ms  = {ratio * 100:5.2f} %")
    base, full_detect, ratio = await paired(shot, detection, ROUNDS, N)
    print(f"full detection (edges changed)      {full_detect:7.3f} ms  = {ratio * 100:5.2f} %")
    base, whole_ms, ratio = await paired(shot, shot_whole, ROUNDS, N)
    print(f"screenshot of the whole frame       {whole_ms:7.3f} ms  = {ratio:5.2f}x the cut one")


if __name__ == "__main__":
    asyncio.run(main())
