"""Post-call evidence taken inside the HID flow.

A call may ask for evidence of its own action (the WebSocket `after`). For a HID tool it must be
taken while the invocation still holds the HID flow, or it could show another client's action
that started in between. The catalog sets the hook of the running invocation here; the input
engine runs it as a successful invocation ends, before the flow is let go.

And what an invocation notes about itself for the catalog's observers (the flight recorder):
the screens it started and ended on, what it released, its profile switches. Deep helpers (the
screen, the engine) note them here without every signature carrying the call's context.
Stdlib only: the engine and the screen must not depend on the catalog.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any


class InFlowHook:
    """The evidence of one invocation: taken once, by the first successful flow end."""

    def __init__(self, take: Callable[[], Awaitable[None]]):
        self._take = take
        self.taken = False

    async def __call__(self) -> None:
        if self.taken:
            return
        self.taken = True  # before awaiting: a task spawned meanwhile inherits this hook
        await self._take()


current: ContextVar[InFlowHook | None] = ContextVar("fingertip_in_flow_evidence", default=None)


async def take_in_flow() -> None:
    """Called by the HID flow as an invocation ends well, with the flow still held."""
    hook = current.get()
    if hook is not None:
        await hook()


# The running invocation's notes (its CallContext.evidence), in its task and the tasks and
# threads it starts.
noted: ContextVar[list[tuple[str, Any]] | None] = ContextVar("fingertip_noted", default=None)


def note(kind: str, value: Any) -> None:
    """Attach `value` to the running invocation, if any (cheap: one list append)."""
    notes = noted.get()
    if notes is not None:
        notes.append((kind, value))
