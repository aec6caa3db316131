"""`make test`: the tiers, the emulated ones running beside the others.

The board VM (tests/board: one QEMU core under TCG, about 10 min idle) starts first; the
arm64 tier (tests/arm64: the daemon on an emulated aarch64, about 2 min with its root cached,
10 the first time) and the desktop tier (tests/desktop: X.Org driven through the gadget, about
10 min) follow it on the same line: one emulator at a time. The service tier
(pytest, about 9 min), the kernel tier (about 3 min) and then the memory benchmark run beside
them, so the suite takes about as long as the longer of the two lines instead of the sum of
all, on two cores. The service and kernel tiers print as they go. The board VM's and the arm64
tier's and the desktop tier's output go to test-artifacts/board-test.log, arm64-test.log and
desktop-test.log while they run and are
printed whole when the suite ends. Every tier runs even when an earlier one failed, so one run
reports every tier. The last lines give each tier's result and wall time. The exit status is 0
only when all passed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

PROJECT = Path(__file__).resolve().parents[1]
BOARD_LOG = PROJECT / "test-artifacts" / "board-test.log"
ARM64_LOG = PROJECT / "test-artifacts" / "arm64-test.log"
DESKTOP_LOG = PROJECT / "test-artifacts" / "desktop-test.log"


@dataclass
class Tier:
    name: str
    command: list[str]
    proc: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    wall_s: float = 0.0
    code: int | None = None

    def start(self, out: IO[bytes] | None = None) -> None:
        if STOPPING:
            return
        print(f"== {self.name}: {' '.join(self.command[1:])}", flush=True)
        self.started = time.monotonic()
        self.proc = subprocess.Popen(self.command, cwd=PROJECT, stdout=out, stderr=out)
        if STOPPING:  # stop_all ran while this one was starting (the background line)
            self.stop()

    def wait(self) -> int | None:
        if self.proc is None:
            return None
        self.code = self.proc.wait()
        self.wall_s = time.monotonic() - self.started
        return self.code

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # each runner tears its VM down on SIGTERM


STOPPING: list[bool] = []  # set by SIGTERM: no tier starts after it


def stop_all(tiers: list[Tier]) -> None:
    STOPPING.append(True)
    for t in tiers:
        t.stop()


def summary(tiers: list[Tier], wall_s: float) -> str:
    lines = ["== make test"]
    for t in tiers:
        result = "not run" if t.code is None else "passed" if t.code == 0 else f"FAILED ({t.code})"
        lines.append(f"  {t.name:<12} {result:<12} {t.wall_s:6.0f} s")
    lines.append(f"  {'whole run':<25} {wall_s:6.0f} s")
    return "\n".join(lines)


def main() -> int:
    python = sys.executable
    board = Tier("board VM", [python, "tests/board/run.py"])
    arm64 = Tier("arm64", [python, "tests/arm64/run.py"])
    # The slowest service tests are listed on every run: they are where the suite's time goes.
    service = Tier("service", [python, "-m", "pytest", "-q", "--durations=15"])
    kernel = Tier("kernel", [python, "tests/kernel/run.py"])
    # The small-board memory figures against their budgets, and CPU per operation: printed
    # (bench_memory.py), failing only if it cannot run.
    memory = Tier("memory bench", [python, "tests/bench/bench_memory.py"])
    desktop = Tier("desktop", [python, "tests/desktop/run.py"])
    tiers = [service, kernel, memory, desktop, board, arm64]
    start = time.monotonic()
    # SIGTERM from CI: stop every tier (each tears its own VM down), then report as usual.
    signal.signal(signal.SIGTERM, lambda *_: stop_all(tiers))
    BOARD_LOG.parent.mkdir(exist_ok=True)
    try:
        with (
            BOARD_LOG.open("wb") as board_log,
            ARM64_LOG.open("wb") as arm64_log,
            DESKTOP_LOG.open("wb") as desktop_log,
        ):

            def emulated() -> None:  # the background line: one emulator at a time
                board.start(board_log)
                board.wait()
                arm64.start(arm64_log)
                arm64.wait()
                desktop.start(desktop_log)
                desktop.wait()

            background = threading.Thread(target=emulated, daemon=True)
            background.start()
            logs = (BOARD_LOG, ARM64_LOG, DESKTOP_LOG)
            shown = ", ".join(str(p.relative_to(PROJECT)) for p in logs)
            print(
                f"   in the background, then the arm64 and desktop tiers; output in {shown}",
                flush=True,
            )
            service.start()
            service.wait()
            kernel.start()
            kernel.wait()
            memory.start()
            memory.wait()
            print("== waiting for the board VM, the arm64 and the desktop tiers", flush=True)
            background.join()
    except KeyboardInterrupt:
        stop_all(tiers)
        for t in tiers:
            t.wait()
    for name, log in (("board VM", BOARD_LOG), ("arm64", ARM64_LOG), ("desktop", DESKTOP_LOG)):
        print(f"== {name} output\n{log.read_text(errors='replace')}", end="", flush=True)
    print(summary(tiers, time.monotonic() - start), flush=True)
    return 0 if all(t.code == 0 for t in tiers) else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")  # children's lines in order with ours
    sys.exit(main())
