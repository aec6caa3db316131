"""MCP (Model Context Protocol) over streamable HTTP at /mcp: the model-facing catalog as MCP tools.

Written directly on aiohttp, not with the official `mcp` SDK's server. The SDK serves through an
ASGI (Starlette) app with its own anyio session manager; aiohttp cannot mount ASGI, so sharing
our one port, security middleware and token rules would need a hand-written ASGI bridge, and
the SDK would put starlette, uvicorn, pydantic, httpx and cryptography on the board. What an
agent needs here is small and stateless: the initialize handshake (protocol 2024-11-05 ..
2025-11-25), ping, tools/list and tools/call, each answered as one JSON body. The tests drive it
with the SDK's own client.

No sessions (no Mcp-Session-Id) and no server-sent stream: GET and DELETE are 405, as the
transport allows. A tool's problems are tool results with isError (the model can read and
correct them); only an unknown tool or malformed params are JSON-RPC errors.
"""

from __future__ import annotations

from typing import Any

import structlog
from aiohttp import web

from daemon import VERSION
from daemon.catalog import Caller, Catalog, Outcome, ToolSpec
from daemon.errors import ToolError
from daemon.transports import routes
from daemon.transports.responses import request_too_large
from daemon.wire import IMAGE_TYPES, encoder, is_artifact, loads

log = structlog.get_logger("daemon.transports.mcp")

PROTOCOL_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")  # newest first

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603

INSTRUCTIONS = (
    "Fingertip is the USB keyboard, touchscreen or mouse of a phone or computer (the target) "
    "and sees its screen. Look first (screenshot), then act. Coordinates are normalized 0-1000 "
    "on both axes. Input tools return a post-action screenshot: inspect it instead of taking "
    "another one."
)


# Built once: json.dumps with options builds a new encoder on every call (every reply). It
# refuses NaN: a bare NaN in a JSON-RPC reply is not JSON (see _rpc_reply).
_encode = encoder(ensure_ascii=False)


class RpcError(Exception):
    def __init__(self, code: int, message: str, data: Any = None):
        super().__init__(message)
        self.code, self.message, self.data = code, message, data

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            out["data"] = self.data
        return out


# -- pure projections ------------------------------------------------------------------------


def tool_annotations(spec: ToolSpec) -> dict[str, Any]:
    """MCP tool annotations from policy. Write tools act on the target but are not
    destructive by our policy; MCP's default for destructiveHint is true, so say false."""
    out: dict[str, Any] = {"readOnlyHint": spec.policy == "read"}
    if spec.policy != "read":
        out["destructiveHint"] = spec.policy == "critical"
    if spec.title:
        out["title"] = spec.title
    return out


def evidence_image(spec: ToolSpec, result: Any) -> tuple[Any, dict[str, Any] | None]:
    """Split a screenshot out of an evidence result: (result without its base64 data, the MCP
    image item). Models take images natively; base64 inside text only wastes their context."""
    if not (spec.evidence and is_artifact(result)):
        return result, None
    rest = {k: v for k, v in result.items() if k != "data"}
    return rest, {
        "type": "image",
        "data": result["data"],
        "mimeType": IMAGE_TYPES[result["format"]],
    }


def output_schema(spec: ToolSpec) -> dict[str, Any] | None:
    """The result schema as MCP outputSchema: only a described object (a bare
    {"type": "object"} says nothing), and for evidence tools without the data that travels
    as an image item."""
    schema = spec.result_schema
    if schema.get("type") != "object" or not schema.get("properties"):
        return None
    if not spec.evidence or "data" not in schema["properties"]:
        return schema
    out = dict(schema)
    out["properties"] = {k: v for k, v in schema["properties"].items() if k != "data"}
    if "required" in schema:
        out["required"] = [k for k in schema["required"] if k != "data"]
    return out


def tool_definition(spec: ToolSpec, catalog: Catalog) -> dict[str, Any]:
    out: dict[str, Any] = {"name": spec.name}
    if spec.title:
        out["title"] = spec.title
    out["description"] = spec.description
    out["inputSchema"] = catalog.args_schema(spec)
    schema = output_schema(spec)
    if schema is not None:
        out["outputSchema"] = schema
    out["annotations"] = tool_annotations(spec)
    return out


def _text(value: Any) -> dict[str, Any]:
    text = value if isinstance(value, str) else _encode(value)
    return {"type": "text", "text": text}


def call_result(outcome: Outcome) -> dict[str, Any]:
    """A CallToolResult: the JSON text (for clients without structured content), the
    structured result, and the screenshot as an image item."""
    if outcome.error is not None:
        return error_result(outcome.error)
    result, image = evidence_image(outcome.tool, outcome.result)
    out: dict[str, Any] = {"content": [_text(result)] + ([image] if image else [])}
    if isinstance(result, dict):
        out["structuredContent"] = result
    out["isError"] = False
    return out


def error_result(error: ToolError) -> dict[str, Any]:
    return {"content": [_text(error.to_dict())], "isError": True}


def negotiate(requested: Any) -> str:
    """The client's version when we speak it, else our newest (the client then decides)."""
    return requested if requested in PROTOCOL_VERSIONS else PROTOCOL_VERSIONS[0]


def accepts_json(accept: str) -> bool:
    types = {part.split(";")[0].strip().lower() for part in accept.split(",")}
    return bool(types & {"application/json", "application/*", "*/*"})


# -- the endpoint ----------------------------------------------------------------------------


