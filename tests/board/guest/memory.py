"""Memory of a systemd unit's processes, and a live-stream viewer, for the board test (run in the
board VM with the guest's own python3; standard library only).

  memory.py snapshot UNIT      one JSON line: each process's RSS, PSS and peak RSS (VmHWM), MB,
                               their sums, and the unit's cgroup: memory.current, memory.peak
                               (since the unit started) and how many OOM kills it saw
  memory.py stream URL SECONDS one viewer of an MJPEG stream: a line when the first frame came,
                               then one with the frames taken
"""

from __future__ import annotations

import json
import sys
import time
import urllib.request
from pathlib import Path


def mb(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


def snapshot(unit: str) -> dict[str, object]:
    cgroup = Path("/sys/fs/cgroup/system.slice") / unit
    procs = []
    for pid in (cgroup / "cgroup.procs").read_text().split():
        try:
            status = Path(f"/proc/{pid}/status").read_text()
            rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:  # gone meanwhile
            continue
        procs.append(
            {
                "pid": int(pid),
                "ocr_worker": "daemon.screen.ocr_worker" in cmdline,
                "rss": mb(status, "VmRSS"),
                "pss": mb(rollup, "Pss"),
                "hwm": mb(status, "VmHWM"),
            }
        )
    events = dict(line.split() for line in (cgroup / "memory.events").read_text().splitlines())
    peak = cgroup / "memory.peak"
    return {
        "procs": procs,
        "rss": sum(p["rss"] for p in procs),
        "pss": sum(p["pss"] for p in procs),
        "hwm": sum(p["hwm"] for p in procs),
        "daemon_pss": sum(p["pss"] for p in procs if not p["ocr_worker"]),
        "cgroup_current": int((cgroup / "memory.current").read_text()) / 2**20,
        "cgroup_peak": int(peak.read_text()) / 2**20 if peak.exists() else None,
        "oom_kills": int(events.get("oom_kill", "0")),
    }


def stream(url: str, seconds: float) -> None:
    frames = 0
    with urllib.request.urlopen(url, timeout=60) as r:
        end = None
        while end is None or time.monotonic() < end:
            chunk = r.read1(65536)
            if not chunk:
                break
            new = chunk.count(b"Content-Type: image/jpeg")
            if new and end is None:
                end = time.monotonic() + seconds
                print(json.dumps({"first_frame": True}), flush=True)
            frames += new
    print(json.dumps({"frames": frames, "seconds": seconds}), flush=True)


def main() -> int:
    if sys.argv[1] == "snapshot":
        print(json.dumps(snapshot(sys.argv[2])))
    else:
        stream(sys.argv[2], float(sys.argv[3]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
