"""The HID tools' argument and result schemas (JSON Schema, as clients see them)."""

from __future__ import annotations

from typing import Any

from daemon.catalog import object_schema
from daemon.engine import program as prog
from daemon.tools.input.platforms import BUTTON_PLATFORMS, QUICK_ACTIONS, gestures_for
from daemon.tools.screen import SCREENSHOT_FIELDS
from gadget import keymap

_COORD = {"type": "number", "minimum": 0}
POINT = object_schema(
    {
        "x": {**_COORD, "description": "0 (left) .. 1000 (right), or pixels"},
        "y": {**_COORD, "description": "0 (top) .. 1000 (bottom), or pixels"},
    },
    required=["x", "y"],
    description="where: {x, y} in coord_space (normalized 0..1000 unless pixel)",
)
COORD_SPACE = {
    "enum": ["normalized", "pixel"],
    "default": "normalized",
    "description": "normalized 0..1000 on both axes (default), or pixels of the screenshot",
}
DIRECTION = {
    "enum": list(prog.DIRECTIONS),
    "description": "which way to move (drag_start: default toward the horizontal centre)",
}
_MS = {"type": "integer", "minimum": 0, "maximum": 60000}
# A whole gesture also fits prog.MAX_PROGRAM_MS (checked on the built program).
SPEED = {"type": "number", "minimum": prog.MIN_SPEED, "maximum": 100000}


def _buttons(platform: str) -> dict[str, Any]:
    """The `button` property: a computer's mouse buttons, or only the primary contact (left)
    where the pointer is a finger (phones, iOS's AssistiveTouch)."""
    if platform in BUTTON_PLATFORMS:
        return {
            "button": {
                "enum": list(prog.BUTTONS),
                "description": "the mouse button (default left): right opens a context menu, "
                "middle pastes the selection on Linux, back and forward are the side buttons",
            }
        }
    return {"button": {"enum": ["left"], "description": "the contact (a finger: no other)"}}


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
            **_buttons(platform),
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
            "repeat": {
                "type": "integer",
                "minimum": 1,
                "maximum": 50,
                "default": 1,
                "description": "how many times to press and release it",
            },
        },
        required=["keys"],
    )


TEXT = {
    "type": "string",
    "minLength": 1,
    "maxLength": 5000,
    "description": "the characters to type, as the target's keyboard layout types them",
}

_BOX = object_schema(
    {k: {"type": "number"} for k in ("x0", "y0", "x1", "y1")}, ["x0", "y0", "x1", "y1"]
)
# Where a piece of text is: pixels, normalized 0..1000 (what touch_gesture takes), center.
PLACED = {
    "box": _BOX,
    "box_normalized": _BOX,
    "center": object_schema({"x": {"type": "number"}, "y": {"type": "number"}}, ["x", "y"]),
}
# What text an action changed (daemon/screen/text_changes.py): tap_text's and enter_text's
# text_changes, screen_text's changes.
TEXT_CHANGES_ARG: dict[str, Any] = {
    "type": "boolean",
    "default": False,
    "description": "also read the screen's text before and after the action and return what "
    "appeared, disappeared and moved (text_changes), each with its box",
}

_CHANGED = object_schema({"text": {"type": "string"}, **PLACED}, ["text", "box", "center"])
TEXT_CHANGES = object_schema(
    {
        "since": {"type": "string"},
        "snapshot_id": {"type": "string"},
        "appeared": {"type": "array", "items": _CHANGED},
        "disappeared": {"type": "array", "items": _CHANGED},
        "moved": {
            "type": "array",
            "items": {
                **_CHANGED,
                "properties": {**_CHANGED["properties"], "from": object_schema(PLACED)},
            },
        },
        "unchanged": {"type": "integer"},
        "error": {"type": "object"},
    },
    description="what text appeared, disappeared and moved (line by line, each with its box), "
    "or why that could not be said (error)",
)

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


def drag_start_schema(platform: str) -> dict[str, Any]:
    return object_schema(
        {
            "point": POINT,
            "direction": DIRECTION,
            "coord_space": COORD_SPACE,
            **_buttons(platform),
        },
        required=["point"],
    )


DRAG_RELEASE_ARGS = object_schema({"point": POINT, "coord_space": COORD_SPACE}, required=["point"])
KEYBOARD_TEXT_ARGS = object_schema({"text": TEXT}, required=["text"])
KEYBOARD_TEXT_RESULT = object_schema(
    {
        "ok": {"type": "boolean"},
        "typed": {"type": "integer"},
        "layout": {"type": "string"},
        "caps_lock": {"enum": ["on", "off", "unknown"]},
        "caps_lock_presses": {"type": "integer"},
        "profile_switches": {"type": "array", "items": {"type": "string"}},
    },
    ["ok", "typed"],
)
ENTER_TEXT_ARGS = object_schema(
    {
        "point": POINT,
        "text": {**TEXT, "minLength": 0},
        "clear": {
            "type": "boolean",
            "default": False,
            "description": "select all and delete what the field holds before typing",
        },
        "submit": {
            "type": "boolean",
            "default": False,
            "description": "press Enter after the text",
        },
        "coord_space": COORD_SPACE,
        "text_changes": TEXT_CHANGES_ARG,
    },
    required=["point", "text"],
)
ENTER_TEXT_RESULT = {
    **EVIDENCE_RESULT,
    "properties": {**EVIDENCE_RESULT["properties"], "text_changes": TEXT_CHANGES},
}
MOUSE_MOVE_ARGS = object_schema(
    {
        "x": POINT["properties"]["x"],
        "y": POINT["properties"]["y"],
        "coord_space": COORD_SPACE,
    },
    required=["x", "y"],
)
MOUSE_SCROLL_ARGS = object_schema(
    {
        "delta": {
            "type": "integer",
            "minimum": -50,
            "maximum": 50,
            "not": {"const": 0},
            "description": "wheel clicks, not 0: positive scrolls up (or right), negative down "
            "(or left)",
        },
        "horizontal": {
            "type": "boolean",
            "default": False,
            "description": "scroll sideways instead of up and down",
        },
    },
    required=["delta"],
)


def quick_action_schema(platform: str) -> dict[str, Any]:
    return object_schema(
        {
            "action": {
                "enum": list(QUICK_ACTIONS[platform]),
                "description": "the system action to perform (those of the target's platform)",
            },
            "list": {
                "type": "boolean",
                "description": "true: perform nothing, list the platform's actions instead",
            },
        },
        oneOf=[{"required": ["action"]}, {"required": ["list"]}],
    )


QUICK_ACTION_RESULT = {
    "oneOf": [
        EVIDENCE_RESULT,
        object_schema(
            {"platform": {"type": "string"}, "actions": {"type": "array"}},
            ["platform", "actions"],
        ),
    ]
}
OPEN_APP_ARGS = object_schema(
    {
        "name": {
            "type": "string",
            "minLength": 1,
            "maxLength": 100,
            "description": "the app's name as its icon shows it, e.g. Notes",
        }
    },
    required=["name"],
)
OPEN_URL_ARGS = object_schema(
    {
        "url": {
            "type": "string",
            "minLength": 1,
            "maxLength": 2000,
            "description": "the address to open in the target's browser, e.g. https://example.com",
        }
    },
    required=["url"],
)
