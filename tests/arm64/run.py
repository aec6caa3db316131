"""`make arm64-test`: the daemon on aarch64, the boards' CPU, without a board.

An arm64 Debian bookworm root (root.py: CPython 3.11, glibc 2.36) runs here under QEMU's
user-mode emulator as a Cortex-A53. In it: a venv installed from `make deploy`'s wheelhouse for
manylinux aarch64 (wheelhouse.py: deploy's own build, cached under its key) with pip's
--no-index --only-binary, so every wheel must be there and fit the board's platform; then
fingertipd with the simulated target as its backend, which must start, answer health_check over
HTTP on loopback, and read the right words with OCR (screen_text, over HTTP) from one frame.

Why user mode and the simulated target: what differs on an aarch64 board is native code (the
wheels of numpy, OpenCV, onnxruntime, orjson, msgpack, aiohttp, ...) and what it computes, and
that is what runs here, emulated instruction by instruction. The kernel side (configfs, the
UDC, V4L2) is the same Python on every CPU and is tested under a real kernel by the kernel and
board VM tiers; a system-mode arm64 VM would add ~10 min of boot and set-up per run for it.
The simulated target needs the xkbcommon bindings, which PyPI has only as an sdist: root.py
builds their aarch64 wheel in the root once, and its requirements come from the index for
aarch64 like the board's.

Each run prints one line per step with its time, and the tier's wall time. The venv's
third-party packages are kept in the root between runs (once per wheelhouse, as deploy keeps
deps/<id> on a board); the fingertip wheel is built and installed again every run. Where the
tier cannot run (not root, no apt, binfmt_misc unavailable) it prints one loud SKIPPED line, or
fails under CI=true, as the other VM tiers do. The daemon's log stays in
test-artifacts/arm64/run-*/.
"""

from __future__ import annotations

import contextlib
import importlib.metadata as md
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

PROJECT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(PROJECT))
from daemon.sim.layout import apps_for, make_layout  # noqa: E402
from deploy import DeployError  # noqa: E402
from tests.arm64 import CACHE, root, wheelhouse  # noqa: E402
from tests.service.daemonproc import free_port, write_config  # noqa: E402

ARTIFACTS = PROJECT / "test-artifacts" / "arm64"
run_folders = root.board_image.kernel_script("run")

VENV = "/opt/fingertip"  # in the root; kept between runs
INSIDE = "/run/fingertip-test"  # the run folder, as the daemon sees it
START_S = 300.0  # bounds only: seen 5-23 s
OCR_S = 540.0  # bounds a read here (under the text tools' own 600 s); seen 32-89 s


class Failed(Exception):
    """One line for the report; the step that failed is printed before it."""


class Steps:
    """The numbered line of each step, then the time it took."""

    def __init__(self, total: int) -> None:
        self.total, self.n, self.at, self.open = total, 0, 0.0, False

    def __call__(self, text: str) -> None:
        self.done()
        self.n += 1
        self.at, self.open = time.monotonic(), True
        print(f"arm64 [{self.n}/{self.total}] {text}", flush=True)

    def done(self, note: str = "") -> None:
        if self.open:
            print(f"  ... {time.monotonic() - self.at:.1f} s{note}", flush=True)
            self.open = False


# The root's Python, and a child process it starts (as the daemon starts its OCR worker).
PROBE = """import platform, subprocess, sys, sysconfig
child = [sys.executable, "-c", "import platform; print(platform.machine())"]
machine = subprocess.run(child, capture_output=True, text=True, check=True).stdout.strip()
print(sysconfig.get_platform(), "CPython", platform.python_version(), *platform.libc_ver(),
      "- a child process runs on", machine)"""


def _in_root(home: Path, *argv: str, timeout: float, **mounts: dict[Path, str]) -> str:
    try:
        return root.in_root(home / "root", *argv, timeout=timeout, **mounts)
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        raise Failed(str(e)) from e


def xkbcommon_sdist() -> Path:
    """The sdist of the xkbcommon version this venv has (its pin), downloaded once."""
    version = md.version("xkbcommon")
    folder = CACHE / "sdist"
    found = sorted(folder.glob(f"xkbcommon-{version}.tar.gz"))
    if found:
        return found[0]
    wheelhouse.deploy_build._pip(
        "download", "--quiet", "--no-deps", "--no-binary=:all:", "--dest", str(folder),
        f"xkbcommon=={version}", what="downloading the xkbcommon sdist",
    )  # fmt: skip
    return folder / f"xkbcommon-{version}.tar.gz"


