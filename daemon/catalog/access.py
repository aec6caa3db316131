"""Who may call: policies, guards, and the Caller from which the catalog alone decides what a
caller sees and may run. Free of the tool model and the call pipeline, so the HTTP port's
authentication (daemon/auth.py) imports only this."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from daemon.errors import ToolError

POLICIES = ("read", "write", "critical")
Policy = Literal["read", "write", "critical"]


def policy_rank(policy: str) -> int:
    return POLICIES.index(policy)


@dataclass(frozen=True)
class Guard:
    """What a transport (or a paired client) may discover and execute."""

    discovery_enabled: bool
    execution_enabled: bool
    max_policy: Policy

    @staticmethod
    def preset(name: str) -> Guard:
        return {
            "disabled": Guard(False, False, "read"),
            "read-only": Guard(True, True, "read"),
            "read-write": Guard(True, True, "write"),
            "full-access": Guard(True, True, "critical"),
        }[name]

    def permits(self, policy: str) -> bool:
        return policy_rank(policy) <= policy_rank(self.max_policy)

    def lowered(self, client_max: str | None) -> Guard:
        """A paired client's maxToolPolicy can lower the guard, never raise it."""
        if client_max is None or policy_rank(client_max) >= policy_rank(self.max_policy):
            return self
        return Guard(self.discovery_enabled, self.execution_enabled, client_max)  # type: ignore[arg-type]

    def to_dict(self) -> dict[str, Any]:
        return {
            "discoveryEnabled": self.discovery_enabled,
            "executionEnabled": self.execution_enabled,
            "maxPolicy": self.max_policy,
        }


# model: the conversational catalog (agent exposure only); diagnostic: what a person or a test
# harness may inspect (HTTP diagnostics too). Internal tools are for no audience.
Audience = Literal["model", "diagnostic"]


def needs_token(policy: str, private: bool) -> bool:
    """Write and critical tools, and read tools that show the target's screen (`private`),
    need the pairing (or a client) token where a connection requires one."""
    return policy != "read" or private


@dataclass(frozen=True)
class Caller:
    """Who calls, as its transport read it from its own wire (Auth.caller for the HTTP port).
    From it the catalog alone decides, once, what this caller sees and may run."""

    transport: str
    guard: Guard  # the transport's [guard] preset, before the client's token lowers it
    audience: Audience = "diagnostic"
    peer: str = ""
    authenticated: bool = False
    # Write and critical tools need a valid token on this connection (off loopback, or on
    # loopback too with [auth].require_on_loopback); False for the local socket and in-process.
    token_required: bool = False
    max_policy: str | None = None  # the client token's maxToolPolicy
    other_platforms: bool = False  # tools of other targets stay listed, marked unavailable
    one_shot: bool = False  # no agent run to end: terminating tools are not for it
    # A text-mode tool's arguments arrive flattened to strings (the WS flattened-string form).
    flattened_text: bool = False
    token_id: str = ""  # which token authenticated it (auth.Client.token_id), never the token
    effective: Guard = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "effective", self.guard.lowered(self.max_policy))

    @property
    def trusted(self) -> bool:
        """Whether this caller passed its connection's token rule: a valid token, or a
        connection that needs none (loopback, the local socket, in-process). What a trusted
        caller ran is the audit trail proper (daemon/trace/store/ keeps it apart)."""
        return self.authenticated or not self.token_required

    @property
    def sees_critical(self) -> bool:
        """Whether the flight recorder shows this caller a critical tool's arguments and result
        (only a caller that may run critical tools sees what they were given)."""
        return self.effective.permits("critical")

    def authorize(self, tool: str, policy: str, private: bool = False) -> None:
        """The whole rule for running something of `policy` (and `private`) for this caller:
        the token rule, then its guard as its token's max policy lowered it. Catalog.call takes
        the same two steps apart (the token rule before the arguments are read, the guard right
        before the tool runs); the port's actions that are no tools (/api/sim) call this."""
        self.check_token(tool, policy, private)
        check_guard(self.effective, tool, policy)

    def check_token(self, tool: str, policy: str, private: bool = False) -> None:
        """The network rule (needs_token) wherever this connection requires a token."""
        if not needs_token(policy, private) or self.authenticated or not self.token_required:
            return
        what = "shows the target's screen" if policy == "read" else f"is a {policy} tool"
        raise ToolError(
            "auth_required",
            f"{tool} {what}: send 'Authorization: Bearer <token>' "
            "(the pairing token in the state folder)",
        )

    def admit(self, what: str, *, private: bool = False) -> None:
        """The rule for the port's routes that are data, not tools (the live stream and
        snapshot, the flight recorder, /metrics): open where this caller's guard is, and when
        `private` (a phone's screen, its audit trail) only with the token wherever a write tool
        needs one."""
        if private and self.token_required and not self.authenticated:
            raise ToolError(
                "auth_required",
                f"{what} needs 'Authorization: Bearer <token>' on this connection "
                "(the pairing token in the state folder)",
            )
        if not (self.effective.discovery_enabled and self.effective.execution_enabled):
            raise ToolError(
                "tool_execution_denied", f"{what}: the {self.transport} guard is disabled"
            )


def check_guard(guard: Guard, tool: str, policy: str) -> None:
    """tool_execution_denied unless `guard` lets `tool` (of `policy`) run."""
    if not guard.execution_enabled:
        raise ToolError("tool_execution_denied", "tool execution is disabled by the guard")
    if not guard.permits(policy):
        raise ToolError(
            "tool_execution_denied",
            f"{tool} needs policy {policy!r}; this caller is limited to {guard.max_policy!r}",
            details={"policy": policy, "maxPolicy": guard.max_policy},
        )


# What kind of caller each transport is, as Caller's keyword arguments: the one table of who
# sees what. The HTTP tools API (and its OpenAPI description) is for people and test harnesses;
# MCP and the skill bundle are a model's view of this target; a WebSocket host sees the model's
# tools of every platform (another target's marked unavailable) and sends text tools' arguments
# flattened; the IPC socket serves one-shot processes, which have no agent run to end.
CALLER_KINDS: dict[str, dict[str, Any]] = {
    "http": {"audience": "diagnostic", "other_platforms": True},
    "skills": {"audience": "model"},
    "mcp": {"audience": "model"},
    "ws": {"audience": "model", "other_platforms": True, "flattened_text": True},
    "ipc": {"audience": "model", "one_shot": True},
}


def in_process(guard: Guard, model_facing: bool = False) -> Caller:
    """The daemon itself (start-up counts, tests): trusted, every tool but the internal ones,
    or with model_facing the platform-filtered conversational catalog."""
    if model_facing:
        return Caller("in-process", guard, "model", authenticated=True)
    return Caller("in-process", guard, "diagnostic", authenticated=True, other_platforms=True)
