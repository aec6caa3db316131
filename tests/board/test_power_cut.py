"""Power cuts (issue 46): the board VM is killed (QEMU SIGKILL: no shutdown, the guest's page
cache lost) at random moments of a workload that types, taps (each call in the flight
recorder), rotates the pairing token and once per boot has a new key and certificate made;
then booted again from the same disk. After each boot: the daemon active within its usual start
time and never restarted (no crash loop); health_check answers and lists no state file set
aside; the recorder's file passes PRAGMA integrity_check; the token, the key and the certificate
are the old ones or the new ones, whole and fitting; and the trail holds every call the host saw
acknowledged more than WINDOW_S before the cut (the recorder's synchronous=FULL window:
tests/bench/bench_durability.py).

Its own VM, on a copy of the cached image (the cuts must persist): run.py runs it after the
acceptance checks, POWER_CUTS cuts (a few in `make test`; `make board-power-cuts` runs 50).
Each cut prints one outcome line.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import image
import pytest
from conftest import HERE, PROJECT
from test_board_vm import run_deploy
from vm import BoardVM

CUTS = int(os.environ.get("POWER_CUTS", "2"))
WINDOW_S = 2.0  # what a cut may lose of the trail: the batch window and a commit, with margin
STATE = "/var/lib/fingertip"
START_S = 600.0  # the daemon's start limit in the VM (TimeoutStartSec, conftest)


class Workload:
    """The guest's workload over one ssh session; every line with the host's time it came."""

    def __init__(self, board: BoardVM, boot: int, cert_at: int) -> None:
        self.lines: list[tuple[float, dict[str, Any]]] = []
        self._cond = threading.Condition()
        self._proc = board.popen(
            f"exec python3 -u /root/power-cut-workload.py --boot {boot} --cert-at {cert_at}"
        )
        self._thread = threading.Thread(target=self._pump, daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        assert self._proc.stdout is not None
        for raw in self._proc.stdout:
            if not raw.endswith("\n"):
                break
            try:
                line = json.loads(raw)
            except ValueError:
                continue
            with self._cond:
                self.lines.append((time.monotonic(), line))
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def wait_steps(self, n: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        with self._cond:
            while sum(1 for _, x in self.lines if "tool" in x) < n:
                left = deadline - time.monotonic()
                if left <= 0 or not self._thread.is_alive():
                    raise AssertionError(f"the workload did {n} steps? {self.lines[-5:]}")
                self._cond.wait(min(left, 1.0))

    def close(self) -> None:
        self._proc.kill()
        self._proc.wait()


def guest_json(board: BoardVM, script: str, python: str = "python3") -> Any:
    done = board.run(f"{python} -", input=script, timeout=300)
    return json.loads(done.stdout.strip().splitlines()[-1])


HEALTH = """
import json, urllib.request
req = urllib.request.Request("http://127.0.0.1:8080/api/tools/health_check",
    data=b'{"input": {}}', headers={"Content-Type": "application/json"}, method="POST")
body = json.loads(urllib.request.urlopen(req, timeout=120).read())
print(json.dumps(json.loads(body["output"])))
"""

TRAIL = """
import json, sqlite3
c = sqlite3.connect("/var/lib/fingertip/trace.db")
check = c.execute("PRAGMA integrity_check").fetchall()
rows = c.execute("SELECT tool, args FROM invocations WHERE tool IN "
                 "('keyboard_text', 'touch_gesture')").fetchall()
print(json.dumps({"integrity": check, "calls": [[t, json.loads(a)] for t, a in rows]}))
"""

PAIR = """
import json, pathlib
from daemon.tls.child import inspect
from daemon.tls.policy import server_context
state = pathlib.Path("/var/lib/fingertip")
server_context(state / "tls-cert.pem", state / "tls-key.pem")  # they fit, or this raises
token = (state / "pairing-token").read_bytes().decode()
print(json.dumps({"fingerprint": inspect(state / "tls-cert.pem")["fingerprint"],
                  "token": token,
                  "damaged": sorted(p.name for p in state.glob("*.damaged-*"))}))
