"""Pointer calibration: where the target really puts its cursor for known HID positions.

The HID map of daemon.screen.geometry is what the platform is reported to do (iOS: the pointer
spans the phone's screen). Calibration measures it instead: the pointer goes to a few known
HID positions, each frame shows the cursor there, the cursor is found in the frame (what
differs from the median of all the frames: a cursor moves, the screen does not), and a line
per axis is fitted from HID position to frame pixel. The residual (the largest distance from
a found cursor to where the fit puts it) says how well the map holds.

Pure: frames in, a Fit out. daemon.tools.calibration runs it on the target.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from daemon.screen.geometry import HidMap, Rect

if TYPE_CHECKING:
    from daemon.frames import Image

# HID-normalized positions (0..1000 of the pointer's range): corners inset, and the centre.
POINTS = ((150.0, 150.0), (850.0, 150.0), (500.0, 500.0), (150.0, 850.0), (850.0, 850.0))
DIFF = 40  # grey levels a cursor differs from the screen under it
MIN_PIXELS = 12  # a smaller difference is noise, not a cursor
ROUND = 0.65  # a blob filling this much of its box is a round cursor (AssistiveTouch)
FILE = "screen-calibration.json"
SETTLE_TIMEOUT_S = 5.0  # the longest a move takes to show in the picture


@dataclass(frozen=True)
class Fit:
    """Frame pixel = a * HID-normalized + b on each axis, for the screen rectangle it was made
    with; residual_px: the largest miss of a found cursor against the fit."""

    ax: float
    bx: float
    ay: float
    by: float
    residual_px: float
    rect: Rect
    frame: tuple[int, int]

    def hid_map(self, rect: Rect) -> HidMap:
        """Screen-normalized -> HID-normalized through this fit: screen s is frame pixel
        rect.x + s/1000 * (rect.w - 1), which the HID reaches at (pixel - b) / a."""
        return HidMap(
            x0=(rect.x - self.bx) / self.ax,
            y0=(rect.y - self.by) / self.ay,
            sx=max(1, rect.w - 1) / 1000 / self.ax,
            sy=max(1, rect.h - 1) / 1000 / self.ay,
        )

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["rect"] = self.rect.to_list()
        out["frame"] = list(self.frame)
        return out

    @staticmethod
    def from_dict(d: dict[str, Any]) -> Fit:
        return Fit(
            float(d["ax"]),
            float(d["bx"]),
            float(d["ay"]),
            float(d["by"]),
            float(d["residual_px"]),
            Rect(*(int(v) for v in d["rect"])),
            (int(d["frame"][0]), int(d["frame"][1])),
        )


def find_cursors(images: Sequence[Image]) -> list[tuple[float, float] | None]:
    """The cursor's hot spot in each image (frame pixels), or None where none stands out.

    The background is the per-pixel median of all images (each shows the cursor elsewhere);
    the cursor is the largest blob that differs from it. A round blob's hot spot is its
    centre (AssistiveTouch); any other shape's is its top-left corner (an arrow's tip).
    """
    import cv2
    import numpy as np

    stack = np.stack([cv2.cvtColor(i, cv2.COLOR_BGR2GRAY) for i in images])
    background = np.median(stack, axis=0).astype(np.int16)
    found: list[tuple[float, float] | None] = []
    for grey in stack:
        mask = (np.abs(grey.astype(np.int16) - background) > DIFF).astype(np.uint8)
        n, _, stats, centroids = cv2.connectedComponentsWithStats(mask, connectivity=8)
        if n <= 1:
            found.append(None)
            continue
        best = 1 + int(np.argmax(stats[1:, cv2.CC_STAT_AREA]))
        x, y, w, h, area = (int(v) for v in stats[best])
        if area < MIN_PIXELS:
            found.append(None)
        elif area / max(1, w * h) >= ROUND and 0.75 <= w / max(1, h) <= 1.33:
            found.append((float(centroids[best][0]), float(centroids[best][1])))
        else:
            found.append((float(x), float(y)))
    return found


def differs(a: Image, b: Image) -> bool:
    """Whether two frames differ by at least a cursor's worth of pixels (the cursor moved in
    the picture); a few noisy pixels do not count."""
    import cv2
    import numpy as np

    diff = cv2.absdiff(cv2.cvtColor(a, cv2.COLOR_BGR2GRAY), cv2.cvtColor(b, cv2.COLOR_BGR2GRAY))
    return int(np.count_nonzero(diff > DIFF)) >= MIN_PIXELS


def fit_line(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """Least squares y = a * x + b."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    var = sum((x - mx) ** 2 for x in xs)
    if var == 0:
        raise ValueError("the positions do not vary")
    a = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var
    return a, my - a * mx


def fit(
    hid: Sequence[tuple[float, float]],
    seen: Sequence[tuple[float, float]],
    rect: Rect,
    frame: tuple[int, int],
) -> Fit:
    """The map from HID positions to where the cursor was seen, and its residual."""
    ax, bx = fit_line([p[0] for p in hid], [s[0] for s in seen])
    ay, by = fit_line([p[1] for p in hid], [s[1] for s in seen])
    if abs(ax) < 1e-6 or abs(ay) < 1e-6:
        raise ValueError("the cursor did not follow the pointer")
    residual = max(
        math.hypot(ax * h[0] + bx - s[0], ay * h[1] + by - s[1])
        for h, s in zip(hid, seen, strict=True)
    )
    return Fit(ax, bx, ay, by, residual, rect, frame)


def load(state_dir: Path) -> Fit | None:
    try:
        return Fit.from_dict(json.loads((state_dir / FILE).read_text()))
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return None  # none yet, or unreadable: the platform's map stands


def save(state_dir: Path, f: Fit) -> None:
    from daemon.private_files import write_private  # whole or not at all

    state_dir.mkdir(parents=True, exist_ok=True)
    write_private(state_dir / FILE, json.dumps(f.to_dict()).encode())


def forget(state_dir: Path) -> None:
    (state_dir / FILE).unlink(missing_ok=True)
