"""The registry and the call pipeline: a transport decodes its wire format, asks the Catalog to
list or to call, and encodes the answer. Here, once: visibility (exposure, audience, platform),
the token rule and the guard, availability, argument and result validation, timeouts, the
detached run of HID invocations, and the one log line per invocation."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

import structlog

from daemon import evidence
from daemon.catalog.access import Caller, Guard, check_guard, in_process
from daemon.catalog.model import (
    AVAILABLE,
    EVIDENCE_TOOL,
    PLATFORMS,
    TREE_TOOL,
    AfterCall,
    Availability,
    CallContext,
    Deferred,
    Invocation,
    Outcome,
    RawText,
    ToolSpec,
    unknown_spec,
)
from daemon.catalog.schemas import schema_errors, sha256_revision, validation_error, with_defaults
from daemon.errors import ToolError
from daemon.invocations import Running, token_revoked
from daemon.wire import WireError, check, encoder, loads

log = structlog.get_logger("daemon.catalog")


@dataclass(frozen=True)
class Began:
    """When a call began, on both clocks, so that neither is taken for the other: `at`
    (time.time()) is what replies and records show, `monotonic` what durations are measured
    from."""

    at: float
    monotonic: float

    @staticmethod
    def now() -> Began:
        at = time.time()
        return Began(at=at, monotonic=time.monotonic())

    def elapsed_ms(self) -> float:
        return (time.monotonic() - self.monotonic) * 1000


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
        began = Began.now()
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
                task.add_done_callback(lambda t: self._log_detached(name, began, t, ctx, args))
            else:
                self.record(name, began, "cancelled", "client_gone", ctx, args=args)
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
        self.record(name, began, outcome, code, ctx, args=args, result=result, **extra)
        return Outcome(
            spec or unknown_spec(name),
            result,
            error,
            duration_ms=int(began.elapsed_ms()),
            called_at=began.at,
            evidence=taken,
            tree=tree,
        )

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
        began = Began.now()
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
        return Outcome(
            spec or unknown_spec(tool),
            result,
            error,
            duration_ms=int(began.elapsed_ms()),
            called_at=began.at,
        )

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
        began: Began,
        task: asyncio.Task[Any],
        ctx: CallContext,
        args: Any = None,
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
        self.record(name, began, outcome, code, ctx, args=args, result=result, client_gone=True)

    def record(
        self,
        name: str,
        began: Began,
        outcome: str,
        code: str | None,
        ctx: CallContext,
        *,
        args: Any = None,
        result: Any = None,
        client_gone: bool = False,
        **fields: Any,
    ) -> None:
        """Log a call's line and hand its record to the observers (flight recorder, metrics):
        every tool call's end, and what a route runs like a tool (a media upload)."""
        duration_ms = round(began.elapsed_ms(), 1)
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
                id=ctx.invocation_id,
                tool=name,
                transport=ctx.transport,
                client=ctx.client,
                args=args,
                started_at=began.at,
                duration_ms=duration_ms,
                outcome=outcome,
                error_code=code,
                result=result,
                client_gone=client_gone,
                token_id=ctx.token_id,
                evidence=tuple(ctx.evidence),
                ran=ctx.ran,
                trusted=ctx.trusted,
                request_bytes=ctx.request_bytes,
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


_flat = encoder(ensure_ascii=False, separators=(",", ":"))


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