"""


def say(board: BoardVM, line: str) -> None:
    """One outcome line: printed, and kept in the run folder (power-cuts.txt)."""
    print(line, flush=True)
    with (board.workdir / "power-cuts.txt").open("a") as f:
        f.write(line + "\n")


def wait_active(board: BoardVM) -> tuple[float, dict[str, str]]:
    """Once the daemon's unit is active: how long its start took (systemd's own stamps: from
    leaving inactive to active, READY=1), and its properties."""
    start = time.monotonic()
    limit = START_S * board.slowness
    while True:
        shown = board.run(
            "systemctl show -p ActiveState,SubState,NRestarts,InactiveExitTimestampMonotonic,"
            "ActiveEnterTimestampMonotonic fingertip",
            check=False,
        ).stdout
        props = dict(line.split("=", 1) for line in shown.split())
        if props.get("ActiveState") == "active":
            break
        if props.get("ActiveState") == "failed" or time.monotonic() - start > limit:
            journal = board.run("journalctl -b -u fingertip -n 30 --no-pager", check=False)
            raise AssertionError(f"fingertip did not start: {props}\n{journal.stdout}")
        time.sleep(1)
    took_us = int(props["ActiveEnterTimestampMonotonic"]) - int(
        props["InactiveExitTimestampMonotonic"]
    )
    return took_us / 1e6, props


@pytest.fixture(scope="module")
def board(workdir: Path) -> Iterator[BoardVM]:
    try:
        img = image.ensure()
    except image.CannotRun as e:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"the board VM cannot run here (CI=true requires it): {e}")
        pytest.skip(f"the board VM cannot run here: {e}")
    folder = workdir / "power-cut"
    folder.mkdir(exist_ok=True)
    disk = folder / "disk.raw"  # the cuts must reach it: a sparse copy, not the snapshot
    subprocess.run(["cp", "--sparse=always", str(img.disk), str(disk)], check=True)
    vm = BoardVM(img, folder, disk)
    try:
        vm.start()
        print(f"\npower cuts: board up after {vm.boot_s:.0f} s, slowness {vm.slowness:.2f}")
        vm.put(HERE / "guest" / "power-cut-workload.py", "/root/power-cut-workload.py", "0755")
        vm.run(
            "mkdir -p /etc/systemd/system/fingertip.service.d && printf '[Service]\\n"
            "TimeoutStartSec=600\\n' > /etc/systemd/system/fingertip.service.d/board-vm.conf"
        )
        config = (PROJECT / "etc" / "fingertip.toml").read_text()
        # No OCR: its packages are not what is tested here, and they cost deploy minutes.
        config = config.replace('enabled = "auto"', "enabled = false", 1)
        vm.run("mkdir -p /etc/fingertip && cat > /etc/fingertip/fingertip.toml", input=config)
        done = run_deploy(vm, folder, "deploy.log")
        assert done.returncode == 0, f"make deploy failed:\n{done.stdout}{done.stderr}"
        yield vm
    finally:
        vm.stop()
        disk.unlink(missing_ok=True)


def test_power_cuts(board: BoardVM) -> None:
    seed = int(os.environ.get("POWER_CUT_SEED", str(time.time_ns() % 10**9)))
    rng = random.Random(seed)
    wait_active(board)
    # The usual start: a clean restart's, measured by systemd on this VM.
    board.run("systemctl restart fingertip", timeout=START_S)
    usual, _ = wait_active(board)
    before = guest_json(board, PAIR, "/opt/fingertip/current/bin/python")
    tokens, fingerprints = {before["token"].strip()}, {before["fingerprint"]}
    say(board, f"power cuts: {CUTS} (POWER_CUT_SEED={seed}), loss window {WINDOW_S} s, "
               f"usual start {usual:.0f} s")  # fmt: skip
    failures: list[str] = []
    for cut in range(1, CUTS + 1):
        steps, cert_at = rng.randint(1, 24), rng.randint(1, 20)
        work = Workload(board, cut, cert_at)
        work.wait_steps(steps, 600 * board.slowness)
        time.sleep(rng.uniform(0, 2.0))  # the cut's moment within a step: random on purpose
        cut_at = board.cut_power()
        work.close()
        seen = [(t, x) for t, x in work.lines]
        acked = [x for t, x in seen if "tool" in x and t < cut_at - WINDOW_S]
        acked = [x for x in acked if x.get("is_error") is False]
        rotating = [x["rotating"] for _, x in seen if "rotating" in x]
        tokens |= {x["token"] for _, x in seen if "token" in x}
        cert_started = any("certificate" in x for _, x in seen)
        problems: list[str] = []
        try:
            board.start()
            took, props = wait_active(board)
            if props.get("NRestarts") != "0":
                problems.append(f"restarted {props.get('NRestarts')} times")
            if took > 3 * usual + 60 * board.slowness:
                problems.append(f"started in {took:.0f} s (usual {usual:.0f} s)")
            health = guest_json(board, HEALTH)
            if not health.get("ok") or health["security"].get("state_files"):
                problems.append(f"health_check: ok={health.get('ok')} "
                                f"state_files={health['security'].get('state_files')}")  # fmt: skip
            trail = guest_json(board, TRAIL)
            if trail["integrity"] != [["ok"]]:
                problems.append(f"integrity_check: {trail['integrity'][:3]}")
            kept = {json.dumps(a, sort_keys=True) for _, a in trail["calls"]}
            lost = [x["seq"] for x in acked if json.dumps(x["args"], sort_keys=True) not in kept]
            if lost:
                problems.append(f"lost acknowledged records: steps {lost}")
            pair = guest_json(board, PAIR, "/opt/fingertip/current/bin/python")
            token = pair["token"]
            whole = re.fullmatch(r"[A-Za-z0-9_-]{43}\n", token) is not None
            in_flight = len(rotating) > len([x for _, x in seen if "rotated" in x])
            if not whole or (token.strip() not in tokens and not in_flight):
                problems.append(f"token neither old nor new: {token!r}")
            tokens.add(token.strip())
            if pair["fingerprint"] not in fingerprints and not cert_started:
                problems.append("a new certificate without one being made")
            fingerprints.add(pair["fingerprint"])
            if pair["damaged"]:
                problems.append(f"damaged files: {pair['damaged']}")
        except (AssertionError, RuntimeError, subprocess.SubprocessError, ValueError) as exc:
            problems.append(f"{type(exc).__name__}: {str(exc)[:800]}")
            took = float("nan")
        say(
            board,
            f"power cut {cut}/{CUTS}: after {steps} steps (+ up to 2 s), cert step "
            f"{'started' if cert_started else 'not reached'}, rotations {len(rotating)}; boot "
            f"{board.boot_s:.0f} s, the daemon's start {took:.0f} s (usual {usual:.0f} s); "
            f"{len(acked)} records acknowledged > {WINDOW_S:.0f} s before the cut, "
            f"{'ALL kept' if not any('lost' in p for p in problems) else 'SOME LOST'}: "
            + ("ok" if not problems else "FAILED: " + "; ".join(problems)),
        )
        if problems:
            failures.append(f"cut {cut}: {'; '.join(problems)}")
            if board.proc is None or board.proc.poll() is not None:
                break  # the board did not come back: nothing more to cut
    shutil.copy(board.console, board.workdir / "console-last.log")
    assert not failures, "\n".join(failures)
