"""The daemon's memory against the small-board budgets, and its CPU per operation (issue 34).

Prints, never asserts. Every figure counts everything the daemon runs: its own process and
its OCR worker, read from /proc. "RSS" adds the processes' resident sets (a library both map
counts twice: an upper bound), "PSS" adds their proportional sets (shared pages split between
them: what the board's RAM really holds). Peaks during a read are sampled every 10 ms; the
kernel's own peak (VmHWM, per process) is printed beside them.

Budgets (a 512 MB board with OCR; 256 MB without):
- idle after start, nothing captured yet: <= 64 MB;
- with screenshots taken and one stream viewer at 15 fps: <= 112 MB;
- during screen_text of a full 1080x1920 frame: a peak of <= 256 MB in all, and back to
  within 16 MB of the figure before the read within 30 s of the last read.

Here, with `make run`'s daemon (the simulated target, whose renderer stands where the board's
capture is), in the clone's venv. The board daemon's own figures (board backend, gadget up,
vivid capture, the deployed packages, the unit's MemoryMax in force) are measured by the board
VM tier (tests/board: "board VM measurement: memory ...") on every `make test`.

The floors, measured in the same run: a bare process that imports only the libraries the
daemon holds at idle (nothing of ours), and the same OCR engine reading the same frame in a
bare process; the daemon should sit within 16 MB of the first, and its rise during a read
within 10 % of the second's peak.

CPU (user + system seconds, the daemon and its worker): 60 s idle, one screenshot, one second
of the stream at 15 fps, one stability wait, one full-frame OCR (the worker's start beside
it). The simulated target renders frames in the daemon's process; its share is measured
apart (the renderer alone, per frame) and taken out, since a board's capture replaces it.

Run: .venv/bin/python tests/bench/bench_memory.py  [--quick: 10 s idle instead of 60]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from daemon.sim.device import VirtualDevice
from tests.service.daemonproc import DaemonProcess

IDLE_BUDGET, WORKING_BUDGET, OCR_BUDGET, BACK_WITHIN, BACK_IN_S = 64, 112, 256, 16, 30
TICKS = os.sysconf("SC_CLK_TCK")
PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024
# What the daemon must hold at idle: the HTTP server, logging, the wire codecs, the schema
# validators, metrics, DNS-SD and udev (the capture's hotplug). Nothing of Fingertip's.
IDLE_LIBRARIES = (
    "asyncio aiohttp.web structlog msgpack orjson fastjsonschema jsonschema prometheus_client "
    "zeroconf pyudev sqlite3 ssl"
)


@dataclass(frozen=True)
class Mem:
    rss: float
    pss: float
    hwm: float

    def __add__(self, other: Mem) -> Mem:
        return Mem(self.rss + other.rss, self.pss + other.pss, self.hwm + other.hwm)


def mem(pid: int) -> Mem:
    """One process's RSS, PSS and peak RSS (VmHWM), MB; zeros once it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return Mem(0, 0, 0)

    def field(text: str, name: str) -> float:
        for line in text.splitlines():
            if line.startswith(name + ":"):
                return int(line.split()[1]) / 1024
        return 0.0

    return Mem(field(status, "VmRSS"), field(rollup, "Pss"), field(status, "VmHWM"))


def children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        try:
            out += [int(c) for c in task.read_text().split()]
        except OSError:
            continue
    return out


def in_all(pid: int) -> Mem:
    total = mem(pid)
    for child in children(pid):
        total = total + mem(child)
    return total


def cpu_s(pid: int, *, waited_children: bool = True) -> float:
    """User + system seconds of pid, its live children, and (cutime, cstime) the ones it
    waited for: the OCR workers that already exited."""

    def own(p: int) -> tuple[float, float]:
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return 0.0, 0.0
        return (int(fields[11]) + int(fields[12])) / TICKS, (
            int(fields[13]) + int(fields[14])
        ) / TICKS

    mine, waited = own(pid)
    live = sum(own(c)[0] for c in children(pid))
    return mine + live + (waited if waited_children else 0.0)


