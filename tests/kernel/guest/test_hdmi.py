"""HDMI bridges, as vivid's HDMI input plays one (guest only).

vivid is reloaded for this module with one HDMI input (and an HDMI output beside it): it has DV
timings, EDID get/set, a signal-mode control (no signal, no lock, out of range, each raising
SOURCE_CHANGE; in those modes it keeps delivering noise, as a real bridge may deliver garbage)
and a Disconnect control. The module puts vivid back as the tier loads it when it ends.

What is checked: the device takes the native DV path and gets our EDID; each signal state shows
in health_check and /metrics and is each screen tool's code, and streaming resumes by itself;
a change of timings gives frames in the new size (and calls the source-change hooks); a
cleared EDID is no signal; a disconnect is capture_unavailable and capture comes back by itself.
Times are recorded, and bounded with the VM's measured slowness (usbhost.SLOWNESS) applied.
"""

from __future__ import annotations

import ast
import asyncio
import ctypes
import fcntl
import os
import re
import select
import subprocess
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from usbhost import SLOWNESS

from daemon.config import (
    BackendConfig,
    CaptureConfig,
    Config,
    IpcConfig,
    StateConfig,
)
from daemon.errors import ToolError
from daemon.screen import edid, v4l2
from daemon.screen.capture import V4L2Capture
from daemon.service import Daemon, build

pytestmark = pytest.mark.skipif(
    not os.environ.get("FINGERTIP_KERNEL_GUEST"), reason="runs inside the kernel-test VM"
)

PROJECT = Path(__file__).resolve().parents[3]
VIVID_CID_BASE = 0x00F0F000
SIGNAL_MODE = VIVID_CID_BASE + 62  # vivid's "DV Timings Signal Mode"
DV_TIMINGS = VIVID_CID_BASE + 63  # its "DV Timings" menu (used in the "selected" mode)
DISCONNECT = VIVID_CID_BASE + 65
MODES = {"current": 0, "no_signal": 1, "no_sync": 2, "out_of_range": 3, "selected": 4}
# One HDMI input, and an HDMI output (node_types: video capture 0x1, video output 0x100).
HDMI_PARAMS = ["n_devs=1", "node_types=0x101", "num_inputs=1", "input_types=0x3"]
HDMI_PARAMS += ["num_outputs=1", "output_types=0x1"]
# The limits: a state within 1 s, frames again (or in the new size) within 3 s.
STATE_LIMIT_S = 1.0 * SLOWNESS
IN_FLIGHT_FRAMES = 4  # buffers the driver had filled when a fault control changed
RECOVERY_LIMIT_S = 3.0 * SLOWNESS


class QueryMenu(ctypes.Structure):
    _pack_ = 1
    _fields_ = [
        ("id", ctypes.c_uint32),
        ("index", ctypes.c_uint32),
        ("name", ctypes.c_char * 32),
        ("reserved", ctypes.c_uint32),
    ]


VIDIOC_QUERYMENU = 0xC02C5625


def tier_vivid_params() -> list[str]:
    """vivid's parameters as the kernel tier loads it (tests/kernel/setup.py's MODULE_PARAMS)."""
    tree = ast.parse((PROJECT / "tests/kernel/setup.py").read_text())
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and ast.unparse(stmt.targets[0]) == "MODULE_PARAMS":
            return str(ast.literal_eval(stmt.value)["vivid"]).split()
    raise AssertionError("tests/kernel/setup.py has no MODULE_PARAMS")


def vivid_ko() -> Path:
    root = Path(os.environ.get("FINGERTIP_KERNEL_ROOT", "/nonexistent"))
    sub = f"lib/modules/{os.uname().release}/kernel/drivers/media/test-drivers/vivid"
    for ko in sorted((root / sub).glob("vivid.ko*")):
        return ko
    raise AssertionError(f"vivid.ko not found under {root / sub}")


def capture_node() -> str | None:
    root = Path("/sys/class/video4linux")
    for node in sorted(root.iterdir()) if root.exists() else []:
        if (node / "name").read_text().strip().endswith("vid-cap"):
            return f"/dev/{node.name}"
    return None


