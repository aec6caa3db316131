"""ansight.tool-catalog.v3 projections over a real Catalog (pure: no daemon, no sockets)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from daemon.catalog import Availability, CallContext, Catalog, Guard, ToolSpec, object_schema
from daemon.errors import ToolError
from daemon.transports import ws_catalog as wc

NOW = 1_790_000_000.25
FULL = Guard.preset("full-access")
# A full tool.catalog reply's members, in the contract's order (the service test checks the
# daemon's own reply against the same list).
FULL_REPLY_KEYS = [
    "schema",
    "revision",
    "tools",
    "count",
    "availabilityRevision",
    "evaluatedAtUtc",
    "totalCount",
    "categories",
]


async def _noop(args: dict[str, Any], ctx: CallContext) -> Any:
    return {}


class Capture:
    """A real availability probe over a flag the test flips (what the capture device does)."""

    def __init__(self) -> None:
        self.on = True

    def __call__(self) -> Availability:
        if self.on:
            return Availability()
        return Availability(False, "capture_unavailable", "no frames", "streaming", "plug it in")


def build(description: str = "Find things.", capture: Capture | None = None) -> Catalog:
    capture = capture or Capture()
    specs = [
        ToolSpec(
            "alpha",
            description,
            "search",
            "read",
            _noop,
            args_schema=object_schema({"q": {"type": "string", "enum": ["a", "b"]}}, ["q"]),
            title="Alpha Finder",
            keywords=("search", "find"),
            prerequisites=("gamma", "beta", "gamma"),
            availability=capture,
        ),
        ToolSpec("beta", "Change things.", "edit", "write", _noop),
        ToolSpec("gamma", "Run anything.", "system", "critical", _noop),
        ToolSpec(
            "notes",
            "Read the notes skill.",
            "skill",
            "read",
            _noop,
            input_mode="text",
            args_schema=object_schema({"input": {"type": "string"}}),
        ),
        ToolSpec(
            "droid_only", "Android only.", "edit", "read", _noop, platforms=frozenset({"android"})
        ),
        ToolSpec("diag", "HTTP diagnostics.", "system", "read", _noop, exposure="http"),
        ToolSpec("hidden", "Maintenance.", "system", "read", _noop, exposure="internal"),
    ]
    return Catalog("ios", specs)


def reply(catalog: Catalog, guard: Guard = FULL, **query: Any) -> dict[str, Any]:
    return wc.catalog_reply(catalog, guard, wc.parse_query(query), NOW)


def ids(payload: dict[str, Any]) -> list[str]:
    return [t["id"] for t in payload["tools"]]


def test_visible_tools_follow_guard_and_exposure() -> None:
    cat = build()
    assert ids(reply(cat)) == ["alpha", "beta", "droid_only", "gamma", "notes"]
    assert ids(reply(cat, Guard.preset("read-only"))) == ["alpha", "droid_only", "notes"]
    assert ids(reply(cat, FULL.lowered("write"))) == ["alpha", "beta", "droid_only", "notes"]
    with pytest.raises(ToolError) as info:
        reply(cat, Guard.preset("disabled"))
    assert info.value.code == "tool_discovery_disabled"


def test_full_reply_shape_and_defaults() -> None:
    out = reply(build())
    assert list(out) == FULL_REPLY_KEYS
    assert out["schema"] == "ansight.tool-catalog.v3"
    assert out["evaluatedAtUtc"] == "2026-09-21T14:13:20.250Z"
    assert out["count"] == out["totalCount"] == 5
    assert out["categories"] == {"edit": 2, "search": 1, "skill": 1, "system": 1}
    alpha, beta, droid, _, notes = out["tools"]
    assert list(alpha) == [
        "id",
        "name",
        "description",
        "category",
        "policy",
        "argumentsSchema",
        "resultSchema",
        "keywords",
        "prerequisiteToolIds",
        "definitionRevision",
    ]
    assert alpha["name"] == "Alpha Finder" and alpha["keywords"] == "find, search"
    assert alpha["prerequisiteToolIds"] == ["beta", "gamma"]
    # additionalProperties false is the protocol default: omitted; open objects say so.
    assert alpha["argumentsSchema"] == {
        "type": "object",
        "properties": {"q": {"type": "string", "enum": ["a", "b"]}},
        "required": ["q"],
    }
    assert alpha["resultSchema"] == {"type": "object", "additionalProperties": True}
    assert "keywords" not in beta and "prerequisiteToolIds" not in beta and beta["name"] == "beta"
    assert notes["argumentEncoding"] == "flattened-string"
    assert "argumentEncoding" not in alpha and "runtime" not in alpha and "executable" not in alpha
    assert droid["executable"] is False
    assert droid["runtime"]["code"] == "tool_platform_unsupported"
    assert droid["runtime"]["available"] is False
    assert list(droid)[-3:] == ["definitionRevision", "runtime", "executable"]


def test_index_and_definitions_projections() -> None:
    cat = build()
    index = reply(cat, detail="index")
    assert list(index)[:5] == ["schema", "revision", "tools", "count", "detail"]
    assert index["detail"] == "index"
    assert all("argumentsSchema" not in t and "resultSchema" not in t for t in index["tools"])
    assert next(t for t in index["tools"] if t["id"] == "droid_only")["executable"] is False
    defs = reply(cat, detail="definitions", ids=["droid_only", "alpha"])
    assert list(defs) == ["schema", "revision", "tools", "count", "detail"]
    assert ids(defs) == ["alpha", "droid_only"]
    assert all("runtime" not in t and "executable" not in t for t in defs["tools"])
    assert all("argumentsSchema" in t for t in defs["tools"])
    # Each tool's definitionRevision is the same in every projection.
    full = {t["id"]: t["definitionRevision"] for t in reply(cat)["tools"]}
    assert {t["id"]: t["definitionRevision"] for t in defs["tools"]}.items() <= full.items()


def test_revisions_are_deterministic_and_track_what_they_cover() -> None:
    capture = Capture()
    a, b = reply(build(capture=capture)), reply(build())
    assert a["revision"] == b["revision"] and a["availabilityRevision"] == b["availabilityRevision"]
    assert a["revision"].startswith("sha256:") and len(a["revision"]) == 71
    changed_tool = reply(build("Find other things."))
    assert changed_tool["revision"] != a["revision"]
    alpha_rev = {t["id"]: t["definitionRevision"] for t in changed_tool["tools"]}
    assert alpha_rev["alpha"] != a["tools"][0]["definitionRevision"]
    assert alpha_rev["beta"] == a["tools"][1]["definitionRevision"]
    assert reply(build(), Guard.preset("read-write"))["revision"] != a["revision"]
    # Same visible tools, different guard: still a different revision (the guard is hashed).
    no_exec = Guard(True, False, "critical")
    assert ids(reply(build(), no_exec)) == ids(a)
    assert reply(build(), no_exec)["revision"] != a["revision"]
    capture.on = False
    after = reply(build(capture=capture))
    assert after["revision"] == a["revision"]
    assert after["availabilityRevision"] != a["availabilityRevision"]


def test_unchanged_and_availability_only_replies() -> None:
    capture = Capture()
    cat = build(capture=capture)
    first = reply(cat, detail="index")
    rev, avail = first["revision"], first["availabilityRevision"]
    same = reply(cat, detail="index", ifRevision=rev, ifAvailabilityRevision=avail)
    assert same == {"schema": "ansight.tool-catalog.v3", "revision": rev, "unchanged": True}
    assert list(same) == ["schema", "revision", "unchanged"]
    assert reply(cat, ifRevision=rev) == same  # no availability revision to compare
    capture.on = False
    moved = reply(cat, ifRevision=rev, ifAvailabilityRevision=avail)
    assert list(moved) == [
        "schema",
        "revision",
        "unchanged",
        "availabilityRevision",
        "evaluatedAtUtc",
        "changes",
    ]
    assert moved["unchanged"] is True and moved["availabilityRevision"] != avail
    assert moved["changes"] == {
        "alpha": {
            "available": False,
            "code": "capture_unavailable",
            "reason": "no frames",
            "requiredState": "streaming",
            "remediation": "plug it in",
            "retryable": True,
        },
        "droid_only": reply(cat)["tools"][2]["runtime"],
    }
    stale = reply(cat, ifRevision="sha256:old", ifAvailabilityRevision=avail)
    assert "tools" in stale and "unchanged" not in stale
    defs = reply(cat, detail="definitions", ifRevision=rev)
    assert "tools" in defs


def test_filters() -> None:
    cat = build()
    assert ids(reply(cat, ids=["gamma", "nope", "alpha"])) == ["alpha", "gamma"]
    assert ids(reply(cat, policy="read")) == ["alpha", "droid_only", "notes"]
    assert ids(reply(cat, executableOnly=True)) == ["alpha", "beta", "gamma", "notes"]
    assert ids(reply(cat, query="FIND")) == ["alpha"]
    assert ids(reply(cat, query="alpha finder")) == ["alpha"]
    assert ids(reply(cat, query="thing")) == ["alpha", "beta", "gamma"]
    assert ids(reply(cat, query="things", feature="edit")) == ["beta"]
    assert ids(reply(cat, limit=2)) == ["alpha", "beta"]
    assert ids(reply(cat, maxResults=1)) == ["alpha"]
    assert ids(reply(cat, limit=0)) == ["alpha"]  # clamped to 1..1000
    assert ids(reply(cat, limit=5, maxResults=1)) == ids(reply(cat))
    out = reply(cat, policy="write")
    assert out["count"] == 1 and out["totalCount"] == 5  # totals describe the whole catalog


def test_parse_query() -> None:
    assert wc.parse_query(None) == wc.Query()
    assert wc.parse_query({"detail": None, "limit": None}) == wc.Query()
    assert wc.parse_query({"limit": 10**9}).limit == 1000
    assert wc.parse_query({"query": "Tap, the-Button tap"}).terms == ("tap", "the", "button")
    for bad in ([], {"detail": "summary"}, {"ids": "alpha"}, {"executableOnly": "yes"}):
        with pytest.raises(ToolError) as info:
            wc.parse_query(bad)
        assert info.value.code == "tool_protocol_invalid_request"
    with pytest.raises(ToolError) as info:
        wc.parse_query({"policy": "admin", "limit": "5"})
    details = info.value.details or {}
    assert details["valid"] is False
    assert {(e["path"], e["code"]) for e in details["errors"]} == {
        ("$.policy", "enum_value_invalid"),
        ("$.limit", "type_mismatch"),
    }


def test_protocol_schema() -> None:
    closed = object_schema({"a": {"type": "object", "properties": {"b": {"type": "integer"}}}})
    assert wc.protocol_schema(closed) == {
        "type": "object",
        "properties": {
            "a": {
                "type": "object",
                "properties": {"b": {"type": "integer"}},
                "additionalProperties": True,
            }
        },
    }
    data = {
        "enum": [{"type": "object"}],
        "default": {"type": "object"},
        "const": {"type": "object"},
    }
    assert wc.protocol_schema(data) == data
    conditional = {
        "type": ["object", "null"],
        "additionalProperties": {"type": "object", "additionalProperties": False},
        "allOf": [{"if": {"properties": {"x": {"const": 1}}}, "then": {"required": ["y"]}}],
        "items": [{"type": "object"}],
    }
    assert wc.protocol_schema(conditional) == {
        "type": ["object", "null"],
        "additionalProperties": {"type": "object"},
        "allOf": [{"if": {"properties": {"x": {"const": 1}}}, "then": {"required": ["y"]}}],
        "items": [{"type": "object", "additionalProperties": True}],
    }


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=10,
)


@given(st.dictionaries(st.text(max_size=8), json_values, max_size=6))
def test_flatten_arguments(args: dict[str, Any]) -> None:
    flat = wc.flatten_arguments(args)
    assert set(flat) == {k for k, v in args.items() if v is not None}
    assert all(isinstance(v, str) for v in flat.values())
    assert all(flat[k] == v for k, v in args.items() if isinstance(v, str))


def test_flatten_values() -> None:
    assert wc.flatten_arguments({"a": True, "b": 5, "c": [1, "x"], "d": None, "e": "s"}) == {
        "a": "true",
        "b": "5",
        "c": '[1,"x"]',
        "e": "s",
    }
    assert wc.flatten_arguments([1]) == [1]


class CountingCatalog(Catalog):
    """A real Catalog that counts how often a definition is hashed."""

    hashed = 0

    def definition_revision(self, spec: ToolSpec) -> str:
        self.hashed += 1
        return super().definition_revision(spec)


def test_definition_revisions_are_hashed_once() -> None:
    plain = build()
    cat = CountingCatalog("ios", [plain.get(n) for n in ("alpha", "beta", "notes")])
    revisions = wc.DefinitionRevisions(cat)
    q = wc.parse_query({"detail": "index"})
    first = wc.catalog_reply(cat, FULL, q, NOW, revisions)
    assert cat.hashed == 3
    assert wc.catalog_reply(cat, FULL, q, NOW, revisions) == first
    assert cat.hashed == 3
    assert wc.catalog_reply(cat, FULL, q, NOW) == first  # same values without the memo
    assert cat.hashed == 6
