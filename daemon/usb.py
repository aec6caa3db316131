"""The USB link to the target as the daemon follows it: not_attached, attached, configured or
suspended (gadget.usbstate), whether the target can be woken, and waking it.

A backend owns one UsbLink and feeds it every state its UDC (or the simulated target) shows;
the input engine refuses input while the target sleeps and cuts a program the target fell
asleep under; health_check, /metrics, the Tool Lab and the flight recorder read it. Touched
only on the event loop.

Remote wakeup's outcome is seen only in the state: the UDC core ignores usb_gadget_wakeup()'s
result, and a host that did not enable remote wakeup simply stays asleep. So a wake that
leaves the state `suspended` for its whole limit is reported as `wakeup_not_enabled` (the
host did not enable it, or sleeps too deeply to answer), one that left `suspended` but did
not come back to `configured` in time as `wake_timeout`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from daemon.errors import ToolError
from gadget.usbstate import normalize

log = structlog.get_logger("daemon.usb")

WAKE_TOOL = "wake_target"
SUSPENDED_REMEDIATION = (
    f"call {WAKE_TOOL} (or set [input] wake_first = true), or wake the target by hand, then retry"
)

# (old state, new state, raw UDC state); called on the event loop at each change.
Listener = Callable[[str, str, str], None]


def suspended_error(tool: str) -> ToolError:
    """What an input tool answers while the target sleeps: nothing was sent."""
    return ToolError(
        "target_suspended",
        f"{tool}: the target is asleep (its USB bus is suspended); nothing was sent, as input "
        "written now would wait in the gadget and arrive when it wakes",
        retryable=True,
        details={"usb_state": "suspended", "remediation": SUSPENDED_REMEDIATION},
    )


class UsbLink:
    """One target's USB link. `wakeup` asks the UDC for remote wakeup (None: it cannot)."""

    def __init__(
        self,
        *,
        can_wake: bool = False,
        wake_reason: str = "",
        wakeup: Callable[[], Awaitable[None]] | None = None,
        state: str = "configured",
    ) -> None:
        self.can_wake, self.wake_reason = False, ""
        self._wakeup: Callable[[], Awaitable[None]] | None = None
        self.configure(can_wake=can_wake, wake_reason=wake_reason, wakeup=wakeup)
        self.raw = state
        self.state = normalize(state)
        self.changed_at = time.time()
        self.changes = 0
        self.listeners: list[Listener] = []
        # Reads the state now (a board: its UDC's sysfs); the watcher's reports come between.
        self.refresh: Callable[[], None] = lambda: None
        self.suspended = asyncio.Event()  # set while the state is `suspended`
        self._changed = asyncio.Event()
        if self.state == "suspended":
            self.suspended.set()

    def configure(
        self, *, can_wake: bool, wake_reason: str, wakeup: Callable[[], Awaitable[None]] | None
    ) -> None:
        """Whether and how the target can be woken (a board decides it at its start)."""
        self.can_wake = can_wake and wakeup is not None
        self.wake_reason = wake_reason
        self._wakeup = wakeup

    def set(self, raw: str) -> None:
        """A state the UDC reported (on the event loop)."""
        raw = raw.strip()
        new = normalize(raw)
        old, self.raw = self.state, raw
        if new == old:
            return
        self.state, self.changed_at = new, time.time()
        self.changes += 1
        if new == "suspended":
            self.suspended.set()
        else:
            self.suspended.clear()
        self._changed.set()
        self._changed = asyncio.Event()
        log.info("usb_state", state=new, was=old, udc_state=raw)
        for listener in list(self.listeners):
            try:
                listener(old, new, raw)
            except Exception:  # one listener's fault must not stop the others
                log.exception("usb_state_listener_failed")

    async def wait_for(self, states: tuple[str, ...], timeout: float) -> bool:
        """Whether the state is (or becomes) one of `states` within `timeout`."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self.state not in states:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            try:
                async with asyncio.timeout(remaining):
                    await self._changed.wait()
            except TimeoutError:
                return self.state in states
        return True

    def status(self) -> dict[str, Any]:
        """health_check's `usb` section."""
        return {
            "state": self.state,
            "udc_state": self.raw,
            "since": self.changed_at,
            "changes": self.changes,
            "can_wake": self.can_wake,
            "wake": self.wake_reason,
        }

    async def wake(self, timeout: float) -> dict[str, Any]:
        """Wake a suspended target and wait until it configured the device again; at once when
        it is awake. ToolErrors say why not: target_not_attached, wake_unsupported,
        wakeup_not_enabled, wake_timeout."""
        start = time.monotonic()
        if self.state == "configured":
            return {"woke": False, "usb_state": self.state, "waited_ms": 0}
        if self.state != "suspended":
            raise ToolError(
                "target_not_attached",
                f"the target is not connected (USB state {self.state}): there is nothing to wake",
                retryable=True,
                details={"usb_state": self.state},
            )
        if not self.can_wake or self._wakeup is None:
            raise ToolError(
                "wake_unsupported",
                f"this board cannot wake its target: {self.wake_reason}",
                details={
                    "usb_state": self.state,
                    "remediation": "wake the target by hand (a key on its own keyboard, its "
                    "power button); see docs/board.md for boards that can",
                },
            )
        await self._wakeup()
        left_suspended = asyncio.Event()

        def watch(old: str, new: str, raw: str) -> None:
            left_suspended.set()

        self.listeners.append(watch)
        try:
            woke = await self.wait_for(("configured",), timeout)
        finally:
            self.listeners.remove(watch)
        waited = round((time.monotonic() - start) * 1000)
        if woke:
            log.info("usb_woke", waited_ms=waited)
            return {"woke": True, "usb_state": self.state, "waited_ms": waited}
        if not left_suspended.is_set():
            raise ToolError(
                "wakeup_not_enabled",
                f"the target stayed asleep {timeout:g} s after the remote wakeup signal: its "
                "host has not enabled remote wakeup for this device (or sleeps too deeply to "
                "answer it)",
                details={
                    "usb_state": self.state,
                    "remediation": "wake the target by hand; on a Linux target allow it with "
                    "power/wakeup = enabled on the device, on Windows 'Allow this device to "
                    "wake the computer'",
                },
            )
        raise ToolError(
            "wake_timeout",
            f"the target answered the wakeup but did not configure the device within "
            f"{timeout:g} s (USB state {self.state})",
            retryable=True,
            details={"usb_state": self.state},
        )
