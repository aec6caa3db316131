"""Board VM runner: `make board-test`, the last step of `make test`.

Builds (or finds) the cached image, then runs tests/board with pytest: one QEMU boot, `make
deploy` onto it, the checks of issue 9, then a power cut and a boot of the same disk (issue 46;
BOARD_POWER_CUTS of them). Where the tier cannot run (not root, no apt, not x86_64 Linux) it
prints one loud SKIPPED line, or fails under CI=true, as the kernel tier does. Prints the
deploy transcript, the sandbox's exposure score, the power cuts' lines and the wall time; keeps
the run's console logs, journal, transcripts and events in test-artifacts/board/run-*/.
Extra arguments go to pytest (BOARD_TEST_ARGS through make, e.g. "-x" or "-k 'ecm'").
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import image  # noqa: E402 (sibling modules)
from conftest import ARTIFACTS, PROJECT, kernel_run  # noqa: E402

# A bound on the whole tier, so CI's run ends: about 15 min idle, 25 min seen with the machine
# oversubscribed five times over (the waits inside scale with the VM's measured slowness).
TIMEOUT_S = float(os.environ.get("BOARD_TEST_TIMEOUT", "2700"))


def main(argv: list[str]) -> int:
    start = time.monotonic()
    try:
        image.ensure()  # a first build prints its steps here, outside pytest's capture
    except image.CannotRun as e:
        return image.skip_or_fail(str(e))
    run = kernel_run.new_run_folder(ARTIFACTS)
    junit = run / "junit.xml"
    args = argv or shlex.split(os.environ.get("BOARD_TEST_ARGS", ""))
    code = pytest_run(run, junit, [str(HERE), *args])
    if (run / "power-cuts.txt").exists():  # one line a cut (tests/board/power_cut.py)
        print((run / "power-cuts.txt").read_text(), end="")
    transcripts = {
        "deploy.log": "the first deploy",
        "deploy-again.log": "the same deploy again (idempotent)",
        "deploy-bad-config.log": "a deploy with a broken config on the board: must stop",
        "undeploy.log": "undeploy",
    }
    for name, what in transcripts.items():
        if (run / name).exists():
            print(f"--- {name} ({what})\n{(run / name).read_text()}", end="")
    metrics = kernel_run.read_junit(junit).metrics if junit.exists() else []
    for _test, name, value in metrics:
        print(f"board VM measurement: {name} = {value}")
    if (run / "phone-link.log").exists():  # see guest/phone-link.sh: watch_carrier
        rebinds = (run / "phone-link.log").read_text().count("rebinding cdc_ether")
        print(f"board VM measurement: phone driver rebinds for a lost carrier = {rebinds}")
    if (run / "ssh-reconnects.txt").exists():  # see conftest.GuestStream
        lines = (run / "ssh-reconnects.txt").read_text().split()
        total = sum(int(n) for n in lines[1::2])
        print(f"board VM measurement: guest helper streams reconnected after an ssh drop = {total}")
    wall = time.monotonic() - start
    print(f"board VM artifacts: {run.relative_to(PROJECT)}")
    print(f"board VM wall time: {wall:.0f} s (image check, boot, deploy, checks, power off)")
    return code


def pytest_run(run: Path, junit: Path, args: list[str]) -> int:
    cmd = [
        sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider",
        "-o", "junit_family=xunit1", f"--junitxml={junit}", "--durations=6", *args,
    ]  # fmt: skip
    print(f"board VM: {' '.join(cmd[2:])}", flush=True)
    proc = subprocess.Popen(cmd, cwd=PROJECT, env={**os.environ, "FINGERTIP_BOARD_RUN": str(run)})
    # A SIGTERM from CI: pytest (conftest) turns it into an interrupt and tears the VM down.
    signal.signal(signal.SIGTERM, lambda *_: proc.send_signal(signal.SIGTERM))
    try:
        return proc.wait(TIMEOUT_S)
    except subprocess.TimeoutExpired:
        print(f"board VM: stopped after {TIMEOUT_S:.0f} s", flush=True)
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()  # QEMU dies with it (PR_SET_PDEATHSIG)
            proc.wait()
        return 1
    except KeyboardInterrupt:
        proc.wait()
        return 130


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
