"""calibrate_pointer: measure where the target puts its cursor for known HID positions, and
tap through that measured map from then on (daemon/screen/calibrate.py does the fitting).

The pointer goes to each of calibrate.POINTS (HID positions, no map applied), a frame captured
after the move (and after iOS's cursor animation) shows the cursor there; the cursor is found
in the whole frame, a line per axis is fitted from HID position to frame pixel, and the map is
kept in the state folder for the screen rectangle it was made with. Taps use it while the
screen geometry stays that rectangle. A touchscreen (Android) has no cursor to find: the tool
says so.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import TYPE_CHECKING, Any

import structlog

from daemon.catalog import CallContext, ToolSpec, object_schema
from daemon.engine import program as prog
from daemon.engine.program import Point
from daemon.errors import ToolError
from daemon.frames import Frame
from daemon.runtime import Runtime
from daemon.screen import calibrate
from daemon.screen.geometry import IDENTITY, ScreenFrames

if TYPE_CHECKING:
    from daemon.frames import Image

log = structlog.get_logger("daemon.tools.calibration")

ARGS = object_schema(
    {
        "forget": {
            "type": "boolean",
            "default": False,
            "description": "drop the kept calibration (taps go back to the platform's map)",
        }
    }
)
RESULT = object_schema(
    {
        "ok": {"type": "boolean"},
        "residual_px": {"type": "number"},
        "points": {"type": "array"},
        "screen": {"type": "object"},
        "hid_map": {"type": "object"},
        "forgotten": {"type": "boolean"},
    },
    ["ok"],
)


def tools(rt: Runtime) -> list[ToolSpec]:
    geometry, state_dir = rt.geometry, rt.config.state_dir

    async def calibrate_pointer(args: dict[str, Any], ctx: CallContext) -> Any:
        if args["forget"]:
            await asyncio.to_thread(calibrate.forget, state_dir)
            geometry.calibration = None
            return {"ok": True, "forgotten": True, "hid_map": geometry.status()["hid_map"]}
        engine = rt.engine
        if engine.pointer.kind != "mouse":
            raise ToolError(
                "calibration_unavailable",
                "this target's pointer is a touchscreen: it shows no cursor to find in the "
                "frame, so there is nothing to measure; touches map across the whole captured "
                "frame, bars included (Android binds a USB touchscreen to its HDMI display)",
            )
        source = rt.screen.source
        if not isinstance(source, ScreenFrames):
            raise ToolError("calibration_unavailable", "no screen geometry on this daemon")
        raw = dataclasses.replace(engine.pointer, map=IDENTITY)  # HID positions as they are
        timeout = rt.screen.frame_timeout_s

        async def shown(before: Frame) -> Frame:
            """The first frame that shows the cursor moved from `before` and at rest (the
            next frame the same): the display path shows a move late (an HDMI chain, the
            desktop tier's emulated one 0.4-1.1 s), and iOS animates its cursor. After
            SETTLE_TIMEOUT_S, the last frame (a cursor already there does not move)."""
            deadline = time.monotonic() + calibrate.SETTLE_TIMEOUT_S
            frame, moved = before, False
            while time.monotonic() < deadline:
                nxt = await source.full_frame(newer_than=frame.captured_at, timeout=timeout)
                still = not await asyncio.to_thread(calibrate.differs, frame.image, nxt.image)
                moved = moved or await asyncio.to_thread(calibrate.differs, before.image, nxt.image)
                if moved and still:
                    return nxt
                frame = nxt
            return frame

        images: list[Image] = []
        frame = await source.full_frame(timeout=timeout)
        async with engine.invocation("calibrate_pointer") as s:
            for x, y in calibrate.POINTS:
                await s.run(prog.mouse_move(rt.config.input, raw, Point(x, y)))
                await asyncio.sleep(raw.settle_ms / 1000)  # iOS animates the cursor there
                frame = await shown(frame)
                images.append(frame.image)
        g = geometry.observe(frame)
        seen = await asyncio.to_thread(calibrate.find_cursors, images)
        missing = [p for p, c in zip(calibrate.POINTS, seen, strict=True) if c is None]
        if missing:
            raise ToolError(
                "cursor_not_found",
                f"the cursor did not show in the frame at {len(missing)} of "
                f"{len(calibrate.POINTS)} positions: on an iPhone, AssistiveTouch must be on; "
                "the screen must not change meanwhile",
                retryable=True,
                details={"missing": [list(p) for p in missing]},
            )
        found = [c for c in seen if c is not None]
        try:
            fit = calibrate.fit(calibrate.POINTS, found, g.rect, (g.frame_w, g.frame_h))
        except ValueError as e:
            raise ToolError("cursor_not_found", str(e), retryable=True) from None
        await asyncio.to_thread(calibrate.save, state_dir, fit)
        geometry.calibration = fit
        log.info("screen.calibrated", residual_px=round(fit.residual_px, 2), **g.to_dict())
        return {
            "ok": True,
            "residual_px": round(fit.residual_px, 2),
            "points": [
                {
                    "hid": {"x": h[0], "y": h[1]},
                    "seen": {"x": round(c[0], 1), "y": round(c[1], 1)},
                    "fitted": {
                        "x": round(fit.ax * h[0] + fit.bx, 1),
                        "y": round(fit.ay * h[1] + fit.by, 1),
                    },
                }
                for h, c in zip(calibrate.POINTS, found, strict=True)
            ],
            "screen": g.to_dict(),
            "hid_map": geometry.status()["hid_map"],
        }

    return [
        ToolSpec(
            name="calibrate_pointer",
            title="Calibrate Pointer",
            description="Measure where the target puts its cursor: the pointer goes to five "
            "known positions, the cursor is found in the captured frame each time, and a map "
            "from pointer position to screen pixel is fitted. Returns residual_px (the largest "
            "miss, in frame pixels), each position (hid, seen, fitted) and the map now used. "
            "Taps use the measured map while the screen stays where it was measured; it is "
            "kept across restarts. forget: true drops it. Needs a visible cursor (iPhone: "
            "AssistiveTouch on); a touchscreen (Android) has none: calibration_unavailable.",
            category="input",
            policy="write",
            handler=calibrate_pointer,
            args_schema=ARGS,
            result_schema=RESULT,
            example_input={},
            hid=True,
            keywords=("calibrate", "cursor", "mapping", "hdmi"),
            timeout_s=60.0,
        )
    ]
