"""The board VM session: one boot of the cached image (image.py) under QEMU for every check in
test_board_vm.py, with the guest's helpers running: the phone's end of the USB network link
(guest/phone-link.sh) and a recorder of every input event the guest's USB host side makes of
our gadget (guest/recorder.py). Run by `make board-test` (run.py), which builds the image
first; `pytest tests/board` alone works too when the image is there.

Each run keeps the guest's console log, journal, the deploy transcript and the recorder's
events in test-artifacts/board/run-*/.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import image  # noqa: E402 (the sibling modules, not packages)
import vm as board_vm  # noqa: E402

PROJECT = HERE.parents[1]
ARTIFACTS = PROJECT / "test-artifacts" / "board"


kernel_run = image.kernel_script("run")  # its run folders and junit reader serve here too


class GuestStream:
    """A long-running guest helper and the lines it prints, as tests wait on them.

    The helper runs inside the guest as a systemd unit of its own (at real-time priority where
    asked), printing to a file in the guest; the host follows that file over a dedicated ssh
    connection (`tail -F`) and, should that connection drop (a stalled VM misses ssh's
    keepalives), reconnects and goes on from the next line it had not seen. So neither the
    helper nor what it printed depends on an ssh session staying up. Reconnections are
    counted (the run prints them). Tests wait for a line that satisfies a predicate, driven by
    the lines arriving, with a deadline; a failure shows the last lines and the unit's state.
    """

    def __init__(
        self, board: board_vm.BoardVM, name: str, command: str, log: Path, parse: bool,
        realtime: bool = False,
    ) -> None:  # fmt: skip
        self.board, self.unit = board, f"fingertip-test-{name}"
        self.out = f"/run/{self.unit}.out"
        self.lines: list[Any] = []
        self.reconnects = 0
        self._count = 0  # complete lines read so far (the resume point)
        self._cond = threading.Condition()
        self._closing = False
        self._log = log.open("w")
        self._reconnects_file = log.parent / "ssh-reconnects.txt"  # run.py prints the count
        self._parse = parse
        props = ["CPUSchedulingPolicy=fifo", "CPUSchedulingPriority=50"] if realtime else []
        self._start_unit = (
            f"systemd-run --unit={self.unit} --quiet "
            + "".join(f"--property={p} " for p in props)
            + f"--property=StandardOutput=truncate:{self.out} "
            f"--property=StandardError=file:/run/{self.unit}.err "
            f"/bin/sh -c {shlex.quote(command)}"
        )
        self._launch()

    def _launch(self) -> None:
        self.board.run(self._start_unit)
        self._proc = self._follow()
        self._thread = threading.Thread(target=self._pump, daemon=True)
        self._thread.start()

    def restart(self) -> None:
        """After the board booted again (a power cut): the helper's unit and its output in /run
        went with the old boot. It starts again and is followed from its new output's first
        line; the lines seen so far stay (marks taken before remain valid)."""
        self._closing = True
        if self._proc.poll() is None:
            self._proc.terminate()
        self._thread.join(30)
        assert not self._thread.is_alive(), f"{self.unit}: the old follower did not stop"
        self._closing = False
        self._count = 0
        self._launch()

    def _follow(self) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [*self.board.ssh_base(shared=False), self.board.host,
             f"tail -n +{self._count + 1} -F {self.out} 2>/dev/null"],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            text=True, bufsize=1,
        )  # fmt: skip

    def _pump(self) -> None:
        while True:
            assert self._proc.stdout is not None
            for raw in self._proc.stdout:
                if not raw.endswith("\n"):  # cut mid-line: read it again after reconnecting
                    break
                self._log.write(raw)
                self._log.flush()
                line: Any = raw.rstrip("\n")
                if self._parse:
                    try:
                        line = json.loads(line)
                    except ValueError:
                        line = {"unparsed": line}
                with self._cond:
                    self._count += 1
                    self.lines.append(line)
                    self._cond.notify_all()
            self._proc.wait()
            # (poll() answers None while another thread waits on QEMU: hence `down` too)
            board = self.board
            if self._closing or board.down or board.proc is None or board.proc.poll() is not None:
                break
            with self._cond:
                self.reconnects += 1
            time.sleep(1)  # a retry's pause: the VM may be busy or its sshd restarting
            if self._closing:
                break
            self._proc = self._follow()
        with self._cond:
            self._cond.notify_all()

    def mark(self) -> int:
        """The position from which a later wait looks."""
        with self._cond:
            return len(self.lines)

    def state(self) -> str:
        """The helper unit's state and its stderr tail, for failure messages."""
        done = self.board.run(
            f"systemctl show -p ActiveState,SubState,ExecMainStatus --value {self.unit} | "
            f"paste -sd' '; tail -n 5 /run/{self.unit}.err",
            check=False,
            timeout=30,
        )
        return (done.stdout + done.stderr).strip()

    def wait_for(
        self, check: Callable[[list[Any]], Any], what: str, timeout: float, since: int = 0
    ) -> Any:
        """Re-run `check` on the lines since `since` whenever one arrives; its first truthy
        result is returned."""
        timeout *= self.board.slowness
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                result = check(self.lines[since:])
                if result:
                    return result
                left = deadline - time.monotonic()
                if left <= 0 or not self._thread.is_alive():
                    tail = self.lines[since:][-15:]
                    break
                self._cond.wait(min(left, 1.0))
        raise AssertionError(
            f"timed out after {timeout:.0f} s waiting for {what}; last lines: {tail}; "
            f"{self.unit}: {self.state()}; ssh reconnects: {self.reconnects}"
        )

    def close(self) -> None:
        self._closing = True
        self.board.run(f"systemctl stop {self.unit}", check=False, timeout=30)
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._thread.join(5)
        self._log.close()
        with self._reconnects_file.open("a") as f:
            f.write(f"{self.unit} {self.reconnects}\n")