def install(home: Path, house: wheelhouse.Wheelhouse, xkb: Path, sim: Path) -> str:
    """The venv in the root: its third-party packages once per set of wheels, the fingertip
    wheel every run; then pip check. Returns what was installed, for the step's line."""
    venv = home / "root" / VENV.lstrip("/")
    stamp = venv / ".made-of"
    sim_wheels = sorted(sim.glob("*.whl"))
    made_of = "".join(f"{p.name}\n" for p in [*house.wheels, xkb, *sim_wheels])
    binds = {
        house.folder: "/wheels/house", xkb.parent: "/wheels/xkb", sim: "/wheels/sim",
        house.wheel.parent: "/wheels/dist",
    }  # fmt: skip
    pip = f"{VENV}/bin/pip --disable-pip-version-check --quiet"
    offline = "--no-index --only-binary=:all:"
    wheel = f"/wheels/dist/{house.wheel.name}"
    if stamp.is_file() and stamp.read_text() == made_of:
        done = "the fingertip wheel (its packages are there from an earlier run)"
        script = f"{pip} install {offline} --no-deps --force-reinstall {wheel}"
    else:
        done = "fingertip, its dependencies and the simulated target's xkbcommon"
        stamp.unlink(missing_ok=True)
        script = (
            f"rm -rf {VENV} && python3 -m venv {VENV} && {pip} install {offline} "
            "--find-links /wheels/house --find-links /wheels/xkb --find-links /wheels/sim "
            f"'{wheel}[{','.join(wheelhouse.EXTRAS)}]' xkbcommon"
        )
    _in_root(home, "sh", "-c", f"{script} && {pip} check", timeout=1800, binds=binds)
    stamp.write_text(made_of)  # last: an install cut short is done again
    count = len(list((venv / "lib/python3.11/site-packages").glob("*.dist-info")))
    return f"{done}: {count} distributions, pip check ok"


def api(port: int, token: str, tool: str, args: dict[str, Any], timeout: float) -> Any:
    """POST /api/tools/<tool>; the tool's output, parsed. Failed on an error reply."""
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/api/tools/{tool}",
        data=json.dumps({"input": args}).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"},
    )
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        reply = json.loads(resp.read())
    if reply.get("is_error"):
        raise Failed(f"{tool} answered an error: {reply.get('error') or reply.get('output')}")
    return json.loads(reply["output"])


class Daemon:
    """fingertipd in the root, in namespaces that die with it (root.chroot_command)."""

    def __init__(self, home: Path, run: Path) -> None:
        self.run, self.port = run, free_port()
        tables: dict[str, dict[str, Any]] = {
            "device": {"device_type": "iOS"},
            "server": {"listen": ["127.0.0.1"], "port": self.port},
            "backend": {"kind": "simulated"},
            "guard": {"http": "full-access"},
            "state": {"dir": f"{INSIDE}/state"},
            "ipc": {"socket": f"{INSIDE}/ipc.sock"},
            "discovery": {"enabled": False},
            # On whatever this machine's RAM, and with time for an emulated worker to start and
            # read (up to 90 s seen on a shared machine, against the default 120 s).
            "ocr": {"enabled": True, "read_timeout_s": OCR_S},
            "log": {"format": "json"},
        }
        write_config(run / "fingertip.toml", tables)
        self.log = run / "daemon.log"
        argv = [f"{VENV}/bin/fingertipd", "--config", f"{INSIDE}/fingertip.toml"]
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                root.chroot_command(home / "root", argv, writable={run: INSIDE}),
                env=root.chroot_env(PYTHONUNBUFFERED="1"),
                stdout=out, stderr=subprocess.STDOUT, preexec_fn=root.die_with_parent,
            )  # fmt: skip

    def tail(self, n: int = 25) -> str:
        return "\n".join(f"  daemon| {line}" for line in self.lines()[-n:])

    def call(self, tool: str, args: dict[str, Any], timeout: float) -> Any:
        """api() while watching the daemon: an emulated crash can leave QEMU hung rather than
        dead (seen: a segfault, then nothing), so its line in the log ends the wait."""
        done: dict[str, Any] = {}

        def request() -> None:
            try:
                done["value"] = api(self.port, self.token(), tool, args, timeout)
            except BaseException as e:  # handed to the waiting thread
                done["error"] = e

        worker = threading.Thread(target=request, daemon=True)
        worker.start()
        while worker.is_alive():
            worker.join(0.5)
            crash = [ln for ln in self.lines() if ln.startswith("qemu: uncaught target signal")]
            if crash or self.proc.poll() is not None:
                raise Failed(f"the daemon died during {tool}: {crash[0] if crash else 'exited'}")
        if "error" in done:
            raise done["error"]
        return done["value"]

    def lines(self) -> list[str]:
        return self.log.read_text(errors="replace").splitlines()

    def events(self, name: str) -> list[dict[str, Any]]:
        """The daemon's JSON log lines of one event."""
        found = []
        for line in self.lines():
            with contextlib.suppress(ValueError):
                event = json.loads(line)
                if isinstance(event, dict) and event.get("event") == name:
                    found.append(event)
        return found

    def token(self) -> str:
        path = self.run / "state" / "pairing-token"
        return path.read_text().strip() if path.is_file() else ""

    def wait_healthy(self, timeout: float) -> dict[str, Any]:
        """health_check until it answers ok (the daemon's first answer is the start's end)."""
        deadline = time.monotonic() + timeout
        last = "no answer"
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise Failed(f"fingertipd exited {self.proc.returncode} before answering")
            try:
                health: dict[str, Any] = self.call("health_check", {}, 30)
                if health.get("ok") is True:
                    return health
                last = f"ok={health.get('ok')!r}"
            except (OSError, ValueError) as e:  # not listening yet (URLError is an OSError)
                last = f"{type(e).__name__}: {e}"
            time.sleep(0.5)
        raise Failed(f"no healthy answer in {timeout:.0f} s ({last})")

    def daemon_pid(self) -> int | None:
        """The daemon's pid here: the child unshare forked (sh and chroot exec into it)."""
        with contextlib.suppress(OSError, ValueError):
            children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text()
            return int(children.split()[0])
        return None

    def stop(self, timeout: float = 120.0) -> int:
        """SIGTERM to the daemon (a graceful stop), its exit status; killed when it hangs."""
        pid = self.daemon_pid()
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise Failed(f"fingertipd did not stop within {timeout:.0f} s of SIGTERM") from None

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()  # everything in its PID namespace dies with it (--kill-child)
            self.proc.wait()