def reload_vivid(params: list[str]) -> None:
    subprocess.run(["rmmod", "vivid"], check=True, capture_output=True)
    subprocess.run(["insmod", str(vivid_ko()), *params], check=True, capture_output=True)


def wait_for(check: Callable[[], Any], what: str, limit: float = 30.0) -> Any:
    end = time.monotonic() + limit * SLOWNESS
    while not (value := check()):
        assert time.monotonic() < end, f"never happened: {what}"
        time.sleep(0.02)
    return value


@pytest.fixture(scope="module")
def node() -> Iterator[str]:
    reload_vivid(HDMI_PARAMS)
    try:
        yield wait_for(capture_node, "vivid's HDMI capture node")
    finally:
        with_hdmi = Path("/sys/module/vivid").exists()
        if with_hdmi:
            subprocess.run(["rmmod", "vivid"], check=False, capture_output=True)
        subprocess.run(["insmod", str(vivid_ko()), *tier_vivid_params()], check=True)


def control(node: str, cid: int, value: int) -> None:
    fd = os.open(node, os.O_RDWR)
    try:
        v4l2.ioctl(fd, v4l2.S_CTRL, v4l2.Control(cid, value))
    finally:
        os.close(fd)


def set_mode(node: str, mode: str) -> None:
    control(node, SIGNAL_MODE, MODES[mode])


def preset_index(node: str, width: int, height: int, fps: int = 60) -> int:
    """The DV Timings menu entry for a progressive preset (vivid names them 1920x1080p60)."""
    fd = os.open(node, os.O_RDWR)
    try:
        for index in range(256):
            menu = QueryMenu(id=DV_TIMINGS, index=index)
            try:
                fcntl.ioctl(fd, VIDIOC_QUERYMENU, menu, True)
            except OSError:
                continue
            m = re.match(r"(\d+)x(\d+)p(\d+)", menu.name.decode())
            if m and tuple(map(int, m.groups())) == (width, height, fps):
                return index
    finally:
        os.close(fd)
    raise AssertionError(f"vivid has no {width}x{height}p{fps} preset")


def read_edid(node: str) -> bytes:
    fd = os.open(node, os.O_RDWR)
    try:
        return v4l2.get_edid(fd)
    finally:
        os.close(fd)


def write_edid(node: str, data: bytes) -> None:
    fd = os.open(node, os.O_RDWR)
    try:
        v4l2.set_edid(fd, data)
    finally:
        os.close(fd)


def config(node: str, **kw: Any) -> CaptureConfig:
    base: dict[str, Any] = {"device": node, "fourcc": "YUYV", "idle_stop_s": 30.0}
    base.update(kw)
    return CaptureConfig(**base)


@pytest.fixture(autouse=True)
def streaming_source(node: str) -> Iterator[None]:
    """Each test starts with a source sending vivid's current timings (720p60 at load)."""
    set_mode(node, "current")
    yield
    set_mode(node, "current")


async def test_the_bridge_gets_our_edid_and_streams_the_sources_timings(
    node: str, record_property: Callable[[str, object], None]
) -> None:
    cap = V4L2Capture(config(node))
    try:
        frame = await cap.frame(timeout=20 * SLOWNESS)
        status = cap.capture_status()
        assert status["path"] == "dv" and status["state"] == "streaming", status
        timings = status["timings"]
        assert frame.image.shape == (timings["height"], timings["width"], 3)
        assert frame.image.std() > 10  # vivid's pattern, not a blank buffer
        assert status["edid"]["loaded"] and status["edid"]["underscan"], status
        # Ours, as the target would read it (vivid rewrites the physical address, as a CEC
        # repeater would: the one part that is not ours).
        assert edid.same(read_edid(node), edid.build())
        record_property("hdmi_timings", f"{timings['width']}x{timings['height']}")
    finally:
        cap.close()


@pytest.fixture
async def daemon(node: str, tmp_path: Path) -> AsyncIterator[Daemon]:
    """The daemon's own composition (board backend on the HDMI node), not started: its tools
    are called in-process through its catalog."""
    cfg = Config(
        backend=BackendConfig(kind="board"),
        capture=config(node),
        state=StateConfig(dir=str(tmp_path / "state")),
        ipc=IpcConfig(socket=str(tmp_path / "ipc.sock")),
    )
    d = build(cfg)
    d.metrics.watch_connections({})  # what start() does: the gauges read at scrape time
    yield d
    await d.backend.capture.aclose()


