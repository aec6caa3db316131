"""Listed <=> callable, over the real catalog of every platform, every tool and every kind of
caller the transports build (catalog.CALLER_KINDS): the catalog alone decides both.

A tool a caller lists must never be refused as unknown (tool_not_found) nor by the guard's
policy; a tool it does not list is refused, as unknown, or by the guard with its stable code
(tool_execution_denied). Calls carry an argument no tool takes, so an admitted call stops at
validation (or earlier at availability or the token rule, auth_required) and nothing acts on
the target.
"""

from __future__ import annotations

import asyncio
import functools
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daemon.catalog import (
    CALLER_KINDS,
    PLATFORMS,
    POLICIES,
    CallContext,
    Caller,
    Catalog,
    Guard,
    RawText,
    ToolSpec,
    object_schema,
)
from daemon.config import load
from daemon.service import build
from tests.service.daemonproc import write_config

NOT_AN_ARGUMENT = {"__not_an_argument__": 1}
GUARD_REFUSAL = "tool_execution_denied"
# A tool may also need a token the caller did not send: refused with its own stable code.
REFUSALS = {GUARD_REFUSAL, "auth_required"}
PRESETS = ("disabled", "read-only", "read-write", "full-access")


async def _never(args: dict[str, Any], ctx: CallContext) -> Any:
    raise AssertionError("an admitted call with an unknown argument must not run")


def _synthetic() -> list[ToolSpec]:
    """Tools the stock catalog lacks, so every dimension of the rule is exercised: diagnostics
    and internal exposure, text mode, terminating, platform-limited, each policy."""
    text = object_schema({"input": {"type": "string"}}, ["input"])
    out = [
        ToolSpec("zz_diag", "HTTP diagnostics.", "test", "read", _never, exposure="http"),
        ToolSpec("zz_internal", "Maintenance.", "test", "write", _never, exposure="internal"),
        ToolSpec("zz_text", "Text tool.", "test", "write", _never, text, input_mode="text"),
        ToolSpec("zz_end", "Ends a run.", "test", "read", _never, terminating=True),
    ]
    for platform in PLATFORMS:
        for policy in POLICIES:
            out.append(
                ToolSpec(
                    f"zz_{platform}_{policy}",
                    "Platform-limited.",
                    "test",
                    policy,  # type: ignore[arg-type]
                    _never,
                    platforms=frozenset({platform}),
                )
            )
    return out


@functools.cache
def catalog_for(platform: str) -> Catalog:
    """The daemon's own catalog for `platform` (simulated backend), plus the synthetic tools."""
    tmp = Path(tempfile.mkdtemp(prefix="ft-caller-"))
    device = {"ios": "iOS", "android": "Android", "macos": "macOS"}.get(platform, platform)
    write_config(
        tmp / "fingertip.toml",
        {
            "device": {"device_type": device},
            "backend": {"kind": "simulated"},
            "state": {"dir": str(tmp / "state")},
            "ipc": {"socket": str(tmp / "ipc.sock")},
        },
    )
    catalog = build(load(tmp / "fingertip.toml")).catalog
    assert catalog.platform == platform
    for spec in _synthetic():
        catalog.register(spec)
    return catalog


callers = st.builds(
    lambda kind, preset, max_policy, authenticated, token_required: Caller(
        kind,
        Guard.preset(preset),
        authenticated=authenticated,
        token_required=token_required,
        max_policy=max_policy,
        **CALLER_KINDS[kind],
    ),
    st.sampled_from(sorted(CALLER_KINDS)),
    st.sampled_from(PRESETS),
    st.sampled_from([None, *POLICIES]),
    st.booleans(),
    st.booleans(),
)


def _code(catalog: Catalog, name: str, caller: Caller) -> str | None:
    outcome = asyncio.run(catalog.call(name, NOT_AN_ARGUMENT, caller))
    return None if outcome.error is None else outcome.error.code


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(platform=st.sampled_from(PLATFORMS), caller=callers, data=st.data())
def test_listed_iff_callable(platform: str, caller: Caller, data: st.DataObject) -> None:
    catalog = catalog_for(platform)
    names = sorted(catalog._specs)
    listed = {s.name for s in catalog.tools(caller)}
    # What this caller would list if its guard allowed everything: the visibility rule alone.
    unlimited = replace(caller, guard=Guard.preset("full-access"), max_policy=None)
    visible = {s.name for s in catalog.tools(unlimited)}
    for name in data.draw(st.lists(st.sampled_from(names), min_size=1, max_size=8, unique=True)):
        code = _code(catalog, name, caller)
        assert code is not None, name  # nothing takes NOT_AN_ARGUMENT
        if name in listed:
            assert code not in ("tool_not_found", GUARD_REFUSAL), (name, code)
        elif name in visible:
            assert code in REFUSALS, (name, code)  # hidden by the guard's policy alone
        else:
            assert code == "tool_not_found", (name, code)


