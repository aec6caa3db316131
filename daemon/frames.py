"""What the screen side hands around: one captured frame, and whatever can produce them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # numpy arrives with the first frame (capture or the simulator), not at start
    import numpy as np
    import numpy.typing as npt

    Image = npt.NDArray[np.uint8]  # H x W x 3, BGR, as OpenCV uses


@dataclass(frozen=True)
class Frame:
    """One frame of the target's screen.

    `image` is decoded BGR. `jpeg` is the device's own JPEG when it delivered MJPEG, so a
    screenshot that needs no resize can be served without decoding and re-encoding.
    """

    image: Image
    seq: int  # increases by one per frame delivered by the source
    captured_at: float  # time.monotonic() when the frame was taken
    captured_at_utc: float  # time.time() at the same moment, for reporting
    jpeg: bytes | None = field(default=None, repr=False)

    @property
    def width(self) -> int:
        return int(self.image.shape[1])

    @property
    def height(self) -> int:
        return int(self.image.shape[0])


class FrameSource(Protocol):
    """A source of fresh frames (the capture device, or the simulated target's renderer)."""

    async def frame(self, *, newer_than: float | None = None, timeout: float = 2.0) -> Frame:
        """The newest frame; with `newer_than`, one captured after that monotonic time.

        Raises daemon.errors.ToolError(code="capture_unavailable", retryable=True) when no
        frame can be had within `timeout`; an HDMI bridge whose source sends nothing usable
        answers its state at once instead (no_cable, no_signal, no_sync, out_of_range; also
        retryable, see daemon/screen/capture_dv.py).
        """
        ...

    def available(self) -> tuple[bool, str]:
        """(True, "") or (False, reason) without starting anything."""
        ...