async def health_state(d: Daemon) -> dict[str, Any]:
    out = await d.catalog.call("health_check", {})
    assert out.error is None, out.error
    capture: dict[str, Any] = out.result["capture"]
    return capture


async def wait_state(d: Daemon, state: str, limit: float) -> float:
    """Seconds until health_check shows `state` (fails past `limit`)."""
    start = time.monotonic()
    while (await health_state(d))["state"] != state:
        assert time.monotonic() - start < limit, f"health_check never said {state}"
        await asyncio.sleep(0.02)
    return time.monotonic() - start


async def wait_screenshot(d: Daemon, limit: float) -> tuple[float, dict[str, Any]]:
    start = time.monotonic()
    while True:
        out = await d.catalog.call("screenshot", {"format": "png"})
        if out.error is None:
            return time.monotonic() - start, out.result
        assert out.error.retryable, out.error
        assert time.monotonic() - start < limit, f"no screenshot again: {out.error}"
        await asyncio.sleep(0.05)


async def test_each_signal_state_shows_answers_its_code_and_streaming_resumes(
    node: str, daemon: Daemon, record_property: Callable[[str, object], None]
) -> None:
    await wait_screenshot(daemon, 20 * SLOWNESS)  # streaming, the reader running
    # vivid's "No Signal" mode also takes the +5 V away (V4L2_CID_DV_RX_POWER_PRESENT = 0), as
    # an unplugged cable does: the bridge's answers mean no cable. "no_signal" itself (a cable,
    # no video: a sleeping target) is what a cleared EDID gives (test_a_cleared_edid_...).
    for mode, state in (("no_signal", "no_cable"), ("no_sync", "no_sync"), ("out_of_range",) * 2):
        set_mode(node, mode)
        shown = await wait_state(daemon, state, STATE_LIMIT_S)
        record_property(f"{state}_shown_s", f"{shown:.2f}")
        health = await health_state(daemon)
        assert health["available"] is False and "timings" not in health
        for tool in ("screenshot", "wait_for_stable_screen"):
            out = await daemon.catalog.call(tool, {})
            assert out.error is not None, f"{tool} answered during {state}"
            err = out.error.to_dict()
            assert err["code"] == "tool_unavailable" and err["retryable"] is True, err
            assert err["details"]["code"] == state and err["details"]["remediation"], err
        # The frame source itself (what evidence after an action and the stream use) answers
        # the state's own code at once, not a frame of vivid's noise and not a timeout.
        asked = time.monotonic()
        with pytest.raises(ToolError) as e:
            await daemon.backend.frames.frame(timeout=10)
        assert e.value.code == state and e.value.retryable
        assert time.monotonic() - asked < 1.0 * SLOWNESS
        metrics = daemon.metrics.scrape().decode()
        assert f'fingertip_capture_state{{state="{state}"}} 1.0' in metrics
        set_mode(node, "current")
        back, shot = await wait_screenshot(daemon, RECOVERY_LIMIT_S)
        record_property(f"{state}_recovered_s", f"{back:.2f}")
        assert (await health_state(daemon))["state"] == "streaming"
        assert shot["width"] > 0


async def test_new_timings_give_frames_in_the_new_size(
    node: str, record_property: Callable[[str, object], None]
) -> None:
    cap = V4L2Capture(config(node))
    heard: list[dict[str, Any]] = []
    cap.on_source_change.append(heard.append)
    try:
        await cap.frame(timeout=20 * SLOWNESS)
        for width, height in ((1920, 1080), (1024, 768), (1280, 720)):
            # Through "current" (the timings now) so that "selected" is a change that takes
            # the new menu entry, whether or not vivid clusters the two controls.
            set_mode(node, "current")
            control(node, DV_TIMINGS, preset_index(node, width, height))
            changed = time.monotonic()
            set_mode(node, "selected")
            while True:
                frame = await cap.frame(newer_than=changed, timeout=10 * SLOWNESS)
                if frame.image.shape[:2] == (height, width):
                    break
                assert time.monotonic() - changed < RECOVERY_LIMIT_S, (
                    f"still {frame.image.shape} after changing to {width}x{height}"
                )
            took = time.monotonic() - changed
            record_property(f"to_{width}x{height}_s", f"{took:.2f}")
            assert cap.capture_status()["timings"]["width"] == width
            assert heard[-1]["width"] == width and heard[-1]["height"] == height
    finally:
        cap.close()


