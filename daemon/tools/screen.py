"""Screen tools: screenshot and wait_for_stable_screen (thin over daemon.screen.service)."""

from __future__ import annotations

from typing import Any

from daemon.catalog import (
    AVAILABLE,
    SCREEN_NOT_SETTLED,
    Availability,
    CallContext,
    ToolSpec,
    object_schema,
)
from daemon.runtime import Runtime
from daemon.screen.capture_dv import REMEDIATION, SIGNAL_STATES
from daemon.screen.options import SHOT, STABLE, ShotOptions, StableOptions

SCREENSHOT_FIELDS: dict[str, Any] = {
    "width": {"type": "integer"},
    "height": {"type": "integer"},
    "format": {"enum": ["jpeg", "png"]},
    "size": {"type": "integer"},
    "data": {"type": "string", "contentEncoding": "base64"},
    "captured_at": {"type": "string"},
}
SCREENSHOT_REQUIRED = ["width", "height", "format", "size", "data"]

SCREENSHOT_ARGS = object_schema(
    {
        "quality": {
            "type": "integer",
            "minimum": 1,
            "maximum": 100,
            "default": SHOT.quality,
            "description": "JPEG quality (png ignores it): lower is smaller and blurrier",
        },
        "max_width": {
            "type": "integer",
            "minimum": 16,
            "maximum": 8192,
            "description": "shrink to at most this many pixels wide, keeping the aspect ratio "
            "(never enlarges; default: the frame's width)",
        },
        "scale": {  # 1 % of a 1080p frame: 19 px
            "type": "number",
            "minimum": 0.01,
            "maximum": 1,
            "description": "shrink by this factor first (default 1: full size); max_width then "
            "caps the result",
        },
        "format": {
            "enum": ["jpeg", "png"],
            "default": SHOT.fmt,
            "description": "jpeg (small) or png (lossless, several times larger)",
        },
        "area": {
            "enum": ["screen", "frame"],
            "default": SHOT.area,
            "description": "screen: the target's own screen, the bars an HDMI adapter adds cut "
            "off (what every coordinate counts in); frame: the whole captured frame",
        },
    }
)

_MS, _STABLE_MS, _DIFF = STABLE.timeout_ms, STABLE.stable_ms, STABLE.diff_threshold
STABLE_ARGS = object_schema(
    {
        "timeout_ms": {
            "type": "integer",
            "minimum": 0,
            "maximum": 60000,
            "default": _MS,
            "description": "give up after this long (screen_stable false, the last screenshot)",
        },
        "stable_ms": {
            "type": "integer",
            "minimum": 0,
            "maximum": 60000,
            "default": _STABLE_MS,
            "description": "the screen counts as settled once unchanged this long",
        },
        "diff_threshold": {
            "type": "number",
            "minimum": 0,
            "maximum": 255,
            "default": _DIFF,
            "description": "mean pixel difference (0..255) between frames below which the "
            "screen counts as unchanged; raise it for a noisy capture",
        },
    }
)


def capture_availability(rt: Runtime) -> Availability:
    frames = rt.backend.frames
    ok, reason = frames.available()
    if ok:
        return AVAILABLE
    # An HDMI bridge's state is its own code (no_signal, ...; daemon/screen/capture_dv.py).
    state = getattr(frames, "state", None) if hasattr(frames, "capture_status") else None
    if state in SIGNAL_STATES:
        return Availability(
            False,
            state,
            reason,
            required_state="the target sending video to the HDMI bridge",
            remediation=REMEDIATION[state],
            retryable=True,
        )
    return Availability(
        False,
        "capture_unavailable",
        reason or "the capture device is not delivering frames",
        required_state="capture device connected and streaming",
        remediation="check the HDMI/UVC capture cable and [capture].device; capture resumes "
        "by itself when the device comes back",
        retryable=True,
    )


def tools(rt: Runtime) -> list[ToolSpec]:
    screen = rt.screen

    async def screenshot(args: ShotOptions, ctx: CallContext) -> Any:
        return await screen.screenshot(args)

    async def wait_for_stable_screen(args: StableOptions, ctx: CallContext) -> Any:
        return await screen.wait_for_stable(args)

    def available() -> Availability:
        return capture_availability(rt)

    return [
        ToolSpec(
            name="screenshot",
            title="Screenshot",
            description="Capture the target's current screen (cut to the target's own screen "
            "when the capture adds bars around it). Returns width, height, format, size and "
            "base64 data (JPEG by default), plus the frame's capture time. Optional quality, "
            "max_width or scale, format (jpeg or png), and area frame for the whole captured "
            "frame.",
            category="screen",
            policy="read",
            handler=screenshot,
            args_schema=SCREENSHOT_ARGS,
            args_type=ShotOptions.from_args,
            result_schema=object_schema(SCREENSHOT_FIELDS, SCREENSHOT_REQUIRED),
            example_input={},
            availability=available,
            keywords=("screen", "capture", "image"),
            evidence=True,
            private=True,
        ),
        ToolSpec(
            name="wait_for_stable_screen",
            title="Wait For Stable Screen",
            description="Wait until the screen stops changing (no structural change for "
            "stable_ms) or timeout_ms passes. Returns ok, stable, elapsed_ms, screen_changed "
            "(against the frame at the start of the wait), last_diff diagnostics and a "
            "screenshot. stable=false means the screen is still changing, but the screenshot "
            "is still a current observation.",
            category="screen",
            policy="read",
            handler=wait_for_stable_screen,
            args_schema=STABLE_ARGS,
            args_type=StableOptions,
            result_schema=object_schema(
                {
                    "ok": {"type": "boolean"},
                    "stable": {"type": "boolean"},
                    "elapsed_ms": {"type": "integer"},
                    "screen_changed": {"type": "boolean"},
                    "last_diff": {"type": ["object", "null"]},
                    **SCREENSHOT_FIELDS,
                },
                ["ok", "stable", "elapsed_ms", "screen_changed", *SCREENSHOT_REQUIRED],
            ),
            example_input={"timeout_ms": _MS, "stable_ms": _STABLE_MS, "diff_threshold": _DIFF},
            availability=available,
            keywords=("settle", "idle", "stability"),
            evidence=True,
            private=True,
            timeout_s=65.0,
            qualify=lambda r: SCREEN_NOT_SETTLED if r.get("stable") is False else None,
        ),
    ]