class PeakSampler:
    """Samples in_all(pid) every 10 ms on a thread: the highest RSS and PSS sums seen."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.rss = self.pss = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> PeakSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            m = in_all(self.pid)
            self.rss, self.pss = max(self.rss, m.rss), max(self.pss, m.pss)
            self._stop.wait(0.01)


def row(name: str, value: float, budget: float | None = None, note: str = "") -> None:
    verdict = ""
    if budget is not None:
        verdict = f"budget {budget:g}: " + ("met" if value <= budget else "OVER")
    print(f"  {name:58s} {value:7.1f} MB  {verdict:20s} {note}".rstrip(), flush=True)


def bare(code: str) -> dict[str, Any]:
    """Run `code` in a bare process of this venv; it prints one JSON line of figures."""
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


MEASURE = """
    import json, os, threading, time
    from pathlib import Path
    def mb(name, text):
        return next(int(l.split()[1]) / 1024 for l in text.splitlines() if l.startswith(name))
    def now():
        return mb("VmRSS:", Path("/proc/self/status").read_text()), mb(
            "Pss:", Path("/proc/self/smaps_rollup").read_text())
"""


def idle_floor() -> dict[str, Any]:
    return bare(
        MEASURE
        + f"""
    for name in {IDLE_LIBRARIES.split()!r}:
        __import__(name)
    rss, pss = now()
    print(json.dumps({{"rss": rss, "pss": pss}}))
    """
    )


def ocr_floor(frame_png: Path) -> dict[str, Any]:
    """The same engine, settings and allocator, reading the same frame in a bare process."""
    return bare(
        MEASURE
        + f"""
    import cv2
    from daemon.memory import give_back_memory, map_large_blocks
    from daemon.screen.ocr_engine import RapidEngine
    map_large_blocks()
    engine = RapidEngine()
    image = cv2.imread({str(frame_png)!r})
    before = now()
    peak = [0.0, 0.0]
    done = threading.Event()
    def sample():
        while not done.is_set():
            r, p = now()
            peak[0], peak[1] = max(peak[0], r), max(peak[1], p)
            done.wait(0.01)
    t = threading.Thread(target=sample); t.start()
    engine.read(image)
    done.set(); t.join()
    give_back_memory()
    hwm = mb("VmHWM:", Path("/proc/self/status").read_text())
    print(json.dumps({{"loaded_rss": before[0], "peak_rss": peak[0], "peak_pss": peak[1],
                      "hwm": hwm}}))
    """
    )


def renderer_cpu_per_frame() -> float:
    """The simulated target's renderer alone: CPU seconds per 1080x1920 frame."""
    from daemon.sim.render import Renderer

    dev = VirtualDevice("ios", 1080, 1920)
    renderer = Renderer()
    renderer.render(dev.view(None))
    start = time.process_time()
    n = 20
    for i in range(n):
        renderer.render(dev.view(i))
    return (time.process_time() - start) / n


class Client:
    def __init__(self, session: aiohttp.ClientSession, daemon: DaemonProcess) -> None:
        self.session, self.daemon = session, daemon

    async def call(self, tool: str, args: dict[str, Any] | None = None) -> Any:
        async with self.session.post(
            f"{self.daemon.base}/api/tools/{tool}", json={"input": args or {}}
        ) as r:
            body = await r.json()
        if body.get("is_error"):
            raise RuntimeError(f"{tool}: {body.get('error')}")
        return json.loads(body["output"])

    async def sim_state(self) -> dict[str, Any]:
        async with self.session.get(
            f"{self.daemon.base}/api/sim/state",
            headers={"Authorization": f"Bearer {self.daemon.token}"},
        ) as r:
            return dict(await r.json())

    async def stream(self, seconds: float, fps: int = 15) -> int:
        """One viewer for `seconds`; the number of frames it took."""
        frames = 0
        url = f"{self.daemon.base}/api/stream?fps={fps}&token={self.daemon.token}"
        async with self.session.get(url) as r:
            end = time.monotonic() + seconds
            async for chunk in r.content.iter_any():
                frames += chunk.count(b"Content-Type: image/jpeg")
                if time.monotonic() >= end:
                    break
        return frames