def first_row() -> tuple[dict[str, float], list[str]]:
    """The band of the home screen's first row of app labels (normalized) and those labels,
    from the simulated target's own layout: what OCR must read there."""
    layout = make_layout("ios", 1080, 1920)
    row = layout.tiles[:4]
    band = {"x0": 0, "y0": min(t.label.y0 for t in row), "x1": 1000,
            "y1": max(t.label.y1 for t in row)}  # fmt: skip
    return band, list(apps_for("ios")[:4])


def tier(step: Steps, run: Path) -> None:
    step("the arm64 root (Debian bookworm under qemu-aarch64, built once)")
    with root.session() as home:
        facts = _in_root(home, "python3", "-c", PROBE, timeout=300).strip()
        step.done(f": {facts}, emulated CPU {root.QEMU_CPU}")

        step("make deploy's wheelhouse for manylinux aarch64 (deploy.py, cached by its key), "
             "and the simulated target's xkbcommon")  # fmt: skip
        try:
            house = wheelhouse.build(run / "dist")
            sim = wheelhouse.sim_wheels()
            xkb = root.xkbcommon_wheel(home, xkbcommon_sdist(), sim)
        except DeployError as e:
            raise Failed(str(e)) from e
        size = sum(p.stat().st_size for p in house.wheels) / 1e6
        print(f"  {len(house.wheels)} wheels, {size:.0f} MB; for the simulated target: "
              f"{xkb.name} (built in the root) and {sim.relative_to(CACHE)}/")  # fmt: skip

        step("installing into a venv in the root (pip --no-index --only-binary=:all:, check)")
        print(f"  {install(home, house, xkb, sim)}", flush=True)

        step("starting fingertipd (simulated target) until health_check answers over HTTP")
        daemon = Daemon(home, run)
        try:
            health = daemon.wait_healthy(START_S)
            print(f"  health_check: ok, version {health['version']}, backend "
                  f"{health['backend']}, capture {health['capture']}")  # fmt: skip

            band, words = first_row()
            step(f"screen_text of one frame, region {band} (the first row of app labels)")
            started = time.monotonic()
            tree = daemon.call("screen_text", {"region": band}, OCR_S + 60)
            took = time.monotonic() - started
            frame = tree["frame"]
            print(f"  read {tree['text']!r} from frame {frame['seq']} "
                  f"({frame['width']}x{frame['height']}): OCR {tree['ocr_ms']} ms, the call "
                  f"{took:.1f} s (the OCR worker's start included)")  # fmt: skip
            for event in daemon.events("ocr.loaded"):  # the worker's own line
                print(f"  the OCR worker (pid {event.get('pid')} in the run's namespace) loaded "
                      f"{event.get('engine')} in {event.get('load_ms')} ms")  # fmt: skip
            if tree["text"].split() != words:
                raise Failed(f"OCR read {tree['text']!r}; the screen shows {' '.join(words)!r}")

            step("stopping fingertipd (SIGTERM)")
            code = daemon.stop()
            if code != 0:
                raise Failed(f"fingertipd exited {code} on SIGTERM")
        except BaseException:
            print(daemon.tail(), flush=True)
            raise
        finally:
            daemon.kill()
        step.done()


def main() -> int:
    start = time.monotonic()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the finally blocks
    step = Steps(6)
    run = run_folders.new_run_folder(ARTIFACTS)
    try:
        tier(step, run)
    except root.CannotRun as e:
        return root.skip_or_fail(str(e))
    except (Failed, RuntimeError, subprocess.SubprocessError, OSError) as e:
        print(f"arm64: FAILED: {e}", flush=True)
        code = 1
    else:
        print("arm64: passed", flush=True)
        code = 0
    finally:
        print(f"arm64 tier artifacts: {run.relative_to(PROJECT)}")
        print(f"arm64 tier wall time: {time.monotonic() - start:.0f} s (root, wheelhouse, "
              "install, start, health_check, OCR, stop)", flush=True)  # fmt: skip
    return code


if __name__ == "__main__":
    sys.exit(main())
