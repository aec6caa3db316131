"""GET /api/openapi.json: an OpenAPI 3.1 description of the HTTP tools API, generated from the
catalog for the caller (the same guard-filtered tools GET /api/tools lists).

One path per HTTP-visible tool. Its request body is the codec's {"input": ...} or
{"raw_input": "..."} with the tool's argument schema; its 200 body carries the tool's result
schema as the contentSchema of `output` (a JSON text); the error statuses and their error codes
come from the error codes' declarations (daemon.errors.CALL_STATUS), so they cannot drift.
"""

from __future__ import annotations

from typing import Any

import jsonschema
from aiohttp import web

from daemon import VERSION
from daemon.catalog import POLICIES, Caller, Catalog, ToolSpec, needs_token
from daemon.errors import CALL_STATUS
from daemon.transports import routes

REF = "#/components/schemas/"

ERROR = {
    "type": "object",
    "required": ["code", "message", "retryable"],
    "properties": {
        "code": {"type": "string"},
        "message": {"type": "string"},
        "retryable": {"type": "boolean"},
        "details": {"type": "object"},
    },
}

TOOL_ENTRY = {
    "type": "object",
    "required": [
        "name",
        "category",
        "description",
        "input_mode",
        "example_input",
        "args_schema",
        "policy",
        "http",
    ],
    "properties": {
        "name": {"type": "string"},
        "category": {"type": "string"},
        "description": {"type": "string"},
        "input_mode": {"enum": ["json", "text"]},
        "example_input": {"type": "string"},
        "args_schema": {"type": "object"},
        "policy": {"enum": list(POLICIES)},
        "http": {
            "type": "object",
            "required": ["method", "path"],
            "properties": {"method": {"const": "POST"}, "path": {"type": "string"}},
        },
        "platforms": {"type": "array", "items": {"type": "string"}},
        "runtime": {"type": "object", "description": "present when the tool is unavailable"},
    },
}

# Every tool response, success or not, has this shape (spec/http-tools-api.txt).
TOOL_RESPONSE = {
    "type": "object",
    "required": ["tool", "raw_input", "output", "is_error", "duration_ms", "called_at"],
    "properties": {
        "tool": {"oneOf": [{"$ref": REF + "ToolEntry"}, {"type": "null"}]},
        "raw_input": {"type": "string"},
        "output": {"type": "string", "description": "the result (or the error) as JSON text"},
        "is_error": {"type": "boolean"},
        "duration_ms": {"type": "integer", "minimum": 0},
        "called_at": {"type": "string", "format": "date-time"},
        "error": {"$ref": REF + "ToolError"},
    },
}

TOOL_LIST = {
    "type": "object",
    "required": ["platform", "count", "tools"],
    "properties": {
        "platform": {"type": "string"},
        "count": {"type": "integer", "minimum": 0},
        "tools": {"type": "array", "items": {"$ref": REF + "ToolEntry"}},
    },
}

STATUS_TEXT = {
    200: "The tool ran: its result, or a tool failure with is_error true (e.g. tool_timeout)",
    400: "Malformed body or invalid arguments (error.details lists the schema errors)",
    401: "A write or critical tool called off loopback without a valid bearer token",
    403: "Refused by the guard, or a foreign Host or Origin",
    413: "Request body larger than the configured limit",
    500: "A bug on our side",
    503: "The tool is unavailable now (error.details says why and how to fix it)",
}


def _codes(status: int) -> list[str]:
    return sorted(code for code, s in CALL_STATUS.items() if s == status)


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {"application/json": {"schema": schema}}


def _error_response(status: int) -> dict[str, Any]:
    schema = {
        "allOf": [{"$ref": REF + "ToolResponse"}],
        "required": ["error"],
        "properties": {
            "is_error": {"const": True},
            "error": {"properties": {"code": {"enum": _codes(status)}}},
        },
    }
    return {"description": STATUS_TEXT[status], "content": _json(schema)}


def _json_text(schema: dict[str, Any]) -> dict[str, Any]:
    """A string holding JSON that matches `schema` (plain text when the result is a string)."""
    if schema.get("type") == "string":
        return {"type": "string"}
    return {"type": "string", "contentMediaType": "application/json", "contentSchema": schema}


