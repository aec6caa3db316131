"""Schemathesis hooks for tests/service/test_openapi.py (loaded by the `st` CLI through
SCHEMATHESIS_HOOKS): a check that reads inside `output`, and a bound on legal but long waits."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import requests
import schemathesis

MAX_WAIT_MS = 400


@schemathesis.hook
def map_body(context: schemathesis.HookContext, body: Any) -> Any:
    """wait_for_stable_screen may legally wait a minute on a still screen: keep in-range waits
    short. Out-of-range values stay as generated: they must still be refused."""
    op = context.operation
    if op is None or not op.path.endswith("/wait_for_stable_screen"):
        return body
    args = body.get("input") if isinstance(body, dict) else None
    if isinstance(args, dict):
        for key in ("timeout_ms", "stable_ms"):
            value = args.get(key)
            if isinstance(value, int) and MAX_WAIT_MS < value <= 60000:
                args[key] = MAX_WAIT_MS
    return body


@schemathesis.hook
def after_call(
    context: schemathesis.HookContext, case: schemathesis.Case, response: schemathesis.Response
) -> None:
    """A successful drag_start holds the contact until drag_release: release it, so the
    operations fuzzed next run instead of answering drag_in_progress."""
    if not case.path.endswith("/drag_start") or response.status_code != 200:
        return
    if response.json().get("is_error") is False:
        url = str(response.request.url).replace("/drag_start", "/drag_release")
        requests.post(url, json={"input": {"point": {"x": 500, "y": 500}}}, timeout=20)


@schemathesis.check
def output_matches_description(
    ctx: schemathesis.CheckContext, response: schemathesis.Response, case: schemathesis.Case
) -> bool | None:
    """`output` is JSON text whose contentSchema generic validators treat as an annotation:
    parse it and validate it against the tool's result schema (or the error schema)."""
    if case.method != "POST" or not case.path.startswith("/api/tools/"):
        return None
    body = response.json()
    if not isinstance(body, dict) or not isinstance(body.get("output"), str):
        return None  # the response schema check reports a malformed body
    op = case.operation.schema.raw_schema["paths"][case.path]["post"]
    success = op["responses"]["200"]["content"]["application/json"]["schema"]
    branch = "then" if body.get("is_error") is False else "else"
    described = success[branch]["properties"]["output"]
    if "contentSchema" not in described:
        return None
    try:
        value = json.loads(body["output"])
    except ValueError as exc:
        raise AssertionError(f"output is not JSON: {exc}") from None
    errors = list(jsonschema.Draft202012Validator(described["contentSchema"]).iter_errors(value))
    if errors:
        raise AssertionError(f"output does not match its contentSchema: {errors[0].message}")
    return True
