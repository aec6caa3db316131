"""The tool model: what a tool is (ToolSpec), what it may know of its call (CallContext), how
a caller's arguments arrive (Deferred, RawText, AfterCall), and the values a call ends in
(Outcome for the transports, Invocation for the observers)."""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from daemon.catalog.access import Policy
from daemon.errors import ToolError

# agent: model-facing (and HTTP-visible); http: HTTP-visible diagnostics kept out of the model's
# catalog; internal: maintenance tools never listed or callable over any transport.
Exposure = Literal["agent", "http", "internal"]
InputMode = Literal["json", "text"]
PLATFORMS = ("ios", "android", "macos", "windows", "linux")


@dataclass(frozen=True)
class Deferred:
    """Arguments a transport decodes only once the catalog knows the tool and admitted the
    caller, so a bad body never hides "no such tool" or "needs a token". `decode` raises
    ToolError for a wire problem."""

    decode: Callable[[], Any]


@dataclass(frozen=True)
class RawText:
    """Arguments sent as text: a text-mode tool takes it as its input, a json tool parses it."""

    text: str


@dataclass(frozen=True)
class AfterCall:
    """Post-call evidence asked with a call: after `delay_ms`, the screenshot tool run with
    `screenshot` as its arguments and/or the visual tree tool with `tree` as its (None: not
    asked), inside the same invocation (inside the HID flow for HID tools), so it shows this
    call's end state and no one else's action."""

    screenshot: dict[str, Any] | None
    delay_ms: int = 0
    tree: dict[str, Any] | None = None


EVIDENCE_TOOL = "screenshot"
TREE_TOOL = "screen_text"  # the visual tree: on-device OCR of the frame (daemon.tools.text)


@dataclass(frozen=True)
class Availability:
    available: bool = True
    code: str = ""
    reason: str = ""
    required_state: str = ""
    remediation: str = ""
    retryable: bool = True

    def to_error(self, tool: str) -> ToolError:
        details = {k: v for k, v in self.runtime().items() if k not in ("available",)}
        return ToolError(
            "tool_unavailable",
            f"{tool} is unavailable: {self.reason or self.code}",
            retryable=self.retryable,
            details=details,
        )

    def runtime(self) -> dict[str, Any]:
        """The compact runtime object of the WS contract (only when unavailable)."""
        out: dict[str, Any] = {"available": False}
        for key, value in (
            ("code", self.code),
            ("reason", self.reason),
            ("requiredState", self.required_state),
            ("remediation", self.remediation),
        ):
            if value:
                out[key] = value
        out["retryable"] = self.retryable
        return out


AVAILABLE = Availability()

SCREEN_NOT_SETTLED = (
    "the screen was still changing when the stability wait ended: the screenshot is current "
    "but may not show the final state"
)

# A handler gets its arguments validated, with the schema's defaults filled in, and built into
# its spec's `args_type` when it has one (else the filled dict).
Handler = Callable[[Any, "CallContext"], Awaitable[Any]]
SchemaFor = Callable[[str], dict[str, Any]]


