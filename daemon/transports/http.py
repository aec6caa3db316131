"""The HTTP tools API (spec/http-tools-api.txt): a codec over the catalog.

Status mapping (every body has the same JSON shape as a success; `error` carries the code):
  200  the tool ran: success, or a tool failure with is_error true (tool_execution_failed,
       tool_timeout, capture errors, ...)
  400  tool_call_payload_invalid (malformed JSON, wrong body shape, raw_input not JSON for a
       json tool), tool_arguments_invalid (schema errors listed in error.details)
  401  auth_required: write/critical tool off loopback without a valid bearer token
  403  tool_execution_denied (guard), host_not_allowed, origin_not_allowed
  404  tool_not_found (unknown or internal tool)
  413  request_too_large
  500  tool_execution_exception, tool_result_schema_invalid (a bug on our side)
  503  tool_unavailable (e.g. capture gone; retryable, details say how to fix it),
       too_many_connections ([server].max_connections reached; retryable)
"""

from __future__ import annotations

from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from daemon.auth import Auth
from daemon.catalog import Availability, Caller, Catalog, Deferred, Outcome, RawText, ToolSpec
from daemon.errors import ToolError, http_status
from daemon.transports import routes
from daemon.transports.responses import error_response, request_too_large
from daemon.transports.skill_bundle import skill_bundle
from daemon.wire import WireError, iso_utc, loads, output_text
from daemon.wire import dumps as _dumps

__all__ = ["HttpApi", "iso_utc", "project", "security_middleware"]


def definition(spec: ToolSpec, catalog: Catalog) -> dict[str, Any]:
    """The fixed part of a tool's HTTP catalog entry: everything but its runtime state."""
    out: dict[str, Any] = {
        "name": spec.name,
        "category": spec.category,
        "description": spec.description,
        "input_mode": spec.input_mode,
        "example_input": spec.example_text(),
        "args_schema": catalog.args_schema(spec),
        "policy": spec.policy,
        "http": {"method": "POST", "path": f"/api/tools/{spec.name}"},
    }
    if spec.platforms is not None:
        out["platforms"] = sorted(spec.platforms)
    return out


def project(spec: ToolSpec, catalog: Catalog) -> dict[str, Any]:
    """The HTTP catalog entry of one tool."""
    return _with_runtime(definition(spec, catalog), catalog.availability(spec))


def _with_runtime(entry: dict[str, Any], avail: Availability) -> dict[str, Any]:
    if not avail.available:
        entry["runtime"] = avail.runtime()
    return entry