def tile_point(name: str) -> dict[str, float]:
    tile = next(t for t in VirtualDevice("ios", 1080, 1920).layout.tiles if t.name == name)
    return {"x": (tile.icon.x0 + tile.icon.x1) / 2, "y": (tile.icon.y0 + tile.icon.y1) / 2}


async def until_back(pid: int, target: float, limit_s: float) -> tuple[float, Mem]:
    """Seconds until the daemon's PSS in all is back to `target` (or limit_s), and the figure."""
    start = time.monotonic()
    while True:
        m = in_all(pid)
        if m.pss <= target or time.monotonic() - start >= limit_s:
            return time.monotonic() - start, m
        await asyncio.sleep(0.25)


async def make_run(idle_s: float, frame_png: Path) -> None:
    render_s = renderer_cpu_per_frame()
    with tempfile.TemporaryDirectory() as tmp:
        daemon = DaemonProcess(
            Path(tmp),
            {
                "backend": {"sim_width": 1080, "sim_height": 1920},
                "log": {"level": "info"},
                "ocr": {"enabled": True},
            },
            env=dict(e.split("=", 1) for e in os.environ.get("BENCH_DAEMON_ENV", "").split()),
        ).start()
        try:
            assert daemon.proc is not None
            pid = daemon.proc.pid
            async with aiohttp.ClientSession() as session:
                await run_daemon(Client(session, daemon), pid, idle_s, render_s, frame_png)
        finally:
            daemon.stop()