async def test_the_daemons_screen_geometry_follows_a_new_mode(
    daemon: Daemon, node: str, record_property: Callable[[str, object], None]
) -> None:
    """The capture's source-change hook reaches the screen geometry (daemon.service wires it):
    after the source changes mode, health_check's screen is found in the new frame and a
    screenshot of the screen has the new size."""
    await wait_screenshot(daemon, 20 * SLOWNESS)
    for width, height in ((1024, 768), (1280, 720)):
        set_mode(node, "current")
        control(node, DV_TIMINGS, preset_index(node, width, height))
        changed = time.monotonic()
        set_mode(node, "selected")
        while True:
            await wait_screenshot(daemon, RECOVERY_LIMIT_S)
            out = await daemon.catalog.call("health_check", {})
            assert out.error is None, out.error
            screen = out.result["screen"]
            if screen.get("known") and screen["frame"] == {"width": width, "height": height}:
                break
            assert time.monotonic() - changed < RECOVERY_LIMIT_S, (
                f"health_check's screen still {screen} after changing to {width}x{height}"
            )
            await asyncio.sleep(0.05)
        # Found afresh in the new frame (vivid's colour bars end in a black one, which the
        # detector may take for a bar): a screenshot is that screen, in the new mode.
        found = screen["screen"]
        assert found["x"] + found["width"] <= width and found["y"] + found["height"] <= height
        assert found["width"] > width // 2 and found["height"] > height // 2
        _, shot = await wait_screenshot(daemon, RECOVERY_LIMIT_S)
        assert (shot["width"], shot["height"]) == (found["width"], found["height"])
        record_property(f"geometry_{width}x{height}_s", f"{time.monotonic() - changed:.2f}")


async def test_a_cleared_edid_is_no_signal(node: str) -> None:
    cap = V4L2Capture(config(node, idle_stop_s=0.3))
    try:
        await cap.frame(timeout=20 * SLOWNESS)
        assert edid.same(read_edid(node), edid.build())
        wait_for(lambda: not cap.running, "the reader stops when idle")
        write_edid(node, b"")  # vivid refuses this while buffers are allocated (EBUSY)
        ok, reason = cap.available()
        assert not ok and reason.startswith("no signal"), reason
        assert cap.capture_status()["state"] == "no_signal"
        with pytest.raises(ToolError) as e:
            await cap.frame(timeout=10)
        assert e.value.code == "no_signal" and e.value.details is not None
        assert e.value.details["state"] == "no_signal"
        # Loaded once per device: what someone cleared stays cleared until they load one.
        write_edid(node, edid.build())
        wait_for(lambda: cap.available() == (True, ""), "a signal again with the EDID back")
    finally:
        cap.close()


async def test_disconnect_then_back_by_itself(
    node: str, record_property: Callable[[str, object], None]
) -> None:
    cap = V4L2Capture(config(node), retry_s=0.5)
    try:
        before = await cap.frame(timeout=20 * SLOWNESS)
        fd = os.open(node, os.O_RDWR)
        try:
            v4l2.ioctl(fd, v4l2.S_CTRL, v4l2.Control(DISCONNECT, 1))
            since = time.monotonic()
            with pytest.raises(ToolError) as e:
                for _ in range(IN_FLIGHT_FRAMES + 1):  # frames vivid had in flight may come
                    since = (await cap.frame(newer_than=since, timeout=10 * SLOWNESS)).captured_at
            assert e.value.code == "capture_unavailable" and e.value.retryable
            assert cap.capture_status()["state"] == "no_device"
        finally:
            os.close(fd)  # vivid reconnects once every file on it is closed
        back = time.monotonic()
        while True:
            try:
                after = await cap.frame(newer_than=back, timeout=10 * SLOWNESS)
                break
            except ToolError as err:
                assert err.retryable, err
                assert time.monotonic() - back < 60 * SLOWNESS, "capture never came back"
                await asyncio.sleep(0.2)
        record_property("reconnected_s", f"{time.monotonic() - back:.2f}")
        assert after.seq > before.seq and cap.capture_status()["state"] == "streaming"
    finally:
        cap.close()


