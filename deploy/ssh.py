"""One ssh connection to the board (ControlMaster), reused by every step of a deploy."""

from __future__ import annotations

import contextlib
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from deploy import PROJECT, DeployError

BOARD_SCRIPT = PROJECT / "deploy" / "board.sh"


class Ssh:
    """One master connection to the board; every command and forward goes through it. The
    destination always follows `--`: whatever it is, ssh never reads it as an option."""

    def __init__(self, host: str, port: int, config: Path | None) -> None:
        self.host, self.port, self.config = host, port, config
        self._dir = Path(tempfile.mkdtemp(prefix="ftd-"))  # ControlPath must be short
        self.control = self._dir / "ctl"
        self.sudo: list[str] = []

    def _base(self) -> list[str]:
        cmd = ["ssh"]
        if self.config is not None:
            cmd += ["-F", str(self.config)]
        return [*cmd, "-p", str(self.port), "-o", f"ControlPath={self.control}"]

    def _remote(self, command: Sequence[str]) -> list[str]:
        """ssh's argv for `command` on the board (quoted for the remote shell, under sudo)."""
        remote = " ".join(shlex.quote(c) for c in [*self.sudo, *command])
        return [*self._base(), "-o", "ControlMaster=no", "--", self.host, remote]

    def open(self) -> None:
        # -f after authentication: a password or key prompt still works on a terminal.
        cmd = [*self._base(), "-o", "ControlMaster=yes", "-o", "ControlPersist=600"]
        cmd += ["-o", "ConnectTimeout=15", "-o", "ServerAliveInterval=10", "-f", "-N"]
        cmd += ["--", self.host]
        done = subprocess.run(cmd, stdin=None, capture_output=False, check=False)
        if done.returncode != 0:
            raise DeployError(
                f"ssh {self.host} -p {self.port} failed (exit {done.returncode}); a new board? "
                f"ssh to it once by hand to check and accept its host key"
            )

    def run(
        self, command: Sequence[str], *, stdin: bytes | None = None, check: str | None = None
    ) -> subprocess.CompletedProcess[bytes]:
        """A command on the board (argv, quoted for the remote shell). With `check`, a
        failure raises DeployError(check) and the command's stderr is shown."""
        done = subprocess.run(
            self._remote(command),
            input=stdin,
            stdout=subprocess.PIPE,
            stderr=None,  # the board's messages go straight to the user
            check=False,
        )
        if check is not None and done.returncode != 0:
            raise DeployError(check)
        return done

    def board_script(self, *args: str, check: str) -> str:
        """deploy/board.sh COMMAND ARGS on the board (read from stdin: nothing to copy first)."""
        done = self.run(["sh", "-s", "--", *args], stdin=BOARD_SCRIPT.read_bytes(), check=check)
        out = done.stdout.decode(errors="replace")
        for line in out.splitlines():
            if not line.startswith("result "):
                print(f"  {line}", flush=True)
        return out

    def stream(self, command: Sequence[str]) -> subprocess.Popen[bytes]:
        return subprocess.Popen(self._remote(command), stdin=subprocess.PIPE)

    @contextlib.contextmanager
    def forward(self, addr: str, port: int) -> Iterator[Path]:
        """A local Unix socket reaching addr:port on the board through the connection."""
        sock = self._dir / "http"
        spec = f"{sock}:{addr}:{port}"
        cmd = [*self._base(), "-O", "forward", "-L", spec, "--", self.host]
        if subprocess.run(cmd, capture_output=True, check=False).returncode != 0:
            raise DeployError(f"ssh could not forward to {addr}:{port} on the board")
        try:
            yield sock
        finally:
            cancel = [*self._base(), "-O", "cancel", "-L", spec, "--", self.host]
            subprocess.run(cancel, capture_output=True, check=False)
            sock.unlink(missing_ok=True)

    def close(self) -> None:
        subprocess.run(
            [*self._base(), "-O", "exit", "--", self.host], capture_output=True, check=False
        )
        shutil.rmtree(self._dir, ignore_errors=True)