def test_every_tool_and_caller_kind_exhaustively() -> None:
    """The same rule without sampling, on the issue's case (Android) under full access."""
    catalog = catalog_for("android")
    for kind, attrs in CALLER_KINDS.items():
        caller = Caller(kind, Guard.preset("full-access"), authenticated=True, **attrs)
        listed = {s.name for s in catalog.tools(caller)}
        for name in catalog._specs:
            code = _code(catalog, name, caller)
            assert (code == "tool_not_found") == (name not in listed), (kind, name, code)
    # The example: not listed to a one-shot caller on Android, hence not callable.
    ipc = Caller("ipc", Guard.preset("full-access"), authenticated=True, **CALLER_KINDS["ipc"])
    assert "mouse_move" not in {s.name for s in catalog.tools(ipc)}
    assert _code(catalog, "mouse_move", ipc) == "tool_not_found"


def test_token_rule_is_a_refusal_with_its_code() -> None:
    catalog = catalog_for("ios")
    off_loopback = Caller("http", Guard.preset("full-access"), token_required=True)
    assert "keyboard_tap" in {s.name for s in catalog.tools(off_loopback)}
    assert _code(catalog, "keyboard_tap", off_loopback) == "auth_required"
    assert _code(catalog, "health_check", off_loopback) == "tool_arguments_invalid"  # a read
    # Reads that show the target's screen are as private as the live stream, and so are the
    # files the target saved on a drive: token first.
    screen = {"screenshot", "wait_for_stable_screen", "screen_text", "find_text"}
    private = screen | {"media_files", "media_file_read"}
    assert {s.name for s in catalog._specs.values() if s.private} == private
    for name in private:
        assert _code(catalog, name, off_loopback) == "auth_required", name
    with_token = replace(off_loopback, authenticated=True)
    assert _code(catalog, "keyboard_tap", with_token) == "tool_arguments_invalid"
    for name in screen:
        assert _code(catalog, name, with_token) != "auth_required", name


def test_text_mode_once_for_every_wire() -> None:
    """A text tool's input, however it arrives: plain text (HTTP input/raw_input) or the
    flattened-string form (WebSocket); a json tool parses raw text."""
    seen: list[Any] = []

    async def echo(args: dict[str, Any], ctx: CallContext) -> Any:
        seen.append(args)
        return {"ok": True}

    text = object_schema({"input": {"type": "string"}}, ["input"])
    catalog = Catalog("ios")
    catalog.register(ToolSpec("t", "Text.", "test", "read", echo, text, input_mode="text"))
    catalog.register(ToolSpec("j", "Json.", "test", "read", echo, object_schema({})))
    http = Caller("http", Guard.preset("full-access"), **CALLER_KINDS["http"])
    ws = Caller("ws", Guard.preset("full-access"), **CALLER_KINDS["ws"])

    async def run() -> list[str | None]:
        codes = []
        for name, args, caller in (
            ("t", "hello", http),
            ("t", RawText("5"), http),
            ("t", {"input": "x"}, ws),
            ("t", {"input": 5}, http),  # no flattening outside the WS form
            ("j", RawText(" "), http),
            ("j", RawText("{"), http),
        ):
            outcome = await catalog.call(name, args, caller)
            codes.append(None if outcome.error is None else outcome.error.code)
        return codes

    codes = asyncio.run(run())
    assert codes == [None, None, None, "tool_arguments_invalid", None, "tool_call_payload_invalid"]
    assert seen == [{"input": "hello"}, {"input": "5"}, {"input": "x"}, {}]
    flattened = asyncio.run(catalog.call("t", {"input": True}, ws))
    assert flattened.ok and seen[-1] == {"input": "true"}
