"""The OCR service with the real engine in its real worker process: nothing loaded until the
first read, one shared run per frame, the bounded queue, matching over a real reading, and a
worker that is killed, hangs or retires costing only the read it was doing."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from daemon.config import OcrConfig
from daemon.errors import ToolError
from daemon.frames import Frame
from daemon.memory import board_memory_mb, ocr_enabled
from daemon.screen import ocr as ocr_mod
from daemon.screen.ocr import Ocr
from daemon.screen.visual_tree import Region, Tree, find, snapshot_id, snapshot_key
from tests.ocr_screens import centered_in, sim_screens

needs_engine = pytest.mark.skipif(not ocr_mod.engine_installed(), reason="OCR engine missing")


def frame(image: np.ndarray, seq: int) -> Frame:
    return Frame(image, seq, time.monotonic(), time.time())


def alive(pid: int) -> bool:
    """Whether pid runs (a zombie, reaped by nobody yet, counts as gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


async def until(condition: object, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


def test_auto_turns_ocr_on_where_the_board_has_512_mb() -> None:
    meminfo = Path("/proc/meminfo").read_text().split()
    assert board_memory_mb() == int(meminfo[meminfo.index("MemTotal:") + 1]) // 1024
    assert ocr_enabled("auto", 440) and not ocr_enabled("auto", 215)
    assert ocr_enabled(True, 100) and not ocr_enabled(False, 8000)


@needs_engine
def test_the_engine_runs_in_the_worker_never_in_the_daemons_process() -> None:
    # In a process of its own: other tests load the engine in this one.
    probe = """
import asyncio, json, sys, time
import numpy as np
from daemon.frames import Frame
from daemon.screen.ocr import Ocr, engine_installed
async def main():
    service = Ocr()
    made = [service.loaded, service.worker_pid, engine_installed()]
    image = np.full((64, 64, 3), 255, np.uint8)
    await service.read(Frame(image, 1, time.monotonic(), time.time()))
    read = [service.loaded, service.worker_pid is not None]
    await service.close()
    heavy = sorted({"rapidocr", "onnxruntime"} & set(sys.modules))
    print(json.dumps([made, read, heavy]))
asyncio.run(main())
"""
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    made, read, heavy = json.loads(out.stdout.splitlines()[-1])
    assert made == [False, None, True]  # nothing started; the engine found without importing it
    assert read == [True, True] and heavy == []


@needs_engine
async def test_callers_of_one_frame_share_one_run_and_the_queue_is_bounded() -> None:
    service = Ocr()
    notes = next(s for s in sim_screens() if s.name == "ios Notes with text")
    f = frame(notes.image, 7)
    a, b = await asyncio.gather(service.read(f), service.read(f))
    assert a is b and service.cached(7) is a
    assert any(line.text == "Notes row 3" for line in a.lines)
    assert service.loaded and service.counts["worker_starts"] == 1
    # distinct tiny frames: one runs, MAX_QUEUED wait, the next is refused at once
    blank = np.full((64, 64, 3), 255, np.uint8)
    tasks = [asyncio.ensure_future(service.read(frame(blank, 100 + i))) for i in range(6)]
    results = await asyncio.gather(*tasks, return_exceptions=True)
    refused = [r for r in results if isinstance(r, ToolError)]
    assert [r.code for r in refused] == ["ocr_busy"] and refused[0].retryable
    await service.close()


@needs_engine
async def test_find_ranks_whole_lines_first_and_boxes_the_matched_words() -> None:
    service = Ocr()
    notes = next(s for s in sim_screens() if s.name == "ios Notes with text")
    reading = await service.read(frame(notes.image, 1))
    tree = Tree.of(reading)
    found = find(tree, "notes row 1")  # row 1 and rows 10..19 (contains, any case)
    assert found[0]["line_text"] == "Notes row 1" and found[0]["whole_line"] is True
    assert all(not m["whole_line"] for m in found[1:]) and len(found) > 1
    typed = find(tree, "Anna at", "exact")
    assert len(typed) == 1 and typed[0]["line_text"].startswith("Meet Anna")
    drawn = {w.text: w.box for w in notes.words}
    x0, y0, x1, y1 = drawn["Anna"][0], drawn["Anna"][1], drawn["at"][2], drawn["at"][3]
    px = typed[0]["box"]
    cx, cy = (px["x0"] + px["x1"]) / 2, (px["y0"] + px["y1"]) / 2
    assert x0 <= cx <= x1 and y0 <= cy <= y1
    assert find(tree, "anna", "exact") == []  # exact is case-sensitive
    await service.close()


@needs_engine
async def test_a_region_reads_only_its_pixels_in_frame_coordinates() -> None:
    service = Ocr()
    home = next(s for s in sim_screens() if s.name == "ios home")
    f = frame(home.image, 3)
    band = Region(0, 250, 1000, 450)  # away from the origin: an offset left out would show
    crop = band.crop(f.width, f.height)
    assert crop is not None and crop[0] == 0 and crop[2] == 1080
    assert 430 < crop[1] < 480 and 864 < crop[3] < 910  # the band's 480-864 px + margin
    assert Region(0, 0, 1000, 1000).crop(f.width, f.height) is None  # the whole frame
    part = await service.read(f, crop)
    assert part.crop == crop and part.lines
    assert all(crop[1] <= ln.box[1] and ln.box[3] <= crop[3] for ln in part.lines)
    sid = snapshot_id(part)
    assert sid.endswith("-r" + ".".join(map(str, crop))) and snapshot_key(sid) == (3, crop)
    assert service.cached(3, crop) is part and service.cached(3) is None
    # Each label drawn inside the band is read in the band where the renderer drew it and where
    # the whole frame's reading puts it: frame pixels. Judged on the drawn labels, not on every
    # word read, and not on the icons' one-letter glyphs: which glyphs read as letters depends
    # on the crop and on the CPU's kernels (an AVX-512 machine read an "s" in the band that the
    # whole frame lacked).
    whole = await service.read(f)
    assert snapshot_key(snapshot_id(whole)) == (3, None)
    whole_words = [w for ln in whole.lines for w in ln.words]
    band_words = [w for ln in Tree.of(part, band).lines for w in ln.words]
    labels = [d for d in home.words if len(d.text) > 1 and d.box[1] >= 480 and d.box[3] <= 864]
    assert {"Maps", "Clock", "Notes", "Weather"} <= {d.text for d in labels}
    for label in labels:
        for reading in (band_words, whole_words):
            assert any(w.text == label.text and centered_in(w.box, label.box) for w in reading), (
                label,
                reading is whole_words,
            )
    # once the whole frame is read, it answers any region of that frame
    assert await service.read(f, (0, 0, 10, 10)) is whole
    await service.close()


@needs_engine
async def test_a_worker_killed_mid_read_costs_that_read_only() -> None:
    service = Ocr()
    home = next(s for s in sim_screens() if s.name == "ios home")
    await service.read(frame(home.image, 1), (0, 0, 200, 200))  # the worker is up
    pid = service.worker_pid
    assert pid is not None
    read = asyncio.ensure_future(service.read(frame(home.image, 2)))
    await until(service._lock.locked)  # the frame is on its way to the worker (or being read)
    os.kill(pid, signal.SIGKILL)  # what the kernel's OOM killer does
    with pytest.raises(ToolError) as failed:
        await read
    assert failed.value.code == "ocr_unavailable" and failed.value.retryable
    assert "SIGKILL" in failed.value.details["worker"]
    assert service.cached(2) is None and not alive(pid)
    assert service.status()["worker_failures"] == 1 and service.load_error is None
    # The next read starts a new worker and reads.
    again = await service.read(frame(home.image, 3))
    assert any(w.text == "Notes" for ln in again.lines for w in ln.words)
    assert service.worker_pid not in (None, pid)
    await service.close()


@needs_engine
async def test_a_hung_worker_is_killed_at_the_read_timeout() -> None:
    service = Ocr()
    blank = np.full((64, 64, 3), 255, np.uint8)
    await service.read(frame(blank, 1))  # started (its engine load is not what is timed here)
    service.config = OcrConfig(read_timeout_s=3.0)
    pid = service.worker_pid
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)  # starved: it takes the frame's first bytes, never answers
    try:
        started = time.monotonic()
        with pytest.raises(ToolError) as failed:
            await service.read(frame(blank, 2))
        assert failed.value.code == "ocr_unavailable"
        assert time.monotonic() - started < 30
        assert not alive(pid)
    finally:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)
    service.config = OcrConfig()  # a new worker's start is not what is timed here either
    await service.read(frame(blank, 3))
    await service.close()


