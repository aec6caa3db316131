"""The `shell` tool: its schema and handler over the shell service (daemon/shell.py)."""

from __future__ import annotations

from typing import Any

from daemon.catalog import CallContext, ToolSpec, object_schema
from daemon.runtime import Runtime

ACTIONS = ("run", "start", "list", "read", "write", "stop")
# A NUL cannot reach exec(): refused by the schema rather than failing in the spawn.
_NO_NUL = "^[^\\x00]*$"

ARGS = object_schema(
    {
        "action": {
            "enum": list(ACTIONS),
            "default": "run",
            "description": "run (default) waits for the command; start runs it as a background "
            "session; list, read, write and stop act on sessions",
        },
        "command": {
            "type": "string",
            "minLength": 1,
            "pattern": _NO_NUL,
            "description": "passed to /bin/sh -c",
        },
        "timeout_s": {
            "type": "number",
            "exclusiveMinimum": 0,
            "maximum": 3600,
            "description": "run: the command is killed after this many seconds (default "
            "[shell].default_timeout_s, 30)",
        },
        "cwd": {
            "type": "string",
            "pattern": _NO_NUL,
            "description": "run, start: the working directory (default [shell].cwd, else the "
            "state folder)",
        },
        "session": {"type": "string", "description": "session id (read, write, stop)"},
        "input": {
            "type": "string",
            "description": "text written to the session's stdin",
            "writeOnly": True,  # may be a password: the flight recorder keeps it redacted
        },
    },
    allOf=[
        {
            "if": {"properties": {"action": {"enum": ["run", "start"]}}},
            "then": {"required": ["command"]},
        },
        {
            "if": {
                "properties": {"action": {"enum": ["read", "write", "stop"]}},
                "required": ["action"],
            },
            "then": {"required": ["session"]},
        },
        {
            "if": {"properties": {"action": {"const": "write"}}, "required": ["action"]},
            "then": {"required": ["input"]},
        },
    ],
)


def qualify(result: Any) -> str | None:
    """A run that timed out or output that was cut is done, but must be read with care."""
    notes = []
    if result.get("timed_out"):
        notes.append(
            "the command timed out and was killed: output is partial, exit_code is the kill's"
        )
    if result.get("truncated"):
        notes.append("output was cut at [shell].max_output_bytes")
    return "; ".join(notes) or None


def tools(rt: Runtime) -> list[ToolSpec]:
    svc = rt.shell

    async def shell(args: dict[str, Any], ctx: CallContext) -> Any:
        action = args["action"]
        if action == "run":
            return await svc.run(args["command"], args.get("timeout_s"), args.get("cwd"))
        if action == "start":
            return await svc.start(args["command"], args.get("cwd"))
        if action == "list":
            return svc.list()
        if action == "read":
            return svc.read(args["session"])
        if action == "write":
            return await svc.write(args["session"], args["input"])
        return await svc.stop(args["session"])

    return [
        ToolSpec(
            name="shell",
            title="Shell",
            description=(
                "Run a shell command on the board (controller-local precise time, timezone, "
                "deterministic calculations, diagnostics). action=run (default) waits up to "
                "timeout_s and returns exit_code, stdout, stderr (capped; truncated=true when "
                "cut). For long-running tasks use action=start to get a background session, "
                "then read (new output since the last read), write (stdin), list, and stop it "
                "when done (stop ends its children too, setsid ones included); sessions end "
                "when the daemon stops, and an ended one is kept for reading only a while."
            ),
            category="system",
            policy="critical",
            handler=shell,
            args_schema=ARGS,
            example_input={"command": "pwd"},
            keywords=("command", "exec", "terminal"),
            # A run is bounded by its own timeout_s; the catalog's limit is a backstop above it.
            timeout_s=3700.0,
            qualify=qualify,
        )
    ]
