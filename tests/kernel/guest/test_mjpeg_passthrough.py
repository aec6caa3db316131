"""A UVC-like MJPEG source through v4l2loopback: the capture serves the device's own JPEG bytes
(passthrough), decoding nothing for a screenshot that needs no resize (guest only).

vivid has no MJPEG; v4l2loopback carries any format a writer sets. The module is built into the
kernel share by the tier's set-up (tests/kernel/setup.py); without it this test is skipped,
saying so. The writer is this test: it sets MJPG on the loopback's output side and writes known
JPEG frames, each a different picture, as a grabber's firmware would.

Unlike a UVC grabber, v4l2loopback (0.12.7) sets every buffer's `bytesused` to the whole buffer
(640x360x4 bytes) when a reader requests buffers (VIDIOC_REQBUFS), so a frame written before
the capture opened comes back followed by the rest of its buffer, as a grabber that pads its
frames would deliver it; such a frame was served padded until the capture cut the JPEG out of
its buffer (daemon/screen/jpeg.py), and the byte-for-byte check failed whenever the writer's
timing made it the first one served. The test now makes that frame the first on purpose: with
a freshly loaded module, two frames written before the capture opens are the device's frames 0
and 1 (its ring holds two), a new reader starts at frame 0, and OpenCV's V4L2 backend drops the
first frame it dequeues after STREAMON (seen with strace in the guest: DQBUF, QBUF, DQBUF). So
the first frame served is frame 1 with 921600 bytes used (frame 0 if OpenCV stopped dropping
one): the capture must cut it to serve it byte for byte. The frames streamed afterwards, each
written after the capture opened, are checked too.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import cv2
import numpy as np
import pytest
from usbhost import SLOWNESS

from daemon.config import CaptureConfig
from daemon.screen import v4l2
from daemon.screen.capture import V4L2Capture
from daemon.screen.encode import encode

pytestmark = pytest.mark.skipif(
    not os.environ.get("FINGERTIP_KERNEL_GUEST"), reason="runs inside the kernel-test VM"
)

NODE = "/dev/video20"
WIDTH, HEIGHT = 640, 360


def loopback_module() -> Path:
    root = Path(os.environ.get("FINGERTIP_KERNEL_ROOT", "/nonexistent"))
    return root / "lib/modules" / os.uname().release / "extra/v4l2loopback.ko"


def jpegs(count: int) -> list[bytes]:
    out = []
    for i in range(count):
        image = np.zeros((HEIGHT, WIDTH, 3), np.uint8)
        image[:, : WIDTH * (i + 1) // count] = (40 * i % 256, 200, 90)
        cv2.putText(image, f"frame {i}", (40, 200), cv2.FONT_HERSHEY_SIMPLEX, 3, (255,) * 3, 5)
        out.append(cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, 80])[1].tobytes())
    return out


class MjpegWriter:
    """The loopback's producer: MJPG frames written one per write(), by hand or round and
    round once started."""

    def __init__(self, frames: list[bytes]) -> None:
        self.frames = frames
        self.fd = os.open(NODE, os.O_RDWR)
        fmt = v4l2.Format(type=v4l2.BUF_TYPE_VIDEO_OUTPUT)
        v4l2.ioctl(self.fd, v4l2.G_FMT, fmt)
        pix = fmt.fmt.pix
        pix.width, pix.height, pix.pixelformat = WIDTH, HEIGHT, v4l2.fourcc("MJPG")
        pix.field, pix.bytesperline = v4l2.FIELD_NONE, 0
        pix.sizeimage = max(len(f) for f in frames) + 4096
        v4l2.ioctl(self.fd, v4l2.S_FMT, fmt)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def write(self, frame: bytes) -> None:
        assert os.write(self.fd, frame) == len(frame)

    def start(self) -> None:
        self.thread.start()

    def _run(self) -> None:
        i = 0
        while not self.stop.is_set():
            self.write(self.frames[i % len(self.frames)])
            i += 1
            self.stop.wait(1 / 15)

    def close(self) -> None:
        self.stop.set()
        if self.thread.is_alive():
            self.thread.join(5)
        os.close(self.fd)


@pytest.fixture(scope="module")
def writer() -> Iterator[MjpegWriter]:
    ko = loopback_module()
    if not ko.exists():
        pytest.skip(f"{ko} is not built (the kernel tier's setup builds it: make kernel-setup)")
    if os.path.exists(NODE):  # a fresh module: its frame count starts at 0 (see the docstring)
        subprocess.run(["rmmod", "v4l2loopback"], check=True, capture_output=True)
    subprocess.run(
        ["insmod", str(ko), "video_nr=20", "card_label=MJPEG grabber", "exclusive_caps=1"],
        check=True,
        capture_output=True,
    )
    w = MjpegWriter(jpegs(5))
    try:
        yield w
    finally:
        w.close()
        subprocess.run(["rmmod", "v4l2loopback"], check=False, capture_output=True)


async def test_mjpeg_frames_are_served_as_the_devices_own_bytes(writer: MjpegWriter) -> None:
    config = CaptureConfig(
        device=NODE, width=WIDTH, height=HEIGHT, fps=15.0, fourcc="MJPG", idle_stop_s=5.0
    )
    before = time.monotonic()
    padded = writer.frames[:2]
    for frame_bytes in padded:  # written before the capture opens (see the docstring)
        writer.write(frame_bytes)
    cap = V4L2Capture(config)
    try:
        frame = await cap.frame(newer_than=before, timeout=10 * SLOWNESS)
        assert cap.capture_status()["path"] == "uvc"  # no DV timings: the OpenCV path
        assert frame.jpeg is not None, "the JPEG was decoded and dropped, not passed through"
        assert len(frame.jpeg) in [len(f) for f in padded], "the JPEG was not cut out of its buffer"
        assert frame.jpeg in padded  # byte for byte what the source wrote
        assert frame.image.shape == (HEIGHT, WIDTH, 3)
        shot = encode(frame, fmt="jpeg", quality=80, max_width=None, scale=None)
        assert shot.data is frame.jpeg  # the screenshot is the device's JPEG, not a re-encode
        writer.start()
        later = await cap.frame(newer_than=time.monotonic(), timeout=10 * SLOWNESS)
        assert later.jpeg in writer.frames and later.seq > frame.seq
    finally:
        cap.close()
