"""Power cuts on the board VM (issue 46), for test_board_vm's power-cut check: the VM the tier
booted and deployed to is killed (QEMU SIGKILL: no shutdown, the guest's page cache lost) at a
random moment of a workload that types, taps (each call in the flight recorder), rotates the
pairing token and once has a new key and certificate made (guest/power-cut-workload.py); then
the same disk boots again. After each boot: the daemon active within its usual start time and
never restarted (no crash loop); health_check answers and lists no state file set aside; the
recorder's file passes PRAGMA integrity_check; the token, the key and the certificate are the
old ones or the new ones, whole and fitting; the trail holds every call the host saw
acknowledged more than WINDOW_S before the cut (the recorder's synchronous=FULL window:
tests/bench/bench_durability.py); no file set aside (*.damaged-*).

One cut in `make test` (BOARD_POWER_CUTS, default 1); `make board-power-cuts` runs 50 on the
same deployed VM. Each cut prints one outcome line, kept in the run folder (power-cuts.txt).
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from vm import BoardVM

CUTS = int(os.environ.get("BOARD_POWER_CUTS", "1"))
WINDOW_S = 2.0  # what a cut may lose of the trail: the batch window and a commit, with margin
START_S = 600.0  # the daemon's start limit in the VM (TimeoutStartSec, conftest)
WORKLOAD = "/root/power-cut-workload.py"
# The cut lands after 1..MAX_STEPS acknowledged calls (+ up to 2 s): the token is rotated every
# 5th call and the certificate made at call 1..MAX_CERT_AT, so one cut meets each about half
# the time, and a step costs ~1 s of an idle VM's time.
MAX_STEPS, MAX_CERT_AT = 12, 10


class Workload:
    """The guest's workload over one ssh session; every line with the host's time it came."""

    def __init__(self, board: BoardVM, boot: int, cert_at: int) -> None:
        self.lines: list[tuple[float, dict[str, Any]]] = []
        self._cond = threading.Condition()
        self._proc = board.popen(f"exec python3 -u {WORKLOAD} --boot {boot} --cert-at {cert_at}")
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


def pair(board: BoardVM) -> dict[str, Any]:
    """The board's token and certificate as files (read with the daemon's own TLS code)."""
    return dict(guest_json(board, PAIR, "/opt/fingertip/current/bin/python"))


def say(board: BoardVM, line: str) -> None:
    """One outcome line: printed, and kept in the run folder (power-cuts.txt; run.py shows it)."""
    print(line, flush=True)
    with (board.workdir / "power-cuts.txt").open("a") as f:
        f.write(line + "\n")


def wait_active(board: BoardVM) -> tuple[float, dict[str, str]]:
    """Once the daemon's unit is active: how long its last start took (systemd's own stamps:
    from its main process's exec to active, READY=1; not from leaving inactive, which a
    restart after a kill never was), and its properties."""
    start = time.monotonic()
    limit = START_S * board.slowness
    while True:
        shown = board.run(
            "systemctl show -p ActiveState,SubState,NRestarts,ExecMainStartTimestampMonotonic,"
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
        props["ExecMainStartTimestampMonotonic"]
    )
    return took_us / 1e6, props


@dataclass
class Known:
    """What the board held before the cuts and every token and certificate made since."""

    usual_start_s: float
    tokens: set[str] = field(default_factory=set)
    fingerprints: set[str] = field(default_factory=set)


def cut_once(board: BoardVM, rng: random.Random, cut: int, known: Known) -> list[str]:
    """One cut at a random moment of the workload, the boot after it and its checks: the
    problems found (none: the cut lost nothing); prints its outcome line."""
    steps, cert_at = rng.randint(1, MAX_STEPS), rng.randint(1, MAX_CERT_AT)
    problems: list[str] = []
    work = Workload(board, cut, cert_at)
    try:
        work.wait_steps(steps, 600 * board.slowness)
        time.sleep(rng.uniform(0, 2.0))  # the cut's moment within a step: random on purpose
    except AssertionError as exc:  # cut and booted all the same: the next checks need a board
        problems.append(f"workload: {str(exc)[:800]}")
    cut_at = board.cut_power()
    work.close()
    seen = list(work.lines)
    calls = [x for t, x in seen if "tool" in x]
    acked = [x for t, x in seen if "tool" in x and t < cut_at - WINDOW_S]
    rotating = [x["rotating"] for _, x in seen if "rotating" in x]
    known.tokens |= {x["token"] for _, x in seen if "token" in x}
    cert_started = any("certificate" in x for _, x in seen)
    # Every call is meant to succeed: an error would leave nothing to look for in the trail.
    if refused := [x for x in calls if x.get("is_error") is not False]:
        problems.append(f"workload calls answered with an error: {refused[:3]}")
    started = time.monotonic()
    took = float("nan")
    try:
        board.start()
        took, props = wait_active(board)
        if props.get("NRestarts") != "0":
            problems.append(f"restarted {props.get('NRestarts')} times")
        usual = known.usual_start_s
        if took > 3 * usual + 60 * board.slowness:
            problems.append(f"started in {took:.0f} s (usual {usual:.0f} s)")
        health = guest_json(board, HEALTH)
        if not health.get("ok") or health["security"].get("state_files"):
            problems.append(
                f"health_check: ok={health.get('ok')} "
                f"state_files={health['security'].get('state_files')}"
            )
        trail = guest_json(board, TRAIL)
        if trail["integrity"] != [["ok"]]:
            problems.append(f"integrity_check: {trail['integrity'][:3]}")
        kept = {json.dumps(a, sort_keys=True) for _, a in trail["calls"]}
        lost = [x["seq"] for x in acked if json.dumps(x["args"], sort_keys=True) not in kept]
        if lost:
            problems.append(f"lost acknowledged records: steps {lost}")
        now = pair(board)
        token = now["token"]
        whole = re.fullmatch(r"[A-Za-z0-9_-]{43}\n", token) is not None
        in_flight = len(rotating) > len([x for _, x in seen if "rotated" in x])
        if not whole or (token.strip() not in known.tokens and not in_flight):
            problems.append(f"token neither old nor new: {token!r}")
        known.tokens.add(token.strip())
        if now["fingerprint"] not in known.fingerprints and not cert_started:
            problems.append("a new certificate without one being made")
        known.fingerprints.add(now["fingerprint"])
        if now["damaged"]:
            problems.append(f"damaged files: {now['damaged']}")
    except (AssertionError, RuntimeError, subprocess.SubprocessError, ValueError) as exc:
        problems.append(f"{type(exc).__name__}: {str(exc)[:800]}")
    checked = time.monotonic() - started
    say(
        board,
        f"power cut {cut}/{CUTS}: after {steps} steps (+ up to 2 s), cert step "
        f"{'started' if cert_started else 'not reached'}, rotations {len(rotating)}; boot "
        f"{board.boot_s:.0f} s, the daemon's start {took:.0f} s (usual "
        f"{known.usual_start_s:.0f} s), boot and checks {checked:.0f} s; {len(acked)} records "
        f"acknowledged > {WINDOW_S:.0f} s before the cut, "
        f"{'ALL kept' if not any('lost' in p for p in problems) else 'SOME LOST'}: "
        + ("ok" if not problems else "FAILED: " + "; ".join(problems)),
    )
    return problems
