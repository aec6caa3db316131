"""The floor of one tool call on this stack, for the baseline servers of bench_http and bench_ws:
only what any server under the catalog's rules must do per call, with none of the catalog.

It checks the arguments and the result against their schemas with the compiled validator the
catalog uses (fastjsonschema), answers with the daemon's own health_check result, and writes one
structured log line with the daemon's own logging set-up, to a file as the daemon's goes. There
is no task, limit, invocation record or metrics: what the best code could come down to here.
"""

from __future__ import annotations

import time
from typing import Any

import fastjsonschema
import structlog

from gadget.log import configure_logging

# The shape of the daemon's own result schema for health_check: each property typed, no others.
_TYPES = {bool: "boolean", str: "string", int: "integer", float: "number", dict: "object"}


class Floor:
    def __init__(self, result: dict[str, Any], log_path: str):
        self.result = result
        configure_logging("info", "json", open(log_path, "w"))  # noqa: SIM115 - the process's
        self.log = structlog.get_logger("floor")
        self.check_args = fastjsonschema.compile(
            {"type": "object", "properties": {}, "additionalProperties": False}
        )
        self.check_result = fastjsonschema.compile(
            {
                "type": "object",
                "properties": {k: {"type": _TYPES[type(v)]} for k, v in result.items()},
                "required": ["ok", "version"],
                "additionalProperties": False,
            }
        )

    def call(self, args: Any) -> dict[str, Any]:
        """The tool's result for `args`, both checked."""
        self.check_args(args)
        result = dict(self.result)
        self.check_result(result)
        return result

    def logged(self, tool: str, transport: str, started: float) -> None:
        """The call's one log line, as the catalog writes it."""
        duration_ms = round((time.monotonic() - started) * 1000, 1)
        self.log.info(
            "tool_invocation",
            tool=tool,
            transport=transport,
            duration_ms=duration_ms,
            outcome="ok",
            error_code=None,
        )
