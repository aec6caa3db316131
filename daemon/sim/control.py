"""Dev/test control of a SimTarget with no web framework in it: a route maps onto `control`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from daemon.errors import ToolError
from daemon.sim.target import PROFILES, SimTarget

ACTIONS = (
    "state",
    "unplug",
    "plug",
    "capture_off",
    "capture_on",
    "animate_on",
    "animate_off",
    "keyboard_on",
    "keyboard_off",
    "profile",
    "suspend",
    "resume",
)


def policy(action: str) -> tuple[str, bool]:
    """(policy, private) of an action, for Caller.authorize: the state shows the text typed into
    the target (private, like a screenshot); every other action changes the target (write)."""
    return ("read", True) if action == "state" else ("write", False)


def _bad(message: str) -> ToolError:
    return ToolError("tool_call_payload_invalid", message)


async def control(
    target: SimTarget, action: str, args: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Apply one fault or observation and return the state afterwards.

    `profile` takes {"name": "full" | "keyboard-isolated"}; `suspend` takes an optional
    {"wakeup": false} (the host did not enable remote wakeup; default true). Unknown actions
    and bad arguments raise ToolError tool_call_payload_invalid.
    """
    args = args or {}
    if action == "unplug":
        target.unplug()
    elif action == "plug":
        target.plug()
    elif action == "capture_off":
        target.capture_off()
    elif action == "capture_on":
        target.capture_on()
    elif action in ("animate_on", "animate_off"):
        target.set_animating(action == "animate_on")
    elif action in ("keyboard_on", "keyboard_off"):
        target.set_keyboard(action == "keyboard_on")
    elif action == "suspend":
        wakeup = args.get("wakeup", True)
        if not isinstance(wakeup, bool):
            raise _bad("suspend takes {'wakeup': true | false}")
        target.suspend(wakeup=wakeup)
    elif action == "resume":
        target.resume()
    elif action == "profile":
        name = args.get("name")
        if name not in PROFILES:
            raise _bad(f"profile needs {{'name': one of {', '.join(PROFILES)}}}")
        await target.switch_profile(str(name))
    elif action != "state":
        raise _bad(f"unknown sim action {action!r}; one of {', '.join(ACTIONS)}")
    return target.state()