class HttpApi:
    def __init__(self, catalog: Catalog, max_body_bytes: int):
        self.catalog = catalog
        self.max_body_bytes = max_body_bytes
        # The JSON text of each tool's definition(), encoded once: every reply carries it.
        self._definitions: dict[str, tuple[ToolSpec, str]] = {}

    def routes(self) -> list[routes.Route]:
        return [
            routes.Route("GET", "/api/tools", self.list_tools, routes.catalog()),
            routes.Route("POST", "/api/tools/{name}", self.call_tool, routes.catalog()),
            # The skill bundle is a model's view of the tools (CALLER_KINDS["skills"]).
            routes.Route(
                "GET", "/api/tool-skills", self.tool_skills, routes.catalog(kind="skills")
            ),
        ]

    async def list_tools(self, request: web.Request, caller: Caller) -> web.Response:
        specs = self.catalog.tools(caller)
        return web.json_response(
            {
                "platform": self.catalog.platform,
                "count": len(specs),
                "tools": [project(s, self.catalog) for s in specs],
            }
        )

    async def tool_skills(self, request: web.Request, caller: Caller) -> web.Response:
        specs = self.catalog.tools(caller)
        base = f"{request.scheme}://{request.host}"
        return web.Response(
            text=skill_bundle(specs, self.catalog, base),
            content_type="text/markdown",
            charset="utf-8",
        )

    async def call_tool(self, request: web.Request, caller: Caller) -> web.Response:
        raw_input: list[str] = []  # what the caller sent, echoed in the reply
        too_large: ToolError | None = None
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            body = b""
            too_large = request_too_large(self.max_body_bytes)

        def decode() -> Any:
            if too_large is not None:
                raise too_large
            args, raw = _decode(body)
            raw_input.append(raw)
            return args

        outcome = await self.catalog.call(
            request.match_info["name"],
            Deferred(decode),
            caller,
            request_bytes=request.content_length if too_large else len(body),
        )
        return self._outcome(outcome, raw_input[0] if raw_input else None)

    def _outcome(self, outcome: Outcome, raw_input: str | None) -> web.Response:
        spec = None if outcome.error and outcome.error.code == "tool_not_found" else outcome.tool
        return self._respond(
            spec, raw_input, outcome.result, outcome.error, outcome.duration_ms, outcome.called_at
        )

    def _respond(
        self,
        spec: ToolSpec | None,
        raw_input: str | None,
        result: Any,
        error: ToolError | None,
        duration_ms: int,
        called_at: float,
    ) -> web.Response:
        try:
            output = output_text(error.to_dict() if error else result)
        except ValueError as exc:  # NaN in a result the catalog did not see: a bug, say so
            error = ToolError("tool_result_schema_invalid", f"the result is not JSON: {exc}")
            output = output_text(error.to_dict())
        body: dict[str, Any] = {
            "raw_input": raw_input or "",
            "output": output,
            "is_error": error is not None,
            "duration_ms": duration_ms,
            "called_at": iso_utc(called_at),
        }
        if error is not None:
            body["error"] = error.to_dict()
        status = http_status(error.code, tool_call=True) if error else 200
        # The tool entry leads the body; its definition is spliced in already encoded.
        text = '{"tool":' + self._tool_json(spec) + "," + _dumps(body)[1:]
        return web.json_response(text=text, status=status)

    def _tool_json(self, spec: ToolSpec | None) -> str:
        if spec is None:
            return "null"
        avail = self.catalog.availability(spec)
        if not avail.available:
            return _dumps(_with_runtime(definition(spec, self.catalog), avail))
        hit = self._definitions.get(spec.name)
        if hit is None or hit[0] is not spec:
            hit = self._definitions[spec.name] = (spec, _dumps(definition(spec, self.catalog)))
        return hit[1]


def _decode(body: bytes) -> tuple[Any, str]:
    """The body's arguments (RawText for raw_input: the catalog knows the tool's input mode)
    and the raw_input the reply echoes."""
    if not body.strip():
        doc: Any = {}
    else:
        try:
            doc = loads(body)
        except WireError as exc:
            raise _payload_error(f"body is not valid JSON: {exc}") from None
    if not isinstance(doc, dict) or set(doc) - {"input", "raw_input"}:
        raise _payload_error('body must be a JSON object {"input": ...} or {"raw_input": "..."}')
    if "input" in doc and "raw_input" in doc:
        raise _payload_error("send either input or raw_input, not both")
    if "raw_input" in doc:
        raw = doc["raw_input"]
        if not isinstance(raw, str):
            raise _payload_error("raw_input must be a string")
        return RawText(raw), raw
    value = doc.get("input", {})
    return value, output_text(value)


def _payload_error(message: str) -> ToolError:
    return ToolError("tool_call_payload_invalid", message)


def security_middleware(auth: Auth) -> Middleware:
    """Refuse foreign Host headers and cross-site browser requests before any handler runs,
    so a web page open on the target cannot drive it."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        error: ToolError | None = None
        if not auth.host_allowed(request.headers.get("Host")):
            error = ToolError("host_not_allowed", f"Host {request.host!r} is not one of ours")
        elif not auth.origin_allowed(request.headers.get("Origin")):
            error = ToolError(
                "origin_not_allowed", f"Origin {request.headers.get('Origin')!r} is not ours"
            )
        if error is not None:
            return error_response(error)
        response: web.StreamResponse = await handler(request)
        return response

    return middleware