async def run_daemon(c: Client, pid: int, idle_s: float, render_s: float, frame_png: Path) -> None:
    print("make run (simulated target 1080x1920), the daemon and its OCR worker:")
    idle = in_all(pid)
    row("idle after start, PSS", idle.pss, IDLE_BUDGET, f"(RSS {idle.rss:.1f})")
    await c.call("health_check")
    cpu: dict[str, float] = {}
    t0 = cpu_s(pid)
    await asyncio.sleep(idle_s)
    cpu[f"{idle_s:.0f} s idle"] = cpu_s(pid) - t0
    for _ in range(4):
        await c.call("screenshot")
    shots = in_all(pid)
    row("after 4 screenshots, PSS", shots.pss, WORKING_BUDGET, f"(RSS {shots.rss:.1f})")

    async def measured(name: str, op: Any, times: int = 1) -> None:
        """CPU per run of `op` (an async callable), over `times` runs: /proc counts in 10 ms
        ticks, too coarse for one screenshot."""
        before_frames = (await c.sim_state())["frames_rendered"]
        start = cpu_s(pid)
        for _ in range(times):
            await op()
        spent = (cpu_s(pid) - start) / times
        rendered = ((await c.sim_state())["frames_rendered"] - before_frames) / times
        cpu[name] = spent
        cpu[name + " (renderer's share out)"] = spent - rendered * render_s

    await measured("one screenshot", lambda: c.call("screenshot"), 20)
    with PeakSampler(pid) as during_stream:
        viewer = asyncio.ensure_future(c.stream(6.0))
        await asyncio.sleep(3.0)  # the stream runs; measured while it does
        streaming = in_all(pid)
        await viewer
    row(
        "screenshots + one stream viewer at 15 fps, PSS",
        streaming.pss,
        WORKING_BUDGET,
        f"(RSS {streaming.rss:.1f}; peak PSS {during_stream.pss:.1f})",
    )
    await measured("one second of stream at 15 fps", lambda: c.stream(1.0), 5)
    await measured(
        "one stability wait (500 ms stable)",
        lambda: c.call("wait_for_stable_screen", {"timeout_ms": 3000, "stable_ms": 500}),
        5,
    )
    # OCR: a full frame, then three other screens; the peak in all, then the way back.
    before = in_all(pid)
    with PeakSampler(pid) as peak:
        start = cpu_s(pid)
        first = await c.call("screen_text")
        cpu["one full-frame OCR, the worker's start included"] = cpu_s(pid) - start
    worker = children(pid)
    start = cpu_s(pid)
    await c.call("screen_text", {"min_confidence": 0.4})  # the same frame: cached, no run
    await c.call("touch_gesture", {"type": "tap", "point": tile_point("Notes")})
    await c.call("wait_for_stable_screen", {"timeout_ms": 3000, "stable_ms": 300})
    start = cpu_s(pid)
    await c.call("screen_text")
    cpu["one full-frame OCR, the worker running"] = cpu_s(pid) - start
    rise = peak.pss - before.pss
    print(
        f"  screen_text of a full frame ({len(first['lines'])} lines; worker pid "
        f"{worker[0] if worker else '?'}):"
    )
    row("  before the read, PSS", before.pss, None, f"(RSS {before.rss:.1f})")
    row("  peak in all during the read, PSS", peak.pss, OCR_BUDGET, f"(RSS {peak.rss:.1f})")
    row("  the daemon's rise during the read, PSS", rise)
    with PeakSampler(pid) as more:
        for app in ("Settings", "Maps", "Clock"):
            await c.call("touch_gesture", {"type": "tap", "point": {"x": 80, "y": 60}})
            await c.call("touch_gesture", {"type": "tap", "point": tile_point(app)})
            await c.call("wait_for_stable_screen", {"timeout_ms": 3000, "stable_ms": 300})
            await c.call("screen_text")
    row("  peak in all over three more screens' reads, PSS", more.pss, OCR_BUDGET)
    held = in_all(pid)
    row("  right after the last read, PSS", held.pss, None, f"(RSS {held.rss:.1f})")
    took, back = await until_back(pid, before.pss + BACK_WITHIN, 60.0)
    row(
        f"  back within {BACK_WITHIN} MB of before the read, after {took:.1f} s, PSS",
        back.pss,
        before.pss + BACK_WITHIN,
        f"(worker running: {bool(children(pid))}; target <= {BACK_IN_S} s)",
    )
    print("CPU per operation (user + system seconds of the daemon and its worker):")
    for name, seconds in cpu.items():
        print(f"  {name:62s} {seconds:7.3f} s")
    print(f"  (the renderer alone: {render_s * 1000:.1f} ms of CPU per 1080x1920 frame)")
    print("floors, bare processes in the same run:")
    idle_f = idle_floor()
    row("the idle libraries alone, PSS", idle_f["pss"], None, f"(RSS {idle_f['rss']:.1f})")
    row(
        "  make run's daemon idle above that floor, PSS",
        idle.pss - idle_f["pss"],
        None,
        "(the simulated target: its renderer, numpy, OpenCV, its XKB reader; the board "
        "daemon's idle figure is the board VM's)",
    )
    ocr_f = ocr_floor(frame_png)
    row(
        "the OCR engine reading the same frame, peak PSS",
        ocr_f["peak_pss"],
        None,
        f"(RSS {ocr_f['peak_rss']:.1f}, VmHWM {ocr_f['hwm']:.1f}, "
        f"loaded {ocr_f['loaded_rss']:.1f})",
    )
    row(
        "  the daemon's rise during the read, against 1.1x that peak",
        rise,
        1.1 * ocr_f["peak_pss"],
    )


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="10 s idle instead of 60")
    args = parser.parse_args()
    import cv2

    from daemon.sim.render import Renderer

    with tempfile.TemporaryDirectory() as tmp:
        frame_png = Path(tmp) / "ios-home.png"
        cv2.imwrite(str(frame_png), Renderer().render(VirtualDevice("ios", 1080, 1920).view(None)))
        await make_run(10.0 if args.quick else 60.0, frame_png)


if __name__ == "__main__":
    asyncio.run(main())
