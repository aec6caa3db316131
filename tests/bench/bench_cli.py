"""Startup of the one-shot CLI (not part of the test suite).

`fingertip catalog` against the real daemon (simulated target) versus `python -c pass`, both with
the venv's interpreter, interleaved in the same run so machine noise hits both alike. Prints the
medians and their ratio (target <= 2x), plus the in-process round trip of the same request so the
remainder is visibly interpreter start and imports.
Run: .venv/bin/python tests/bench/bench_cli.py
"""

from __future__ import annotations

import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import msgpack

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.service.daemonproc import DaemonProcess

ROUNDS, WARMUP = 40, 3
FINGERTIP = Path(sys.executable).with_name("fingertip")


def wall_ms(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, check=True)
    return (time.perf_counter() - start) * 1000


def round_trip_ms(path: str) -> float:
    body = msgpack.packb({"id": 1, "op": "catalog"})
    start = time.perf_counter()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect(path)
        s.sendall(len(body).to_bytes(4, "big") + body)
        size = int.from_bytes(s.recv(4, socket.MSG_WAITALL), "big")
        s.recv(size, socket.MSG_WAITALL)
    return (time.perf_counter() - start) * 1000


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="ft-bench-") as tmp:
        daemon = DaemonProcess(Path(tmp)).start()
        try:
            path = daemon.tables["ipc"]["socket"]
            env = {**os.environ, "FINGERTIP_SOCKET": path}
            cli_argv = [str(FINGERTIP), "catalog"]
            base_argv = [sys.executable, "-c", "pass"]
            for _ in range(WARMUP):
                wall_ms(cli_argv, env)
                wall_ms(base_argv, env)
            cli, base, trip = [], [], []
            for _ in range(ROUNDS):
                cli.append(wall_ms(cli_argv, env))
                base.append(wall_ms(base_argv, env))
                trip.append(round_trip_ms(path))
        finally:
            daemon.stop()
    c, b, t = statistics.median(cli), statistics.median(base), statistics.median(trip)
    print(f"python -c pass (baseline)    median {b:6.1f} ms  min {min(base):6.1f} ms")
    print(f"fingertip catalog            median {c:6.1f} ms  min {min(cli):6.1f} ms")
    print(f"  of which the IPC round trip  median {t:6.1f} ms (warm client, same request)")
    print(f"ratio fingertip catalog / python -c pass: {c / b:.2f}x (target <= 2x)")


if __name__ == "__main__":
    main()
