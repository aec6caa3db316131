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
    """A long-running guest command whose stdout lines are collected by a thread; tests wait
    for a line that satisfies a predicate (driven by the lines arriving, with a deadline)."""

    def __init__(self, proc: subprocess.Popen[str], log: Path, parse: bool) -> None:
        self.proc = proc
        self.lines: list[Any] = []
        self._cond = threading.Condition()
        self._log = log.open("w")
        self._parse = parse
        self._thread = threading.Thread(target=self._pump, daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            self._log.write(raw)
            self._log.flush()
            line: Any = raw.rstrip("\n")
            if self._parse:
                try:
                    line = json.loads(line)
                except ValueError:
                    continue
            with self._cond:
                self.lines.append(line)
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def mark(self) -> int:
        """The position from which a later wait looks."""
        with self._cond:
            return len(self.lines)

    def wait_for(
        self, check: Callable[[list[Any]], Any], what: str, timeout: float, since: int = 0
    ) -> Any:
        """Re-run `check` on the lines since `since` whenever one arrives; its first truthy
        result is returned."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                result = check(self.lines[since:])
                if result:
                    return result
                left = deadline - time.monotonic()
                if left <= 0 or (self.proc.poll() is not None and not self._thread.is_alive()):
                    tail = self.lines[since:][-15:]
                    raise AssertionError(
                        f"timed out after {timeout:.0f} s waiting for {what}; last lines: {tail}"
                    )
                self._cond.wait(min(left, 1.0))

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._thread.join(5)
        self._log.close()


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
        print(f"\nboard VM: ssh up after {vm.boot_s:.0f} s (port {vm.port})", flush=True)
        for name in ("phone-link.sh", "phone.py", "recorder.py"):
            vm.put(HERE / "guest" / name, f"/root/{name}", "0755")
        # The ECM function's debug lines (its notifications) in the journal, for when the
        # link fails; the modules load when the gadget first comes up, hence module options.
        vm.run(
            "printf 'options usb_f_ecm dyndbg=+p\\noptions u_ether dyndbg=+p\\n' "
            "> /etc/modprobe.d/fingertip-board-test.conf"
        )
        try:
            yield vm
        finally:
            journal = vm.run("journalctl -b --no-pager -o short-monotonic", check=False)
            (workdir / "journal.txt").write_text(journal.stdout)


@pytest.fixture(scope="session")
def recorder(board: board_vm.BoardVM, workdir: Path) -> Iterator[GuestStream]:
    """Every input event of our gadget's devices, as the guest's host side sees them."""
    stream = GuestStream(
        board.popen("exec python3 -u /root/recorder.py watch"), workdir / "recorder.jsonl", True
    )
    stream.wait_for(lambda lines: any(x.get("ready") for x in lines), "the recorder", 60)
    yield stream
    stream.close()


@pytest.fixture(scope="session")
def phone_link(board: board_vm.BoardVM, workdir: Path) -> Iterator[GuestStream]:
    """The phone's end of the USB network link, adopted whenever it (re)appears."""
    stream = GuestStream(board.popen("exec /root/phone-link.sh"), workdir / "phone-link.log", False)
    stream.wait_for(
        lambda lines: any(x.startswith("phone-link: ready") for x in lines),
        "the phone's link keeper",
        60,
    )
    yield stream
    stream.close()
