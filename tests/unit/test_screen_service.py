"""Screen over a FrameSource test double that plays back programmed frames."""

from __future__ import annotations

import base64
import itertools
import math
import time
from collections.abc import Iterator

import cv2
import numpy as np
import pytest

from daemon.errors import ToolError
from daemon.frames import Frame
from daemon.screen.options import ShotOptions, StableOptions
from daemon.screen.service import Screen

W, H = 320, 200


class ProgrammedFrameSource:
    """TEST DOUBLE for a FrameSource: each frame() call delivers the next programmed image.

    Capture times run on their own clock, `interval` apart and always after `newer_than`, like
    a camera that is never late; the requested `newer_than` values are recorded. Times are
    multiples of 1/8 s, so their differences are exact and frame counts do not depend on
    rounding.
    """

    def __init__(self, images: Iterator[np.ndarray], interval: float = 0.125) -> None:
        self.images = images
        self.interval = interval
        self.clock = math.floor(time.monotonic() / interval) * interval
        self.seq = 0
        self.on = True
        self.asked: list[float | None] = []

    async def frame(self, *, newer_than: float | None = None, timeout: float = 2.0) -> Frame:
        self.asked.append(newer_than)
        if not self.on:
            raise ToolError("capture_unavailable", "test double is off", retryable=True)
        self.clock += self.interval
        if newer_than is not None and self.clock <= newer_than:
            self.clock = (math.floor(newer_than / self.interval) + 1) * self.interval
        self.seq += 1
        return Frame(next(self.images), self.seq, self.clock, time.time())

    def available(self) -> tuple[bool, str]:
        return (True, "") if self.on else (False, "test double is off")


def solid(value: int) -> np.ndarray:
    return np.full((H, W, 3), value, np.uint8)


def clock_only(second: int) -> np.ndarray:
    """Same screen, different clock in the status bar (the top 8 %)."""
    image = solid(90)
    cv2.putText(image, f"12:{second:02d}", (5, 12), cv2.FONT_HERSHEY_PLAIN, 1, (255, 255, 255))
    return image


def then_forever(*images: np.ndarray) -> Iterator[np.ndarray]:
    return itertools.chain(images[:-1], itertools.repeat(images[-1]))


def shown(result: dict[str, object]) -> np.ndarray:
    data = base64.b64decode(str(result["data"]))
    image = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    assert image is not None
    return image


async def test_screenshot_is_encoded_from_a_frame() -> None:
    screen = Screen(ProgrammedFrameSource(itertools.repeat(solid(120))))
    out = await screen.screenshot(ShotOptions(quality=90, max_width=160))
    assert (out["width"], out["height"], out["format"]) == (160, 100, "jpeg")
    assert abs(float(shown(out).mean()) - 120) < 2
    png = await screen.screenshot(ShotOptions(fmt="png"))
    assert png["format"] == "png" and np.array_equal(shown(png), solid(120))


async def test_a_settling_screen_becomes_stable() -> None:
    source = ProgrammedFrameSource(then_forever(solid(10), solid(80), solid(160), solid(240)))
    out = await Screen(source).wait_for_stable(StableOptions(timeout_ms=60_000, stable_ms=300))
    assert out["ok"] is True and out["stable"] is True
    assert out["screen_changed"] is True
    assert out["last_diff"]["changed"] is False  # type: ignore[index]
    assert abs(float(shown(out).mean()) - 240) < 2  # the settled screen, not an earlier one
    # 10, 80, 160, then 240 over >= 300 ms of capture time: 4 frames of 240, 1/8 s apart.
    assert source.seq == 7


async def test_an_unchanging_screen_is_stable_and_unchanged() -> None:
    source = ProgrammedFrameSource(itertools.repeat(solid(50)))
    out = await Screen(source).wait_for_stable(StableOptions(timeout_ms=60_000, stable_ms=500))
    assert (out["stable"], out["screen_changed"]) == (True, False)
    assert source.seq == 5  # 0, 125, ..., 500 ms


