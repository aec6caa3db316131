"""The structlog set-up shared by the daemon and the gadget CLI (JSON lines)."""

from __future__ import annotations

import io
import json
import socket
from collections.abc import Iterator
from typing import Any

import pytest
import structlog

from gadget.log import configure_logging


@pytest.fixture(autouse=True)
def _restore_structlog() -> Iterator[None]:
    yield
    structlog.reset_defaults()


class Opaque:
    def __repr__(self) -> str:
        return "<opaque>"


def test_json_lines_carry_level_timestamp_and_fall_back_to_repr() -> None:
    out = io.StringIO()
    configure_logging("info", "json", stream=out)
    log = structlog.get_logger("test")
    log.debug("hidden")
    log.info("tool_invocation", tool="t", duration_ms=1.5, outcome="ok", error_code=None)
    log.info("odd_value", value=Opaque())
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        log.exception("failed")
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [e["event"] for e in lines] == ["tool_invocation", "odd_value", "failed"]
    first = lines[0]
    assert first["level"] == "info" and first["timestamp"].endswith("Z")
    assert (first["tool"], first["duration_ms"], first["outcome"]) == ("t", 1.5, "ok")
    assert first["error_code"] is None
    assert lines[1]["value"] == "<opaque>"
    assert lines[2]["level"] == "error" and "RuntimeError: boom" in lines[2]["exception"]


def test_each_line_is_one_write_on_an_unbuffered_stream() -> None:
    # A SEQPACKET socket keeps write boundaries: one received packet per write(2).
    reader, writer = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with reader, writer:
        raw: Any = writer.makefile("wb", buffering=0)
        stream = io.TextIOWrapper(raw, encoding="utf-8", write_through=True)  # as python -u
        configure_logging("info", "json", stream=stream)
        log = structlog.get_logger("test")
        for n in range(3):
            log.info("line", n=n)
        reader.settimeout(5)
        packets = [reader.recv(65536) for _ in range(3)]
    assert [json.loads(p)["n"] for p in packets] == [0, 1, 2]
    assert all(p.endswith(b"}\n") and p.count(b"\n") == 1 for p in packets)
