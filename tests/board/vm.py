"""One board VM: QEMU (TCG) booting the cached image, with the guest's ssh forwarded to a port
on 127.0.0.1 only. Each run boots a sparse copy of the cached image in its run folder (a few
seconds; removed when the VM powers off), so the cached image stays clean and a power cut
(BoardVM.cut_power, then start again) finds on the disk what the guest had made durable.

`python tests/board/vm.py` boots it and waits, printing the ssh command: for poking at a board
by hand (Ctrl-C powers it off).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import image  # the sibling module

# The field's sizes (board-vm.md): 512 MB, a Pi Zero 2 W, with OCR and the unit's memory limits
# in force; `make board-test-small` boots with 256 MB, a board without OCR.
MEMORY_MB = int(os.environ.get("BOARD_VM_MEMORY_MB", "512"))
BOOT_TIMEOUT_S = 300.0  # ~35 s seen; TCG on a busy shared machine can be several times slower
IDLE_BOOT_S = 35.0  # boot to ssh on an idle machine: the yardstick of BoardVM.slowness


def _die_with_parent() -> None:
    """(in the child, before exec) QEMU is killed when the process that started it dies, so
    an interrupted test run never leaves a VM behind."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def qemu_command(
    img: image.Image, port: int, console: Path, memory_mb: int, disk: Path
) -> list[str]:
    """`disk` is the run's copy of the image. Not snapshot=on: its overlay goes with a killed
    QEMU, and a boot after a power cut must find what the guest wrote. QEMU's default cache
    (writeback, flushes passed through) loses at a kill what the guest had not flushed."""
    return [
        "qemu-system-x86_64",
        "-accel", "tcg", "-cpu", image.kernel_tier.GUEST_CPU, "-m", str(memory_mb), "-smp", "1",
        "-display", "none", "-no-reboot",
        "-serial", f"file:{console}",
        "-kernel", str(img.kernel), "-initrd", str(img.initrd),
        "-append", f"root=/dev/vda rw {image.kernel_tier.GUEST_CMDLINE}",
        "-drive", f"file={disk},if=virtio,format=raw",
        "-nic", f"user,model=virtio-net-pci,hostfwd=tcp:127.0.0.1:{port}-:22",
        "-device", "virtio-rng-pci",
    ]  # fmt: skip


