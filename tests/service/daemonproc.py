"""Start the real fingertipd as a subprocess on a free loopback port (simulated target).

Readiness is taken from the daemon's own sd_notify READY=1 on a NOTIFY_SOCKET the test owns,
which also proves that READY is sent only once the listeners are up.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import resource
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]

# A client context that takes any certificate (the daemon's own is self-signed).
UNPINNED = ssl.create_default_context()
UNPINNED.check_hostname = False
UNPINNED.verify_mode = ssl.CERT_NONE


# A condition the daemon reaches on its own time (a log line written after the reply, a child
# process's output) is polled under a deadline this generous: the suite shares two cores with
# two emulated machines, and a fixed count of quick polls ran out before a `cat` echoed.
SETTLE_S = 60.0


async def eventually(
    check: Callable[[], Any | Awaitable[Any]],
    what: str = "the condition",
    timeout: float = SETTLE_S,
) -> Any:
    """Poll `check` (sync or async) until it returns something truthy, and return that."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not reached in {timeout:.0f} s")
        await asyncio.sleep(0.05)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k} = {toml_value(x)}" for k, x in v.items()) + "}"
    raise TypeError(v)


def write_config(path: Path, tables: dict[str, dict[str, Any]]) -> None:
    lines = []
    for table, values in tables.items():
        lines.append(f"[{table}]")
        lines += [f"{k} = {toml_value(v)}" for k, v in values.items()]
        lines.append("")
    path.write_text("\n".join(lines))


def daemon_tables(
    tmp: Path, port: int, overrides: dict[str, dict[str, Any]] | None = None
) -> dict[str, dict[str, Any]]:
    """The test daemon's config (simulated target on 127.0.0.1:`port`, state under `tmp`)
    with `overrides` merged in, table by table."""
    tables: dict[str, dict[str, Any]] = {
        "device": {"device_type": "iOS"},
        "server": {"listen": ["127.0.0.1"], "port": port, "shutdown_grace_s": 10.0},
        "backend": {"kind": "simulated"},
        "guard": {"http": "full-access", "ws": "full-access", "ipc": "full-access"},
        "state": {"dir": str(tmp / "state")},
        "ipc": {"socket": str(tmp / "ipc.sock")},
        "log": {"format": "json", "level": "debug"},
    }
    for table, values in (overrides or {}).items():
        tables.setdefault(table, {}).update(values)
    return tables


class DaemonProcess:
    def __init__(
        self,
        tmp: Path,
        overrides: dict[str, dict[str, Any]] | None = None,
        env: dict[str, str] | None = None,
        nofile: int | None = None,
        fsize: int | None = None,
    ):
        self.tmp = tmp
        self.extra_env = env or {}
        self.nofile = nofile  # RLIMIT_NOFILE (soft and hard) of the daemon, None = ours
        self.fsize = fsize  # RLIMIT_FSIZE (bytes): a write past it fails, as on a full disk
        self.port = free_port()
        self.state_dir = tmp / "state"
        self.tables = tables = daemon_tables(tmp, self.port, overrides)
        self.config_path = tmp / "fingertip.toml"
        write_config(self.config_path, tables)
        self.log_path = tmp / "daemon.log"
        self.args: list[str] = []  # fingertipd's options besides --config (e.g. --port)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def base(self) -> str:
        return self.url("127.0.0.1")

    def url(self, address: str) -> str:
        """The daemon's base URL on one of its listen addresses: https where [server].tls
        gives that address TLS (tests that check the certificate pin it themselves)."""
        from daemon.tls import secured

        scheme = "https" if secured(address, self.tables["server"].get("tls", "auto")) else "http"
        return f"{scheme}://{address}:{self.port}"

    def health(self) -> dict[str, Any]:
        """health_check's result."""
        return dict(json.loads(self.post_json("/api/tools/health_check", {"input": {}})["output"]))

    @property
    def token(self) -> str:
        configured: str = self.tables.get("auth", {}).get("token", "")
        return configured or (self.state_dir / "pairing-token").read_text().strip()

    def start(self, timeout: float = 30.0) -> DaemonProcess:
        notify_path = self.tmp / "notify.sock"
        with contextlib.suppress(FileNotFoundError):
            notify_path.unlink()
        notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        notify.bind(str(notify_path))
        notify.settimeout(0.2)
        env = {**os.environ, "NOTIFY_SOCKET": str(notify_path), "PYTHONUNBUFFERED": "1"}
        env.pop("WATCHDOG_USEC", None)
        env.update(self.extra_env)
        self._log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "daemon", "--config", str(self.config_path), *self.args],
            cwd=REPO,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            preexec_fn=self._limits if (self.nofile, self.fsize) != (None, None) else None,
        )
        self.notifications: list[str] = []
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"fingertipd exited {self.proc.returncode}:\n{self.logs()}")
                try:
                    msg = notify.recv(4096).decode()
                except TimeoutError:
                    continue
                self.notifications.append(msg)
                if "READY=1" in msg:
                    self._notify = notify
                    return self
            raise RuntimeError(f"fingertipd not ready in {timeout}s:\n{self.logs()}")
        except BaseException:
            notify.close()
            self.kill()
            raise

    def _limits(self) -> None:
        if self.nofile is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (self.nofile, self.nofile))
        if self.fsize is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (self.fsize, self.fsize))

    def drain_notifications(self) -> list[str]:
        if not hasattr(self, "_notify"):
            return self.notifications
        with contextlib.suppress(TimeoutError, OSError):
            while True:
                self.notifications.append(self._notify.recv(4096).decode())
        return self.notifications

    def memory_kib(self, field: str) -> int:
        """One of the kernel's memory figures for the daemon (VmRSS, VmHWM: /proc/PID/status)."""
        assert self.proc is not None
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1])
        raise AssertionError(f"no {field} for the daemon")

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def log_events(self) -> list[dict[str, Any]]:
        out = []
        for line in self.logs().splitlines():
            with contextlib.suppress(ValueError):
                out.append(json.loads(line))
        return out

    def stop(self, timeout: float = 30.0) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        finally:
            self.drain_notifications()
            self.kill()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        with contextlib.suppress(Exception):
            self._log.close()
        with contextlib.suppress(Exception):
            self._notify.close()

    # Small synchronous helpers (the tests themselves use aiohttp). Over TLS they trust any
    # certificate: the tests of the certificate pin it themselves.
    def get_json(self, path: str) -> Any:
        with urllib.request.urlopen(self.base + path, timeout=10, context=UNPINNED) as resp:
            return json.loads(resp.read())

    def get_bytes(self, path: str) -> bytes:
        with urllib.request.urlopen(self.base + path, timeout=10, context=UNPINNED) as resp:
            return bytes(resp.read())

    def post_json(self, path: str, body: Any = None) -> Any:
        req = urllib.request.Request(
            self.base + path,
            data=json.dumps(body or {}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=30, context=UNPINNED) as resp:
            return json.loads(resp.read())

    def sim_state(self) -> Any:
        """The simulated target's state; it shows what was typed, so it is private like the
        screen: the pairing token goes with it (needed where [auth].require_on_loopback)."""
        known = (
            "token" in self.tables.get("auth", {}) or (self.state_dir / "pairing-token").exists()
        )
        headers = {"Authorization": f"Bearer {self.token}"} if known else {}
        req = urllib.request.Request(self.base + "/api/sim/state", headers=headers)
        with urllib.request.urlopen(req, timeout=10) as resp:
            return json.loads(resp.read())
