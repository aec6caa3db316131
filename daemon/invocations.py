"""Which tool invocations are executing right now, and for whom: what the Tool Lab's "driving"
badge reads (GET /api/live). The catalog enters an invocation when its handler starts and leaves
it when the handler ends; a HID invocation's handler runs in its own task, so an entry lasts as
long as the action does, even after its client went away.

A caller is the transport's name plus CallContext.client. The HTTP transport adds the optional
`X-Fingertip-Caller` header to the peer address, so two pages on one host are told apart. It is
a display label the client chooses, never an identity the daemon trusts.
"""

from __future__ import annotations

import itertools
import re
import time
from dataclasses import dataclass
from typing import Any

CALLER_HEADER = "X-Fingertip-Caller"
_LABEL = re.compile(r"[^A-Za-z0-9._:-]")
MAX_LABEL = 64


def caller_label(remote: str | None, header: str | None) -> str:
    """The HTTP caller: the peer address, plus the client's own label (cleaned and capped)."""
    base = remote or ""
    label = _LABEL.sub("", header or "")[:MAX_LABEL]
    return f"{base}/{label}" if label else base


@dataclass(frozen=True)
class RunningInvocation:
    tool: str
    transport: str
    caller: str
    started_at: float  # time.monotonic()

    def to_dict(self, now: float) -> dict[str, Any]:
        return {
            "tool": self.tool,
            "transport": self.transport,
            "caller": self.caller,
            "running_ms": round((now - self.started_at) * 1000),
        }


class Running:
    """The registry: a dict keyed by a counter, touched only on the event loop (no lock)."""

    def __init__(self) -> None:
        self._ids = itertools.count(1)
        self._now: dict[int, RunningInvocation] = {}

    def enter(self, tool: str, transport: str, caller: str) -> int:
        key = next(self._ids)
        self._now[key] = RunningInvocation(tool, transport, caller, time.monotonic())
        return key

    def leave(self, key: int) -> None:
        self._now.pop(key, None)

    def snapshot(self) -> list[dict[str, Any]]:
        now = time.monotonic()
        return [inv.to_dict(now) for inv in self._now.values()]