class BoardVM:
    """A running guest and an ssh master connection to it."""

    def __init__(self, img: image.Image, workdir: Path, disk: Path) -> None:
        self.img = img
        self.disk = disk
        self.workdir = workdir
        self.port = free_port()
        self.console = workdir / "console.log"
        self.ssh_config = workdir / "ssh_config"
        # ssh's ControlPath must stay short (a Unix socket path): keep it out of workdir.
        self._ctl_dir = Path(tempfile.mkdtemp(prefix="ftb-"))
        self.ssh_config.write_text(self._ssh_config_text())
        self.proc: subprocess.Popen[bytes] | None = None
        self.boot_s = 0.0
        self.first_boot_s = 0.0  # the run's first boot (the later ones follow power cuts)
        self.cuts = 0
        self.down = False  # powered off or cut: a helper's dropped ssh is no network fault
        self.memory_mb = MEMORY_MB

    @property
    def slowness(self) -> float:
        """How much slower than on an idle machine this VM first booted (>= 1): the board tests
        scale their waits' limits by it (limits only bound failures). A boot after a power cut
        replays the journal and checks the recorder's file: not the yardstick."""
        return max(1.0, self.first_boot_s / IDLE_BOOT_S)

    def _ssh_config_text(self) -> str:
        # What a user's ~/.ssh/config would say for a board; the host key is checked against
        # the one recorded when the image was built (HostKeyAlias), never blindly accepted.
        return "\n".join(
            [
                "Host *",
                "  HostName 127.0.0.1",
                f"  Port {self.port}",
                "  User root",
                f"  IdentityFile {self.img.key}",
                "  IdentitiesOnly yes",
                f"  HostKeyAlias {image.HOST_ALIAS}",
                f"  UserKnownHostsFile {self.img.known_hosts}",
                "  StrictHostKeyChecking yes",
                "  BatchMode yes",
                "  ConnectTimeout 10",
                "  ServerAliveInterval 5",
                # A VM stalled by a busy host answers late, not never: two minutes of silence
                # before ssh gives up on a connection.
                "  ServerAliveCountMax 24",
                "  LogLevel ERROR",
                "",
            ]
        )

    @property
    def host(self) -> str:
        return "root@127.0.0.1"

    def ssh_base(self, shared: bool = True) -> list[str]:
        """ssh to the guest over the shared master connection, or (shared=False) over a
        connection of its own, which a dropped master cannot take down with it."""
        if not shared:
            return ["ssh", "-F", str(self.ssh_config), "-o", "ControlPath=none"]
        return [
            "ssh", "-F", str(self.ssh_config),
            "-o", "ControlMaster=auto", "-o", f"ControlPath={self._ctl_dir}/%C",
            "-o", "ControlPersist=600",
        ]  # fmt: skip

    def start(self) -> None:
        start = time.monotonic()
        self.down = False
        self.proc = subprocess.Popen(
            qemu_command(self.img, self.port, self.console, self.memory_mb, self.disk),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=(self.workdir / "qemu.stderr").open("wb"),
            preexec_fn=_die_with_parent,
        )
        # A boot after a power cut also starts the deployed daemon: its limit scales as the
        # tests' waits do (the first boot's never can: it measures the slowness).
        limit = BOOT_TIMEOUT_S * self.slowness
        deadline = start + limit
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"QEMU exited ({self.proc.returncode}); see {self.console}")
            probe = subprocess.run(
                [*self.ssh_base(), self.host, "systemctl is-system-running --wait"],
                capture_output=True,
                text=True,
                timeout=limit,
                check=False,
            )
            state = probe.stdout.strip()
            if state in ("running", "degraded"):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"no ssh within {limit:.0f} s; see {self.console}")
            time.sleep(2)
        self.boot_s = time.monotonic() - start
        self.first_boot_s = self.first_boot_s or self.boot_s
        if state != "running":
            failed = self.run("systemctl --failed --no-legend", check=False).stdout
            raise RuntimeError(f"the guest booted {state}: failed units:\n{failed}")

    def run(
        self,
        command: str,
        *,
        check: bool = True,
        timeout: float = 120.0,
        input: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """One shell command in the guest (as root)."""
        done = subprocess.run(
            [*self.ssh_base(), self.host, command],
            capture_output=True,
            text=True,
            input=input,
            timeout=timeout,
            check=False,
        )
        if check and done.returncode != 0:
            raise AssertionError(
                f"guest: {command!r} -> {done.returncode}\n{done.stdout}{done.stderr}"
            )
        return done

    def popen(self, command: str) -> subprocess.Popen[str]:
        """A long-running guest command whose stdout the caller reads line by line."""
        return subprocess.Popen(
            [*self.ssh_base(), self.host, command],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            bufsize=1,
        )

    def put(self, local: Path, remote: str, mode: str = "0644") -> None:
        data = local.read_text()
        self.run(f"cat > {shlex.quote(remote)} && chmod {mode} {shlex.quote(remote)}", input=data)

    def cut_power(self) -> float:
        """Kill QEMU at once (SIGKILL: no shutdown, the guest's page cache lost, as when the
        power goes); the host's monotonic time of the cut. The console log so far is kept
        (console-cut-N.log): the next start() writes a new one."""
        assert self.proc is not None
        self.down = True
        self.proc.kill()
        at = time.monotonic()
        self.proc.wait()
        self.cuts += 1
        self.console.rename(self.workdir / f"console-cut-{self.cuts}.log")
        self.close_ssh_master()
        return at

    def close_ssh_master(self) -> None:
        """The ssh connection every step shares: closed with the board it went to."""
        with contextlib.suppress(subprocess.TimeoutExpired, OSError):
            subprocess.run(
                [*self.ssh_base(), "-O", "exit", self.host],
                capture_output=True,
                timeout=10,
                check=False,
            )

    def stop(self) -> None:
        """Power off cleanly (a few seconds), else kill; never leave QEMU behind."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            with contextlib.suppress(subprocess.TimeoutExpired, OSError):
                subprocess.run(
                    [*self.ssh_base(), self.host, "systemctl poweroff"],
                    capture_output=True,
                    timeout=20,
                    check=False,
                )
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.close_ssh_master()
        shutil.rmtree(self._ctl_dir, ignore_errors=True)


@contextlib.contextmanager
def running(img: image.Image, workdir: Path) -> Iterator[BoardVM]:
    """A VM on a copy of the image in `workdir` (sparse: ~3 s for its ~0.8 GB of data)."""
    disk = workdir / "disk.raw"
    subprocess.run(["cp", "--sparse=always", str(img.disk), str(disk)], check=True)
    vm = BoardVM(img, workdir, disk)
    try:
        vm.start()
        yield vm
    finally:
        vm.stop()
        disk.unlink(missing_ok=True)


def main(argv: Sequence[str]) -> int:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # power off on the way out
    img = image.ensure()
    workdir = Path(tempfile.mkdtemp(prefix="fingertip-board-"))
    with running(img, workdir) as vm:
        print(f"board VM up after {vm.boot_s:.0f} s; console log {vm.console}")
        print(f"ssh -F {vm.ssh_config} board   |   make deploy HOST=root@127.0.0.1 PORT={vm.port}")
        print(f"(ssh config for deploy: SSH_CONFIG={vm.ssh_config}); Ctrl-C powers it off")
        with contextlib.suppress(KeyboardInterrupt):
            while vm.proc is not None and vm.proc.poll() is None:
                time.sleep(1)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main(sys.argv[1:]))
