"""JSON Schema for tools and protocol payloads: compiled validators cached by schema, errors
with the catalog's codes, defaults filled in, and definition revisions."""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import fastjsonschema
import jsonschema

from daemon.errors import ToolError


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