class McpEndpoint:
    def __init__(self, catalog: Catalog, max_body_bytes: int):
        self.catalog = catalog
        self.max_body_bytes = max_body_bytes

    def routes(self) -> list[routes.Route]:
        # A model's caller: the model-facing tools of this target, under the MCP guard.
        return [
            routes.Route("POST", "/mcp", self.post, routes.catalog("mcp")),
            routes.Route("GET", "/mcp", self.not_allowed, routes.OPEN),
            routes.Route("DELETE", "/mcp", self.not_allowed, routes.OPEN),
        ]

    async def not_allowed(self, request: web.Request, caller: Caller) -> web.Response:
        """No server-initiated stream and no sessions to end: 405, as the transport allows."""
        return _rpc_reply(
            None,
            error=RpcError(INVALID_REQUEST, f"Method Not Allowed: {request.method} /mcp"),
            status=405,
            headers={"Allow": "POST"},
        )

    async def post(self, request: web.Request, caller: Caller) -> web.Response:
        if not accepts_json(request.headers.get("Accept", "")):
            return _rpc_reply(
                None,
                error=RpcError(INVALID_REQUEST, "Not Acceptable: accept application/json"),
                status=406,
            )
        if request.content_type != "application/json":
            return _rpc_reply(
                None,
                error=RpcError(INVALID_REQUEST, "Unsupported Media Type: send application/json"),
                status=415,
            )
        version = request.headers.get("MCP-Protocol-Version")
        if version is not None and version not in PROTOCOL_VERSIONS:
            return _rpc_reply(
                None,
                error=RpcError(
                    INVALID_REQUEST,
                    f"Unsupported protocol version: {version}",
                    {"supported": list(PROTOCOL_VERSIONS), "requested": version},
                ),
                status=400,
            )
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            error = request_too_large(self.max_body_bytes)
            return _rpc_reply(
                None,
                error=RpcError(INVALID_REQUEST, error.message, error.to_dict()),
                status=413,
            )
        try:
            message = loads(body)
        except ValueError as exc:  # wire.WireError: not JSON, NaN, too deep, lone surrogate
            return _rpc_reply(None, error=RpcError(PARSE_ERROR, f"Parse error: {exc}"), status=400)
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
            return _rpc_reply(
                None,
                error=RpcError(INVALID_REQUEST, "expected one JSON-RPC 2.0 message (no batches)"),
                status=400,
            )
        if "method" not in message:  # a response to a request we never send
            return web.Response(status=202)
        method = message["method"]
        if "id" not in message:  # notification: initialized, cancelled, ... nothing to answer
            log.debug("mcp_notification", method=method)
            return web.Response(status=202)
        rid = message["id"]
        if not isinstance(method, str) or isinstance(rid, bool) or not isinstance(rid, str | int):
            return _rpc_reply(
                None,
                error=RpcError(INVALID_REQUEST, "a request needs a string method and id"),
                status=400,
            )
        params = message.get("params", {})
        if not isinstance(params, dict):
            return _rpc_reply(rid, error=RpcError(INVALID_PARAMS, "params must be an object"))
        try:
            return _rpc_reply(rid, result=await self.dispatch(method, params, caller, len(body)))
        except RpcError as exc:
            return _rpc_reply(rid, error=exc)

    async def dispatch(
        self, method: str, params: dict[str, Any], caller: Caller, size: int = 0
    ) -> Any:
        if method == "initialize":
            return {
                "protocolVersion": negotiate(params.get("protocolVersion")),
                "capabilities": {"tools": {"listChanged": False}},
                "serverInfo": {"name": "fingertip", "title": "Fingertip", "version": VERSION},
                "instructions": INSTRUCTIONS,
            }
        if method == "ping":
            return {}
        if method == "tools/list":
            specs = self.catalog.tools(caller)
            return {"tools": [tool_definition(s, self.catalog) for s in specs]}
        if method == "tools/call":
            return await self.call(params, caller, size)
        raise RpcError(METHOD_NOT_FOUND, f"Method not found: {method}")

    async def call(
        self, params: dict[str, Any], caller: Caller, size: int | None = None
    ) -> dict[str, Any]:
        name, args = params.get("name"), params.get("arguments", {})
        if not isinstance(name, str):
            raise RpcError(INVALID_PARAMS, "tools/call needs a string name")
        if not isinstance(args, dict):
            raise RpcError(INVALID_PARAMS, "tools/call arguments must be an object")
        outcome = await self.catalog.call(name, args, caller, request_bytes=size)
        if outcome.unknown:
            raise RpcError(INVALID_PARAMS, f"Unknown tool: {name}")  # a protocol error in MCP
        try:
            return call_result(outcome)
        except ValueError as exc:  # NaN in a result the catalog did not see: a bug, say so
            return error_result(
                ToolError("tool_result_schema_invalid", f"the result is not JSON: {exc}")
            )


def _rpc_reply(
    rid: Any,
    *,
    result: Any = None,
    error: RpcError | None = None,
    status: int = 200,
    headers: dict[str, str] | None = None,
) -> web.Response:
    body: dict[str, Any] = {"jsonrpc": "2.0", "id": rid}
    if error is not None:
        body["error"] = error.to_dict()
    else:
        body["result"] = result
    try:
        text = _encode(body)
    except ValueError as exc:  # NaN or Infinity somewhere in the result: never send bare NaN
        bad = RpcError(INTERNAL_ERROR, f"the result is not JSON: {exc}")
        text = _encode({"jsonrpc": "2.0", "id": rid, "error": bad.to_dict()})
    return web.json_response(text=text, status=status, headers=headers)
