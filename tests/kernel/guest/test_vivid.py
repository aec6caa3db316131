"""vivid, the kernel's virtual V4L2 capture device: a frame read with OpenCV inside the guest.

The capture issue replaces this with the daemon's own capture code.
"""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np


def vivid_capture_node() -> str:
    for node in sorted(Path("/sys/class/video4linux").iterdir()):
        if (node / "name").read_text().strip().endswith("vid-cap"):
            return f"/dev/{node.name}"
    raise AssertionError("vivid has no video capture node (is the vivid module loaded?)")


def test_vivid_frame_reads_with_opencv() -> None:
    cap = cv2.VideoCapture(vivid_capture_node(), cv2.CAP_V4L2)
    try:
        assert cap.isOpened()
        cap.set(cv2.CAP_PROP_FRAME_WIDTH, 640)
        cap.set(cv2.CAP_PROP_FRAME_HEIGHT, 360)
        ok, frame = cap.read()
    finally:
        cap.release()
    assert ok and frame is not None
    assert frame.shape == (360, 640, 3)
    assert frame.dtype == np.uint8
    # vivid's default test pattern is colour bars: many distinct colours, not a blank frame.
    assert len(np.unique(frame.reshape(-1, 3), axis=0)) >= 8
