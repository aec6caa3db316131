"""The HTTP tools API codec over a small real catalog, served in-process by aiohttp."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from aiohttp import web
from hypothesis import example, given
from hypothesis import strategies as st

from daemon.auth import Auth
from daemon.catalog import Availability, CallContext, Catalog, Guard, ToolSpec, object_schema
from daemon.config import Config
from daemon.transports.http import HttpApi, iso_utc, project
from daemon.transports.routes import mount

BODY_KEYS = ["tool", "raw_input", "output", "is_error", "duration_ms", "called_at"]


@given(st.floats(min_value=0, max_value=2**33, allow_nan=False))
@example(1_700_000_000.9999996)  # rounds up to the next second, as datetime does
@example(1_700_000_000.0005)
def test_iso_utc_is_the_strftime_millisecond_form(ts: float) -> None:
    expected = datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    assert iso_utc(ts) == expected


def build_app(available: list[bool]) -> tuple[web.Application, Catalog]:
    async def echo(args: dict[str, Any], ctx: CallContext) -> Any:
        return {"echo": args.get("text", "")}

    def availability() -> Availability:
        if available[0]:
            return Availability()
        return Availability(False, "capture_unavailable", "no signal", remediation="plug it in")

    catalog = Catalog(
        "ios",
        [
            ToolSpec(
                "echo",
                "Echo the text back.",
                "test",
                "read",
                echo,
                args_schema=object_schema({"text": {"type": "string"}}),
                example_input={"text": "hi"},
            ),
            ToolSpec(
                "flaky", "Sometimes unavailable.", "test", "read", echo, availability=availability
            ),
        ],
    )
    app = web.Application()
    guards = {"http": Guard.preset("full-access")}
    mount(app, HttpApi(catalog, 1 << 20).routes(), Auth(Config(), "token"), guards)
    return app, catalog


def assert_canonical(text: str) -> dict[str, Any]:
    """The body is exactly the compact serialization of its own parse, tool entry first."""
    body: dict[str, Any] = json.loads(text)
    assert text == json.dumps(body, ensure_ascii=False, separators=(",", ":"))
    assert list(body)[: len(BODY_KEYS)] == BODY_KEYS
    return body


async def test_reply_carries_the_tool_entry_as_projected(aiohttp_client: Any) -> None:
    app, catalog = build_app([True])
    client = await aiohttp_client(app)
    for text in ("é ✓", "again"):  # the second reply reuses the encoded entry
        resp = await client.post("/api/tools/echo", json={"input": {"text": text}})
        assert resp.status == 200
        body = assert_canonical(await resp.text())
        assert body["tool"] == project(catalog.get("echo"), catalog)
        assert json.loads(body["output"]) == {"echo": text}
        assert body["raw_input"] == json.dumps(
            {"text": text}, ensure_ascii=False, separators=(",", ":")
        )


async def test_reply_tool_entry_follows_availability(aiohttp_client: Any) -> None:
    available = [True]
    app, catalog = build_app(available)
    client = await aiohttp_client(app)
    runtimes = []
    for state in (True, False, True):
        available[0] = state
        resp = await client.post("/api/tools/flaky", json={"input": {}})
        body = assert_canonical(await resp.text())
        assert body["tool"] == project(catalog.get("flaky"), catalog)
        runtimes.append(body["tool"].get("runtime"))
    assert runtimes[0] is None and runtimes[2] is None
    assert runtimes[1] == {
        "available": False,
        "code": "capture_unavailable",
        "reason": "no signal",
        "remediation": "plug it in",
        "retryable": True,
    }


async def test_unknown_tool_reply_has_no_tool_entry(aiohttp_client: Any) -> None:
    app, _ = build_app([True])
    client = await aiohttp_client(app)
    resp = await client.post("/api/tools/nope", json={"input": {}})
    assert resp.status == 404
    body = assert_canonical(await resp.text())
    assert body["tool"] is None and body["error"]["code"] == "tool_not_found"