def request_schema(spec: ToolSpec, args: dict[str, Any]) -> dict[str, Any]:
    """The codec's body: input (the arguments; a text tool also takes the plain string) or
    raw_input (JSON text of the arguments; for a text tool, the text itself), not both. An
    empty body means no arguments, so it is allowed only when the tool takes none."""
    if spec.input_mode == "text":
        value: dict[str, Any] = {"anyOf": [{"type": "string"}, args]}
        raw: dict[str, Any] = {"type": "string"}
    else:
        value, raw = args, _json_text(args)
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {"input": value, "raw_input": raw},
        "additionalProperties": False,
        "maxProperties": 1,
    }
    if not takes_no_arguments(args):
        schema["minProperties"] = 1
    return schema


def takes_no_arguments(args: dict[str, Any]) -> bool:
    return jsonschema.Draft202012Validator(args).is_valid({})


def success_schema(spec: ToolSpec) -> dict[str, Any]:
    """200: the result's schema in `output` when the call succeeded, the error otherwise."""
    return {
        "allOf": [{"$ref": REF + "ToolResponse"}],
        "if": {"properties": {"is_error": {"const": False}}},
        "then": {
            "properties": {"output": _json_text(spec.result_schema)},
            "not": {"required": ["error"]},
        },
        "else": {"required": ["error"], "properties": {"output": _json_text(ERROR)}},
    }


def tool_operation(spec: ToolSpec, catalog: Catalog) -> dict[str, Any]:
    statuses = [400, 403, 413, 500, 503]
    if needs_token(spec.policy, spec.private):
        statuses.insert(1, 401)
    responses: dict[str, Any] = {
        "200": {"description": STATUS_TEXT[200], "content": _json(success_schema(spec))}
    }
    responses.update({str(s): _error_response(s) for s in statuses})
    example = {"input": spec.example_input}
    args = catalog.args_schema(spec)
    return {
        "operationId": spec.name,
        "summary": spec.title or spec.name,
        "description": spec.description,
        "tags": [spec.category],
        "x-policy": spec.policy,
        "requestBody": {
            "required": not takes_no_arguments(args),
            "content": {
                "application/json": {
                    "schema": request_schema(spec, args),
                    "example": example,
                }
            },
        },
        "responses": responses,
    }


def _get(operation_id: str, summary: str, content: dict[str, Any]) -> dict[str, Any]:
    return {
        "get": {
            "operationId": operation_id,
            "summary": summary,
            "responses": {
                "200": {"description": "OK", "content": content},
                "403": _error_response(403),
            },
        }
    }


def openapi_document(specs: list[ToolSpec], catalog: Catalog) -> dict[str, Any]:
    paths: dict[str, Any] = {
        "/api/tools": _get(
            "listTools", "The HTTP-visible tools", _json({"$ref": REF + "ToolList"})
        ),
        "/api/tool-skills": _get(
            "toolSkills",
            "A SKILL.md teaching an external agent the model-facing tools",
            {"text/markdown": {"schema": {"type": "string"}}},
        ),
        "/api/openapi.json": _get("openapi", "This description", _json({"type": "object"})),
    }
    for spec in specs:
        paths[f"/api/tools/{spec.name}"] = {"post": tool_operation(spec, catalog)}
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Fingertip tools API",
            "version": VERSION,
            "description": f"The tools of a Fingertip board whose target is {catalog.platform}. "
            "Coordinates are normalized 0..1000. Write and critical tools need "
            "'Authorization: Bearer <pairing token>' off loopback.",
        },
        "tags": [{"name": c} for c in sorted({s.category for s in specs})],
        "paths": paths,
        "components": {
            "schemas": {
                "ToolError": ERROR,
                "ToolEntry": TOOL_ENTRY,
                "ToolResponse": TOOL_RESPONSE,
                "ToolList": TOOL_LIST,
            },
            "securitySchemes": {
                "pairingToken": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "the pairing token (state folder) or a client token",
                }
            },
        },
        # The token is optional: loopback needs none, and read tools never do.
        "security": [{}, {"pairingToken": []}],
    }


class OpenApi:
    def __init__(self, catalog: Catalog):
        self.catalog = catalog

    def routes(self) -> list[routes.Route]:
        # The HTTP tools API's own caller: exactly the tools GET /api/tools lists.
        return [routes.Route("GET", "/api/openapi.json", self.document, routes.catalog())]

    async def document(self, request: web.Request, caller: Caller) -> web.Response:
        specs = self.catalog.tools(caller)
        return web.json_response(openapi_document(specs, self.catalog))
