"""Kernel-tier runner: one QEMU boot that runs tests/kernel/guest with the project's venv.

`python tests/kernel/run.py [PYTEST_ARGS...]` (make kernel-test; KERNEL_TEST_ARGS passes the
arguments through make). The guest console streams here with a `guest| ` prefix. The guest's
result comes back through a writable 9p work folder, one run-* folder per run under
test-artifacts/kernel/ (exit code, junit xml, console log), and becomes this process's exit
status, with a list of what failed and the numbers the guest tests recorded. A guest that does
not finish in time is killed: a failure.
"""

from __future__ import annotations

import compileall
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import setup  # the sibling setup script, not setuptools

PROJECT = Path(__file__).resolve().parents[2]
ARTIFACTS = PROJECT / "test-artifacts" / "kernel"
KEEP_RUNS = 5
# Bounds a hung guest only: a run that takes about 100 s idle took 240 s with other work
# running, so 600 s left too little room for a busier machine.
TIMEOUT_S = float(os.environ.get("KERNEL_TEST_TIMEOUT", "1200"))
# SeaBIOS and the kernel clear the screen; keep the log plain text.
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1bc")


@dataclass(frozen=True)
class Guest:
    """What a VM tier boots: its guest test folder (the kernel tier's, or the desktop tier's
    that reuses this VM), its size, and the name its summary lines carry."""

    tests: str = "tests/kernel/guest"
    smp: int = 1
    memory_mb: int = 1024
    tier: str = "kernel"
    pytest_args: tuple[str, ...] = ()  # before the caller's


KERNEL = Guest()


def qemu_command(art: setup.Artifacts, work: Path, guest: Guest = KERNEL) -> list[str]:
    ninep = "security_model=none,multidevs=remap"
    return [
        "qemu-system-x86_64",
        "-accel", "tcg",
        "-cpu", setup.GUEST_CPU,
        "-smp", str(guest.smp),
        "-m", str(guest.memory_mb),
        "-nographic", "-no-reboot", "-nic", "none",
        "-kernel", str(art.kernel),
        "-initrd", str(art.initrd),
        "-append", f"{setup.GUEST_CMDLINE} loglevel=4 fingertip.project={PROJECT} "
        f"fingertip.kernel_root={art.kernel.parent.parent} fingertip.tests={guest.tests}",
        "-virtfs", f"local,path=/,mount_tag=hostroot,readonly=on,{ninep}",
        "-virtfs", f"local,path={work},mount_tag=work,{ninep}",
        # The project and the unpacked kernel on shares of their own, mounted at their own
        # paths inside the guest: the guest's tmpfs on /tmp would hide a clone or a cache
        # (HOME) that lives under /tmp, as CI's may.
        "-virtfs", f"local,path={PROJECT},mount_tag=project,readonly=on,{ninep}",
        "-virtfs", f"local,path={art.kernel.parent.parent},mount_tag=kernel,readonly=on,{ninep}",
    ]  # fmt: skip


@dataclass
class Outcome:
    passed: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)  # (test id, why)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    metrics: list[tuple[str, str, str]] = field(default_factory=list)  # (test, name, value)
    # Failed tests whose cause was the target-side rig (usbhost.HarnessFault), not the product.
    harness_faults: list[str] = field(default_factory=list)


def read_junit(path: Path) -> Outcome:
    """Per test id: failed if any of its entries failed or errored (a teardown error is its own
    entry), else skipped or passed."""
    out = Outcome()
    seen: dict[str, str] = {}  # test id -> "passed" | "skipped" | "failed"
    root = ET.parse(path).getroot()
    for suite in root.iter("testsuite"):  # session-wide figures (the VM's measured slowness)
        for prop in suite.findall("properties/property"):
            out.metrics.append(("session", prop.get("name", ""), prop.get("value", "")))
    for case in root.iter("testcase"):
        test = f"{case.get('classname', '')}::{case.get('name', '')}"
        for prop in case.iter("property"):
            out.metrics.append((test, prop.get("name", ""), prop.get("value", "")))
        bad = case.find("failure")
        if bad is None:
            bad = case.find("error")
        skip = case.find("skipped")
        if bad is not None:
            text = (bad.text or bad.get("message") or "").strip().splitlines()
            out.failed.append((test, "\n".join(text[-15:])))
            # The exception's own line ("usbhost.HarnessFault: ..."), not the traceback text,
            # which quotes read_until's source, HarnessFault included, for any failed read.
            if "HarnessFault:" in str(bad.get("message")):
                out.harness_faults.append(test)
            seen[test] = "failed"
        elif skip is not None and seen.get(test) != "failed":
            out.skipped.append((test, skip.get("message", "")))
            seen[test] = "skipped"
        else:
            seen.setdefault(test, "passed")
    out.passed = sum(v == "passed" for v in seen.values())
    return out


