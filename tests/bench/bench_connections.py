"""Connections past [server].max_connections: what they cost the daemon in descriptors, and how
fast it sheds them (issue 44, finding 1; not part of the test suite).

Two real daemons (simulated target) on loopback, identical but for [server].tls: "off" (the
plain listener, the baseline) and "on". Each gets the same floods of connections that send
nothing, every one kept open on the client side:

- a burst of BURST connections at full speed: the daemon's descriptors (/proc/<pid>/fd) at rest,
  at their peak, and how long until they are back under rest + cap + MAX_REFUSING (the time to
  shed); before the fix a TLS listener held one per connection for header_timeout_s;
- RATE connections a second for FLOOD_S seconds: the peak, and whether accept() ran out of
  descriptors (accept_failed) under a NOFILE limit;
- health_check over the IPC socket during each flood: its median round trip against the same
  call at rest.
Figures, never pass/fail. Run: .venv/bin/python tests/bench/bench_connections.py
"""

from __future__ import annotations

import contextlib
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from daemon.transports.limits import MAX_REFUSING
from tests.service.daemonproc import DaemonProcess
from tests.service.test_hostile_connections import descriptors, ipc_health

CAP = 64
HEADER_TIMEOUT_S = 15.0  # the default
BURST = 400
RATE, FLOOD_S = 250, 4.4  # 1,100 connections, the attack's figures
NOFILE = 512


class Sampler:
    """The daemon's descriptor count, every 5 ms in a thread, and its peak."""

    def __init__(self, pid: int):
        self.pid, self.peak, self.last = pid, 0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(OSError):
                self.last = descriptors(self.pid)
                self.peak = max(self.peak, self.last)
            self._stop.wait(0.005)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


class Health:
    """health_check over IPC in a loop in a thread: round trips in ms."""

    def __init__(self, d: DaemonProcess):
        self.d, self.times = d, []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            start = time.perf_counter()
            ok = ipc_health(self.d)
            self.times.append((time.perf_counter() - start) * 1000 if ok else float("inf"))

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return statistics.median(self.times) if self.times else float("nan")


def connect(port: int) -> socket.socket | None:
    try:
        return socket.create_connection(("127.0.0.1", port), timeout=10)
    except OSError:
        return None


def burst(d: DaemonProcess, pid: int, rest: int) -> tuple[int, float, int, float]:
    """(peak, seconds to shed, descriptors once shed, IPC health_check median ms)."""
    sampler, health = Sampler(pid), Health(d)
    held = [s for s in (connect(d.port) for _ in range(BURST)) if s is not None]
    start = time.monotonic()
    bound = rest + CAP + MAX_REFUSING + 4
    while descriptors(pid) > bound and time.monotonic() - start < 2 * HEADER_TIMEOUT_S:
        time.sleep(0.01)
    shed_s = time.monotonic() - start
    now = descriptors(pid)
    health_ms = health.stop()
    sampler.stop()
    for s in held:
        s.close()
    return sampler.peak, shed_s, now, health_ms


def flood(d: DaemonProcess, pid: int) -> tuple[int, int, float]:
    """(peak, accept_failed lines, IPC health_check median ms)."""
    sampler, health = Sampler(pid), Health(d)
    held = []
    start = time.monotonic()
    for i in range(int(RATE * FLOOD_S)):
        delay = start + i / RATE - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        s = connect(d.port)
        if s is not None:
            held.append(s)
    health_ms = health.stop()
    sampler.stop()
    for s in held:
        s.close()
    failed = sum(1 for e in d.log_events() if e.get("event") == "accept_failed")
    return sampler.peak, failed, health_ms


def at_rest(d: DaemonProcess, pid: int) -> tuple[int, float]:
    times = []
    for _ in range(50):
        start = time.perf_counter()
        assert ipc_health(d)
        times.append((time.perf_counter() - start) * 1000)
    return descriptors(pid), statistics.median(times)


def settle(pid: int, rest: int) -> None:
    deadline = time.monotonic() + 2 * HEADER_TIMEOUT_S
    while descriptors(pid) > rest + 2 and time.monotonic() < deadline:
        time.sleep(0.05)


def main() -> None:
    rows: list[dict[str, float | int | str]] = []
    with tempfile.TemporaryDirectory(prefix="ft-bench-conns-") as tmp:
        for name, mode in (("plain", "off"), ("TLS", "on")):
            folder = Path(tmp) / name
            folder.mkdir()
            server = {"tls": mode, "max_connections": CAP, "header_timeout_s": HEADER_TIMEOUT_S}
            d = DaemonProcess(folder, {"server": server}, nofile=NOFILE).start()
            try:
                assert d.proc is not None
                pid = d.proc.pid
                d.health()
                rest, rest_ms = at_rest(d, pid)
                peak, shed_s, shed_to, burst_ms = burst(d, pid, rest)
                settle(pid, rest)
                after_burst = descriptors(pid)
                flood_peak, failed, flood_ms = flood(d, pid)
                settle(pid, rest)
                rows.append(
                    {
                        "name": name,
                        "rest": rest,
                        "rest_ms": rest_ms,
                        "peak": peak,
                        "shed_s": shed_s,
                        "shed_to": shed_to,
                        "burst_ms": burst_ms,
                        "after_burst": after_burst,
                        "flood_peak": flood_peak,
                        "failed": failed,
                        "flood_ms": flood_ms,
                        "after_flood": descriptors(pid),
                    }
                )
            finally:
                d.stop()
    print(
        f"max_connections {CAP}, header_timeout_s {HEADER_TIMEOUT_S:g}, MAX_REFUSING "
        f"{MAX_REFUSING}, NOFILE {NOFILE}; daemon descriptors from /proc/<pid>/fd"
    )
    print(f"a burst of {BURST} silent connections, all kept open by the client")
    for r in rows:
        role = "baseline" if r["name"] == "plain" else ""
        print(
            f"  {r['name']:5}  rest {r['rest']:4}  peak {r['peak']:4}  under rest+cap+refusing "
            f"{float(r['shed_s']):6.2f} s after the last connect ({r['shed_to']} fds); "
            f"after they left {r['after_burst']}  {role}"
        )
        print(
            f"         IPC health_check {r['rest_ms']:6.2f} ms at rest, "
            f"{r['burst_ms']:6.2f} ms meanwhile"
        )
    print(f"{RATE} silent connections a second for {FLOOD_S:g} s ({int(RATE * FLOOD_S)}), kept")
    for r in rows:
        print(
            f"  {r['name']:5}  peak {r['flood_peak']:4} of {NOFILE}  accept_failed lines "
            f"{r['failed']}  IPC health_check {r['flood_ms']:6.2f} ms (at rest "
            f"{r['rest_ms']:.2f});  after {r['after_flood']}  "
            f"{'baseline' if r['name'] == 'plain' else ''}"
        )


if __name__ == "__main__":
    main()