@needs_engine
async def test_an_idle_worker_exits_and_the_next_read_starts_another() -> None:
    service = Ocr(OcrConfig(idle_exit_s=1.0))
    blank = np.full((64, 64, 3), 255, np.uint8)
    await service.read(frame(blank, 1))
    pid = service.worker_pid
    assert pid is not None
    await until(lambda: not service.loaded and not alive(pid))
    assert service.status()["worker"] == "stopped" and service.counts["worker_failures"] == 0
    # Its frame went with it (6 MB at 1080p); its lines stay for screen_text's since.
    assert service.cached(1) is None and service.remembered(1) is not None
    await service.read(frame(blank, 2))
    assert service.worker_pid not in (None, pid)
    await service.close()
    assert not service.loaded


async def test_an_engine_that_cannot_load_is_reported_once_not_retried(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # The worker runs with a `rapidocr` that raises at import: a broken install.
    (tmp_path / "rapidocr").mkdir()
    (tmp_path / "rapidocr" / "__init__.py").write_text("raise ImportError('broken install')\n")
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    service = Ocr()
    blank = np.full((64, 64, 3), 255, np.uint8)
    with pytest.raises(ToolError) as first:
        await service.read(frame(blank, 1))
    assert first.value.code == "ocr_engine_failed" and "broken install" in first.value.message
    with pytest.raises(ToolError) as second:
        await service.read(frame(blank, 2))
    assert second.value.code == "ocr_engine_failed"
    assert service.counts["worker_starts"] == 1 and not service.loaded
    await service.close()
