"""The catalog fills schema defaults once and hands each handler its typed argument object."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from daemon.catalog import CallContext, Catalog, Guard, ToolSpec, object_schema, with_defaults
from daemon.config import load
from daemon.screen.options import SHOT, STABLE, ShotOptions, StableOptions
from daemon.service import build
from tests.service.daemonproc import write_config

SCHEMA = object_schema(
    {
        "mode": {"enum": ["a", "b"], "default": "a"},
        "n": {"type": "integer", "default": 3},
        "at": object_schema({"x": {"type": "number"}, "space": {"default": "normalized"}}),
        "steps": {"type": "array", "items": object_schema({"ms": {"default": 0}, "k": {}})},
        "opt": {"type": "string"},
    }
)


def test_absent_properties_get_their_default_nested_and_in_items() -> None:
    given = {"at": {"x": 1}, "steps": [{"k": 1}, {"ms": 5}]}
    filled = with_defaults(SCHEMA, given)
    assert filled == {
        "mode": "a",
        "n": 3,
        "at": {"x": 1, "space": "normalized"},
        "steps": [{"k": 1, "ms": 0}, {"ms": 5}],
    }
    assert "opt" not in filled  # no default stated: stays absent
    assert given == {"at": {"x": 1}, "steps": [{"k": 1}, {"ms": 5}]}  # the caller's is untouched


def test_given_values_win_and_defaults_are_copies() -> None:
    schema = object_schema({"tags": {"type": "array", "default": []}, "n": {"default": 3}})
    assert with_defaults(schema, {"n": 0}) == {"n": 0, "tags": []}
    first = with_defaults(schema, {})
    first["tags"].append("x")
    assert with_defaults(schema, {})["tags"] == []  # the schema's default was not shared


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Args:
    mode: str
    n: int
    at: dict[str, Any] | None = None
    steps: list[dict[str, Any]] | None = None
    opt: str | None = None


async def test_the_handler_gets_the_typed_filled_arguments() -> None:
    seen: list[Any] = []

    async def typed(args: _Args, ctx: CallContext) -> Any:
        seen.append(args)
        return {}

    async def plain(args: dict[str, Any], ctx: CallContext) -> Any:
        seen.append(args)
        return {}

    catalog = Catalog("ios")
    catalog.register(ToolSpec("typed", "", "t", "read", typed, SCHEMA, args_type=_Args))
    catalog.register(ToolSpec("plain", "", "t", "read", plain, SCHEMA))
    guard, ctx = Guard.preset("full-access"), CallContext("test")
    raw = {"n": 7}
    assert (await catalog.call("typed", raw, guard=guard, ctx=ctx)).ok
    assert (await catalog.call("plain", raw, guard=guard, ctx=ctx)).ok
    assert seen == [_Args(mode="a", n=7), {"mode": "a", "n": 7}]
    assert raw == {"n": 7}
    # Validation still judges what the client sent, before any default is filled in.
    bad = await catalog.call("typed", {"mode": None}, guard=guard, ctx=ctx)
    assert bad.error is not None and bad.error.code == "tool_arguments_invalid"
    assert len(seen) == 2


def test_the_screen_defaults_are_stated_once_and_cited_by_the_schemas(tmp_path: Path) -> None:
    write_config(
        tmp_path / "f.toml",
        {"backend": {"kind": "simulated"}, "state": {"dir": str(tmp_path)}},
    )
    catalog = build(load(tmp_path / "f.toml")).catalog

    def defaults(tool: str) -> dict[str, Any]:
        props = catalog.args_schema(catalog.get(tool))["properties"]
        return {k: v["default"] for k, v in props.items() if "default" in v}

    assert defaults("screenshot") == {
        "quality": SHOT.quality,
        "format": SHOT.fmt,
        "area": SHOT.area,
    }
    assert ShotOptions.from_args(format="png", quality=SHOT.quality) == ShotOptions(fmt="png")
    assert StableOptions(**defaults("wait_for_stable_screen")) == STABLE


@pytest.mark.parametrize("device", ["iOS", "Android", "macOS", "windows", "linux"])
def test_every_typed_tool_accepts_its_schema_and_restates_no_default(
    device: str, tmp_path: Path
) -> None:
    """Per tool: the dataclass names exactly the schema's properties; a property the schema
    defaults has no other default in the dataclass; the example input builds the object."""
    write_config(
        tmp_path / "f.toml",
        {
            "device": {"device_type": device},
            "backend": {"kind": "simulated"},
            "state": {"dir": str(tmp_path / "state")},
            "ipc": {"socket": str(tmp_path / "ipc.sock")},
        },
    )
    (tmp_path / "state").mkdir()
    catalog = build(load(tmp_path / "f.toml")).catalog
    typed = 0
    for spec in catalog.tools(Guard.preset("full-access")):
        if spec.args_type is None:
            continue
        typed += 1
        schema = catalog.args_schema(spec)
        value = catalog.validate_arguments(spec, spec.example_input)
        if not isinstance(spec.args_type, type):  # a converter (screenshot: format -> fmt)
            continue
        assert isinstance(value, spec.args_type), spec.name
        props = schema["properties"]
        fields = {f.name: f for f in dataclasses.fields(spec.args_type)}
        assert set(fields) == set(props), spec.name
        for name, field in fields.items():
            has_default = field.default is not dataclasses.MISSING
            if "default" in props[name]:
                # Either the schema is the one statement (no dataclass default) or it cites
                # the options object's (the screen tools): never two values that could drift.
                assert not has_default or field.default == props[name]["default"], spec.name
            elif name not in schema.get("required", []):
                assert has_default and field.default is None, f"{spec.name}.{name}"
    assert typed >= 10


@pytest.mark.parametrize("device", ["iOS", "Android", "macOS", "windows", "linux"])
def test_every_tools_schemas_are_valid_json_schema(device: str, tmp_path: Path) -> None:
    """Checked here once, not in Catalog.register at every start (a slow board's seconds)."""
    write_config(
        tmp_path / "f.toml",
        {
            "device": {"device_type": device},
            "backend": {"kind": "simulated"},
            "state": {"dir": str(tmp_path)},
        },
    )
    catalog = build(load(tmp_path / "f.toml")).catalog
    specs = list(catalog._specs.values())  # every tool, internal ones and other platforms' too
    assert len(specs) > 20
    for spec in specs:
        jsonschema.Draft202012Validator.check_schema(spec.schema_for(catalog.platform))
        jsonschema.Draft202012Validator.check_schema(spec.result_schema)
