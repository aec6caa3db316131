"""Post-call evidence taken inside the HID flow.

A call may ask for evidence of its own action (the WebSocket `after`). For a HID tool it must be
taken while the invocation still holds the HID flow, or it could show another client's action
that started in between. The catalog sets the hook of the running invocation here; the input
engine runs it as a successful invocation ends, before the flow is let go. Stdlib only: the
engine must not depend on the catalog.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextvars import ContextVar


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
