"""Every HID tool: touch_gesture, drag_start, drag_release, keyboard_tap, keyboard_text,
enter_text, mouse_move, mouse_scroll, quick_action, open_app, open_url.

Thin: arguments become report programs (daemon.engine.program, pure and validated whole before
anything is sent) and run in one invocation of the serialized HID flow (daemon.engine.flow),
which owns timing, iOS isolation and cleanup. Post-action evidence comes from the Screen
service: a best-effort baseline inside the invocation, the input, the invocation's cleanup
(release, `full` restored), then the stability wait and final screenshot, still inside the
invocation so the screenshot shows this action and not the next caller's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from daemon.catalog import SCREEN_NOT_SETTLED, CallContext, ToolSpec, object_schema
from daemon.engine import InputEngine, Session, engine_for
from daemon.engine import program as prog
from daemon.engine.program import Point, Program, invalid
from daemon.errors import ToolError
from daemon.frames import Frame
from daemon.runtime import Runtime
from daemon.tools.screen import SCREENSHOT_FIELDS
from gadget import keymap

log = structlog.get_logger("daemon.tools.input")

PHONES = ("ios", "android")
MOUSE_PLATFORMS = frozenset({"ios", "macos", "windows", "linux"})
PHONE_GESTURES = ("tap", "double_tap", "long_press", "swipe", "scroll")
# A held left button means nothing on a desktop, so long_press is a phone gesture.
DESKTOP_GESTURES = ("tap", "double_tap", "swipe", "scroll")

# --- schemas ---------------------------------------------------------------------------------

_COORD = {"type": "number", "minimum": 0}
POINT = object_schema(
    {
        "x": {**_COORD, "description": "0 (left) .. 1000 (right), or pixels"},
        "y": {**_COORD, "description": "0 (top) .. 1000 (bottom), or pixels"},
    },
    required=["x", "y"],
)
COORD_SPACE = {
    "enum": ["normalized", "pixel"],
    "default": "normalized",
    "description": "normalized 0..1000 on both axes (default), or pixels of the screenshot",
}
DIRECTION = {"enum": list(prog.DIRECTIONS)}
_MS = {"type": "integer", "minimum": 0, "maximum": 60000}
# A whole gesture also fits prog.MAX_PROGRAM_MS (checked on the built program).
SPEED = {"type": "number", "minimum": prog.MIN_SPEED, "maximum": 100000}


def gestures_for(platform: str) -> tuple[str, ...]:
    return PHONE_GESTURES if platform in PHONES else DESKTOP_GESTURES


def _atomic_action_schema() -> dict[str, Any]:
    """One action, chosen by its `action` (if/then rather than oneOf, so a refusal names the
    bad field, e.g. $.actions[1].speed, instead of "not valid under any of the schemas")."""
    xy = {"x": _COORD, "y": _COORD}
    kinds = {
        "touch_down": object_schema({"action": {}, **xy}, ["x", "y"]),
        "move_to": object_schema(
            {"action": {}, **xy, "speed": SPEED, "duration_ms": _MS}, ["x", "y"]
        ),
        "wait": object_schema({"action": {}, "duration_ms": _MS}, ["duration_ms"]),
        "touch_up": object_schema({"action": {}}),
    }
    return {
        "type": "object",
        "properties": {"action": {"enum": list(kinds)}},
        "required": ["action"],
        "allOf": [
            {"if": {"properties": {"action": {"const": k}}}, "then": then}
            for k, then in kinds.items()
        ],
    }


def touch_gesture_schema(platform: str) -> dict[str, Any]:
    types = gestures_for(platform)

    def when(kind: str, then: dict[str, Any]) -> dict[str, Any]:
        return {"if": {"properties": {"type": {"const": kind}}, "required": ["type"]}, "then": then}

    rules = [when(k, {"required": ["point"]}) for k in types if k != "swipe"]
    rules.append(
        when(
            "swipe",
            {
                "required": ["start"],
                "oneOf": [{"required": ["end"]}, {"required": ["direction"]}],
            },
        )
    )
    rules.append(when("scroll", {"required": ["point", "direction"]}))
    return object_schema(
        {
            "type": {
                "enum": list(types),
                "description": "the gesture; draggable targets use drag_start/drag_release",
            },
            "point": {**POINT, "description": "where to tap / press / scroll"},
            "start": {**POINT, "description": "swipe start"},
            "end": {**POINT, "description": "swipe end (or give direction)"},
            "direction": {
                **DIRECTION,
                "description": "swipe: the finger's direction (travels to the edge unless "
                "duration_ms is given); scroll: the way the view scrolls (down shows what is "
                "below)",
            },
            "distance": {
                "type": "number",
                "exclusiveMinimum": 0,
                "maximum": 1000,
                "default": prog.SCROLL_DISTANCE,
                "description": "scroll: how far, in normalized units",
            },
            "speed": {
                **SPEED,
                "default": prog.SWIPE_SPEED,
                "description": "swipe speed in normalized units per second",
            },
            "duration_ms": {
                **_MS,
                "description": "swipe: the motion's time (start+end), or sets the travel "
                "(start+direction: speed*duration_ms/1000); long_press: the hold",
            },
            "hold_before_ms": {**_MS, "default": 0, "description": "dwell before moving"},
            "hold_after_ms": {**_MS, "default": 0, "description": "dwell before release"},
            "steps": {
                "type": "integer",
                "minimum": 1,
                "maximum": 1000,
                "default": prog.SWIPE_STEPS,
                "description": "HID interpolation count of a swipe",
            },
            "actions": {
                "type": "array",
                "minItems": 1,
                "maxItems": 200,
                "items": _atomic_action_schema(),
                "description": "advanced: one contact-preserving program of touch_down, "
                "move_to (speed or duration_ms; neither = immediate), wait, touch_up; a "
                "touch_down must be closed by touch_up; the whole program takes at most "
                f"{prog.MAX_PROGRAM_MS / 1000:g} s",
            },
            "coord_space": COORD_SPACE,
        },
        oneOf=[{"required": ["type"]}, {"required": ["actions"]}],
        allOf=rules,
    )


def keyboard_tap_schema(platform: str) -> dict[str, Any]:
    if platform == "android":
        item: dict[str, Any] = {
            "type": "string",
            "minLength": 1,
            "description": "a key name (ctrl, shift, a, enter, f5, volume_up ...) or an Android "
            "KEYCODE_* alias",
        }
    else:
        item = {
            "anyOf": [
                {"enum": sorted(keymap.POINTER_SAFE_KEYCODES)},
                {
                    "type": "string",
                    "minLength": 1,
                    "not": {"pattern": "^[Kk][Ee][Yy][Cc][Oo][Dd][Ee]"},
                },
            ],
            "description": "a key name (cmd, ctrl, shift, a, enter, f5, volume_up ...); of the "
            "Android KEYCODE_* aliases only the media, volume, screenshot and brightness ones",
        }
    return object_schema(
        {
            "keys": {
                "oneOf": [item, {"type": "array", "minItems": 1, "maxItems": 8, "items": item}],
                "description": "one key, or a chord pressed in order and released in reverse: "
                '["ctrl","c"], ["cmd","space"]',
            },
            "repeat": {"type": "integer", "minimum": 1, "maximum": 50, "default": 1},
        },
        required=["keys"],
    )


TEXT = {"type": "string", "minLength": 1, "maxLength": 5000}

EVIDENCE_RESULT = object_schema(
    {
        "action_output": {"type": "object"},
        "screen_stable": {"type": "boolean"},
        "stable_wait_ms": {"type": "integer"},
        "screen_changed": {"type": "boolean"},
        "screenshot_error": {"type": "object"},
        "drag": {"type": "object"},
        **SCREENSHOT_FIELDS,
    },
    required=["action_output"],
)

# --- quick actions -----------------------------------------------------------------------------

# name -> ("keys", key names) | ("swipe", (start x, start y, direction))
QuickAction = tuple[str, Any]
_MEDIA: dict[str, QuickAction] = {
    "volume_up": ("keys", ["volume_up"]),
    "volume_down": ("keys", ["volume_down"]),
    "mute": ("keys", ["mute"]),
    "brightness_up": ("keys", ["brightness_up"]),
    "brightness_down": ("keys", ["brightness_down"]),
}
QUICK_ACTIONS: dict[str, dict[str, QuickAction]] = {
    "ios": {
        "home": ("keys", ["cmd", "h"]),
        "back": ("swipe", (1, 500, "right")),
        "app_switcher": ("keys", ["cmd", "tab"]),
        "notifications": ("swipe", (300, 1, "down")),
        "control_center": ("swipe", (950, 1, "down")),
        "search": ("keys", ["cmd", "space"]),
        "screenshot": ("keys", ["cmd", "shift", "3"]),
        **_MEDIA,
    },
    "android": {
        "home": ("keys", ["KEYCODE_HOME"]),
        "back": ("keys", ["KEYCODE_BACK"]),
        "app_switcher": ("keys", ["KEYCODE_APP_SWITCH"]),
        "notifications": ("swipe", (500, 1, "down")),
        "search": ("keys", ["KEYCODE_SEARCH"]),
        "screenshot": ("keys", ["KEYCODE_SYSRQ"]),
        "lock": ("keys", ["KEYCODE_POWER"]),
        **_MEDIA,
    },
    "macos": {
        "back": ("keys", ["cmd", "["]),
        "app_switcher": ("keys", ["cmd", "tab"]),
        "search": ("keys", ["cmd", "space"]),
        "screenshot": ("keys", ["cmd", "shift", "3"]),
        "lock": ("keys", ["ctrl", "cmd", "q"]),
        **_MEDIA,
    },
    "windows": {
        "home": ("keys", ["win", "d"]),
        "back": ("keys", ["alt", "left"]),
        "app_switcher": ("keys", ["alt", "tab"]),
        "notifications": ("keys", ["win", "n"]),
        "search": ("keys", ["win"]),
        "screenshot": ("keys", ["printscreen"]),
        "lock": ("keys", ["win", "l"]),
        **_MEDIA,
    },
    "linux": {
        "back": ("keys", ["alt", "left"]),
        "app_switcher": ("keys", ["alt", "tab"]),
        "search": ("keys", ["super"]),
        "screenshot": ("keys", ["printscreen"]),
        "lock": ("keys", ["super", "l"]),
        **_MEDIA,
    },
}
# How each platform opens the search that open_app / open_url type into.
SEARCH_KEYS = {
    "ios": ["cmd", "space"],
    "macos": ["cmd", "space"],
    "android": ["KEYCODE_SEARCH"],
    "windows": ["win"],
    "linux": ["super"],
}
SELECT_ALL = {"ios": ["cmd", "a"], "macos": ["cmd", "a"]}  # others: ctrl+a


def describe_quick(action: QuickAction) -> str:
    kind, spec = action
    if kind == "keys":
        return "keys " + "+".join(spec)
    x, y, direction = spec
    return f"edge swipe {direction} from {x},{y}"


# --- the tools ---------------------------------------------------------------------------------


def refuse_drag_type(args: Any) -> None:
    if isinstance(args, dict) and args.get("type") == "drag":
        message = (
            'touch_gesture type "drag" is unsupported: call drag_start at the item, confirm the '
            "destination from its screenshot, then drag_release at that point"
        )
        raise ToolError(
            "tool_arguments_invalid",
            message,
            details={
                "valid": False,
                "errors": [{"path": "$.type", "code": "enum_value_invalid", "message": message}],
            },
        )


class InputTools:
    """The HID tools of one daemon, sharing its engine and screen."""

    def __init__(self, rt: Runtime, engine: InputEngine):
        self.rt = rt
        self.engine = engine
        self.cfg = rt.config.input
        self.platform = rt.platform
        self.pointer = engine.pointer
        self.screen = rt.screen
        self.layout = rt.config.device.layout
        self._size: tuple[int, int] | None = None  # last capture size seen

    # -- shared steps ---------------------------------------------------------------------------

    async def baseline(self) -> Frame | None:
        frame = await self.screen.baseline()
        if frame is not None:
            self._size = (frame.width, frame.height)
        return frame

    async def capture_size(self) -> tuple[int, int]:
        """The capture resolution pixel coordinates map through (the last frame's size)."""
        if self._size is None:
            try:
                frame = await self.rt.backend.frames.frame(timeout=self.screen.frame_timeout_s)
            except ToolError as e:
                raise ToolError(
                    "capture_unavailable",
                    f'coord_space "pixel" needs the capture resolution: {e.message}; use '
                    "normalized coordinates",
                    retryable=True,
                ) from None
            self._size = (frame.width, frame.height)
        return self._size

    async def point(self, raw: dict[str, Any], path: str, space: str) -> Point:
        size = await self.capture_size() if space == "pixel" else None
        return prog.normalize(float(raw["x"]), float(raw["y"]), path, size)

    async def evidence(
        self, baseline: Frame | None, *, wait: bool, delay_ms: int = 0
    ) -> dict[str, Any]:
        """The post-action screenshot; the action already happened, so a capture failure is
        reported beside it (screenshot_error), never as the tool's failure."""
        try:
            return await self.screen.evidence(
                baseline,
                wait_stable=wait,
                timeout_ms=self.cfg.evidence_timeout_ms,
                stable_ms=self.cfg.evidence_stable_ms,
                delay_ms=delay_ms,
            )
        except ToolError as e:
            return {"screenshot_error": e.to_dict()}

    async def with_evidence(
        self,
        tool: str,
        act: Callable[[Session], Awaitable[dict[str, Any]]],
        *,
        wait: bool = True,
        delay_ms: int = 0,
    ) -> dict[str, Any]:
        async with self.engine.invocation(tool) as s:
            baseline = await self.baseline()
            output = await act(s)
            await s.finish()
            if s.switches:
                output["profile_switches"] = list(s.switches)
            shot = await self.evidence(baseline, wait=wait, delay_ms=delay_ms)
        return {"action_output": output, **shot}

    def keys_program(self, names: list[str], repeat: int = 1) -> Program:
        return prog.chord(self.cfg, prog.resolve_keys(names, self.layout), repeat)

    def text_program(self, text: str, path: str = "$.text") -> tuple[Program, bool]:
        """The typing program of `text` on the target's layout (checked whole: an untypable
        character fails before anything is typed) and whether Caps Lock would change it."""
        strokes = prog.text_strokes(text, path, self.layout)
        return prog.typing(self.cfg, strokes), self.layout.caps_sensitive(text)

    # -- touch_gesture ----------------------------------------------------------------------------

    async def touch_gesture(self, args: dict[str, Any], ctx: CallContext) -> Any:
        kind = args.get("type", "actions")
        space = args.get("coord_space", "normalized")

        async def act(s: Session) -> dict[str, Any]:
            program, info = await self.gesture_program(kind, args, space, s.pointer_at)
            await s.run(program)
            return {
                "ok": True,
                "type": kind,
                **info,
                "pointer": self.pointer.kind,
                "duration_ms": round(prog.duration_ms(program)),
                "reports": len(program),
            }

        return await self.with_evidence("touch_gesture", act)

    async def gesture_program(
        self, kind: str, args: dict[str, Any], space: str, at: Point | None
    ) -> tuple[Program, dict[str, Any]]:
        cfg, ptr = self.cfg, self.pointer
        if kind == "actions":
            actions = []
            for i, a in enumerate(args["actions"]):
                a = dict(a)
                if "x" in a:
                    p = await self.point(a, f"$.actions[{i}]", space)
                    a["x"], a["y"] = p.x, p.y
                actions.append(a)
            return prog.atomic(cfg, ptr, actions, at), {"actions": len(actions)}
        if kind not in gestures_for(self.platform):
            raise invalid("$.type", f"{kind!r} is not a gesture on {self.platform}")
        if kind == "swipe":
            start = await self.point(args["start"], "$.start", space)
            end = await self.point(args["end"], "$.end", space) if "end" in args else None
            s = prog.resolve_swipe(
                start,
                end=end,
                direction=args.get("direction"),
                speed=args.get("speed", prog.SWIPE_SPEED),
                duration_ms=args.get("duration_ms"),
                hold_before_ms=args.get("hold_before_ms", 0),
                hold_after_ms=args.get("hold_after_ms", 0),
                steps=args.get("steps", prog.SWIPE_STEPS),
            )
            info = {
                "start": s.start.to_dict(),
                "end": s.end.to_dict(),
                "move_ms": round(s.duration_ms),
            }
            return prog.swipe(cfg, ptr, s, at), info
        p = await self.point(args["point"], "$.point", space)
        info = {"point": p.to_dict()}
        if kind == "tap":
            return prog.tap(cfg, ptr, p, at), info
        if kind == "double_tap":
            return prog.double_tap(cfg, ptr, p, at), info
        if kind == "long_press":
            return prog.long_press(cfg, ptr, p, args.get("duration_ms"), at), info
        distance = float(args.get("distance", prog.SCROLL_DISTANCE))
        program = prog.scroll(
            cfg,
            ptr,
            p,
            args["direction"],
            distance,
            use_wheel=self.platform not in PHONES,
            at=at,
        )
        return program, {**info, "direction": args["direction"], "distance": distance}

    # -- drag -------------------------------------------------------------------------------------

    async def drag_start(self, args: dict[str, Any], ctx: CallContext) -> Any:
        space = args.get("coord_space", "normalized")
        cfg, ptr = self.cfg, self.pointer
        async with self.engine.invocation("drag_start", drag="start") as s:
            start = await self.point(args["point"], "$.point", space)
            to = prog.drag_away(start, args.get("direction"))
            baseline = await self.baseline()
            await s.run(prog.drag_start(cfg, ptr, start, to, s.pointer_at))
            shot = await self.evidence(baseline, wait=True)
            output: dict[str, Any] = {"ok": True, "start": start.to_dict(), "at": to.to_dict()}
            if shot.get("screen_stable") is True:
                s.keep_contact(start, to)
                return {"action_output": output, **shot, "drag": self.engine.drag_dict()}
            # Not stable (or no screen): undo, and show the screen as it is after the undo.
            await s.run(prog.drag_cancel(cfg, ptr, to, start))
            await s.finish()
            output["released"] = True
            after = await self.evidence(baseline, wait=False)
            kept = {k: shot[k] for k in ("screen_stable", "stable_wait_ms") if k in shot}
            return {"action_output": output, **after, **kept, "screen_stable": False}

    async def drag_release(self, args: dict[str, Any], ctx: CallContext) -> Any:
        space = args.get("coord_space", "normalized")
        async with self.engine.invocation("drag_release", drag="release") as s:
            drag = self.engine.drag
            assert drag is not None
            to = await self.point(args["point"], "$.point", space)
            baseline = await self.baseline()
            await s.run(prog.drag_release(self.cfg, self.pointer, drag.at, to))
            await s.finish()
            shot = await self.evidence(baseline, wait=True)
        output = {"ok": True, "start": drag.start.to_dict(), "released_at": to.to_dict()}
        return {"action_output": output, **shot}

    # -- keyboard -----------------------------------------------------------------------------

    async def keyboard_tap(self, args: dict[str, Any], ctx: CallContext) -> Any:
        raw = args["keys"]
        names = [raw] if isinstance(raw, str) else list(raw)
        keys = prog.resolve_keys(names, self.layout)
        program = prog.chord(self.cfg, keys, args.get("repeat", 1))

        async def act(s: Session) -> dict[str, Any]:
            await s.run(program)
            return {"ok": True, "keys": [k.name for k in keys], "repeat": args.get("repeat", 1)}

        return await self.with_evidence("keyboard_tap", act)

    async def keyboard_text(self, args: dict[str, Any], ctx: CallContext) -> Any:
        text = args["text"]
        program, caps = self.text_program(text)
        async with self.engine.invocation("keyboard_text") as s:
            info = await s.type_text(program, caps_sensitive=caps)
        out = {"ok": True, "typed": len(text), "layout": self.layout.name, **info}
        return {**out, "profile_switches": list(s.switches)} if s.switches else out

    async def enter_text(self, args: dict[str, Any], ctx: CallContext) -> Any:
        text = args.get("text", "")
        if not text and not args.get("clear") and not args.get("submit"):
            raise invalid(
                "$.text", "nothing to do: give text, clear or submit", "minLength_invalid"
            )
        typed, caps = self.text_program(text)
        select_all = self.keys_program(SELECT_ALL.get(self.platform, ["ctrl", "a"]))
        delete = self.keys_program(["backspace"])
        enter = self.keys_program(["enter"])
        space = args.get("coord_space", "normalized")

        async def act(s: Session) -> dict[str, Any]:
            p = await self.point(args["point"], "$.point", space)
            await s.run(prog.tap(self.cfg, self.pointer, p, s.pointer_at))
            await asyncio.sleep(self.cfg.focus_settle_ms / 1000)
            if args.get("clear"):
                await s.run(select_all)
                await s.run(delete)
            info = await s.type_text(typed, caps_sensitive=caps)
            if args.get("submit"):
                await s.run(enter)
            return {
                "ok": True,
                "point": p.to_dict(),
                "typed": len(text),
                "layout": self.layout.name,
                **info,
                "cleared": bool(args.get("clear")),
                "submitted": bool(args.get("submit")),
            }

        return await self.with_evidence(
            "enter_text", act, wait=False, delay_ms=self.cfg.enter_text_delay_ms
        )

    # -- mouse --------------------------------------------------------------------------------

    async def mouse_move(self, args: dict[str, Any], ctx: CallContext) -> Any:
        space = args.get("coord_space", "normalized")

        async def act(s: Session) -> dict[str, Any]:
            p = await self.point(args, "$", space)
            await s.run(prog.mouse_move(self.cfg, self.pointer, p))
            return {"ok": True, "point": p.to_dict()}

        return await self.with_evidence("mouse_move", act)

    async def mouse_scroll(self, args: dict[str, Any], ctx: CallContext) -> Any:
        delta, horizontal = int(args["delta"]), bool(args.get("horizontal", False))

        async def act(s: Session) -> dict[str, Any]:
            at = s.pointer_at or Point(500, 500)
            await s.run(prog.mouse_scroll(self.cfg, self.pointer, at, delta, horizontal))
            return {"ok": True, "delta": delta, "horizontal": horizontal, "at": at.to_dict()}

        return await self.with_evidence("mouse_scroll", act)

    # -- composite ------------------------------------------------------------------------------

    async def quick_action(self, args: dict[str, Any], ctx: CallContext) -> Any:
        table = QUICK_ACTIONS[self.platform]
        if args.get("list") or "action" not in args:
            return {
                "platform": self.platform,
                "actions": [{"name": n, "via": describe_quick(a)} for n, a in table.items()],
            }
        name = args["action"]
        if name not in table:
            raise invalid("$.action", f"{name!r} is not a quick action on {self.platform}")
        kind, spec = table[name]
        if kind == "keys":
            program = self.keys_program(spec)
        else:
            x, y, direction = spec
            program = prog.swipe(
                self.cfg, self.pointer, prog.resolve_swipe(Point(x, y), direction=direction)
            )

        async def act(s: Session) -> dict[str, Any]:
            await s.run(program)
            return {"ok": True, "action": name, "via": describe_quick(table[name])}

        return await self.with_evidence("quick_action", act)

    async def launch(self, tool: str, text: str, path: str, what: dict[str, Any]) -> dict[str, Any]:
        """Open the platform's search, type `text`, press Enter (open_app and open_url)."""
        typed, caps = self.text_program(text, path)
        opener = self.keys_program(SEARCH_KEYS[self.platform])
        enter = self.keys_program(["enter"])

        async def act(s: Session) -> dict[str, Any]:
            await s.run(opener)
            await asyncio.sleep(self.cfg.search_open_ms / 1000)
            await s.type_text(typed, caps_sensitive=caps)
            await s.run(enter)
            return {
                "ok": True,
                **what,
                "via": "search",
                "note": "ok means the launch request was sent; check the screenshot",
            }

        return await self.with_evidence(tool, act)

    async def open_app(self, args: dict[str, Any], ctx: CallContext) -> Any:
        return await self.launch("open_app", args["name"], "$.name", {"app": args["name"]})

    async def open_url(self, args: dict[str, Any], ctx: CallContext) -> Any:
        url = args["url"].strip()
        if not url or any(c.isspace() for c in url):
            raise ToolError("url_invalid", f"{args['url']!r} is not a URL (no spaces allowed)")
        return await self.launch("open_url", url, "$.url", {"url": url})


def launch_qualification(result: Any) -> str:
    """open_app/open_url always complete with a qualification: the target accepted the launch
    request; whether the app or page is on screen is for the caller to see."""
    note = "the launch request was accepted; check the screenshot for the app or page"
    unsettled = SCREEN_NOT_SETTLED if result.get("screen_stable") is False else None
    return f"{note}; {unsettled}" if unsettled else note


def tools(rt: Runtime) -> list[ToolSpec]:
    t = InputTools(rt, engine_for(rt))
    platform = rt.platform

    def spec(name: str, **kw: Any) -> ToolSpec:
        kw.setdefault("result_schema", EVIDENCE_RESULT)
        kw.setdefault("evidence", True)
        return ToolSpec(name=name, category="input", policy="write", hid=True, **kw)

    evidence_note = (
        " Returns JSON: action_output, screen_stable, stable_wait_ms, screen_changed (only "
        "when a baseline screenshot existed) and the final screenshot (width, height, format, "
        "size, base64 data)."
    )
    quick_names = list(QUICK_ACTIONS[platform])
    layout = rt.config.device.layout.label
    typing_note = (
        f" Typed as the target's keyboard layout ({layout}, [device].keyboard_layout) types "
        "it: letters, AltGr/Option characters and dead-key accents, whatever Caps Lock is "
        "(turned off around the text when it is on, and left as found); a character the layout "
        "cannot type (emoji, CJK, ...) is untypable_character before anything is typed."
    )
    return [
        spec(
            "touch_gesture",
            title="Touch Gesture",
            description="Tap, double_tap, long_press, swipe or scroll on the target's screen at "
            "normalized 0..1000 coordinates (0,0 top left). Swipe: start plus end or "
            "direction; speed (units/s, default 2500), duration_ms, hold_before_ms, "
            "hold_after_ms, steps (default 24); back/home fallbacks are edge swipes such as "
            "start.x=1 or start.y=999. Move draggable items with drag_start/drag_release, "
            "never with a swipe or actions. actions (touch_down, move_to, wait, touch_up) is a "
            "rare advanced option for custom contact timing." + evidence_note,
            handler=t.touch_gesture,
            args_schema=touch_gesture_schema,
            precheck=refuse_drag_type,
            example_input={"type": "tap", "point": {"x": 500, "y": 500}},
            keywords=("tap", "click", "swipe", "scroll", "press", "touch"),
        ),
        spec(
            "drag_start",
            title="Drag Start",
            description="Start dragging the item at point: press, hold 500 ms, move 200 units "
            "(toward the horizontal centre, or direction) at 500 units/s without releasing, "
            "then wait for the screen to settle while keeping contact. screen_stable=true: "
            "confirm the destination from the screenshot and call drag_release there. "
            "screen_stable=false: the contact was already moved back and released; retry the "
            "whole drag. Do not call wait_for_stable_screen in between.",
            handler=t.drag_start,
            args_schema=object_schema(
                {"point": POINT, "direction": DIRECTION, "coord_space": COORD_SPACE},
                required=["point"],
            ),
            example_input={"point": {"x": 200, "y": 300}},
            keywords=("drag", "move item", "reorder"),
            prerequisites=("screenshot",),
        ),
        spec(
            "drag_release",
            title="Drag Release",
            description="Finish the drag begun by drag_start: move directly to point, hold "
            "200 ms, release." + evidence_note,
            handler=t.drag_release,
            args_schema=object_schema(
                {"point": POINT, "coord_space": COORD_SPACE}, required=["point"]
            ),
            example_input={"point": {"x": 700, "y": 300}},
            keywords=("drag", "drop"),
            prerequisites=("drag_start",),
        ),
        spec(
            "keyboard_tap",
            title="Keyboard Tap",
            description="Press one key or a chord: keys pressed in order and released in "
            'reverse, e.g. ["ctrl","c"] or ["cmd","space"]; optional repeat. Media, volume and '
            "brightness keys go out as consumer keys. On iOS, shortcuts with cmd/ctrl/alt run "
            "in a pointer-free USB profile (the link may drop briefly)." + evidence_note,
            handler=t.keyboard_tap,
            args_schema=keyboard_tap_schema,
            example_input={"keys": ["ctrl", "c"]},
            keywords=("key", "shortcut", "hotkey", "press"),
        ),
        spec(
            "keyboard_text",
            title="Keyboard Text",
            description="Type text (newlines and tabs included) into whatever has focus."
            + typing_note
            + " On iOS a text needing Option types in one pointer-free USB profile phase. "
            "Returns ok, typed (characters), layout and caps_lock as found (on, off, or "
            "unknown when the target never reported its LEDs).",
            handler=t.keyboard_text,
            args_schema=object_schema({"text": TEXT}, required=["text"]),
            result_schema=object_schema(
                {
                    "ok": {"type": "boolean"},
                    "typed": {"type": "integer"},
                    "layout": {"type": "string"},
                    "caps_lock": {"enum": ["on", "off", "unknown"]},
                    "caps_lock_presses": {"type": "integer"},
                    "profile_switches": {"type": "array", "items": {"type": "string"}},
                },
                ["ok", "typed"],
            ),
            evidence=False,
            example_input={"text": "Settings"},
            keywords=("type", "write", "input"),
        ),
        spec(
            "enter_text",
            title="Enter Text",
            description="Tap the text field at point to focus it, then type text (optionally "
            "clear: select all and delete first; submit: press Enter after)."
            + typing_note
            + " Returns "
            "action_output, screen_changed (when a baseline existed) and a short-delay "
            "screenshot (no stability wait).",
            handler=t.enter_text,
            args_schema=object_schema(
                {
                    "point": POINT,
                    "text": {**TEXT, "minLength": 0},
                    "clear": {"type": "boolean", "default": False},
                    "submit": {"type": "boolean", "default": False},
                    "coord_space": COORD_SPACE,
                },
                required=["point", "text"],
            ),
            example_input={"point": {"x": 500, "y": 140}, "text": "hello"},
            keywords=("type", "field", "fill"),
        ),
        spec(
            "mouse_move",
            title="Mouse Move",
            description="Move the pointer (no click) to x, y (normalized 0..1000, or pixels "
            "with coord_space pixel)." + evidence_note,
            handler=t.mouse_move,
            args_schema=object_schema(
                {
                    "x": POINT["properties"]["x"],
                    "y": POINT["properties"]["y"],
                    "coord_space": COORD_SPACE,
                },
                required=["x", "y"],
            ),
            example_input={"x": 500, "y": 500},
            platforms=MOUSE_PLATFORMS,
            keywords=("hover", "cursor", "pointer"),
        ),
        spec(
            "mouse_scroll",
            title="Mouse Scroll",
            description="Turn the mouse wheel where the pointer is: delta ticks, positive up "
            "(or right with horizontal), negative down (or left). Unreliable on iPhone with "
            "AssistiveTouch: prefer touch_gesture scroll there." + evidence_note,
            handler=t.mouse_scroll,
            args_schema=object_schema(
                {
                    "delta": {
                        "type": "integer",
                        "minimum": -50,
                        "maximum": 50,
                        "not": {"const": 0},
                    },
                    "horizontal": {"type": "boolean", "default": False},
                },
                required=["delta"],
            ),
            example_input={"delta": -3},
            platforms=MOUSE_PLATFORMS,
            keywords=("wheel", "scroll"),
        ),
        spec(
            "quick_action",
            title="Quick Action",
            description="A system action by name, mapped for this target to media keys, key "
            f"chords or edge swipes: {', '.join(quick_names)}. list=true returns the actions "
            "and how each is sent." + evidence_note,
            handler=t.quick_action,
            args_schema=lambda p: object_schema(
                {"action": {"enum": list(QUICK_ACTIONS[p])}, "list": {"type": "boolean"}},
                oneOf=[{"required": ["action"]}, {"required": ["list"]}],
            ),
            result_schema={
                "oneOf": [
                    EVIDENCE_RESULT,
                    object_schema(
                        {"platform": {"type": "string"}, "actions": {"type": "array"}},
                        ["platform", "actions"],
                    ),
                ]
            },
            example_input={"list": True},
            keywords=("home", "back", "volume", "notifications", "app switcher"),
        ),
        spec(
            "open_app",
            title="Open App",
            description="Launch an app by name through the platform's search (Spotlight, "
            "Android search, Start menu): open search, type the name, press Enter. ok:true "
            "only means the launch request was sent, not that the app is visible: inspect the "
            "returned screenshot. If the app's icon is clearly visible, tap it with "
            "touch_gesture instead." + evidence_note,
            handler=t.open_app,
            args_schema=object_schema(
                {"name": {"type": "string", "minLength": 1, "maxLength": 100}}, required=["name"]
            ),
            example_input={"name": "Settings"},
            keywords=("launch", "start", "app"),
            qualify=launch_qualification,
        ),
        spec(
            "open_url",
            title="Open URL",
            description="Open a URL through the platform's search (typed, then Enter), which "
            "hands it to the default browser. ok:true only means the request was sent, not "
            "that the page is visible: inspect the returned screenshot." + evidence_note,
            handler=t.open_url,
            args_schema=object_schema(
                {"url": {"type": "string", "minLength": 1, "maxLength": 2000}}, required=["url"]
            ),
            example_input={"url": "https://example.com"},
            keywords=("browser", "web", "link"),
            qualify=launch_qualification,
        ),
    ]