async def test_a_ticking_status_bar_does_not_keep_the_screen_unstable() -> None:
    source = ProgrammedFrameSource(clock_only(s) for s in itertools.count())
    out = await Screen(source).wait_for_stable(StableOptions(timeout_ms=60_000, stable_ms=300))
    assert (out["stable"], out["screen_changed"]) == (True, False)


async def test_a_change_that_came_and_went_still_counts_as_changed() -> None:
    source = ProgrammedFrameSource(then_forever(solid(30), solid(200), solid(30)))
    out = await Screen(source).wait_for_stable(StableOptions(timeout_ms=60_000, stable_ms=200))
    assert (out["stable"], out["screen_changed"]) == (True, True)
    assert abs(float(shown(out).mean()) - 30) < 2


async def test_a_never_settling_screen_times_out_with_a_screenshot() -> None:
    source = ProgrammedFrameSource(itertools.cycle([solid(20), solid(220)]))
    out = await Screen(source).wait_for_stable(StableOptions(timeout_ms=300, stable_ms=200))
    assert out["ok"] is True and out["stable"] is False
    assert out["screen_changed"] is True
    assert out["last_diff"]["changed"] is True  # type: ignore[index]
    assert out["size"] == len(base64.b64decode(str(out["data"])))
    assert shown(out).shape == (H, W, 3)
    assert isinstance(out["elapsed_ms"], int)


async def test_stable_ms_zero_is_stable_at_the_first_frame() -> None:
    source = ProgrammedFrameSource(itertools.cycle([solid(20), solid(220)]))
    out = await Screen(source).wait_for_stable(StableOptions(timeout_ms=1000, stable_ms=0))
    assert (out["stable"], out["screen_changed"], source.seq) == (True, False, 1)
    assert "last_diff" not in out


async def test_the_wait_only_uses_frames_captured_after_it_began() -> None:
    source = ProgrammedFrameSource(itertools.repeat(solid(50)))
    before = time.monotonic()
    await Screen(source).wait_for_stable(StableOptions(timeout_ms=60_000, stable_ms=200))
    first, *rest = source.asked
    assert first is not None and first >= before
    assert all(t is not None and t > first for t in rest)


async def test_evidence_with_a_baseline_reports_the_change() -> None:
    source = ProgrammedFrameSource(then_forever(solid(40), solid(200)))
    screen = Screen(source)
    baseline = await screen.baseline()
    assert baseline is not None
    acted = time.monotonic()
    out = await screen.evidence(
        baseline, wait_stable=True, stability=StableOptions(timeout_ms=60_000, stable_ms=200)
    )
    assert out["screen_stable"] is True and out["screen_changed"] is True
    assert isinstance(out["stable_wait_ms"], int)
    assert abs(float(shown(out).mean()) - 200) < 2
    assert all(t is not None and t >= acted for t in source.asked[1:])


async def test_evidence_with_a_baseline_and_no_change() -> None:
    source = ProgrammedFrameSource(itertools.repeat(solid(40)))
    screen = Screen(source)
    baseline = await screen.baseline()
    out = await screen.evidence(baseline, wait_stable=False, delay_ms=20)
    assert out["screen_changed"] is False
    assert "screen_stable" not in out and "stable_wait_ms" not in out


async def test_evidence_without_a_baseline_omits_screen_changed() -> None:
    source = ProgrammedFrameSource(itertools.repeat(solid(40)))
    screen = Screen(source)
    source.on = False
    assert await screen.baseline() is None  # best effort: no error
    source.on = True
    out = await screen.evidence(
        None, wait_stable=True, stability=StableOptions(timeout_ms=60_000, stable_ms=100)
    )
    assert "screen_changed" not in out
    assert out["screen_stable"] is True
    assert {"width", "height", "format", "size", "data", "captured_at"} <= set(out)


async def test_capture_unavailable_reaches_the_caller() -> None:
    source = ProgrammedFrameSource(itertools.repeat(solid(40)))
    source.on = False
    with pytest.raises(ToolError) as e:
        await Screen(source).screenshot()
    assert e.value.code == "capture_unavailable" and e.value.retryable
