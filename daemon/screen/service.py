"""Screen: the async shell the tools call (screenshot, stability wait, post-action evidence).

Everything CPU-bound (signatures, encoding, base64) runs in a worker thread, never on the loop.

The stability rule: frames are taken as the source delivers them, each compared with the one
before it by the structural detector; the screen is *stable* once a run of frames with no
change between consecutive ones spans at least `stable_ms` of capture time (so at 3 fps and
stable_ms=500 three unchanged frames are needed, at 30 fps about sixteen). `stable_ms=0` is
stable on the first frame. The wait ends stable, or unstable at `timeout_ms`, and either way
returns the newest frame as a screenshot. `screen_changed` says whether any frame of the wait
differed from the first one (a change that came and went still counts).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import structlog

from daemon.config import CaptureConfig
from daemon.errors import ToolError
from daemon.evidence import note
from daemon.frames import Frame, FrameSource
from daemon.screen.detector import Diff, Signature, compare, signature
from daemon.screen.encode import encode, screenshot_dict
from daemon.screen.geometry import ScreenFrames
from daemon.screen.options import SHOT, STABLE, ShotOptions, StableOptions

log = structlog.get_logger("daemon.screen")


@dataclass(frozen=True)
class Settled:
    """How a stability wait ended."""

    stable: bool
    elapsed_ms: int
    screen_changed: bool
    last_diff: Diff | None
    frame: Frame
    signature: Signature


def shot(frame: Frame, options: ShotOptions) -> dict[str, Any]:
    """Encode `frame` and make the screenshot fields (blocking: call it in a thread)."""
    encoded = encode(
        frame,
        fmt=options.fmt,
        quality=options.quality,
        max_width=options.max_width,
        scale=options.scale,
    )
    return screenshot_dict(encoded, frame)


class Screen:
    """Screenshots and stability waits over any FrameSource (V4L2 capture or the simulator)."""

    def __init__(
        self,
        source: FrameSource,
        config: CaptureConfig | None = None,
        *,
        baseline_timeout_s: float = 1.0,
    ) -> None:
        self.source = source
        # How long one frame may take before the source is called unavailable.
        self.frame_timeout_s = config.no_frame_timeout_s if config else 2.0
        # A baseline is best effort: it must not hold an action back for long.
        self.baseline_timeout_s = min(baseline_timeout_s, self.frame_timeout_s)

    async def screenshot(self, options: ShotOptions = SHOT) -> dict[str, Any]:
        """A fresh frame (per the source's freshness guarantee), encoded: the target's screen,
        or with area "frame" the whole captured frame, bars included."""
        source = self.source
        if options.area == "frame" and isinstance(source, ScreenFrames):
            frame = await source.full_frame(timeout=self.frame_timeout_s)
        else:
            frame = await source.frame(timeout=self.frame_timeout_s)
        return await asyncio.to_thread(shot, frame, options)

    async def wait_for_stable(
        self, stability: StableOptions = STABLE, options: ShotOptions = SHOT
    ) -> dict[str, Any]:
        """Wait for the screen to settle; `stable: false` still returns the current screen."""
        settled = await self.settle(time.monotonic(), stability)
        out: dict[str, Any] = {
            "ok": True,
            "stable": settled.stable,
            "elapsed_ms": settled.elapsed_ms,
            "screen_changed": settled.screen_changed,
        }
        if settled.last_diff is not None:
            out["last_diff"] = settled.last_diff.to_dict()
        out.update(await asyncio.to_thread(shot, settled.frame, options))
        return out

    async def baseline(self) -> Frame | None:
        """The frame before an action, best effort: None when capture is unavailable."""
        try:
            frame = await self.source.frame(timeout=self.baseline_timeout_s)
            note("before", frame)  # the flight recorder keeps the screen each action started on
            return frame
        except ToolError as e:
            log.info("screen.no_baseline", code=e.code, reason=e.message)
            return None

    async def evidence(
        self,
        baseline: Frame | None,
        *,
        wait_stable: bool,
        stability: StableOptions = STABLE,
        delay_ms: int = 0,
        options: ShotOptions | None = None,
    ) -> dict[str, Any]:
        """The post-action screenshot: after `delay_ms`, and after a stability wait (`stability`)
        if asked.

        Returns screen_stable and stable_wait_ms only when waiting, screen_changed only when
        there was a baseline, then the screenshot fields. Frames are all captured after this
        call (plus delay) began, never before the action ended. Raises capture_unavailable
        when no final frame can be had: the caller decides what that means for its action.
        """
        if delay_ms > 0:
            await asyncio.sleep(delay_ms / 1000)
        since = time.monotonic()
        out: dict[str, Any] = {}
        final_sig: Signature | None = None
        if wait_stable:
            settled = await self.settle(since, stability)
            out["screen_stable"] = settled.stable
            out["stable_wait_ms"] = settled.elapsed_ms
            frame, final_sig = settled.frame, settled.signature
        else:
            frame = await self.source.frame(newer_than=since, timeout=self.frame_timeout_s)
        note("after", frame)
        if baseline is not None:
            out["screen_changed"] = await asyncio.to_thread(
                _changed, baseline, frame, final_sig, stability.diff_threshold
            )
        out.update(await asyncio.to_thread(shot, frame, options or SHOT))
        return out

    async def settle(self, since: float, stability: StableOptions) -> Settled:
        """The stability wait over frames captured after monotonic time `since`.

        The first frame is waited for with the source's own timeout even when `timeout_ms`
        is shorter, so there is always a screenshot to return; `timeout_ms` bounds the rest.
        """
        timeout_ms, stable_ms = stability.timeout_ms, stability.stable_ms
        diff_threshold = stability.diff_threshold
        if timeout_ms < 0 or stable_ms < 0 or diff_threshold < 0:
            raise ValueError("timeout_ms, stable_ms and diff_threshold must be >= 0")
        start = time.monotonic()
        deadline = start + timeout_ms / 1000
        first = await self.source.frame(newer_than=since, timeout=self.frame_timeout_s)
        first_sig = await asyncio.to_thread(signature, first.image)
        frame, sig = first, first_sig
        run_start = first.captured_at
        changed = False
        last_diff: Diff | None = None
        stable = stable_ms == 0
        samples = 1
        while not stable:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                nxt = await asyncio.wait_for(
                    self.source.frame(newer_than=frame.captured_at, timeout=self.frame_timeout_s),
                    remaining,
                )
            except TimeoutError:
                break  # our deadline, not the source's: the screen just did not settle in time
            samples += 1
            nxt_sig = await asyncio.to_thread(signature, nxt.image)
            last_diff = compare(sig, nxt_sig, diff_threshold)
            if last_diff.changed:
                run_start = nxt.captured_at
            if not changed and compare(first_sig, nxt_sig, diff_threshold).changed:
                changed = True
            frame, sig = nxt, nxt_sig
            stable = (frame.captured_at - run_start) * 1000 >= stable_ms
        elapsed_ms = round((time.monotonic() - start) * 1000)
        log.debug(
            "screen.settle",
            stable=stable,
            elapsed_ms=elapsed_ms,
            screen_changed=changed,
            frames=samples,
        )
        return Settled(stable, elapsed_ms, changed, last_diff, frame, sig)


def _changed(baseline: Frame, final: Frame, final_sig: Signature | None, threshold: float) -> bool:
    after = final_sig if final_sig is not None else signature(final.image)
    return compare(signature(baseline.image), after, threshold).changed
