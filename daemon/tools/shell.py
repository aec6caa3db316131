"""The `shell` tool: a command with a timeout and capped output, and background sessions."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import signal
import time
from dataclasses import dataclass, field
from typing import Any

import structlog

from daemon.catalog import CallContext, ToolSpec, object_schema
from daemon.errors import ToolError
from daemon.runtime import Runtime

log = structlog.get_logger("daemon.shell")

ACTIONS = ("run", "start", "list", "read", "write", "stop")

ARGS = object_schema(
    {
        "action": {
            "enum": list(ACTIONS),
            "default": "run",
            "description": "run (default) waits for the command; start runs it as a background "
            "session; list, read, write and stop act on sessions",
        },
        "command": {"type": "string", "minLength": 1, "description": "passed to /bin/sh -c"},
        "timeout_s": {"type": "number", "exclusiveMinimum": 0, "maximum": 3600},
        "cwd": {"type": "string"},
        "session": {"type": "string", "description": "session id (read, write, stop)"},
        "input": {"type": "string", "description": "text written to the session's stdin"},
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


@dataclass
class _Output:
    """Collects a stream up to a cap; what is past the cap is counted, not kept."""

    cap: int
    data: bytearray = field(default_factory=bytearray)
    dropped: int = 0
    read_pos: int = 0

    def feed(self, chunk: bytes) -> None:
        room = self.cap - len(self.data)
        self.data += chunk[: max(room, 0)]
        self.dropped += max(len(chunk) - max(room, 0), 0)

    def text(self, start: int = 0) -> str:
        return self.data[start:].decode("utf-8", "replace")


@dataclass
class Session:
    id: str
    command: str
    proc: asyncio.subprocess.Process
    out: _Output
    started: float
    pump: asyncio.Task[None] | None = None

    def describe(self) -> dict[str, Any]:
        return {
            "session": self.id,
            "command": self.command,
            "running": self.proc.returncode is None,
            "exit_code": self.proc.returncode,
            "pid": self.proc.pid,
            "age_s": round(time.monotonic() - self.started, 1),
        }


class ShellService:
    """Runs commands; owns background sessions (all ended when the daemon stops)."""

    def __init__(self, rt: Runtime):
        cfg = rt.config.shell
        self.cwd = cfg.cwd or str(rt.config.state_dir)
        self.default_timeout = cfg.default_timeout_s
        self.cap = cfg.max_output_bytes
        self.max_sessions = cfg.max_sessions
        self.sessions: dict[str, Session] = {}
        self._ids = itertools.count(1)

    async def _spawn(
        self, command: str, cwd: str | None, stdin: bool
    ) -> asyncio.subprocess.Process:
        try:
            return await asyncio.create_subprocess_shell(
                command,
                stdin=asyncio.subprocess.PIPE if stdin else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT if stdin else asyncio.subprocess.PIPE,
                cwd=cwd or self.cwd,
                start_new_session=True,  # its own process group, so a timeout kills children too
            )
        except OSError as exc:
            raise ToolError("shell_spawn_failed", f"cannot start command: {exc}") from None

    async def run(self, command: str, timeout: float | None, cwd: str | None) -> dict[str, Any]:
        limit = timeout or self.default_timeout
        started = time.monotonic()
        proc = await self._spawn(command, cwd, stdin=False)
        out, err = _Output(self.cap), _Output(self.cap)
        assert proc.stdout is not None and proc.stderr is not None
        readers = asyncio.gather(_pump(proc.stdout, out), _pump(proc.stderr, err))
        timed_out = False
        try:
            async with asyncio.timeout(limit):
                await proc.wait()
                await readers
        except TimeoutError:
            timed_out = True
        finally:
            if proc.returncode is None or not readers.done():
                _kill(proc)
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(proc.wait(), 2)
                readers.cancel()
                with contextlib.suppress(BaseException):
                    await readers
        return {
            "exit_code": proc.returncode,
            "stdout": out.text(),
            "stderr": err.text(),
            "truncated": bool(out.dropped or err.dropped),
            "timed_out": timed_out,
            "duration_ms": int((time.monotonic() - started) * 1000),
        }

    async def start(self, command: str, cwd: str | None) -> dict[str, Any]:
        live = [s for s in self.sessions.values() if s.proc.returncode is None]
        if len(live) >= self.max_sessions:
            raise ToolError(
                "shell_too_many_sessions",
                f"{len(live)} sessions are running (limit {self.max_sessions}); stop one first",
                retryable=True,
            )
        proc = await self._spawn(command, cwd, stdin=True)
        sid = f"s{next(self._ids)}"
        session = Session(sid, command, proc, _Output(self.cap), time.monotonic())
        assert proc.stdout is not None
        session.pump = asyncio.create_task(_pump(proc.stdout, session.out))
        self.sessions[sid] = session
        return session.describe()

    def _get(self, sid: str) -> Session:
        try:
            return self.sessions[sid]
        except KeyError:
            raise ToolError(
                "shell_session_not_found",
                f"no session {sid!r}",
                details={"sessions": sorted(self.sessions)},
            ) from None

    def read(self, sid: str) -> dict[str, Any]:
        s = self._get(sid)
        text = s.out.text(s.out.read_pos)
        s.out.read_pos = len(s.out.data)
        return {**s.describe(), "output": text, "truncated": bool(s.out.dropped)}

    async def write(self, sid: str, data: str) -> dict[str, Any]:
        s = self._get(sid)
        if s.proc.returncode is not None or s.proc.stdin is None:
            raise ToolError("shell_session_ended", f"session {sid} has ended")
        try:
            s.proc.stdin.write(data.encode())
            await s.proc.stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            raise ToolError("shell_session_ended", f"session {sid} closed its input") from None
        return {**s.describe(), "written": len(data.encode())}

    async def stop(self, sid: str) -> dict[str, Any]:
        s = self._get(sid)
        await _end(s)
        del self.sessions[sid]
        return {**s.describe(), "output": s.out.text(s.out.read_pos)}

    async def close(self) -> None:
        await asyncio.gather(*(_end(s) for s in self.sessions.values()))
        self.sessions.clear()


async def _pump(stream: asyncio.StreamReader, out: _Output) -> None:
    while chunk := await stream.read(65536):
        out.feed(chunk)


def _kill(proc: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


async def _end(s: Session) -> None:
    if s.proc.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(s.proc.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(s.proc.wait(), 2)
        except TimeoutError:
            _kill(s.proc)
            await s.proc.wait()
    if s.pump is not None:
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(s.pump, 1)


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
        action = args.get("action", "run")
        if action == "run":
            return await svc.run(args["command"], args.get("timeout_s"), args.get("cwd"))
        if action == "start":
            return await svc.start(args["command"], args.get("cwd"))
        if action == "list":
            return {"sessions": [s.describe() for s in svc.sessions.values()]}
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
                "when done; sessions end when the daemon stops."
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
