"""The one tool catalog every transport shares.

A transport decodes its wire format, asks the catalog to list or to call, and encodes the answer.
Everything else lives here, once: policy and guards, platform filtering, exposure, availability,
argument and result validation (jsonschema), timeouts, the detached run of HID invocations, and
the one log line per invocation.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import json
import secrets
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import fastjsonschema
import jsonschema
import structlog

from daemon import evidence
from daemon.errors import ToolError
from daemon.invocations import Running, token_revoked
from daemon.wire import WireError, check, encoder, loads

log = structlog.get_logger("daemon.catalog")

POLICIES = ("read", "write", "critical")
Policy = Literal["read", "write", "critical"]
# agent: model-facing (and HTTP-visible); http: HTTP-visible diagnostics kept out of the model's
# catalog; internal: maintenance tools never listed or callable over any transport.
Exposure = Literal["agent", "http", "internal"]
InputMode = Literal["json", "text"]
PLATFORMS = ("ios", "android", "macos", "windows", "linux")


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
        caller ran is the audit trail proper (daemon/trace/store.py keeps it apart)."""
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


@dataclass(frozen=True)
class Invocation:
    """One finished invocation, as observers (flight recorder, metrics) see it."""

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


_flat = encoder(ensure_ascii=False, separators=(",", ":"))


