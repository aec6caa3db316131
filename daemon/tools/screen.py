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
        "quality": {"type": "integer", "minimum": 1, "maximum": 100, "default": 80},
        "max_width": {"type": "integer", "minimum": 16, "maximum": 8192},
        "scale": {"type": "number", "minimum": 0.01, "maximum": 1},  # 1 % of a 1080p frame: 19 px
        "format": {"enum": ["jpeg", "png"], "default": "jpeg"},
    }
)

STABLE_ARGS = object_schema(
    {
        "timeout_ms": {"type": "integer", "minimum": 0, "maximum": 60000, "default": 3500},
        "stable_ms": {"type": "integer", "minimum": 0, "maximum": 60000, "default": 500},
        "diff_threshold": {"type": "number", "minimum": 0, "maximum": 255, "default": 2},
    }
)


def capture_availability(rt: Runtime) -> Availability:
    ok, reason = rt.backend.frames.available()
    if ok:
        return AVAILABLE
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

    async def screenshot(args: dict[str, Any], ctx: CallContext) -> Any:
        return await screen.screenshot(
            quality=args.get("quality", 80),
            max_width=args.get("max_width"),
            scale=args.get("scale"),
            fmt=args.get("format", "jpeg"),
        )

    async def wait_for_stable_screen(args: dict[str, Any], ctx: CallContext) -> Any:
        return await screen.wait_for_stable(
            timeout_ms=args.get("timeout_ms", 3500),
            stable_ms=args.get("stable_ms", 500),
            diff_threshold=args.get("diff_threshold", 2.0),
        )

    def available() -> Availability:
        return capture_availability(rt)

    return [
        ToolSpec(
            name="screenshot",
            title="Screenshot",
            description="Capture the target's current screen. Returns width, height, format, "
            "size and base64 data (JPEG by default), plus the frame's capture time. Optional "
            "quality, max_width or scale, and format (jpeg or png).",
            category="screen",
            policy="read",
            handler=screenshot,
            args_schema=SCREENSHOT_ARGS,
            result_schema=object_schema(SCREENSHOT_FIELDS, SCREENSHOT_REQUIRED),
            example_input={},
            availability=available,
            keywords=("screen", "capture", "image"),
            evidence=True,
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
            example_input={"timeout_ms": 3500, "stable_ms": 500, "diff_threshold": 2},
            availability=available,
            keywords=("settle", "idle", "stability"),
            evidence=True,
            timeout_s=65.0,
            qualify=lambda r: SCREEN_NOT_SETTLED if r.get("stable") is False else None,
        ),
    ]
