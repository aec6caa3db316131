"""The `ansight.tool-catalog.v3` projections for the WebSocket protocol: definitions and index
entries, the query filters, deterministic revisions, and the tool.catalog reply in each of its
forms (full, index, definitions, unchanged, availability-only). Pure functions over the Catalog:
which tools exist, their policy, schemas and availability are the catalog's business.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from daemon.catalog import (
    CALLER_KINDS,
    POLICIES,
    Availability,
    Caller,
    Catalog,
    Guard,
    ToolSpec,
    flatten_arguments,
    schema_errors,
    sha256_revision,
    validation_error,
)
from daemon.errors import ToolError
from daemon.transports.ws_codec import INVALID_REQUEST
from daemon.wire import iso_utc

__all__ = ["flatten_arguments"]  # the catalog applies it; re-exported for the protocol's tests

SCHEMA = "ansight.tool-catalog.v3"
DETAILS = ("full", "index", "definitions")
MAX_RESULTS = 1000
FLATTENED = "flattened-string"

QUERY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "detail": {"enum": list(DETAILS)},
        "ids": {"type": "array", "items": {"type": "string"}},
        "query": {"type": "string"},
        "feature": {"type": "string"},
        "policy": {"enum": list(POLICIES)},
        "executableOnly": {"type": "boolean"},
        "limit": {"type": "integer"},
        "maxResults": {"type": "integer"},
        "ifRevision": {"type": "string"},
        "ifAvailabilityRevision": {"type": "string"},
    },
}


@dataclass(frozen=True)
class ToolState:
    """One visible tool as evaluated for one reply."""

    spec: ToolSpec
    availability: Availability
    definition_revision: str

    @property
    def id(self) -> str:
        return self.spec.name


def host(who: Caller | Guard) -> Caller:
    """A Caller as is; a bare Guard as a host under it (catalog.CALLER_KINDS["ws"])."""
    if isinstance(who, Caller):
        return who
    return Caller("ws", who, authenticated=True, **CALLER_KINDS["ws"])


def visible_specs(catalog: Catalog, who: Caller | Guard) -> list[ToolSpec]:
    """What a WS host may see, sorted by id (the catalog decides)."""
    return catalog.tools(host(who))


class DefinitionRevisions:
    """definitionRevision per tool, hashed once: a registered spec's definition cannot change
    (specs are frozen, the platform is fixed), and hosts poll with ifRevision often."""

    def __init__(self, catalog: Catalog):
        self.catalog = catalog
        self._cache: dict[str, tuple[ToolSpec, str]] = {}

    def __call__(self, spec: ToolSpec) -> str:
        hit = self._cache.get(spec.name)
        if hit is None or hit[0] is not spec:
            hit = (spec, self.catalog.definition_revision(spec))
            self._cache[spec.name] = hit
        return hit[1]


def tool_states(
    catalog: Catalog, who: Caller | Guard, revisions: Callable[[ToolSpec], str] | None = None
) -> list[ToolState]:
    revision = revisions or catalog.definition_revision
    return [ToolState(s, catalog.availability(s), revision(s)) for s in visible_specs(catalog, who)]


def is_flattened(spec: ToolSpec) -> bool:
    """Text-mode tools take their input as string arguments: the legacy flattened-string form."""
    return spec.input_mode == "text"


_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_SCHEMA_ONE = (
    "items",
    "additionalProperties",
    "not",
    "if",
    "then",
    "else",
    "contains",
    "propertyNames",
    "unevaluatedProperties",
    "unevaluatedItems",
    "additionalItems",
)
_SCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems")


def _is_object_schema(schema: dict[str, Any]) -> bool:
    kind = schema.get("type")
    return kind == "object" or (isinstance(kind, list) and "object" in kind)


def protocol_schema(schema: Any) -> Any:
    """A JSON Schema as the protocol publishes it: `additionalProperties: false` is the
    protocol default and omitted, so an object schema that is open in JSON Schema terms says
    `additionalProperties: true` explicitly. Keyword values that are data (enum, const,
    default, examples) are never touched."""
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {k: protocol_schema(v) for k, v in value.items()}
        elif key in _SCHEMA_ONE:
            out[key] = (
                [protocol_schema(v) for v in value]
                if isinstance(value, list)
                else protocol_schema(value)
            )
        elif key in _SCHEMA_LISTS and isinstance(value, list):
            out[key] = [protocol_schema(v) for v in value]
        else:
            out[key] = value
    if _is_object_schema(schema):
        if out.get("additionalProperties") is False:
            del out["additionalProperties"]
        elif "additionalProperties" not in out:
            out["additionalProperties"] = True
    return out


def runtime_state(availability: Availability) -> dict[str, Any]:
    """The runtime object hashed into availabilityRevision (available tools included)."""
    return {"available": True} if availability.available else availability.runtime()


def catalog_revision(guard: Guard, states: list[ToolState]) -> str:
    return sha256_revision(
        {
            "schema": SCHEMA,
            "guard": guard.to_dict(),
            "tools": [
                {"id": s.id, "definitionRevision": s.definition_revision}
                for s in sorted(states, key=lambda s: s.id)
            ],
        }
    )


def availability_revision(states: list[ToolState]) -> str:
    return sha256_revision(
        {
            "tools": [
                {"id": s.id, "runtime": runtime_state(s.availability)}
                for s in sorted(states, key=lambda s: s.id)
            ]
        }
    )


def tool_entry(catalog: Catalog, state: ToolState, detail: str) -> dict[str, Any]:
    """One tool in a reply: a full definition, an index entry (no schemas) or a definition
    projection (no runtime state). Protocol defaults are omitted."""
    spec = state.spec
    out: dict[str, Any] = {
        "id": spec.name,
        "name": spec.title or spec.name,
        "description": spec.description,
        "category": spec.category,
        "policy": spec.policy,
    }
    if detail != "index":
        out["argumentsSchema"] = protocol_schema(catalog.args_schema(spec))
        out["resultSchema"] = protocol_schema(spec.result_schema)
    if spec.keywords:
        out["keywords"] = ", ".join(sorted(spec.keywords))
    if spec.prerequisites:
        out["prerequisiteToolIds"] = sorted(set(spec.prerequisites))
    if is_flattened(spec):
        out["argumentEncoding"] = FLATTENED
    out["definitionRevision"] = state.definition_revision
    if detail != "definitions" and not state.availability.available:
        out["runtime"] = state.availability.runtime()
        out["executable"] = False
    return out


@dataclass(frozen=True)
class Query:
    """A parsed tool.query payload."""

    detail: str = "full"
    ids: frozenset[str] | None = None
    terms: tuple[str, ...] = ()
    features: tuple[str, ...] = ()
    policy: str | None = None
    executable_only: bool = False
    limit: int = MAX_RESULTS
    if_revision: str | None = None
    if_availability_revision: str | None = None


_NOT_ALNUM = re.compile(r"[^0-9a-z]+")


def _normalize(text: str) -> str:
    return _NOT_ALNUM.sub(" ", text.lower())


def _terms(text: str | None) -> tuple[str, ...]:
    return tuple(dict.fromkeys(_normalize(text or "").split()))


def parse_query(payload: Any) -> Query:
    """Validate a tool.query payload (absent = defaults; null members count as absent)."""
    if payload is None:
        return Query()
    if not isinstance(payload, dict):
        raise ToolError(INVALID_REQUEST, "tool.query payload must be a JSON object")
    p = {k: v for k, v in payload.items() if v is not None}
    errors = schema_errors(QUERY_SCHEMA, p)
    if errors:
        raise validation_error(errors, "tool.query payload", INVALID_REQUEST)
    limit = p.get("limit", p.get("maxResults", MAX_RESULTS))
    return Query(
        detail=p.get("detail", "full"),
        ids=frozenset(p["ids"]) if "ids" in p else None,
        terms=_terms(p.get("query")),
        features=_terms(p.get("feature")),
        policy=p.get("policy"),
        executable_only=p.get("executableOnly", False),
        limit=min(max(limit, 1), MAX_RESULTS),
        if_revision=p.get("ifRevision"),
        if_availability_revision=p.get("ifAvailabilityRevision"),
    )


def _searchable(spec: ToolSpec) -> str:
    return _normalize(
        " ".join(
            (
                spec.name,
                spec.title,
                spec.description,
                spec.category,
                *spec.keywords,
                *spec.prerequisites,
            )
        )
    )


def select(states: list[ToolState], q: Query) -> list[ToolState]:
    """The filters, in the peers' order, applied before anything is serialized."""
    out = []
    for s in states:
        if q.ids is not None and s.id not in q.ids:
            continue
        if q.policy is not None and s.spec.policy != q.policy:
            continue
        if q.executable_only and not s.availability.available:
            continue
        if q.terms or q.features:
            text = _searchable(s.spec)
            if not all(t in text for t in (*q.terms, *q.features)):
                continue
        out.append(s)
        if len(out) == q.limit:
            break
    return out