def _interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # pytest then tears the session down: the VM powers off


def pytest_configure(config: pytest.Config) -> None:
    signal.signal(signal.SIGTERM, _interrupted)  # a CI job cancelled, run.py's time limit


@pytest.fixture(scope="session")
def workdir() -> Path:
    given = os.environ.get("FINGERTIP_BOARD_RUN")  # run.py names the folder it reports on
    return Path(given) if given else kernel_run.new_run_folder(ARTIFACTS)


@pytest.fixture(scope="session")
def board(workdir: Path) -> Iterator[board_vm.BoardVM]:
    try:
        img = image.ensure()
    except image.CannotRun as e:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"the board VM cannot run here (CI=true requires it): {e}")
        pytest.skip(f"the board VM cannot run here: {e}")
    with board_vm.running(img, workdir) as vm:
        print(
            f"\nboard VM: ssh up after {vm.boot_s:.0f} s (port {vm.port}); "
            f"slowness {vm.slowness:.2f} (every wait's limit is scaled by it)",
            flush=True,
        )
        for name in ("phone-link.sh", "phone.py", "recorder.py", "kill-on.py", "memory.py"):
            vm.put(HERE / "guest" / name, f"/root/{name}", "0755")
        # The ECM function's debug lines (its notifications) in the journal, for when the
        # link fails; the modules load when the gadget first comes up, hence module options.
        vm.run(
            "printf 'options usb_f_ecm dyndbg=+p\\noptions u_ether dyndbg=+p\\n' "
            "> /etc/modprobe.d/fingertip-board-test.conf"
        )
        # The daemon's start costs about a minute of the guest's CPU under TCG: 37 s of wall
        # time in a quiet VM, over the unit's 120 s start limit (meant for a board) in a loaded
        # one, where systemd then gave up restarting it after a SIGKILL. Only the limit widens.
        vm.run(
            "mkdir -p /etc/systemd/system/fingertip.service.d && printf '[Service]\\n"
            "TimeoutStartSec=600\\n' > /etc/systemd/system/fingertip.service.d/board-vm.conf"
        )
        try:
            yield vm
        finally:
            # Every boot's the guest kept (a power cut boots again; the cut test keeps its own).
            journal = vm.run("journalctl --no-pager -o short-monotonic", check=False)
            (workdir / "journal.txt").write_text(journal.stdout)


@pytest.fixture(scope="session")
def recorder(board: board_vm.BoardVM, workdir: Path) -> Iterator[GuestStream]:
    """Every input event of our gadget's devices, as the guest's host side sees them."""
    stream = GuestStream(
        board,
        "recorder",
        "exec python3 -u /root/recorder.py watch",
        workdir / "recorder.jsonl",
        parse=True,
        realtime=True,  # a busy daemon must not starve the target's reading
    )
    stream.wait_for(lambda lines: any(x.get("ready") for x in lines), "the recorder", 60)
    yield stream
    stream.close()


@pytest.fixture(scope="session")
def phone_link(board: board_vm.BoardVM, workdir: Path) -> Iterator[GuestStream]:
    """The phone's end of the USB network link, adopted whenever it (re)appears."""
    stream = GuestStream(
        board, "phone-link", "exec /root/phone-link.sh", workdir / "phone-link.log", parse=False
    )
    stream.wait_for(
        lambda lines: any(x.startswith("phone-link: ready") for x in lines),
        "the phone's link keeper",
        60,
    )
    yield stream
    stream.close()
