"""The shell service: a command with a timeout and capped output, and background sessions
(the `shell` tool's work; daemon/tools/shell.py holds only the tool's definition).

Every command runs in its own process group with FINGERTIP_SHELL=<daemon tag>:<command id> in
its environment. Ending a command signals its group and every process that still carries its
mark: a child that called setsid (a new group and session) or whose parent died (a new parent)
keeps its environment, so it is found in /proc and ended too. That is the same on a board and
under `make run` (no cgroup needed; on a board systemd's KillMode=mixed is the backstop).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import secrets
import signal
import time
from dataclasses import dataclass, field
from typing import Any

import structlog

from daemon.config import Config
from daemon.errors import ToolError

log = structlog.get_logger("daemon.shell")

MARK = "FINGERTIP_SHELL"
END_GRACE_S = 2.0  # from SIGTERM to SIGKILL when a session is stopped


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
class ShellSession:
    id: str
    command: str
    proc: asyncio.subprocess.Process
    out: _Output
    started: float
    mark: str
    pump: asyncio.Task[None] | None = None
    exited: asyncio.Task[int] | None = None  # sets ended_at (held here: tasks are weak refs)
    ended_at: float | None = None  # when its process exited (monotonic)

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
    """Runs commands; owns background sessions (all ended when the daemon stops). Ended
    sessions are kept for reading at most [shell].keep_ended_s and [shell].max_ended of them."""

    def __init__(self, config: Config):
        cfg = config.shell
        self.cwd = cfg.cwd or str(config.state_dir)
        self.default_timeout = cfg.default_timeout_s
        self.cap = cfg.max_output_bytes
        self.max_sessions = cfg.max_sessions
        self.keep_ended_s = cfg.keep_ended_s
        self.max_ended = cfg.max_ended
        self.sessions: dict[str, ShellSession] = {}
        self._ids = itertools.count(1)
        self._tag = secrets.token_hex(8)  # this daemon's mark: nobody else's processes carry it
        self._ending: set[asyncio.Task[None]] = set()

    async def _spawn(
        self, command: str, cwd: str | None, stdin: bool, mark: str
    ) -> asyncio.subprocess.Process:
        try:
            return await asyncio.create_subprocess_shell(
                command,
                stdin=asyncio.subprocess.PIPE if stdin else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT if stdin else asyncio.subprocess.PIPE,
                cwd=cwd or self.cwd,
                env={**os.environ, MARK: mark},
                start_new_session=True,  # its own process group, so a timeout kills children too
            )
        except OSError as exc:
            raise ToolError("shell_spawn_failed", f"cannot start command: {exc}") from None

    def _mark(self, cid: str) -> str:
        return f"{self._tag}:{cid}"

    async def run(self, command: str, timeout: float | None, cwd: str | None) -> dict[str, Any]:
        limit = timeout or self.default_timeout
        started = time.monotonic()
        mark = self._mark(f"r{next(self._ids)}")
        proc = await self._spawn(command, cwd, stdin=False, mark=mark)
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
            # A timeout that hits while waiting for the readers cancels them: done, but not
            # because the command's output ended (something of it still holds the pipes).
            if proc.returncode is None or not readers.done() or readers.cancelled():
                await _end_tree(_group(proc), mark, grace=0)
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
        self._reap()
        live = [s for s in self.sessions.values() if s.proc.returncode is None]
        if len(live) >= self.max_sessions:
            raise ToolError(
                "shell_too_many_sessions",
                f"{len(live)} sessions are running (limit {self.max_sessions}); stop one first",
                retryable=True,
            )
        sid = f"s{next(self._ids)}"
        proc = await self._spawn(command, cwd, stdin=True, mark=self._mark(sid))
        session = ShellSession(
            sid, command, proc, _Output(self.cap), time.monotonic(), self._mark(sid)
        )
        assert proc.stdout is not None
        session.pump = asyncio.create_task(_pump(proc.stdout, session.out))
        session.exited = asyncio.create_task(proc.wait())
        session.exited.add_done_callback(lambda _: self._ended(session))
        self.sessions[sid] = session
        return session.describe()

    def _ended(self, s: ShellSession) -> None:
        # Reaping here too keeps the bound at every moment, not only from the next shell call:
        # a listing could otherwise count a session that ended after that call's reap.
        s.ended_at = time.monotonic()
        self._reap()

    def _reap(self) -> None:
        """Forget ended sessions past keep_ended_s, and the oldest beyond max_ended (checked on
        every shell call, so what is kept stays bounded in count and in time)."""
        now = time.monotonic()
        # Ended as a listing shows it (an exit code), even before the exit watcher ran.
        ended = sorted(
            (s for s in self.sessions.values() if s.proc.returncode is not None),
            key=lambda s: s.ended_at or now,
        )
        excess = len(ended) - self.max_ended
        for i, s in enumerate(ended):
            if i < excess or now - (s.ended_at or now) >= self.keep_ended_s:
                del self.sessions[s.id]
                self._end_later(s)  # what it left running (setsid children) goes with it

    def _end_later(self, s: ShellSession) -> asyncio.Task[None]:
        task = asyncio.create_task(_end(s))
        self._ending.add(task)
        task.add_done_callback(self._ending.discard)
        return task

    def _get(self, sid: str) -> ShellSession:
        self._reap()
        try:
            return self.sessions[sid]
        except KeyError:
            raise ToolError(
                "shell_session_not_found",
                f"no session {sid!r}",
                details={"sessions": sorted(self.sessions)},
            ) from None

    def list(self) -> dict[str, Any]:
        self._reap()
        return {"sessions": [s.describe() for s in self.sessions.values()]}

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
        # Gone from the table before the first await: a concurrent stop of the same session
        # gets shell_session_not_found, and the ending runs to its end even if this call is
        # cancelled (its client went away).
        del self.sessions[sid]
        await asyncio.shield(self._end_later(s))
        return {**s.describe(), "output": s.out.text(s.out.read_pos)}

    async def close(self) -> None:
        ending = [self._end_later(s) for s in self.sessions.values()]
        self.sessions.clear()
        await asyncio.gather(*ending, *self._ending, return_exceptions=True)
        # Whatever any command of this daemon left behind, runs included.
        await _end_tree(0, self._tag + ":", grace=0)


async def _pump(stream: asyncio.StreamReader, out: _Output) -> None:
    while chunk := await stream.read(65536):
        out.feed(chunk)


_PF_KTHREAD = 0x00200000
_EXEC_WAIT_S = 0.5


def _environ(pid: str) -> bytes | None:
    """A process's environment; None when it is not ours to read or gone. Empty while it is in
    the middle of an execve (the old memory is gone, the new not yet set up): then read again
    until it is not, so a command that execs at the moment of a scan cannot slip through.
    Zombies and kernel threads have none for good."""
    deadline = time.monotonic() + _EXEC_WAIT_S
    while True:
        try:
            with open(f"/proc/{pid}/environ", "rb") as fh:
                env = fh.read()
            if env:
                return env
            with open(f"/proc/{pid}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
        except OSError:
            return None
        if fields[0] in (b"Z", b"X") or int(fields[6]) & _PF_KTHREAD:
            return b""
        if time.monotonic() > deadline:
            return b""
        time.sleep(0.005)  # in a worker thread (asyncio.to_thread), never on the loop


def marked(mark: str) -> list[int]:
    """Live processes whose environment holds FINGERTIP_SHELL=<mark> (a mark ending in ':' is
    a prefix: every command of one daemon). Processes we may not read (another user's) cannot
    be ours."""
    needle = f"\0{MARK}={mark}".encode()
    needle = needle if mark.endswith(":") else needle + b"\0"
    found = []
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if entry.name.isdigit() and needle in b"\0" + (_environ(entry.name) or b""):
                found.append(int(entry.name))
    return found


def _signal(pgid: int, pids: list[int], sig: signal.Signals) -> None:
    targets = [(os.killpg, pgid)] if pgid > 0 else []
    targets += [(os.kill, pid) for pid in pids]
    for send, pid in targets:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            send(pid, sig)


async def _end_tree(pgid: int, mark: str, grace: float) -> None:
    """End process group `pgid` (0: none) and every process marked `mark`: SIGTERM and up to
    `grace` seconds to exit, then SIGKILL, repeated while marked processes remain (one may fork
    between a scan and its kill)."""
    if grace > 0:
        _signal(pgid, await asyncio.to_thread(marked, mark), signal.SIGTERM)
        # Polled: a process that is not our child signals nothing when it exits.
        for _ in range(int(grace / 0.05)):
            if not await asyncio.to_thread(marked, mark):
                break
            await asyncio.sleep(0.05)
    _signal(pgid, [], signal.SIGKILL)
    for _ in range(50):  # a killed process may take a moment to be gone
        left = await asyncio.to_thread(marked, mark)
        if not left:
            return
        _signal(0, left, signal.SIGKILL)
        await asyncio.sleep(0.02)
    log.warning("shell_processes_left", mark=mark, pids=left)


def _group(proc: asyncio.subprocess.Process) -> int:
    """The command's process group while its leader lives; once reaped its pid may be reused,
    and the marks still find whatever is left of the group."""
    return proc.pid if proc.returncode is None else 0


async def _end(s: ShellSession) -> None:
    await _end_tree(_group(s.proc), s.mark, END_GRACE_S)
    with contextlib.suppress(Exception):
        await asyncio.wait_for(s.proc.wait(), 2)
    if s.pump is not None:
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(s.pump, 1)
