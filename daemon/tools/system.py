"""Portable system tools: health_check, weather, wait_for_wakeup, and SKILL.md skills."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import aiohttp
import structlog

from daemon import VERSION
from daemon.catalog import CallContext, ToolSpec, object_schema, schema_errors
from daemon.errors import ToolError
from daemon.runtime import Runtime
from daemon.wire import iso_utc

log = structlog.get_logger("daemon.tools.system")

TEXT_ARGS = object_schema({"input": {"type": "string"}})


def health_tool(rt: Runtime) -> ToolSpec:
    # Fixed for the daemon's life (a frozen config, backend parts built once): looked up here
    # once, not on every call.
    board = getattr(rt.backend, "status", None)  # the board's HID roles and keyboard LEDs
    board_status = board if callable(board) else None
    frames, profiles, run_state = rt.backend.frames, rt.backend.profiles, rt.run_state
    device_type, backend = rt.config.device.device_type, rt.config.backend.kind
    platform = rt.platform
    layout, hid = rt.config.device.layout, rt.backend.hid

    def keyboard() -> dict[str, Any]:
        """The target's layout and its lock keys as its last LED report set them (null for
        each while it has sent none since it enumerated)."""
        leds = hid.led_reports()[1]
        locks = {
            "caps_lock": None if leds is None else leds.caps_lock,
            "num_lock": None if leds is None else leds.num_lock,
            "scroll_lock": None if leds is None else leds.scroll_lock,
        }
        return {"layout": layout.name, "layout_name": layout.label, **locks}

    async def health(args: dict[str, Any], ctx: CallContext) -> Any:
        capture_ok, capture_reason = frames.available()
        capture: dict[str, Any] = {"available": capture_ok, "reason": capture_reason}
        capture_status = getattr(frames, "capture_status", None)  # a capture device's state
        if callable(capture_status):
            capture.update(capture_status())
        extra = {"hid": board_status()} if board_status is not None else {}
        extra.update({name: section() for name, section in rt.status.items()})
        return {
            **extra,
            "ok": True,
            "version": VERSION,
            "uptime_s": round(time.monotonic() - rt.started_at, 1),
            "device_type": device_type,
            "platform": platform,
            "backend": backend,
            "profile": profiles.profile,
            "run_state": run_state.state,
            "capture": capture,
            "keyboard": keyboard(),
        }

    return ToolSpec(
        name="health_check",
        title="Health Check",
        description="Report that the daemon is up: version, uptime, target type, backend, live "
        "USB profile, run state, whether screen capture is available (for a capture device: "
        "its state, one of no_device, no_cable, no_signal, no_sync, out_of_range, streaming, "
        "with the source's timings, and for an HDMI bridge the EDID it was given), and the "
        "keyboard: the "
        f"target's layout ({rt.config.device.layout.label}) and its Caps/Num/Scroll Lock as "
        "its last LED report set them (null before its first), the USB link (usb.state: "
        "not_attached, attached, configured or suspended while the target sleeps; "
        "usb.can_wake: whether wake_target can wake it, and why), the live stream's viewers, "
        "delivered fps and dropped frames, on-device OCR (on or off, its worker process "
        "running or stopped, its last failure), the screen geometry (where the target's screen "
        "is inside the captured frame, its orientation, whether detected, configured or the "
        "full frame, and how the HID pointer spans it), and the security posture: each "
        "listener and whether it has TLS, the certificate's fingerprint, where the token is "
        "required, each transport's guard, who can reach the shell tool, the client tokens' "
        "policies (by id) and any warnings. Takes no arguments.",
        category="system",
        policy="read",
        handler=health,
        example_input={},
        result_schema=object_schema(
            {
                "ok": {"type": "boolean"},
                "version": {"type": "string"},
                "uptime_s": {"type": "number"},
                "device_type": {"type": "string"},
                "platform": {"type": "string"},
                "backend": {"type": "string"},
                "profile": {"type": "string"},
                "run_state": {"type": "string"},
                "capture": {"type": "object"},
                "keyboard": {"type": "object"},
                "hid": {"type": "object"},
                "usb": {"type": "object"},
                "trace": {"type": "object"},
                "stream": {"type": "object"},
                "ocr": {"type": "object"},
                "screen": {"type": "object"},
                "media": {"type": "object"},
                "security": {"type": "object"},
            },
            required=["ok", "version"],
        ),
        keywords=("status", "ping"),
    )


_WEATHER_ARGS = object_schema(
    {
        "location": {"type": "string", "minLength": 1, "description": "a place name"},
        "latitude": {
            "type": "number",
            "minimum": -90,
            "maximum": 90,
            "description": "degrees north (with longitude, instead of location)",
        },
        "longitude": {
            "type": "number",
            "minimum": -180,
            "maximum": 180,
            "description": "degrees east (with latitude, instead of location)",
        },
        "days": {
            "type": "integer",
            "minimum": 1,
            "maximum": 7,
            "default": 3,
            "description": "days of forecast, today first",
        },
    },
    oneOf=[{"required": ["location"]}, {"required": ["latitude", "longitude"]}],
)


# What we read of Open-Meteo's replies: anything else in them is ignored, anything missing or of
# the wrong type is the upstream's fault (weather_upstream_error), never ours (a 500).
_GEO_REPLY = {
    "type": "object",
    "properties": {
        "results": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "country": {"type": "string"},
                    "timezone": {"type": "string"},
                    "latitude": {"type": "number", "minimum": -90, "maximum": 90},
                    "longitude": {"type": "number", "minimum": -180, "maximum": 180},
                },
                "required": ["latitude", "longitude"],
            },
        }
    },
}
_FORECAST_REPLY = {
    "type": "object",
    "properties": {
        "current": {"type": "object"},
        "current_units": {"type": "object"},
        "daily": {
            "type": "object",
            "properties": {"time": {"type": "array", "items": {"type": "string"}}},
            "required": ["time"],
            "additionalProperties": {"type": "array"},
        },
    },
    "required": ["current", "daily"],
}


def _not_json(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def _bad_reply(message: str) -> ToolError:
    return ToolError(
        "weather_upstream_error",
        f"weather service sent an unusable reply: {message}",
        retryable=True,  # a captive portal or a proxy in the way answers HTML; it passes
    )


async def _read_capped(resp: aiohttp.ClientResponse, cap: int) -> bytes:
    """The body, read no further than `cap` bytes (an endless upstream costs `cap`, not RAM)."""
    if (resp.content_length or 0) > cap:
        raise _bad_reply(f"{resp.content_length} bytes, over [weather].max_reply_bytes ({cap})")
    body = bytearray()
    async for chunk in resp.content.iter_chunked(65536):
        body += chunk
        if len(body) > cap:
            raise _bad_reply(f"over [weather].max_reply_bytes ({cap})")
    return bytes(body)


def _decode(body: bytes, schema: dict[str, Any]) -> Any:
    try:
        doc = json.loads(body, parse_constant=_not_json)
    except (ValueError, RecursionError) as exc:  # HTML, truncated, NaN, nested too deep
        raise _bad_reply(f"not JSON ({str(exc)[:80]})") from None
    errors = schema_errors(schema, doc)
    if errors:
        raise _bad_reply(f"{errors[0]['path']}: {errors[0]['message'][:120]}")
    return doc


def _forecast_days(daily: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """One entry per day; a series not as long as `time` makes the reply unusable."""
    days = len(daily["time"])
    short = sorted(k for k, v in daily.items() if len(v) != days)
    if short:
        raise _bad_reply(f"daily series {', '.join(short)} do not have {days} values")
    return [{key: series[i] for key, series in daily.items()} for i in range(days)]


def weather_tool(rt: Runtime) -> ToolSpec:
    cfg = rt.config.weather

    async def get_json(
        session: aiohttp.ClientSession, url: str, params: dict[str, Any], schema: dict[str, Any]
    ) -> Any:
        try:
            async with session.get(url, params=params) as resp:
                if resp.status != 200:
                    raise ToolError(
                        "weather_upstream_error",
                        f"weather service answered HTTP {resp.status}",
                        retryable=resp.status >= 500,
                    )
                body = await _read_capped(resp, cfg.max_reply_bytes)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise ToolError(
                "weather_unavailable",
                f"weather service unreachable ({type(exc).__name__}); the board may be offline",
                retryable=True,
            ) from None
        return _decode(body, schema)

    async def weather(args: dict[str, Any], ctx: CallContext) -> Any:
        timeout = aiohttp.ClientTimeout(total=cfg.timeout_s)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            place: dict[str, Any]
            if "location" in args:
                found = await get_json(
                    session,
                    cfg.geocoding_url,
                    {"name": args["location"], "count": 1},
                    _GEO_REPLY,
                )
                results = found.get("results") or []
                if not results:
                    raise ToolError(
                        "weather_location_not_found", f"no place called {args['location']!r}"
                    )
                r = results[0]
                place = {
                    "name": r.get("name"),
                    "country": r.get("country"),
                    "latitude": r["latitude"],
                    "longitude": r["longitude"],
                    "timezone": r.get("timezone"),
                }
            else:
                place = {"latitude": args["latitude"], "longitude": args["longitude"]}
            data = await get_json(
                session,
                cfg.forecast_url,
                {
                    "latitude": place["latitude"],
                    "longitude": place["longitude"],
                    "current": "temperature_2m,relative_humidity_2m,weather_code,wind_speed_10m",
                    "daily": "weather_code,temperature_2m_max,temperature_2m_min,"
                    "precipitation_probability_max",
                    "forecast_days": args["days"],
                    "timezone": "auto",
                },
                _FORECAST_REPLY,
            )
        return {
            "location": place,
            "current": data["current"],
            "units": data.get("current_units") or {},
            "forecast": _forecast_days(data["daily"]),
        }

    return ToolSpec(
        name="weather",
        title="Weather",
        description="Current weather and a short forecast (up to 7 days) from Open-Meteo for a "
        "place name or latitude/longitude. Needs the board to be online; offline is a "
        "retryable weather_unavailable error.",
        category="information",
        policy="read",
        handler=weather,
        args_schema=_WEATHER_ARGS,
        example_input={"location": "Shanghai"},
        keywords=("forecast", "temperature"),
    )


def wakeup_tool(rt: Runtime) -> ToolSpec:
    async def wait_for_wakeup(args: dict[str, Any], ctx: CallContext) -> Any:
        reason = args.get("reason", "")
        rt.run_state.set("waiting_for_wakeup", reason)
        return {
            "ok": True,
            "wait_for_wakeup_requested": True,
            "wait_for_wakeup_reason": reason,
            # Compatibility aliases kept by the contract.
            "sleep_requested": True,
            "sleep_reason": reason,
        }

    return ToolSpec(
        name="wait_for_wakeup",
        title="Wait For Wakeup",
        description="End the current agent run and return to waiting for the next wakeup. Use "
        "it when the user asks to sleep, stop listening or wait for the next wakeup, instead of "
        "replying with text. Terminating: no final answer is expected after it succeeds.",
        category="runtime",
        policy="read",
        handler=wait_for_wakeup,
        args_schema=object_schema(
            {
                "reason": {
                    "type": "string",
                    "maxLength": 500,
                    "description": "why the agent goes to sleep (kept in the trace)",
                }
            }
        ),
        result_schema=object_schema(
            {
                "ok": {"type": "boolean"},
                "wait_for_wakeup_requested": {"type": "boolean"},
                "wait_for_wakeup_reason": {"type": "string"},
                "sleep_requested": {"type": "boolean"},
                "sleep_reason": {"type": "string"},
            },
            required=["wait_for_wakeup_requested", "sleep_requested"],
        ),
        example_input={"reason": "user asked to sleep"},
        terminating=True,
    )


_FRONT_MATTER = re.compile(r"\A---\n(.*?)\n---\n", re.S)
_NAME = re.compile(r"[^a-z0-9_]+")


def _skill_meta(text: str, fallback: str) -> tuple[str, str]:
    """(name, description) from the SKILL.md front matter (simple `key: value` lines)."""
    meta: dict[str, str] = {}
    m = _FRONT_MATTER.match(text)
    if m:
        for line in m.group(1).splitlines():
            key, sep, value = line.partition(":")
            if sep and not line.startswith((" ", "\t")):
                meta[key.strip()] = value.strip().strip("'\"")
    name = _NAME.sub("_", (meta.get("name") or fallback).lower()).strip("_") or fallback
    return name, meta.get("description", f"The {name} skill.")


def skill_tools(rt: Runtime, taken: Iterable[str] = ()) -> list[ToolSpec]:
    """Every */SKILL.md under the skills folder is a text-mode tool returning its content.

    A skill that cannot be read, or whose tool name is `taken` (by an internal tool) or was
    given to a skill before it, is left out with a warning: one bad file in the folder must not
    keep the daemon from starting (a name clash raised at registration, and systemd restarted
    the daemon into the same failure)."""
    if not rt.config.skills.dir:
        return []
    specs: list[ToolSpec] = []
    names = set(taken)
    for path in sorted(Path(rt.config.skills.dir).glob("*/SKILL.md")):
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            log.warning("skill_left_out", path=str(path), reason=str(exc))
            continue
        name, description = _skill_meta(text, path.parent.name)
        if f"skill_{name}" in names:
            log.warning("skill_left_out", path=str(path), reason=f"skill_{name} is taken")
            continue
        names.add(f"skill_{name}")

        async def read_skill(args: dict[str, Any], ctx: CallContext, path: Path = path) -> Any:
            try:
                content = await asyncio.to_thread(path.read_text, encoding="utf-8")
                return {"skill": path.parent.name, "content": content}
            except OSError as exc:
                raise ToolError("skill_unreadable", f"cannot read {path}: {exc}") from None

        specs.append(
            ToolSpec(
                name=f"skill_{name}",
                title=f"Skill: {name}",
                description=f"{description} Returns the skill's SKILL.md instructions.",
                category="skill",
                policy="read",
                handler=read_skill,
                input_mode="text",
                args_schema=TEXT_ARGS,
                example_input=name,
            )
        )
    return specs


def rotate_token_tool(rt: Runtime) -> ToolSpec:
    auth = rt.auth

    async def rotate_token(args: dict[str, Any], ctx: CallContext) -> Any:
        token, closed = await auth.rotate()
        return {
            "token_id": "pairing",
            "token": token,
            "token_file": str(auth.token_file),
            "rotated_at": iso_utc(auth.rotated_at or time.time()),
            "connections_closed": closed,
        }

    return ToolSpec(
        name="rotate_token",
        title="Rotate Pairing Token",
        description="Replace the pairing token with a new one, at once and without a restart: "
        "the old token is refused from the next request on, and the WebSocket sessions and "
        "streams it opened are closed. Returns the new token (also written to the state "
        "folder, 0600); keep it, the caller's old one no longer works. Client tokens from the "
        "config are not changed. Refused (token_in_config) when [auth].token sets the pairing "
        "token. On the board itself: `fingertip token rotate`.",
        category="system",
        policy="critical",
        handler=rotate_token,
        exposure="http",  # a person's act, not a model's: not in MCP, WS or IPC catalogs
        result_schema=object_schema(
            {
                "token_id": {"type": "string"},
                "token": {"type": "string", "writeOnly": True},
                "token_file": {"type": "string"},
                "rotated_at": {"type": "string"},
                "connections_closed": {"type": "integer"},
            },
            required=["token_id", "token", "rotated_at"],
        ),
        keywords=("security", "revoke", "pairing"),
    )


def internal_tools(rt: Runtime) -> list[ToolSpec]:
    """Maintenance tools of the agent runtime: registered, never listed or callable over a
    transport (exposure internal)."""

    async def refuse(args: dict[str, Any], ctx: CallContext) -> Any:
        raise ToolError("tool_not_found", "internal tool")

    return [
        ToolSpec(n, d, "maintenance", "write", refuse, exposure="internal")
        for n, d in (
            ("skill_manage", "Create, edit or delete skills (agent-internal)."),
            ("skill_mark_used", "Record that a skill was used (agent-internal)."),
        )
    ]


def tools(rt: Runtime) -> list[ToolSpec]:
    internal = internal_tools(rt)
    return [
        health_tool(rt),
        rotate_token_tool(rt),
        weather_tool(rt),
        wakeup_tool(rt),
        *skill_tools(rt, taken=[t.name for t in internal]),
        *internal,
    ]
