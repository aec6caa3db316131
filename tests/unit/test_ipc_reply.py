"""The Tool RPC mapping (daemon/transports/ipc.py) over a real Catalog, the request decoder, and
the CLI's reading of stdin."""

from __future__ import annotations

import asyncio
from typing import Any

import msgpack
import pytest

from daemon import cli
from daemon.catalog import SCREEN_NOT_SETTLED, CallContext, Catalog, Guard, ToolSpec, object_schema
from daemon.errors import ToolError
from daemon.transports import ipc

FULL = Guard.preset("full-access")


def spec(name: str, result: Any = None, **kw: Any) -> ToolSpec:
    async def handler(args: dict[str, Any], ctx: CallContext) -> Any:
        if isinstance(result, BaseException):
            raise result
        return result

    kw.setdefault("result_schema", {})
    return ToolSpec(name, f"The {name} tool.", "test", kw.pop("policy", "read"), handler, **kw)


async def reply(catalog: Catalog, name: str, args: Any = None, guard: Guard = FULL) -> Any:
    outcome = await catalog.call(
        name, {} if args is None else args, guard=guard, ctx=CallContext("ipc")
    )
    return ipc.reply_for(outcome)


async def test_complete_and_non_object_results() -> None:
    catalog = Catalog("ios", [spec("plain", {"a": 1}), spec("text", "hello")])
    assert await reply(catalog, "plain") == {"type": "complete", "document": {"a": 1}}
    # The contract's document is an object: other results are wrapped.
    assert await reply(catalog, "text") == {"type": "complete", "document": {"result": "hello"}}


async def test_generic_evidence_rule() -> None:
    unsettled = {"action_output": "tap", "screen_stable": False}
    catalog = Catalog(
        "ios",
        [
            spec("tap", unsettled, evidence=True),
            spec("settled", {**unsettled, "screen_stable": True}, evidence=True),
            spec("no_wait", {"action_output": "typed"}, evidence=True),
            spec("not_evidence", unsettled),
        ],
    )
    assert await reply(catalog, "tap") == {
        "type": "qualified",
        "document": {**unsettled, "qualification": SCREEN_NOT_SETTLED},
    }
    for name in ("settled", "no_wait", "not_evidence"):
        assert (await reply(catalog, name))["type"] == "complete", name


async def test_own_qualification_comes_first() -> None:
    def launched(result: Any) -> str | None:
        return "the target accepted the launch; it may not be in front yet"

    catalog = Catalog(
        "ios",
        [
            spec("open_app", {"ok": True, "screen_stable": False}, evidence=True, qualify=launched),
            spec(
                "quiet", {"ok": True, "screen_stable": False}, evidence=True, qualify=lambda r: None
            ),
        ],
    )
    out = await reply(catalog, "open_app")
    assert out["type"] == "qualified" and out["document"]["qualification"].startswith("the target")
    # A hook with nothing to say leaves the generic rule in force.
    assert (await reply(catalog, "quiet"))["document"]["qualification"] == SCREEN_NOT_SETTLED


async def test_every_catalog_error_maps() -> None:
    catalog = Catalog(
        "ios",
        [
            spec("crash", RuntimeError("boom")),
            spec("bad_result", {"n": "x"}, result_schema=object_schema({"n": {"type": "integer"}})),
            spec("semantic", ToolError("weather_unavailable", "offline", retryable=True)),
            spec("critical", {}, policy="critical"),
            spec("android_only", {}, platforms=frozenset({"android"})),
        ],
    )

    async def never(args: dict[str, Any], ctx: CallContext) -> Any:
        await asyncio.Event().wait()

    catalog.register(ToolSpec("hang", "Hangs.", "test", "read", never, timeout_s=0.01))
    expect = {
        "nope": "UNKNOWN_TOOL",
        "crash": "INVOCATION_FAILED",
        "hang": "INVOCATION_FAILED",
        "bad_result": "INVALID_RESULT",
    }
    for name, failure in expect.items():
        assert await reply(catalog, name) == {"type": "rejected", "failure": failure}, name
    assert await reply(catalog, "crash", {"x": 1}) == {
        "type": "rejected",
        "failure": "INVALID_ARGUMENTS",
    }
    read_only = Guard.preset("read-only")
    assert (await reply(catalog, "critical", guard=read_only))["failure"] == "OUT_OF_SCOPE"
    assert (await reply(catalog, "crash", guard=Guard.preset("disabled")))["failure"] == (
        "OUT_OF_SCOPE"
    )
    # Semantic rejections travel whole, with their details.
    semantic = await reply(catalog, "semantic")
    assert semantic == {
        "type": "rejected_document",
        "document": {"code": "weather_unavailable", "message": "offline", "retryable": True},
    }
    other_platform = await reply(catalog, "android_only")
    assert other_platform["type"] == "rejected_document"
    assert other_platform["document"]["details"]["code"] == "tool_platform_unsupported"


def test_failures_are_the_contracts() -> None:
    assert set(ipc.FAILURES.values()) <= set(cli.FAILURES)
    # Every code the CLI can print is one of the contract's ten.
    assert len(cli.FAILURES) == 10


