"""The pure projections behind /mcp and /api/openapi.json (no daemon)."""

from __future__ import annotations

from typing import Any

import jsonschema

from daemon.catalog import CallContext, Catalog, Guard, Outcome, ToolSpec, object_schema
from daemon.errors import ToolError
from daemon.transports import mcp, openapi


async def _noop(args: dict[str, Any], ctx: CallContext) -> Any:
    return {}


SHOT_RESULT = object_schema(
    {"width": {"type": "integer"}, "format": {"enum": ["jpeg", "png"]}, "data": {"type": "string"}},
    ["width", "format", "data"],
)
SHOT = ToolSpec("shot", "d", "screen", "read", _noop, result_schema=SHOT_RESULT, evidence=True)
TAP = ToolSpec(
    "tap",
    "d",
    "input",
    "write",
    _noop,
    args_schema=object_schema({"x": {"type": "number"}}, ["x"]),
    example_input={"x": 1},
)
SHELL = ToolSpec("sh", "d", "system", "critical", _noop, title="Shell")


def test_annotations_follow_policy() -> None:
    assert mcp.tool_annotations(SHOT) == {"readOnlyHint": True}
    assert mcp.tool_annotations(TAP) == {"readOnlyHint": False, "destructiveHint": False}
    assert mcp.tool_annotations(SHELL) == {
        "readOnlyHint": False,
        "destructiveHint": True,
        "title": "Shell",
    }


def test_evidence_moves_into_an_image_item() -> None:
    schema = mcp.output_schema(SHOT)
    assert schema is not None and "data" not in schema["properties"]
    assert schema["required"] == ["width", "format"]
    assert SHOT_RESULT["required"] == ["width", "format", "data"]  # the spec is untouched
    assert mcp.output_schema(SHELL) is None  # a bare {"type": "object"} describes nothing

    result = {"width": 2, "format": "png", "data": "iVBO"}
    out = mcp.call_result(Outcome(SHOT, result, None, 3, 0.0))
    assert out["structuredContent"] == {"width": 2, "format": "png"}
    assert out["content"][1] == {"type": "image", "data": "iVBO", "mimeType": "image/png"}
    assert "iVBO" not in out["content"][0]["text"]
    jsonschema.validate(out["structuredContent"], schema)

    failed = mcp.call_result(Outcome(SHOT, None, ToolError("capture_unavailable", "off"), 1, 0.0))
    assert failed["isError"] is True and "structuredContent" not in failed
    assert '"capture_unavailable"' in failed["content"][0]["text"]


def test_negotiation_and_accept() -> None:
    assert mcp.negotiate("2025-06-18") == "2025-06-18"
    assert mcp.negotiate("2030-01-01") == mcp.PROTOCOL_VERSIONS[0]
    assert mcp.accepts_json("application/json, text/event-stream")
    assert mcp.accepts_json("*/*") and not mcp.accepts_json("text/event-stream")


def test_request_body_follows_the_arguments() -> None:
    catalog = Catalog("ios", [SHOT, TAP])
    doc = openapi.openapi_document(catalog.tools(Guard.preset("full-access")), catalog)
    tap = doc["paths"]["/api/tools/tap"]["post"]
    body = tap["requestBody"]
    schema = body["content"]["application/json"]["schema"]
    validator = jsonschema.Draft202012Validator(schema)
    assert body["required"] is True
    assert validator.is_valid({"input": {"x": 3}}) and validator.is_valid({"raw_input": "{}"})
    assert not validator.is_valid({}) and not validator.is_valid({"input": {}, "raw_input": ""})
    assert "401" in tap["responses"]
    shot = doc["paths"]["/api/tools/shot"]["post"]
    assert shot["requestBody"]["required"] is False and "401" not in shot["responses"]
