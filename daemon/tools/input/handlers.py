"""The HID tools' handlers: touch_gesture, drag_start, drag_release, keyboard_tap,
keyboard_text, enter_text, mouse_move, mouse_scroll, quick_action, open_app, open_url.

Thin: arguments (typed, defaults filled by the catalog) become report programs
(daemon.engine.program, pure and validated whole before anything is sent) and run in one
invocation of the serialized HID flow (daemon.engine.flow), which owns timing, iOS isolation
and cleanup. Post-action evidence comes from the Screen service: a best-effort baseline inside
the invocation, the input, the invocation's cleanup (release, `full` restored), then the
stability wait and final screenshot, still inside the invocation so the screenshot shows this
action and not the next caller's.
"""

from __future__ import annotations

import asyncio
import difflib
import time
import unicodedata
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import structlog

from daemon.catalog import SCREEN_NOT_SETTLED, CallContext
from daemon.engine import HidInvocation
from daemon.engine import program as prog
from daemon.engine.program import Point, Program, invalid
from daemon.errors import ToolError
from daemon.frames import Frame
from daemon.runtime import Runtime
from daemon.screen import text_changes
from daemon.screen.ocr import Line
from daemon.screen.options import StableOptions
from daemon.tools.input.args import (
    DragReleaseArgs,
    DragStartArgs,
    EnterTextArgs,
    KeyboardTapArgs,
    KeyboardTextArgs,
    MouseMoveArgs,
    MouseScrollArgs,
    OpenAppArgs,
    OpenUrlArgs,
    QuickActionArgs,
    TouchGestureArgs,
)
from daemon.tools.input.platforms import (
    CLEAR_KEYS,
    LINE_END,
    PHONES,
    QUICK_ACTIONS,
    SEARCH_KEYS,
    describe_quick,
    gestures_for,
)

log = structlog.get_logger("daemon.tools.input")
# enter_text's check of `clear`: the row read around the point (half its height: at least
# FIELD_ROWS px, or this share of the frame's), and the most characters deleted one by one when
# the clear keys left text.
FIELD_ROWS = 24
FIELD_ROW_SHARE = 0.04
MAX_CLEAR_DELETES = 200
# How alike what OCR read and what was typed must be to count as the same text (OCR misreads a
# letter now and then); the old text beside the new makes them far less alike.
READS_AS = 0.75
READ_SLACK = 0.1  # and may read this share longer (a letter split in two)


def _plain(text: str) -> str:
    """Text as compared: no spaces, lower case, no accents (OCR drops them now and then)."""
    bare = unicodedata.normalize("NFKD", "".join(text.split()).lower())
    return "".join(c for c in bare if not unicodedata.combining(c))


def likeness(read: str, typed: str) -> float:
    """How alike OCR's `read` and the `typed` text are, 0..1. Pure."""
    return difflib.SequenceMatcher(None, _plain(read), _plain(typed)).ratio()


def reads_as(read: str, typed: str) -> bool:
    """Whether OCR's line `read` holds the `typed` text as words of their own: a label beside
    the field is a word apart, while old text a clear left is glued to the new ("Old valuAda":
    typing goes on at the caret). Alike, and no longer (OCR misreads a letter now and then).
    Pure."""
    words, n = read.split(), len(typed.split())
    longest = len(_plain(typed)) * (1 + READ_SLACK) + 1
    for i in range(len(words) - n + 1):
        run = " ".join(words[i : i + n])
        if likeness(run, typed) >= READS_AS and len(_plain(run)) <= longest:
            return True
    return False