@dataclass(frozen=True)
class ToolSpec:
    """A tool as the catalog knows it. Transports project it; they never change it."""

    name: str
    description: str
    category: str
    policy: Policy
    handler: Handler
    args_schema: dict[str, Any] | SchemaFor = field(
        default_factory=lambda: {"type": "object", "properties": {}, "additionalProperties": False}
    )
    result_schema: dict[str, Any] = field(default_factory=lambda: {"type": "object"})
    example_input: Any = field(default_factory=dict)
    # Builds the handler's typed argument object from the filled arguments (`args_type(**args)`,
    # e.g. a dataclass per tool); None hands the handler the filled dict.
    args_type: Callable[..., Any] | None = None
    input_mode: InputMode = "json"
    title: str = ""
    platforms: frozenset[str] | None = None  # None = portable
    exposure: Exposure = "agent"
    hid: bool = False  # takes part in the serialized HID flow: runs detached from its client
    timeout_s: float | None = None  # None = the server default for its kind
    availability: Callable[[], Availability] | None = None
    keywords: tuple[str, ...] = ()
    prerequisites: tuple[str, ...] = ()
    terminating: bool = False  # ends the agent run (wait_for_wakeup)
    evidence: bool = False  # its result carries a screenshot (post-action evidence)
    # Shows the target's screen (a picture or its text): a phone's screen is private, so a read
    # tool with it needs the token wherever a write tool does, as the live stream does.
    private: bool = False
    # Tool knowledge for callers that must tell "done" from "done, but read this first" (the
    # Tool RPC qualified reply): a sentence when a successful result is qualified, else None.
    qualify: Callable[[Any], str | None] | None = None
    # Runs before schema validation on the raw arguments, to refuse a retired value with a
    # message that says what to use instead (touch_gesture type "drag"); raises ToolError.
    precheck: Callable[[Any], None] | None = None

    def qualification(self, result: Any) -> str | None:
        """The tool's own qualification of a successful result, else the generic evidence rule:
        a post-action screenshot taken before the screen settled (screen_stable false)."""
        own = self.qualify(result) if self.qualify is not None else None
        if own:
            return own
        if self.evidence and isinstance(result, dict) and result.get("screen_stable") is False:
            return SCREEN_NOT_SETTLED
        return None

    def schema_for(self, platform: str) -> dict[str, Any]:
        s = self.args_schema
        return s(platform) if callable(s) else s

    def example_text(self) -> str:
        if isinstance(self.example_input, str):
            return self.example_input
        return json.dumps(self.example_input, separators=(",", ":"))


@dataclass
class CallContext:
    """What a handler may know about its call. Tools never learn which transport called."""

    transport: str
    client: str = ""
    started_at: float = field(default_factory=time.monotonic)
    detached: asyncio.Task[Any] | None = None  # a HID invocation's own task, once started
    # 128 random bits as 32 hex digits, the shape uuid4().hex had, at a sixth of its cost (its
    # UUID object was about 7 % of a quick call's catalog time).
    invocation_id: str = field(default_factory=lambda: secrets.token_hex(16))
    token_id: str = ""  # which token authenticated the caller (auth.Client.token_id), never it
    # What the tool noted about itself for observers (daemon.evidence.note): ("before" or
    # "after", Frame), ("released", [...]), ("profile_switches", [...]).
    evidence: list[tuple[str, Any]] = field(default_factory=list)
    # For observers: the caller passed its token rule (Caller.trusted), the size of the request
    # that carried the call as its transport read it, and whether the tool was let run.
    trusted: bool = True
    request_bytes: int | None = None
    ran: bool = False


@dataclass(frozen=True, kw_only=True)
class Invocation:
    """One finished invocation, as observers (flight recorder, metrics) see it. Built with
    keywords only: sixteen fields, several of one type, are too easy to put in the wrong place."""

    id: str  # 32 random hex digits, assigned when the call starts (CallContext.invocation_id)
    tool: str
    transport: str
    client: str  # peer address as the transport knows it
    args: Any  # the arguments as received (before redaction)
    started_at: float  # time.time() at start
    duration_ms: float
    outcome: str  # "ok" | "error" | "cancelled"
    error_code: str | None
    result: Any = None
    client_gone: bool = False
    token_id: str = ""
    evidence: tuple[tuple[str, Any], ...] = ()
    # False when the call was refused before it ran (unknown tool, token, guard, availability,
    # arguments): its args are then None, whatever was sent.
    ran: bool = True
    trusted: bool = True  # the caller passed its connection's token rule (Caller.trusted)
    request_bytes: int | None = None  # the request that carried it, as its transport read it


@dataclass(frozen=True)
class Outcome:
    """The result of one invocation, as every transport encodes it."""

    tool: ToolSpec
    result: Any
    error: ToolError | None
    duration_ms: int
    called_at: float  # time.time()
    evidence: Outcome | None = None  # the AfterCall screenshot's own outcome, when asked
    tree: Outcome | None = None  # the AfterCall visual tree's own outcome, when asked

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def unknown(self) -> bool:
        """The caller named no tool it may see (the lookup failed, nothing ran)."""
        return self.tool.handler is _no_handler


async def _no_handler(args: Any, ctx: CallContext) -> Any:
    raise ToolError("tool_not_found", "no such tool")


def unknown_spec(name: str) -> ToolSpec:
    """What an Outcome names when the caller named no tool it may see (Outcome.unknown)."""
    return ToolSpec(name, "", "unknown", "read", _no_handler)
