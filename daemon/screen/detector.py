"""The structural change detector (the peer's "PR #442" detector), pure numpy/OpenCV.

A frame becomes a *signature*: the mean colour of each block of a grid laid over the image
below its top 8 % (the status bar, whose clock and icons change on their own). Two signatures
differ when MORE than 1 % of their blocks changed, a block having changed when the largest of
its per-channel differences of block means exceeds the threshold (0..255 units, the peer's
default is 2). Signatures are computed once per frame, so a stability wait compares small grids.

Grid: 80 blocks along the image's longer axis, 40 along the shorter (a landscape 1920x1080
capture gets 80 columns x 40 rows, a portrait phone screen 40 columns x 80 rows), so blocks
stay roughly square whichever way the target is held.

numpy and OpenCV are imported by the functions that use them: the daemon holds them only once
it has frames to compare (the small-board memory budget).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    Blocks = npt.NDArray[np.float32]  # rows x cols x channels, block means in 0..255

STATUS_BAR_FRACTION = 0.08
GRID_LONG = 80
GRID_SHORT = 40
CHANGED_BLOCKS_PERCENT = 1  # a pair changed when strictly more than 1 % of blocks changed


@dataclass(frozen=True, eq=False)
class Signature:
    """Block means of one frame, with the frame's size (a resolution change is a change)."""

    blocks: Blocks
    width: int
    height: int


@dataclass(frozen=True)
class Diff:
    """What compare() saw; `to_dict()` is the `last_diff` diagnostic."""

    changed: bool
    changed_fraction: float
    max_block_diff: float
    changed_blocks: int
    total_blocks: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "changed": self.changed,
            "changed_fraction": round(self.changed_fraction, 4),
            "max_block_diff": round(self.max_block_diff, 2),
            "changed_blocks": self.changed_blocks,
            "total_blocks": self.total_blocks,
        }


def grid_shape(width: int, height: int) -> tuple[int, int]:
    """(rows, cols) of the block grid for a frame of this size."""
    return (GRID_SHORT, GRID_LONG) if width >= height else (GRID_LONG, GRID_SHORT)


def _edges(length: int, parts: int) -> npt.NDArray[np.intp]:
    # Whole-pixel block edges; never more blocks than pixels, so no block is empty.
    import numpy as np

    return np.round(np.linspace(0, length, min(parts, length) + 1)).astype(np.intp)


def signature(image: npt.NDArray[np.uint8]) -> Signature:
    """Block means below the status bar.

    The means come from an integral image (sums over whole-pixel blocks): exact, and under
    1 ms at 1080p, where cv2.resize(INTER_AREA) needs ~4 ms because 994 rows do not divide
    by 40. Where the size divides evenly the result equals INTER_AREA's.
    """
    import cv2
    import numpy as np

    if image.ndim == 2:
        image = image[:, :, np.newaxis]
    height, width = int(image.shape[0]), int(image.shape[1])
    if height == 0 or width == 0:
        raise ValueError("empty image")
    top = min(math.ceil(height * STATUS_BAR_FRACTION), height - 1)
    region = np.ascontiguousarray(image[top:])
    rows, cols = grid_shape(width, height)
    r = _edges(region.shape[0], rows)
    c = _edges(width, cols)
    exact = region.shape[0] * width * 255 < 2**31
    sums = cv2.integral(region, sdepth=cv2.CV_32S if exact else cv2.CV_64F)
    if sums.ndim == 2:
        sums = sums[:, :, np.newaxis]
    lo, hi = sums[r[:-1]], sums[r[1:]]  # only the 41 or 81 rows the corners need
    corner = [m[:, idx].astype(np.float64) for m in (lo, hi) for idx in (c[:-1], c[1:])]
    total = corner[3] - corner[1] - corner[2] + corner[0]
    area = np.outer(np.diff(r), np.diff(c))[:, :, np.newaxis]
    return Signature((total / area).astype(np.float32), width, height)


def compare(a: Signature, b: Signature, threshold: float) -> Diff:
    """Did the screen change structurally between `a` and `b`? Symmetric in a and b.

    A different frame size or channel count counts as every block changing by the full range.
    """
    if threshold < 0:
        raise ValueError("threshold must be >= 0")
    total = int(b.blocks.shape[0] * b.blocks.shape[1])
    if (a.width, a.height) != (b.width, b.height) or a.blocks.shape != b.blocks.shape:
        return Diff(True, 1.0, 255.0, total, total)
    import numpy as np

    per_block = np.abs(a.blocks - b.blocks).max(axis=2)
    changed = int(np.count_nonzero(per_block > threshold))
    return Diff(
        changed=changed * 100 > CHANGED_BLOCKS_PERCENT * total,  # integers: no rounding edge
        changed_fraction=changed / total,
        max_block_diff=float(per_block.max()),
        changed_blocks=changed,
        total_blocks=total,
    )
