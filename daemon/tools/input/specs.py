"""The HID tools as the catalog knows them: one ToolSpec each (descriptions, schemas, typed
arguments, handlers)."""

from __future__ import annotations

from typing import Any

from daemon.catalog import ToolSpec
from daemon.runtime import Runtime
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
from daemon.tools.input.handlers import InputTools, launch_qualification, refuse_drag_type
from daemon.tools.input.platforms import MOUSE_PLATFORMS, QUICK_ACTIONS
from daemon.tools.input.schemas import (
    DRAG_RELEASE_ARGS,
    ENTER_TEXT_ARGS,
    ENTER_TEXT_RESULT,
    EVIDENCE_RESULT,
    KEYBOARD_TEXT_ARGS,
    KEYBOARD_TEXT_RESULT,
    MOUSE_MOVE_ARGS,
    MOUSE_SCROLL_ARGS,
    OPEN_APP_ARGS,
    OPEN_URL_ARGS,
    QUICK_ACTION_RESULT,
    drag_start_schema,
    keyboard_tap_schema,
    quick_action_schema,
    touch_gesture_schema,
)


def tools(rt: Runtime) -> list[ToolSpec]:
    t = InputTools(rt)
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
            "rare advanced option for custom contact timing. On a computer, button (right, "
            "middle, back, forward; default left) clicks, double-clicks or swipes with that "
            "mouse button." + evidence_note,
            handler=t.touch_gesture,
            args_schema=touch_gesture_schema,
            args_type=TouchGestureArgs,
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
            "whole drag. Do not call wait_for_stable_screen in between. On a computer, button "
            "holds that mouse button instead of the left one.",
            handler=t.drag_start,
            args_schema=drag_start_schema,
            args_type=DragStartArgs,
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
            args_schema=DRAG_RELEASE_ARGS,
            args_type=DragReleaseArgs,
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
            args_type=KeyboardTapArgs,
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
            args_schema=KEYBOARD_TEXT_ARGS,
            args_type=KeyboardTextArgs,
            result_schema=KEYBOARD_TEXT_RESULT,
            evidence=False,
            example_input={"text": "Settings"},
            keywords=("type", "write", "input"),
        ),
        spec(
            "enter_text",
            title="Enter Text",
            description="Tap the text field at point to focus it, then type text (optionally "
            "clear: empty it first; submit: press Enter after). clear selects and deletes with "
            "the target's keys (Cmd+A on Apple, Ctrl+A on Android, Home then Shift+End on "
            "Windows and Linux, whose Ctrl+A is select-all only where the app binds it); with "
            "OCR on, the field's row is then read: old text still beside the new is deleted "
            "key by key and the text typed again (action_output.clear: keys, read, verified)."
            + typing_note
            + " Returns "
            "action_output, screen_changed (when a baseline existed) and a short-delay "
            "screenshot (no stability wait); with text_changes, also what text appeared, "
            "disappeared and moved (on-device OCR of the screen before and after).",
            handler=t.enter_text,
            args_schema=ENTER_TEXT_ARGS,
            args_type=EnterTextArgs,
            result_schema=ENTER_TEXT_RESULT,
            example_input={"point": {"x": 500, "y": 140}, "text": "hello"},
            keywords=("type", "field", "fill"),
        ),
        spec(
            "mouse_move",
            title="Mouse Move",
            description="Move the pointer (no click) to x, y (normalized 0..1000, or pixels "
            "with coord_space pixel)." + evidence_note,
            handler=t.mouse_move,
            args_schema=MOUSE_MOVE_ARGS,
            args_type=MouseMoveArgs,
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
            args_schema=MOUSE_SCROLL_ARGS,
            args_type=MouseScrollArgs,
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
            args_schema=quick_action_schema,
            args_type=QuickActionArgs,
            result_schema=QUICK_ACTION_RESULT,
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
            args_schema=OPEN_APP_ARGS,
            args_type=OpenAppArgs,
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
            args_schema=OPEN_URL_ARGS,
            args_type=OpenUrlArgs,
            example_input={"url": "https://example.com"},
            keywords=("browser", "web", "link"),
            qualify=launch_qualification,
        ),
    ]