def _compact(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def sha256_revision(value: Any) -> str:
    """Deterministic revision: sha256 over compact, key-sorted JSON."""
    return "sha256:" + hashlib.sha256(_compact(value).encode()).hexdigest()


_ERROR_CODES = {
    "type": "type_mismatch",
    "enum": "enum_value_invalid",
    "const": "enum_value_invalid",
    "required": "required_property_missing",
    "additionalProperties": "additional_property_not_allowed",
}


# Compiled validators by schema identity (the schema is kept alive beside them, so an id is
# never reused while cached). fastjsonschema compiles a schema to Python code and answers "is
# it valid?" about ten times faster than jsonschema, which matters on every call; jsonschema
# stays the authority and explains what is wrong whenever the fast check says no.
_Check = Callable[[Any], Any]
_VALIDATORS: dict[int, tuple[dict[str, Any], _Check | None, jsonschema.Draft202012Validator]] = {}


def _compiled(schema: dict[str, Any]) -> tuple[_Check | None, jsonschema.Draft202012Validator]:
    hit = _VALIDATORS.get(id(schema))
    if hit is None:
        if len(_VALIDATORS) > 512:  # only transports with ad-hoc schemas could grow it
            _VALIDATORS.clear()
        try:
            # No defaults filled in and no formats checked: the same answers as jsonschema.
            fast: _Check | None = fastjsonschema.compile(
                schema, use_default=False, use_formats=False
            )
        except fastjsonschema.JsonSchemaDefinitionException:
            fast = None  # a keyword it does not know: jsonschema alone
        hit = _VALIDATORS[id(schema)] = (schema, fast, jsonschema.Draft202012Validator(schema))
    return hit[1], hit[2]


def schema_errors(schema: dict[str, Any], value: Any) -> list[dict[str, str]]:
    """`value`'s errors against `schema` as [{path, code, message}] (empty when valid), so a
    transport reports bad protocol payloads with the same codes as bad tool arguments."""
    fast, validator = _compiled(schema)
    if fast is not None:
        try:
            fast(value)
            return []
        except fastjsonschema.JsonSchemaValueException:
            pass
    out = []
    for err in sorted(validator.iter_errors(value), key=lambda e: list(e.absolute_path)):
        path = "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err.absolute_path)
        code = _ERROR_CODES.get(str(err.validator), f"{err.validator}_invalid")
        if err.validator == "type" and err.instance is None:
            code = "null_not_allowed"
        if err.validator == "required":
            missing = err.message.split("'")[1] if "'" in err.message else ""
            path = f"{path}.{missing}" if missing else path
        out.append({"path": path, "code": code, "message": err.message})
    return out


def with_defaults(schema: dict[str, Any], value: Any) -> Any:
    """`value` (valid against `schema`) with every absent property whose schema states a
    `default` filled in, in nested objects and array items too, and every whole-number float
    where the schema asks for an integer made an int (JSON Schema counts 2.0 as an integer; a
    handler gets the int it was promised). A new value: the caller's is never changed. The
    schema's `default` is thus the one statement of each argument default."""
    if type(value) is float:
        if value.is_integer() and any(_says_integer(b) for b in _branches(schema)):
            return int(value)
        return value
    if isinstance(value, dict):
        out = dict(value)
        for branch in _branches(schema):
            props = branch.get("properties")
            if not isinstance(props, dict):
                continue
            for key, sub in props.items():
                if not isinstance(sub, dict):
                    continue
                if key in out:
                    out[key] = with_defaults(sub, out[key])
                elif branch is schema and "default" in sub:
                    out[key] = copy.deepcopy(sub["default"])
        return out
    if isinstance(value, list):
        items = [b["items"] for b in _branches(schema) if isinstance(b.get("items"), dict)]
        for sub in items:
            value = [with_defaults(sub, v) for v in value]
    return value


def _branches(schema: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """`schema` and the subschemas that may apply with it (allOf, anyOf, oneOf, then, else)."""
    yield schema
    for key in ("allOf", "anyOf", "oneOf"):
        subs = schema.get(key)
        for sub in subs if isinstance(subs, list) else ():
            if isinstance(sub, dict):
                yield from _branches(sub)
    for key in ("then", "else"):
        sub = schema.get(key)
        if isinstance(sub, dict):
            yield from _branches(sub)


def _says_integer(schema: dict[str, Any]) -> bool:
    kind = schema.get("type")
    return kind == "integer" or (isinstance(kind, list) and "integer" in kind)


def validation_error(
    errors: list[dict[str, str]], what: str = "arguments", code: str | None = None
) -> ToolError:
    """Schema errors as one ToolError: the first in the message, all in details. The code
    follows `what` (tool arguments or result) unless a transport names its own."""
    first = errors[0]
    if code is None:
        code = "tool_arguments_invalid" if what == "arguments" else "tool_result_schema_invalid"
    return ToolError(
        code,
        f"invalid {what}: {first['path']}: {first['message']}",
        details={"valid": False, "errors": errors},
    )


class Catalog:
    """All registered tools for one configured platform."""

    def __init__(
        self,
        platform: str,
        specs: Iterable[ToolSpec] = (),
        *,
        tool_timeout_s: float = 60.0,
        hid_timeout_s: float = 300.0,
        max_pending_hid: int = 32,
        running: Running | None = None,
    ):
        self.platform = platform
        self.tool_timeout_s = tool_timeout_s
        self.hid_timeout_s = hid_timeout_s
        self.max_pending_hid = max_pending_hid
        self._specs: dict[str, ToolSpec] = {}
        self._args_schemas: dict[str, dict[str, Any]] = {}
        self._detached: set[asyncio.Task[Any]] = set()
        # Told of every finished invocation; each must be cheap and never block (hand off).
        self.observers: list[Callable[[Invocation], None]] = []
        # What is admitted and runs now (the calls' budget, the Tool Lab's "driving" badge).
        self.running = running or Running()
        for spec in specs:
            self.register(spec)

    # -- registry ---------------------------------------------------------------------------

    def register(self, spec: ToolSpec) -> None:
        if spec.name in self._specs:
            raise ValueError(f"tool {spec.name!r} registered twice")
        for platform in spec.platforms or ():
            if platform not in PLATFORMS:
                raise ValueError(f"tool {spec.name!r}: unknown platform {platform!r}")
        # The schemas are code, not input: the unit tier checks them against the meta-schema
        # for every platform (test_catalog_defaults.py). Checking them here cost every start
        # 0.44 s on a PC and 16-19 s under emulation.
        self._specs[spec.name] = spec

    def get(self, name: str, *, include_internal: bool = False) -> ToolSpec:
        spec = self._specs.get(name)
        if spec is None or (spec.exposure == "internal" and not include_internal):
            raise ToolError("tool_not_found", f"no tool named {name!r}", details={"tool": name})
        return spec

    def tools(
        self,
        caller: Caller | Guard,
        *,
        model_facing: bool = False,
        exclude: Iterable[str] = (),
    ) -> list[ToolSpec]:
        """The tools `caller` may see, sorted by name: exactly those it may call (or be refused
        only by its guard's policy at call time, never as unknown).

        A bare Guard is an in-process caller: model_facing=True is then the platform-filtered
        conversational catalog, otherwise every tool but the internal ones.
        """
        who = caller if isinstance(caller, Caller) else in_process(caller, model_facing)
        guard = who.effective
        if not guard.discovery_enabled:
            return []
        skip = set(exclude)
        return [
            spec
            for spec in sorted(self._specs.values(), key=lambda s: s.name)
            if spec.name not in skip
            and guard.permits(spec.policy)
            and self._hidden(spec, who) is None
        ]

    def _hidden(self, spec: ToolSpec, caller: Caller) -> str | None:
        """Why `caller` may neither see nor call `spec` (None: it may): the one visibility rule
        of every transport (exposure, audience, platform, terminating)."""
        if spec.exposure == "internal" or (caller.audience == "model" and spec.exposure != "agent"):
            return f"no tool named {spec.name!r}"
        if not caller.other_platforms and not self.runs_here(spec):
            return f"{spec.name} does not run on device_type {self.platform}"
        if caller.one_shot and spec.terminating:
            return (
                f"{spec.name} only makes sense inside an agent run; it is not exposed over "
                f"{caller.transport.upper()}"
            )
        return None

    def lookup(self, name: str, caller: Caller) -> ToolSpec:
        """The tool `caller` names, if it may see it; else tool_not_found."""
        spec = self._specs.get(name)
        if spec is None:
            raise ToolError("tool_not_found", f"no tool named {name!r}", details={"tool": name})
        reason = self._hidden(spec, caller)
        if reason is not None:
            raise ToolError("tool_not_found", reason, details={"tool": name})
        return spec

    def runs_here(self, spec: ToolSpec) -> bool:
        return spec.platforms is None or self.platform in spec.platforms

    def args_schema(self, spec: ToolSpec) -> dict[str, Any]:
        """The schema for this catalog's platform, computed once per tool."""
        schema = self._args_schemas.get(spec.name)
        if schema is None:
            schema = self._args_schemas[spec.name] = spec.schema_for(self.platform)
        return schema

    def availability(self, spec: ToolSpec) -> Availability:
        if not self.runs_here(spec):
            return Availability(
                False,
                "tool_platform_unsupported",
                f"{spec.name} does not run on device_type {self.platform}",
                required_state=f"device_type in {sorted(spec.platforms or ())}",
                remediation="set [device].device_type to a supported target",
                retryable=False,
            )
        if spec.availability is None:
            return AVAILABLE
        try:
            return spec.availability()
        except Exception as exc:  # an availability probe must never break listing
            log.warning("availability_probe_failed", tool=spec.name, error=repr(exc))
            return Availability(False, "availability_unknown", str(exc))

    def definition_revision(self, spec: ToolSpec) -> str:
        return sha256_revision(
            {
                "id": spec.name,
                "name": spec.title or spec.name,
                "description": spec.description,
                "category": spec.category,
                "policy": spec.policy,
                "argumentsSchema": self.args_schema(spec),
                "resultSchema": spec.result_schema,
                "keywords": sorted(spec.keywords),
                "prerequisiteToolIds": sorted(spec.prerequisites),
                "inputMode": spec.input_mode,
            }
        )

    # -- calls ------------------------------------------------------------------------------

    def validate_arguments(self, spec: ToolSpec, args: Any) -> Any:
        """Check `args` and return what the handler gets: defaults filled, typed if it asks."""
        try:  # the edge rule again, for any caller that skipped it: NaN passes every bound
            check(args)
        except WireError as exc:
            raise validation_error(
                [{"path": exc.path, "code": "value_invalid", "message": exc.reason}]
            ) from None
        if spec.precheck is not None:
            spec.precheck(args)
        schema = self.args_schema(spec)
        errors = schema_errors(schema, args)
        if errors:
            raise validation_error(errors)
        filled = with_defaults(schema, args)
        return spec.args_type(**filled) if spec.args_type is not None else filled

    async def call(
        self,
        name: str,
        args: Any,
        caller: Caller | None = None,
        *,
        after: AfterCall | None = None,
        guard: Guard | None = None,
        ctx: CallContext | None = None,
        request_bytes: int | None = None,
    ) -> Outcome:
        """Run one tool for `caller`: visibility, token rule, text mode, guard, availability,
        validation, execution, result check, and the evidence asked `after` it.

        Without a caller, an in-process one under `guard`. Never raises for tool problems: the
        Outcome carries the ToolError. HID tools run in a task of their own, shielded from the
        caller: once accepted they finish (or hit the server-side limit) even when the client
        goes away.
        """
        called_at = time.time()
        started = time.monotonic()
        if caller is None:
            caller = in_process(guard or Guard.preset("full-access"))
        if ctx is None:
            ctx = CallContext(
                caller.transport,
                client=caller.peer,
                token_id=caller.token_id,
                trusted=caller.trusted,
                request_bytes=request_bytes,
            )
        spec: ToolSpec | None = None
        result: Any = None
        error: ToolError | None = None
        shot: dict[str, Outcome] = {}
        token = evidence.noted.set(ctx.evidence)
        admitted = None
        try:
            spec = self.lookup(name, caller)
            admitted = self.running.admit(ctx.client, ctx.token_id)  # counted (invocations)
            caller.check_token(name, spec.policy, spec.private)
            args = self._arguments(spec, args, caller)
            result = await self._checked_call(spec, args, caller.effective, ctx, after, shot)
        except ToolError as exc:
            error = exc
        except asyncio.CancelledError:
            task = ctx.detached
            if task is not None and not task.done():
                # The client left; the HID invocation goes on and is logged once, at its end.
                task.add_done_callback(
                    lambda t: self._log_detached(name, started, t, ctx, args, called_at)
                )
            else:
                self._log(name, started, "cancelled", "client_gone", ctx, args, called_at)
            raise
        except Exception as exc:
            log.exception("tool_exception", tool=name)
            error = ToolError("tool_execution_exception", f"{name} failed unexpectedly: {exc!r}")
        finally:
            evidence.noted.reset(token)
            self.running.dismiss(admitted)
        code = error.code if error else None
        taken = shot.get(EVIDENCE_TOOL) if error is None else None
        tree = shot.get(TREE_TOOL) if error is None else None
        extra: dict[str, Any] = {}
        if after is not None and after.screenshot is not None:
            extra["evidence"] = _evidence_word(taken)
        if after is not None and after.tree is not None:
            extra["tree_evidence"] = _evidence_word(tree)
        outcome = "ok" if error is None else "error"
        self._log(name, started, outcome, code, ctx, args, called_at, result, **extra)
        dummy = spec or ToolSpec(name, "", "unknown", "read", _no_handler)
        ms = int((time.monotonic() - started) * 1000)
        return Outcome(dummy, result, error, ms, called_at, taken, tree)

    def _arguments(self, spec: ToolSpec, args: Any, caller: Caller) -> Any:
        """The arguments as the tool takes them, however the caller's wire carried them."""
        if isinstance(args, Deferred):
            args = args.decode()
        if isinstance(args, RawText):
            if spec.input_mode == "text":
                return {"input": args.text}
            try:
                return loads(args.text) if args.text.strip() else {}
            except WireError as exc:
                raise ToolError(
                    "tool_call_payload_invalid",
                    f"raw_input is not valid JSON for this json tool: {exc}",
                ) from None
        if spec.input_mode != "text":
            return args
        if isinstance(args, str):  # a text tool's plain input
            return {"input": args}
        if caller.flattened_text and isinstance(args, dict):
            return flatten_arguments(args)
        return args

    async def _checked_call(
        self,
        spec: ToolSpec,
        args: Any,
        guard: Guard,
        ctx: CallContext,
        after: AfterCall | None = None,
        shot: dict[str, Outcome] | None = None,
    ) -> Any:
        check_guard(guard, spec.name, spec.policy)
        # Availability is evaluated again right before execution.
        avail = self.availability(spec)
        if not avail.available:
            raise avail.to_error(spec.name)
        args = self.validate_arguments(spec, args)
        run = self._with_evidence(spec, args, ctx, after, shot) if after is not None else None
        if spec.hid:
            result = await self._run_detached(spec, args, ctx, run)
        else:
            limit = spec.timeout_s or self.tool_timeout_s
            result = await self._run_with_limit(spec, args, ctx, limit, run)
        errors = schema_errors(spec.result_schema, result)
        try:  # a reply never carries NaN, Infinity or a string it cannot encode
            check(result)
        except WireError as exc:
            errors += [{"path": exc.path, "code": "value_invalid", "message": exc.reason}]
        if errors:
            log.error("tool_result_invalid", tool=spec.name, errors=errors)
            raise validation_error(errors, "result")
        return result

    def _with_evidence(
        self,
        spec: ToolSpec,
        args: Any,
        ctx: CallContext,
        after: AfterCall,
        shot: dict[str, Outcome] | None,
    ) -> Callable[[], Awaitable[Any]]:
        """The handler, then the evidence: taken by the HID flow as the invocation ends (see
        daemon.evidence), else right after the handler, in the same task either way."""
        out = shot if shot is not None else {}

        async def take() -> None:
            if after.delay_ms:
                await asyncio.sleep(after.delay_ms / 1000)
            if after.screenshot is not None:
                out[EVIDENCE_TOOL] = await self._evidence_call(EVIDENCE_TOOL, after.screenshot, ctx)
            if after.tree is not None:
                out[TREE_TOOL] = await self._evidence_call(TREE_TOOL, after.tree, ctx)

        async def run() -> Any:
            hook = evidence.InFlowHook(take)
            token = evidence.current.set(hook)
            try:
                result = await spec.handler(args, ctx)
            finally:
                evidence.current.reset(token)
            if not hook.taken:
                await hook()
            return result

        return run

    async def _evidence_call(self, tool: str, args: Any, ctx: CallContext) -> Outcome:
        """An evidence tool's (screenshot, the visual tree) own checks and handler; a failure
        is the evidence's, never the call's (the action already happened)."""
        started, called_at = time.monotonic(), time.time()
        result: Any = None
        error: ToolError | None = None
        spec = self._specs.get(tool)
        try:
            if spec is None:
                raise ToolError("tool_not_found", f"no tool named {tool!r}")
            avail = self.availability(spec)
            if not avail.available:  # say why in the availability's own words
                raise ToolError(
                    avail.code or "tool_unavailable",
                    avail.reason or f"{tool} is unavailable",
                    retryable=avail.retryable,
                )
            tool_args = self.validate_arguments(spec, args)
            result = await spec.handler(tool_args, ctx)
            errors = schema_errors(spec.result_schema, result)
            if errors:
                raise validation_error(errors, "result")
        except ToolError as exc:
            error = exc
        except Exception as exc:
            log.exception("evidence_failed", tool=tool)
            error = ToolError("tool_execution_exception", f"{tool} evidence failed: {exc!r}")
        dummy = spec or ToolSpec(tool, "", "unknown", "read", _no_handler)
        ms = int((time.monotonic() - started) * 1000)
        return Outcome(dummy, result, error, ms, called_at)

    async def _run_with_limit(
        self,
        spec: ToolSpec,
        args: Any,
        ctx: CallContext,
        limit: float,
        run: Callable[[], Awaitable[Any]] | None = None,
    ) -> Any:
        ctx.ran = True  # the tool runs: what it was asked is kept (bounded), not only its size
        running = self.running.enter(spec.name, ctx.transport, ctx.client, ctx.token_id)
        try:
            async with asyncio.timeout(limit) as running.limit:
                return await (run() if run is not None else spec.handler(args, ctx))
        except TimeoutError:
            if running.revoked:  # cut by Running.revoke
                raise token_revoked(spec.name) from None
            raise ToolError(
                "tool_timeout", f"{spec.name} did not finish within {limit:g} s", retryable=True
            ) from None
        finally:
            self.running.leave(running)

    async def _run_detached(
        self,
        spec: ToolSpec,
        args: Any,
        ctx: CallContext,
        run: Callable[[], Awaitable[Any]] | None = None,
    ) -> Any:
        # Accepted HID invocations outlive their clients: without a bound, clients that call and
        # leave queued them up without end (1.4 MB each for a long text, built before it waits).
        if len(self._detached) >= self.max_pending_hid:
            raise ToolError(
                "hid_busy",
                f"{len(self._detached)} HID invocations are already accepted and not yet ended "
                "([server].max_pending_hid); retry once they have",
                retryable=True,
                details={"max_pending_hid": self.max_pending_hid},
            )
        limit = spec.timeout_s or self.hid_timeout_s
        task = asyncio.create_task(self._run_with_limit(spec, args, ctx, limit, run))
        ctx.detached = task
        self._detached.add(task)
        task.add_done_callback(self._detached.discard)
        # The caller may be cancelled (client gone); the task goes on to its end.
        return await asyncio.shield(task)

    async def drain(self, timeout: float) -> int:
        """Wait for running HID invocations (at shutdown); cancel those still running after
        `timeout`. Returns how many had to be cut."""
        pending = {t for t in self._detached if not t.done()}
        if not pending:
            return 0
        _, still = await asyncio.wait(pending, timeout=timeout)
        for task in still:
            task.cancel()
        if still:
            await asyncio.wait(still, timeout=5)
        return len(still)

    def _log_detached(
        self,
        name: str,
        started: float,
        task: asyncio.Task[Any],
        ctx: CallContext,
        args: Any = None,
        called_at: float = 0.0,
    ) -> None:
        code = None
        result = None
        if task.cancelled():
            code = "tool_cancelled_at_shutdown"
        elif isinstance(exc := task.exception(), ToolError):
            code = exc.code
        elif exc is not None:
            code = "tool_execution_exception"
        else:
            result = task.result()
        outcome = "ok" if code is None else "error"
        self._log(name, started, outcome, code, ctx, args, called_at, result, client_gone=True)

    def _log(
        self,
        name: str,
        started: float,
        outcome: str,
        code: str | None,
        ctx: CallContext,
        args: Any = None,
        called_at: float = 0.0,
        result: Any = None,
        *,
        client_gone: bool = False,
        **fields: Any,
    ) -> None:
        duration_ms = round((time.monotonic() - started) * 1000, 1)
        extra = {"client_gone": True, **fields} if client_gone else fields
        line = {
            "tool": name,
            "transport": ctx.transport,
            "duration_ms": duration_ms,
            "outcome": outcome,
            "error_code": code,
            **extra,
        }
        seen = None
        if self.observers:
            # A call refused before it ran hands its observers no arguments: a stranger's
            # megabyte of junk is not kept alive for the recorder (which keeps its size).
            if not ctx.ran or isinstance(args, Deferred | RawText):
                args = None
            seen = Invocation(
                ctx.invocation_id,
                name,
                ctx.transport,
                ctx.client,
                args,
                called_at,
                duration_ms,
                outcome,
                code,
                result,
                client_gone,
                ctx.token_id,
                tuple(ctx.evidence),
                ctx.ran,
                ctx.trusted,
                ctx.request_bytes,
            )
        # Emptied now that the record has its copy: the list is the value of a context variable,
        # and contexts copied during the call outlive it (a cancelled timer keeps its context
        # until its deadline: asyncio.timeout's is the HID limit, 300 s). Each kept the two
        # full frames of a call's evidence alive: 12 MB per tap, 180 MB after ten taps.
        ctx.evidence.clear()
        # Written after the reply: the transport encodes and sends its answer in this same
        # loop step, so the caller's latency does not carry the log line and the observers
        # (about half of a quick call's time). Nothing can see the difference: the callback
        # runs in the next loop iteration, before any later request is read off a socket.
        asyncio.get_running_loop().call_soon(self._emit, line, seen)

    def _emit(self, line: dict[str, Any], seen: Invocation | None) -> None:
        log.info("tool_invocation", **line)
        if seen is None:
            return
        for observer in self.observers:
            try:
                observer(seen)
            except Exception:  # an observer's fault never reaches the caller
                log.exception("invocation_observer_failed", tool=seen.tool)


def in_process(guard: Guard, model_facing: bool = False) -> Caller:
    """The daemon itself (start-up counts, tests): trusted, every tool but the internal ones,
    or with model_facing the platform-filtered conversational catalog."""
    if model_facing:
        return Caller("in-process", guard, "model", authenticated=True)
    return Caller("in-process", guard, "diagnostic", authenticated=True, other_platforms=True)


def flatten_arguments(arguments: Any) -> Any:
    """What a flattened-string tool receives: every value a string (non-strings as compact
    JSON, so true -> "true", 5 -> "5"), nulls dropped."""
    if not isinstance(arguments, dict):
        return arguments
    return {k: v if isinstance(v, str) else _flat(v) for k, v in arguments.items() if v is not None}


def _evidence_word(outcome: Outcome | None) -> str:
    """The evidence in the invocation's one log line: ok, or its error code."""
    if outcome is None:
        return "none"
    return "ok" if outcome.error is None else outcome.error.code


async def _no_handler(args: Any, ctx: CallContext) -> Any:
    raise ToolError("tool_not_found", "no such tool")


def object_schema(
    properties: Mapping[str, Any], required: Iterable[str] = (), **extra: Any
) -> dict[str, Any]:
    """A closed JSON object schema (additionalProperties false, the catalog's default)."""
    schema: dict[str, Any] = {
        "type": "object",
        "properties": dict(properties),
        "additionalProperties": False,
    }
    req = list(required)
    if req:
        schema["required"] = req
    schema.update(extra)
    return schema