def test_catalog_projection() -> None:
    catalog = Catalog(
        "ios",
        [
            spec("zeta", {}),
            spec("alpha", {}, policy="write"),
            spec("shell", {}, policy="critical"),
            spec("sleep", {}, terminating=True),
            spec("diag", {}, exposure="http"),
            spec("android_only", {}, platforms=frozenset({"android"})),
            spec("maint", {}, exposure="internal"),
        ],
    )
    out = ipc.catalog_reply(catalog, FULL)
    tools = out["catalog"]["tools"]
    assert out["type"] == "catalog" and out["catalog"]["schemaVersion"] == 2
    assert [t["name"] for t in tools] == ["alpha", "shell", "zeta"]
    assert [t["effect"] for t in tools] == ["WRITE", "WRITE", "READ"]
    assert list(tools[0]) == ["name", "description", "effect", "inputSchema"]
    assert [
        t["name"] for t in ipc.catalog_reply(catalog, Guard.preset("read-only"))["catalog"]["tools"]
    ] == ["zeta"]
    with pytest.raises(ToolError) as exc:
        ipc.catalog_reply(catalog, Guard.preset("disabled"))
    assert ipc.error_reply(exc.value) == {"type": "rejected", "failure": "CATALOG_UNAVAILABLE"}


def _frame(data: bytes) -> dict[str, Any]:
    size = int.from_bytes(data[:4], "big")
    assert len(data) == 4 + size
    message = msgpack.unpackb(data[4:], raw=False)
    assert isinstance(message, dict)
    return message


def test_response_frames() -> None:
    error = ToolError("tool_not_found", "no tool named 'x'", details={"tool": "x"})
    assert _frame(ipc.error_response(5, error)) == {
        "id": 5,
        "reply": {"type": "rejected", "failure": "UNKNOWN_TOOL"},
        "error": error.to_dict(),
    }
    assert _frame(ipc.response("a", {"type": "complete", "document": {}})) == {
        "id": "a",
        "reply": {"type": "complete", "document": {}},
    }
    # A result msgpack cannot carry is the daemon's bug, reported as one.
    bad = _frame(ipc.response(1, {"type": "complete", "document": {"x": object()}}))
    assert bad["reply"] == {"type": "rejected", "failure": "INVALID_RESULT"}
    assert bad["error"]["code"] == "ipc_result_unencodable"


@pytest.mark.parametrize(
    ("message", "code"),
    [
        ({"id": 1, "op": "nap"}, "ipc_request_invalid"),
        ({"id": 1, "op": "call"}, "ipc_request_invalid"),
        ({"id": 1, "op": "call", "tool": ""}, "ipc_request_invalid"),
        ({"id": True, "op": "catalog"}, "ipc_frame_invalid"),
        ({"id": 1.5, "op": "catalog"}, "ipc_frame_invalid"),
        ({"op": "catalog"}, "ipc_frame_invalid"),
        ([1], "ipc_frame_invalid"),
    ],
)
def test_decode_request_errors(message: Any, code: str) -> None:
    with pytest.raises(ToolError) as exc:
        ipc.decode_request(msgpack.packb(message))
    assert exc.value.code == code


def test_decode_request() -> None:
    body = msgpack.packb({"id": "x", "op": "call", "tool": "t", "arguments": {"a": [1]}})
    assert ipc.decode_request(body) == ipc.Request("x", "call", "t", {"a": [1]})
    assert ipc.decode_request(msgpack.packb({"id": 0, "op": "catalog"})).op == "catalog"
    with pytest.raises(ToolError, match="extension"):
        ipc.decode_request(
            msgpack.packb(
                {"id": 1, "op": "call", "tool": "t", "arguments": msgpack.ExtType(1, b"")}
            )
        )


def test_access() -> None:
    access = ipc.Access(frozenset({0, 1000}), frozenset({50}))
    assert access.allows(ipc.Peer(1, 1000, 1000))
    assert access.allows(ipc.Peer(1, 7, 50))
    assert access.allows(ipc.Peer(1, 7, 7, (3, 50)))
    assert not access.allows(ipc.Peer(1, 7, 7, (3,)))


@pytest.mark.parametrize(
    ("data", "failure"),
    [
        (b"{}", None),
        (b' {"a": [1, 2.5, null]} \n', None),
        (b"x" * (cli.STDIN_LIMIT + 1), "REQUEST_TOO_LARGE"),
        (b"\xc3\x28", "INVALID_ARGUMENTS"),
        (b"[]", "INVALID_ARGUMENTS"),
        (b"", "INVALID_ARGUMENTS"),
        (b"{}{}", "INVALID_ARGUMENTS"),
        (b'{"a": Infinity}', "INVALID_ARGUMENTS"),
        (b'{"a": ' + b"[" * 200_000 + b"]" * 200_000 + b"}", "INVALID_ARGUMENTS"),
    ],
)
def test_read_arguments(data: bytes, failure: str | None) -> None:
    if failure is None:
        assert isinstance(cli.read_arguments(data), dict)
        return
    with pytest.raises(cli.Rejected) as exc:
        cli.read_arguments(data)
    assert exc.value.failure == failure
