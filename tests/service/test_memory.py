"""What the daemon holds, on a small board's terms (issue 34): the board daemon is built without
numpy, OpenCV or the OCR engine (each arrives with its first use), and work that handles full
frames (taps with their evidence, stability waits) does not pile them up. The budgets' figures
are printed by tests/bench/bench_memory.py and the board VM; this tier only guards the
mechanisms, with margins far wider than any run's noise."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import aiohttp

from tests.service.daemonproc import REPO, DaemonProcess
from tests.service.test_input_tools import Make, start

HEAVY = ("numpy", "cv2", "onnxruntime", "rapidocr", "xkbcommon", "PIL", "cryptography")


def rss_mb(d: DaemonProcess) -> float:
    assert d.proc is not None
    for line in Path(f"/proc/{d.proc.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def test_the_board_daemon_is_built_without_heavy_libraries(tmp_path: Path) -> None:
    probe = f"""
import json, sys
from daemon.config import from_mapping
from daemon.service import build
config = from_mapping({{
    "backend": {{"kind": "board"}},
    "state": {{"dir": {str(tmp_path)!r}}},
    "ipc": {{"socket": {str(tmp_path / "ipc.sock")!r}}},
}})
build(config)
print(json.dumps(sorted(set({HEAVY!r}) & set(sys.modules))))
"""
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, check=True
    )
    assert json.loads(out.stdout.splitlines()[-1]) == []


async def test_taps_with_evidence_do_not_pile_up_frames(make_daemon: Make) -> None:
    # Each tap takes a frame before and after it (6 MB each at 1080x1920). Contexts copied
    # during a call outlive it and once kept them alive: +101 MB over these ten taps.
    d = start(make_daemon, backend={"sim_width": 1080, "sim_height": 1920})
    tap = {"input": {"type": "tap", "point": {"x": 500, "y": 500}}}
    # One client on one kept-alive connection, as an agent's loop is.
    async with aiohttp.ClientSession() as session:

        async def tap_once() -> None:
            async with session.post(f"{d.base}/api/tools/touch_gesture", json=tap) as r:
                assert (await r.json())["is_error"] is False

        for _ in range(3):  # warm: the first calls load what every later call shares
            await tap_once()
        before = rss_mb(d)
        for _ in range(10):
            await tap_once()
        grown = rss_mb(d) - before
    assert grown < 30, f"the daemon grew {grown:.0f} MB over ten taps"