# The gestures a mouse button other than left can make: a click, a double click, a press moved.
BUTTON_GESTURES = ("tap", "double_tap", "swipe")


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

    def __init__(self, rt: Runtime):
        self.rt = rt
        self.engine = rt.engine
        self.cfg = rt.config.input
        self.platform = rt.platform
        self.screen = rt.screen
        self.layout = rt.config.device.layout
        self._size: tuple[int, int] | None = None  # last capture size seen
        # The post-action stability wait ([input].evidence_*; the threshold is the tool's).
        self.stability = StableOptions(
            timeout_ms=self.cfg.evidence_timeout_ms, stable_ms=self.cfg.evidence_stable_ms
        )

    @property
    def pointer(self) -> prog.Pointer:
        """The engine's pointer with the screen geometry's HID map of this moment."""
        return self.engine.pointer

    # -- shared steps ---------------------------------------------------------------------------

    async def baseline(self) -> Frame | None:
        frame = await self.screen.baseline()
        if frame is not None:
            self._size = (frame.width, frame.height)
        return frame

    async def capture_size(self) -> tuple[int, int]:
        """The size pixel coordinates count in: the target's screen (what screenshots show),
        from the screen geometry, else the last frame's size."""
        geometry = self.rt.geometry.current
        if geometry is not None:
            return geometry.rect.w, geometry.rect.h
        if self._size is None:
            try:
                frame = await self.screen.source.frame(timeout=self.screen.frame_timeout_s)
            except ToolError as e:
                raise ToolError(
                    "capture_unavailable",
                    f'coord_space "pixel" needs the capture resolution: {e.message}; use '
                    "normalized coordinates",
                    retryable=True,
                ) from None
            self._size = (frame.width, frame.height)
        return self._size

    async def point(self, raw: Mapping[str, Any], path: str, space: str) -> Point:
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
                stability=self.stability,
                delay_ms=delay_ms,
            )
        except ToolError as e:
            return {"screenshot_error": e.to_dict()}

    async def with_evidence(
        self,
        tool: str,
        act: Callable[[HidInvocation], Awaitable[dict[str, Any]]],
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

    async def touch_gesture(self, args: TouchGestureArgs, ctx: CallContext) -> Any:
        kind = args.type or "actions"  # the schema: one of type or actions

        async def act(s: HidInvocation) -> dict[str, Any]:
            program, info = await self.gesture_program(kind, args, s.pointer_at)
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
        self, kind: str, args: TouchGestureArgs, at: Point | None
    ) -> tuple[Program, dict[str, Any]]:
        """The gesture's program. Which fields are present per kind is the schema's if/then
        rules (checked before this runs), hence the asserts."""
        cfg, ptr, space = self.cfg, self.pointer, args.coord_space
        button = args.button or "left"
        if button != "left" and kind not in BUTTON_GESTURES:
            raise invalid(
                "$.button",
                f"button {button!r} applies to {', '.join(BUTTON_GESTURES)}, not {kind}",
            )
        if kind == "actions":
            assert args.actions is not None
            actions = []
            for i, a in enumerate(args.actions):
                a = dict(a)
                if "x" in a:
                    p = await self.point(a, f"$.actions[{i}]", space)
                    a["x"], a["y"] = p.x, p.y
                actions.append(a)
            return prog.atomic(cfg, ptr, actions, at), {"actions": len(actions)}
        if kind not in gestures_for(self.platform):
            raise invalid("$.type", f"{kind!r} is not a gesture on {self.platform}")
        buttoned = {"button": button} if args.button is not None else {}
        if kind == "swipe":
            assert args.start is not None
            start = await self.point(args.start, "$.start", space)
            end = await self.point(args.end, "$.end", space) if args.end is not None else None
            s = prog.resolve_swipe(
                start,
                end=end,
                direction=args.direction,
                speed=args.speed,
                duration_ms=args.duration_ms,
                hold_before_ms=args.hold_before_ms,
                hold_after_ms=args.hold_after_ms,
                steps=args.steps,
            )
            info = {
                "start": s.start.to_dict(),
                "end": s.end.to_dict(),
                "move_ms": round(s.duration_ms),
                **buttoned,
            }
            return prog.swipe(cfg, ptr, s, at, button), info
        assert args.point is not None
        p = await self.point(args.point, "$.point", space)
        info = {"point": p.to_dict()}
        if kind == "tap":
            return prog.tap(cfg, ptr, p, at, button), {**info, **buttoned}
        if kind == "double_tap":
            return prog.double_tap(cfg, ptr, p, at, button), {**info, **buttoned}
        if kind == "long_press":
            return prog.long_press(cfg, ptr, p, args.duration_ms, at), info
        assert args.direction is not None
        distance = float(args.distance)
        program = prog.scroll(
            cfg,
            ptr,
            p,
            args.direction,
            distance,
            use_wheel=self.platform not in PHONES,
            at=at,
        )
        return program, {**info, "direction": args.direction, "distance": distance}

    # -- drag -------------------------------------------------------------------------------------

    async def drag_start(self, args: DragStartArgs, ctx: CallContext) -> Any:
        cfg, ptr = self.cfg, self.pointer
        button = args.button or "left"
        async with self.engine.invocation("drag_start", drag="start") as s:
            start = await self.point(args.point, "$.point", args.coord_space)
            to = prog.drag_away(start, args.direction)
            baseline = await self.baseline()
            await s.run(prog.drag_start(cfg, ptr, start, to, s.pointer_at, button))
            shot = await self.evidence(baseline, wait=True)
            output: dict[str, Any] = {"ok": True, "start": start.to_dict(), "at": to.to_dict()}
            if args.button is not None:
                output["button"] = button
            if shot.get("screen_stable") is True:
                s.keep_contact(start, to, button)
                return {"action_output": output, **shot, "drag": self.engine.drag_dict()}
            # Not stable (or no screen): undo, and show the screen as it is after the undo.
            await s.run(prog.drag_cancel(cfg, ptr, to, start, button))
            await s.finish()
            output["released"] = True
            after = await self.evidence(baseline, wait=False)
            kept = {k: shot[k] for k in ("screen_stable", "stable_wait_ms") if k in shot}
            return {"action_output": output, **after, **kept, "screen_stable": False}

    async def drag_release(self, args: DragReleaseArgs, ctx: CallContext) -> Any:
        async with self.engine.invocation("drag_release", drag="release") as s:
            drag = self.engine.drag
            assert drag is not None
            to = await self.point(args.point, "$.point", args.coord_space)
            baseline = await self.baseline()
            await s.run(prog.drag_release(self.cfg, self.pointer, drag.at, to, drag.button))
            await s.finish()
            shot = await self.evidence(baseline, wait=True)
        output = {"ok": True, "start": drag.start.to_dict(), "released_at": to.to_dict()}
        return {"action_output": output, **shot}

    # -- keyboard -----------------------------------------------------------------------------

    async def keyboard_tap(self, args: KeyboardTapArgs, ctx: CallContext) -> Any:
        keys = prog.resolve_keys(args.names, self.layout)
        program = prog.chord(self.cfg, keys, args.repeat)

        async def act(s: HidInvocation) -> dict[str, Any]:
            await s.run(program)
            return {"ok": True, "keys": [k.name for k in keys], "repeat": args.repeat}

        return await self.with_evidence("keyboard_tap", act)

    async def keyboard_text(self, args: KeyboardTextArgs, ctx: CallContext) -> Any:
        text = args.text
        program, caps = self.text_program(text)
        async with self.engine.invocation("keyboard_text") as s:
            info = await s.type_text(program, caps_sensitive=caps)
        out = {"ok": True, "typed": len(text), "layout": self.layout.name, **info}
        return {**out, "profile_switches": list(s.switches)} if s.switches else out

    async def enter_text(self, args: EnterTextArgs, ctx: CallContext) -> Any:
        text = args.text
        if not text and not args.clear and not args.submit:
            raise invalid(
                "$.text", "nothing to do: give text, clear or submit", "minLength_invalid"
            )
        typed, caps = self.text_program(text)
        enter = self.keys_program(["enter"])

        async def act(s: HidInvocation) -> dict[str, Any]:
            p = await self.point(args.point, "$.point", args.coord_space)
            await s.run(prog.tap(self.cfg, self.pointer, p, s.pointer_at))
            await asyncio.sleep(self.cfg.focus_settle_ms / 1000)
            if args.clear:
                for chord in CLEAR_KEYS[self.platform]:
                    await s.run(self.keys_program(chord))
            info = await s.type_text(typed, caps_sensitive=caps)
            clear = await self.check_cleared(s, p, text, typed, caps) if args.clear else None
            if args.submit:
                await s.run(enter)
            return {
                "ok": True,
                "point": p.to_dict(),
                "typed": len(text),
                "layout": self.layout.name,
                **info,
                "cleared": args.clear,
                **({"clear": clear} if clear is not None else {}),
                "submitted": args.submit,
            }

        out = await self.with_evidence(
            "enter_text", act, wait=False, delay_ms=self.cfg.enter_text_delay_ms
        )
        if args.text_changes:  # read after the HID flow is let go: nobody waits behind it
            out["text_changes"] = await text_changes.of_action(self.rt.ocr, ctx.evidence)
        return out

    async def check_cleared(
        self, s: HidInvocation, p: Point, text: str, typed: Program, caps: bool
    ) -> dict[str, Any]:
        """Whether `clear` cleared, read on the screen: after the clear keys (CLEAR_KEYS) and
        the typing, the line on the field's row that reads most like `text` must read as
        `text`, not with the old text beside it. Where it does not (a field where those keys
        select nothing: Tk's and xterm's Ctrl+A, a terminal), that line is deleted from its end
        key by key, `text` typed again and the row read again. `verified` is null where the
        row cannot be read (no OCR, no capture, nothing typed to look for)."""
        out: dict[str, Any] = {"keys": ", ".join("+".join(k) for k in CLEAR_KEYS[self.platform])}
        if not text.strip():
            return {**out, "verified": None}
        line = await self.row_line(p, text)
        if line is None:
            return {**out, "verified": None}
        if not reads_as(line.text, text):
            count = min(MAX_CLEAR_DELETES, len(line.text) + 2)
            await s.run(self.keys_program(LINE_END.get(self.platform, ["end"])))
            await s.run(self.keys_program(["backspace"], count))
            await s.type_text(typed, caps_sensitive=caps)
            out.update(read_first=line.text, deleted_one_by_one=count)
            line = await self.row_line(p, text)
            if line is None:
                return {**out, "verified": None}
        return {**out, "read": line.text, "verified": reads_as(line.text, text)}

    async def row_line(self, p: Point, text: str) -> Line | None:
        """The line that reads most like `text` on the row of `p` of the settled screen (one
        OCR read of that row), or None when it cannot be read or holds no text."""
        ocr = self.rt.ocr
        if not ocr.enabled:
            return None
        try:
            frame = (await self.screen.settle(time.monotonic(), self.stability)).frame
            w, h = frame.width, frame.height
            y = p.y / 1000 * (h - 1)
            rows = max(FIELD_ROWS, h * FIELD_ROW_SHARE)
            crop = (0, max(0, round(y - rows)), w, min(h, round(y + rows)))
            reading = await ocr.read(frame, crop)
        except ToolError as e:
            log.info("enter_text.clear_unread", code=e.code, reason=e.message)
            return None
        on_row = [line for line in reading.lines if line.box[1] - 2 <= y <= line.box[3] + 2]
        return max(on_row, key=lambda line: likeness(line.text, text), default=None)

    # -- mouse --------------------------------------------------------------------------------

    async def mouse_move(self, args: MouseMoveArgs, ctx: CallContext) -> Any:
        async def act(s: HidInvocation) -> dict[str, Any]:
            p = await self.point({"x": args.x, "y": args.y}, "$", args.coord_space)
            await s.run(prog.mouse_move(self.cfg, self.pointer, p))
            return {"ok": True, "point": p.to_dict()}

        return await self.with_evidence("mouse_move", act)

    async def mouse_scroll(self, args: MouseScrollArgs, ctx: CallContext) -> Any:
        delta, horizontal = int(args.delta), args.horizontal

        async def act(s: HidInvocation) -> dict[str, Any]:
            at = s.pointer_at or Point(500, 500)
            await s.run(prog.mouse_scroll(self.cfg, self.pointer, at, delta, horizontal))
            return {"ok": True, "delta": delta, "horizontal": horizontal, "at": at.to_dict()}

        return await self.with_evidence("mouse_scroll", act)

    # -- composite ------------------------------------------------------------------------------

    async def quick_action(self, args: QuickActionArgs, ctx: CallContext) -> Any:
        table = QUICK_ACTIONS[self.platform]
        if args.list or args.action is None:
            return {
                "platform": self.platform,
                "actions": [{"name": n, "via": describe_quick(a)} for n, a in table.items()],
            }
        name = args.action
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

        async def act(s: HidInvocation) -> dict[str, Any]:
            await s.run(program)
            return {"ok": True, "action": name, "via": describe_quick(table[name])}

        return await self.with_evidence("quick_action", act)

    async def launch(self, tool: str, text: str, path: str, what: dict[str, Any]) -> dict[str, Any]:
        """Open the platform's search, type `text`, press Enter (open_app and open_url)."""
        typed, caps = self.text_program(text, path)
        opener = self.keys_program(SEARCH_KEYS[self.platform])
        enter = self.keys_program(["enter"])

        async def act(s: HidInvocation) -> dict[str, Any]:
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

    async def open_app(self, args: OpenAppArgs, ctx: CallContext) -> Any:
        return await self.launch("open_app", args.name, "$.name", {"app": args.name})

    async def open_url(self, args: OpenUrlArgs, ctx: CallContext) -> Any:
        url = args.url.strip()
        if not url or any(c.isspace() for c in url):
            raise ToolError("url_invalid", f"{args.url!r} is not a URL (no spaces allowed)")
        return await self.launch("open_url", url, "$.url", {"url": url})


def launch_qualification(result: Any) -> str:
    """open_app/open_url always complete with a qualification: the target accepted the launch
    request; whether the app or page is on screen is for the caller to see."""
    note = "the launch request was accepted; check the screenshot for the app or page"
    unsettled = SCREEN_NOT_SETTLED if result.get("screen_stable") is False else None
    return f"{note}; {unsettled}" if unsettled else note