def catalog_reply(
    catalog: Catalog,
    who: Caller | Guard,
    q: Query,
    now: float,
    revisions: Callable[[ToolSpec], str] | None = None,
) -> dict[str, Any]:
    """The tool.catalog payload for query `q` for a host (its caller, or a bare guard),
    evaluated at `now` (time.time()); `revisions` may memoize definitionRevision."""
    caller = host(who)
    guard = caller.effective
    if not guard.discovery_enabled:
        raise ToolError("tool_discovery_disabled", "tool discovery is disabled by the guard")
    states = tool_states(catalog, caller, revisions)
    revision = catalog_revision(guard, states)
    avail_revision = availability_revision(states)
    if q.detail != "definitions" and q.if_revision == revision:
        if q.if_availability_revision in (None, avail_revision):
            return {"schema": SCHEMA, "revision": revision, "unchanged": True}
        return {
            "schema": SCHEMA,
            "revision": revision,
            "unchanged": True,
            "availabilityRevision": avail_revision,
            "evaluatedAtUtc": iso_utc(now),
            "changes": {
                s.id: s.availability.runtime() for s in states if not s.availability.available
            },
        }
    tools = [tool_entry(catalog, s, q.detail) for s in select(states, q)]
    out: dict[str, Any] = {"schema": SCHEMA, "revision": revision, "tools": tools}
    out["count"] = len(tools)
    if q.detail != "full":
        out["detail"] = q.detail
    if q.detail != "definitions":
        out["availabilityRevision"] = avail_revision
        out["evaluatedAtUtc"] = iso_utc(now)
        out["totalCount"] = len(states)
        out["categories"] = dict(sorted(Counter(s.spec.category for s in states).items()))
    return out