def new_run_folder(artifacts: Path = ARTIFACTS) -> Path:
    """A folder of its own per run (runs may overlap on a shared machine); old ones pruned.
    The board VM tier (tests/board) keeps its runs the same way."""
    artifacts.mkdir(parents=True, exist_ok=True)
    for old in sorted(artifacts.glob("run-*"))[:-KEEP_RUNS]:
        shutil.rmtree(old, ignore_errors=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return Path(tempfile.mkdtemp(prefix=f"run-{stamp}-", dir=artifacts))


def boot(
    art: setup.Artifacts, work: Path, guest: Guest = KERNEL, timeout_s: float = TIMEOUT_S
) -> tuple[bool, str]:
    """Run the VM, streaming its console; (timed out?, last console line naming a test)."""
    last_test = ""
    cmd = qemu_command(art, work, guest)
    log = work / "console.log"
    with log.open("w") as logf:
        proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        assert proc.stdout is not None
        stdout = proc.stdout

        def pump() -> None:
            nonlocal last_test
            for raw in stdout:
                line = ANSI.sub("", raw.decode(errors="replace")).rstrip("\r\n")
                logf.write(line + "\n")
                print(f"guest| {line}", flush=True)
                if f"{guest.tests}/" in line and "::" in line:
                    last_test = line

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        timed_out = False
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:  # also on Ctrl-C or SIGTERM: never leave a VM behind
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        reader.join(5)
    return timed_out, last_test


def report(outcome: Outcome, wall: float, tier: str = "kernel") -> None:
    if outcome.metrics:
        print(f"{tier} tier measurements:")
        for test, name, value in outcome.metrics:
            print(f"  {name:<34} {value:<14} ({test.rsplit('::', 1)[-1]})")
    for test, why in outcome.skipped:
        print(f"SKIPPED {test}: {why}")
    for test, why in outcome.failed:
        print(f"FAILED {test}\n" + "\n".join(f"    {x}" for x in why.splitlines()))
    # A fault of the target-side rig (usbhost.HarnessFault: the kernel dropped events because
    # the reader fell behind) is still a failure, but named as the harness's, and counted.
    faults = outcome.harness_faults
    print(f"{tier} tier harness faults (target-side reader lost events): {len(faults)}")
    print(f"{tier} tier wall time: {wall:.1f} s (setup, boot and tests)")
    print(f"{tier}: {outcome.passed} passed, {len(outcome.failed)} failed", end="")
    print(f", {len(outcome.skipped)} skipped" if outcome.skipped else "", flush=True)


def precompile() -> None:
    """Byte-compile the project here, where it takes a second: the guest mounts it read-only
    and, without .pyc files (a fresh clone where PYTHONDONTWRITEBYTECODE is set has none),
    compiled every module again in every process under TCG, each CLI run included."""
    for folder in ("gadget", "daemon", "tests"):
        compileall.compile_dir(PROJECT / folder, quiet=1, workers=0)


def main(argv: list[str]) -> int:
    return run_tier(argv, KERNEL, ARTIFACTS, "KERNEL_TEST_ARGS")


def run_tier(
    argv: list[str],
    guest: Guest,
    artifacts: Path,
    args_env: str,
    timeout_s: float = TIMEOUT_S,
    prepare: Callable[[], None] | None = None,
) -> int:
    """One VM tier's run: set-up (plus the tier's own `prepare`), one boot, the report."""
    start = time.monotonic()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the finally that kills QEMU
    try:
        art = setup.ensure()
        if prepare is not None:
            prepare()
    except setup.CannotRun as e:
        return setup.skip_or_fail(str(e), f"{guest.tier.upper()} TIER")
    work = new_run_folder(artifacts)
    precompile()
    args = [*guest.pytest_args, *(argv or shlex.split(os.environ.get(args_env, "")))]
    (work / "pytest-args").write_text("".join(f"{a}\n" for a in args))

    print(
        f"{guest.tier} tier: booting {art.kver} under QEMU (TCG, {guest.smp} vCPU), "
        f"timeout {timeout_s:.0f} s",
        flush=True,
    )
    timed_out, last_test = boot(art, work, guest, timeout_s)
    wall = time.monotonic() - start

    junit, code = work / "junit.xml", work / "exit-code"
    outcome = read_junit(junit) if junit.exists() else Outcome()
    if timed_out:
        why = f"killed after {timeout_s:.0f} s; last test line: {last_test or '(none)'}"
        outcome.failed.append(("guest VM", why))
    elif not code.exists():
        why = "the guest ended without writing its exit code (panic or crash? see console above)"
        outcome.failed.append(("guest VM", why))
    elif code.read_text().strip() != "0" and not outcome.failed:
        why = f"pytest exited {code.read_text().strip()} (collection or usage error? see above)"
        outcome.failed.append(("guest pytest", why))
    if not outcome.failed and outcome.passed == 0:
        outcome.failed.append(("guest pytest", "no test passed"))
    print(f"{guest.tier} tier artifacts (console log, junit xml): {work.relative_to(PROJECT)}")
    report(outcome, wall, guest.tier)
    return 1 if outcome.failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
