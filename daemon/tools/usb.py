"""wake_target: wake a sleeping target over USB (remote wakeup) and wait until it is back."""

from __future__ import annotations

from typing import Any

from daemon.catalog import CallContext, ToolSpec, object_schema
from daemon.runtime import Runtime
from daemon.usb import WAKE_TOOL


def tools(rt: Runtime) -> list[ToolSpec]:
    engine = rt.engine
    timeout = rt.config.input.wake_timeout_s

    async def wake(args: dict[str, Any], ctx: CallContext) -> Any:
        # In the HID flow: the wake and the release of whatever the sleep interrupted come
        # before any other input.
        async with engine.invocation(WAKE_TOOL, asleep_ok=True):
            return await engine.wake()

    return [
        ToolSpec(
            name=WAKE_TOOL,
            title="Wake Target",
            description="Wake the target when it sleeps (its USB bus is suspended: a computer "
            "in standby, a locked phone that suspended USB): the board signals USB remote "
            f"wakeup and waits up to {timeout:g} s until the target has configured the device "
            "again. While the target sleeps, input tools answer target_suspended and send "
            "nothing. Returns woke (false when it was already awake), usb_state, waited_ms "
            "and released (keys or buttons released that a sleep interrupted). Errors: "
            "wake_unsupported (this board's USB controller cannot wake its target; "
            "health_check's usb.can_wake says so beforehand), wakeup_not_enabled (the target "
            "stayed asleep: its host did not allow this device to wake it), wake_timeout (it "
            "answered but did not come back in time), target_not_attached (nothing is "
            "connected). Takes no arguments.",
            category="input",
            policy="write",
            handler=wake,
            hid=True,
            example_input={},
            result_schema=object_schema(
                {
                    "woke": {"type": "boolean"},
                    "usb_state": {"type": "string"},
                    "waited_ms": {"type": "integer"},
                    "released": {"type": "array", "items": {"type": "string"}},
                },
                required=["woke", "usb_state"],
            ),
            keywords=("wake", "wakeup", "sleep", "suspend", "resume", "standby"),
        )
    ]