def output_node() -> str:
    root = Path("/sys/class/video4linux")
    for node in sorted(root.iterdir()):
        if (node / "name").read_text().strip().endswith("vid-out"):
            return f"/dev/{node.name}"
    raise AssertionError("vivid has no video output node (node_types 0x100)")


class HdmiSource:
    """vivid's HDMI output playing a target: one known YUYV picture, sent over and over (the
    loop copies the output's buffer into capture only while the output keeps streaming)."""

    def __init__(self, capture: str, picture: bytes, width: int, height: int) -> None:
        self.fd = os.open(output_node(), os.O_RDWR | os.O_NONBLOCK)
        ctl = os.open(capture, os.O_RDWR)
        try:  # the output's timings are the input's: the loop needs them equal
            v4l2.set_dv_timings(self.fd, v4l2.get_dv_timings(ctl))
        finally:
            os.close(ctl)
        out = v4l2.BUF_TYPE_VIDEO_OUTPUT
        pix = v4l2.set_format(self.fd, width, height, v4l2.fourcc("YUYV"), out)
        assert (pix.width, pix.height) == (width, height), (pix.width, pix.height)
        self.bufs = v4l2.Buffers(self.fd, 3, out, fill=picture)
        self.bufs.start()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            if select.select([], [self.fd], [], 0.2)[1]:
                try:
                    buf = self.bufs.dequeue()
                except BlockingIOError:
                    continue
                self.bufs.requeue(buf)  # the same picture again

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)
        self.bufs.close()
        os.close(self.fd)


async def test_the_sources_picture_arrives_pixel_exact_in_a_screenshot(
    node: str, daemon: Daemon
) -> None:
    import base64

    import cv2
    import numpy as np

    timings = (await health_state_streaming(daemon))["timings"]
    width, height = timings["width"], timings["height"]
    rng = np.random.default_rng(51)
    # Blocks of 16x16 pixels (so no encoder or chroma step could blur an edge away) of random
    # YUYV: a picture vivid's generator never makes.
    blocks = rng.integers(16, 236, (height // 16 + 1, width // 16 + 1, 4), dtype=np.uint8)
    yuyv = np.repeat(np.repeat(blocks, 16, axis=0), 8, axis=1)[:height, : width // 2]
    picture = np.ascontiguousarray(yuyv).reshape(height, width, 2)
    expected = cv2.cvtColor(picture, cv2.COLOR_YUV2BGR_YUYV)
    control(node, VIVID_CID_BASE + 1, 2)  # OSD text: none
    source = HdmiSource(node, picture.tobytes(), width, height)
    try:
        control(node, VIVID_CID_BASE + 37, 1)  # Loop Video: the input shows the output
        deadline = time.monotonic() + 30 * SLOWNESS
        while True:
            out = await daemon.catalog.call("screenshot", {"format": "png"})
            if out.error is None:
                png = base64.b64decode(out.result["data"])
                shot = cv2.imdecode(np.frombuffer(png, np.uint8), cv2.IMREAD_COLOR)
                if shot.shape == expected.shape and np.array_equal(shot, expected):
                    break
            assert time.monotonic() < deadline, "the output's picture never arrived exactly"
            await asyncio.sleep(0.1)
    finally:
        control(node, VIVID_CID_BASE + 37, 0)
        control(node, VIVID_CID_BASE + 1, 0)
        source.close()


async def health_state_streaming(d: Daemon) -> dict[str, Any]:
    await wait_screenshot(d, 20 * SLOWNESS)
    capture = await health_state(d)
    assert capture["state"] == "streaming", capture
    return capture
