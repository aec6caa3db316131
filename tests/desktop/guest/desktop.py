"""The desktop inside the guest: udev, the V4L2 loopback device, X.Org, the screen feeder, the
Tk application, and Fingertip's daemon on the board backend driving it.

Both sides of the USB cable are this guest's kernel (dummy_hcd), as in the kernel tier: the
daemon's gadget is the desktop's keyboard and pointer. The daemon sees the desktop only through
/dev/video10, a v4l2loopback device that ffmpeg fills with X's screen (x11grab); tests read the
desktop only through the daemon's tools and the application's own record (app.py).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from tests.service.daemonproc import DaemonProcess

HERE = Path(__file__).resolve().parent
WORK = Path("/run/fingertip")  # the run's folder on the host (9p): artifacts go here
SCREENS = WORK / "screens"
SCRATCH = Path("/tmp/desktop")  # the guest's tmpfs: sockets, configs, the daemon's state
WIDTH, HEIGHT = 1024, 768  # X's screen
# The capture's frame: the X screen scaled and pillarboxed into it, as an HDMI adapter or
# grabber puts a 4:3 picture in a 16:9 frame; the daemon must find the screen inside it
# (daemon/screen/geometry.py) for taps, screenshots and text to be the screen's.
FRAME_W, FRAME_H = 1280, 720
DISPLAY = ":1"
LOOPBACK = "/dev/video10"
FEED_FPS = 10
# The capture format: RGB24, as an HDMI-to-CSI-2 bridge (TC358743) offers it; OpenCV turns it
# into BGR. Under TCG, writing YUYV (a USB grabber's raw format) cost ffmpeg 56 % of a vCPU at
# 10 fps, RGB24 17 %: the guest's two vCPUs are the desktop's, the grabber's and the board's.
FOURCC = "RGB3"
FFMPEG_PIX_FMT = "rgb24"
# Under TCG everything takes many times longer than on hardware; these bound waits only.
START_TIMEOUT_S = 300.0
EVENT_TIMEOUT_S = 30.0
WRITE_TIMEOUT_MS = 15_000.0
EVIDENCE_STABLE_MS = 1500
EVIDENCE_TIMEOUT_MS = 10_000
NO_FRAME_TIMEOUT_S = 30.0
# OCR under TCG is hundreds of times slower than on a board: a read may take minutes before the
# daemon kills it ([ocr].read_timeout_s), and a text tool's call waits a little longer.
OCR_READ_TIMEOUT_S = 540.0
TEXT_TIMEOUT_S = OCR_READ_TIMEOUT_S + 160.0
# The layouts whose daemon reads the screen: the text and clear scenarios run on "us". The
# others type the same sentences' accents without OCR: enter_text's clear is the same keys on
# every layout, and each engine start and read under TCG costs minutes of the tier.
OCR_LAYOUTS = frozenset({"us"})

_started: list[subprocess.Popen[bytes]] = []


def sh(*cmd: str, env: dict[str, str] | None = None, check: bool = True) -> str:
    done = subprocess.run(
        cmd, capture_output=True, text=True, check=False, env={**os.environ, **(env or {})}
    )
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout


def spawn(name: str, *cmd: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """A background process whose output goes to SCRATCH/<name>.out (never to a pipe nobody
    reads), in a session of its own so stopping it stops its children."""
    out = (SCRATCH / f"{name}.out").open("ab")
    proc = subprocess.Popen(
        cmd,
        stdin=subprocess.DEVNULL,
        stdout=out,
        stderr=subprocess.STDOUT,
        env={**os.environ, **(env or {})},
        start_new_session=True,
    )
    _started.append(proc)
    return proc


def stop(proc: subprocess.Popen[bytes], timeout: float = 10.0) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def stop_all() -> None:
    while _started:
        stop(_started.pop())


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (0 when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def note_cpu() -> None:
    """Each background process's CPU time so far, into FIGURES."""
    for proc in _started:
        args = proc.args
        name = Path(str(args[0] if isinstance(args, list | tuple) else args)).name
        FIGURES[f"cpu: {name}"] = f"{cpu_seconds(proc.pid):.0f} s"


def until(check: Callable[[], Any], what: str, timeout: float = EVENT_TIMEOUT_S) -> Any:
    """Poll `check` until it returns something truthy; fail naming `what`."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:.0f} s")
        time.sleep(0.05)


# Where a run's time and the guest's CPU went, listed by the runner after the run (conftest
# records them as the session's properties in the junit xml).
FIGURES: dict[str, str] = {}


@contextlib.contextmanager
def phase(what: str) -> Iterator[None]:
    """Time a set-up step."""
    began = time.monotonic()
    yield
    FIGURES[f"time: {what}"] = f"{time.monotonic() - began:.1f} s"


# -- the machine's side: loopback, udev ---------------------------------------------------------


def bring_up_loopback_net() -> None:
    sh("ip", "link", "set", "lo", "up")  # the daemon listens on 127.0.0.1


def load_v4l2loopback() -> None:
    """The capture device the daemon reads: one loopback node, capture-only once fed
    (exclusive_caps), like a grabber's."""
    if Path(LOOPBACK).exists():
        return
    ko = Path(os.environ["FINGERTIP_KERNEL_ROOT"]) / "lib/modules" / os.uname().release
    sh(
        "insmod",
        str(ko / "extra/v4l2loopback.ko"),
        f"video_nr={LOOPBACK.removeprefix('/dev/video')}",
        "card_label=Desktop HDMI",
        "exclusive_caps=1",
        f"max_width={FRAME_W}",
        f"max_height={FRAME_H}",
    )


# systemd's tools refuse to act inside a chroot unless told otherwise; this guest's init runs
# everything in a chroot of the shared root (tests/kernel/init.sh).
UDEV_ENV = {"SYSTEMD_IGNORE_CHROOT": "1"}


def start_udev() -> None:
    """udevd, so the gadget's input devices reach X.Org's udev backend as they enumerate."""
    sh("/lib/systemd/systemd-udevd", "--daemon", env=UDEV_ENV)
    sh("udevadm", "trigger", "--action=add", env=UDEV_ENV)
    sh("udevadm", "settle", "--timeout=60", env=UDEV_ENV)


# -- X.Org ---------------------------------------------------------------------------------------

XORG_CONF = f"""\
Section "ServerFlags"
    Option "AutoAddDevices" "true"
    Option "AutoEnableDevices" "true"
    Option "BlankTime" "0"
    Option "StandbyTime" "0"
    Option "SuspendTime" "0"
    Option "OffTime" "0"
EndSection
Section "Device"
    Identifier "dummy"
    Driver "dummy"
    VideoRam 16384
EndSection
Section "Monitor"
    Identifier "monitor"
    HorizSync 5.0-1000.0
    VertRefresh 5.0-200.0
    Modeline "{WIDTH}x{HEIGHT}" 63.50 1024 1072 1176 1328 768 771 775 798 -hsync +vsync
EndSection
Section "Screen"
    Identifier "screen"
    Device "dummy"
    Monitor "monitor"
    DefaultDepth 24
    SubSection "Display"
        Depth 24
        Modes "{WIDTH}x{HEIGHT}"
    EndSubSection
EndSection
"""


def gadget_nodes() -> dict[str, str]:
    """The kernel's input devices made from our gadget (the host side), node -> name."""
    out: dict[str, str] = {}
    for block in Path("/proc/bus/input/devices").read_text().split("\n\n"):
        name = re.search(r'^N: Name="(.*)"$', block, re.M)
        handlers = re.search(r"^H: Handlers=.*\b(event\d+)\b", block, re.M)
        if name and handlers and name[1].startswith("Fingertip"):
            out[f"/dev/input/{handlers[1]}"] = name[1]
    return out


def _comm(task: Path) -> str:
    try:
        return (task / "comm").read_text().strip()
    except OSError:  # the thread ended meanwhile
        return ""


# SCHED_FIFO priority of X's input thread: the kernel tier's readers run at 50 (DRAIN_PRIORITY).
X_INPUT_PRIORITY = 50


@dataclass
class Xorg:
    log: Path = SCRATCH / "Xorg.log"
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        conf = SCRATCH / "xorg.conf"
        conf.write_text(XORG_CONF)
        self.proc = spawn(
            "xorg",
            "/usr/lib/xorg/Xorg",
            DISPLAY,
            "-config", str(conf),
            "-noreset", "-nolisten", "tcp", "-s", "0", "-dpms",
            "-logfile", str(self.log),
            "vt7", "-novtswitch",
        )  # fmt: skip
        until(lambda: Path(f"/tmp/.X11-unix/X{DISPLAY[1:]}").exists(), "X's socket", 60)
        self.input_thread_realtime()

    def input_thread_realtime(self) -> None:
        """X's input thread at a real-time priority, as the kernel tier's own readers run.
        Why: the kernel keeps only a few dozen events per evdev reader (about five AltGr
        characters), and under TCG with a busy machine X's input thread was not scheduled for
        longer than that while the daemon typed: libinput logged SYN_DROPPED and a French
        sentence lost "} [|] \\ ^ ". A real desktop reads its keyboard in time; this one must
        too, or the tier tests the emulator. Only the input thread: X's drawing stays normal."""
        assert self.proc is not None
        tasks = Path(f"/proc/{self.proc.pid}/task")
        threads = until(
            lambda: [t.name for t in tasks.iterdir() if _comm(t) == "InputThread"],
            "X's input thread",
            60,
        )
        for tid in threads:
            sh("chrt", "--fifo", "--pid", str(X_INPUT_PRIORITY), tid)

    def dropped_events(self) -> int:
        """How many times libinput said the kernel dropped events for X (SYN_DROPPED)."""
        return self.text().count("SYN_DROPPED")

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def devices(self, name: str) -> dict[str, str]:
        """X's input devices now whose name starts with `name`: node -> name."""
        env = {"DISPLAY": DISPLAY}
        out = {}
        for line in sh("xinput", "list", "--short", env=env).splitlines():
            # "⎜   ↳ Fingertip Fingertip    id=9	[slave  pointer  (2)]"
            m = re.search(r"([^\s↳⎜⎡⎣].*?)\s+id=(\d+)\s", line)
            if m is None:
                continue
            dev_name, dev = m[1], m[2]
            if dev_name.startswith(name):
                props = sh("xinput", "list-props", dev, env=env, check=False)
                if node := re.search(r'Device Node \(\d+\):\s*"(.*)"', props):
                    out[node[1]] = dev_name
        return out

    def keyboards(self, layout: str) -> None:
        """Set the desktop's keyboards as a user would: the XKB layout, and X's autorepeat
        delay pushed out of reach (660 ms -> 30 s), as the kernel tier pushes the kernel's.
        Why: under TCG the guest stalls for most of a second at times, and a release reaching
        X 660 ms after its press makes X repeat the key (seen: "Übermutt" for "Übermut").
        Both apply to the keyboards X has now: call it once the gadget's are there."""
        sh("setxkbmap", "-display", DISPLAY, "-layout", layout, "-option", "")
        sh("xset", "-display", DISPLAY, "r", "rate", "30000", "25")


# -- the screen feeder ---------------------------------------------------------------------------


screen_size = (WIDTH, HEIGHT)  # X's screen now: the grabber's input (Feeder.resize)


def fitted(width: int, height: int) -> tuple[int, int, int, int]:
    """Where an adapter that scales a width x height picture to fit the frame puts it:
    x, y, w, h in frame pixels, centred (1024x768 -> 960x720 at x 160: a pillarbox)."""
    scale = min(FRAME_W / width, FRAME_H / height)
    w, h = round(width * scale) // 2 * 2, round(height * scale) // 2 * 2
    return (FRAME_W - w) // 2, (FRAME_H - h) // 2, w, h


class Feeder:
    """The desktop's "HDMI output": ffmpeg copying X's screen into the loopback device, scaled
    to fit a FRAME_W x FRAME_H frame of black bars (fitted()), the pointer drawn in, as a real
    display shows it. It passes frames through as they come (`-fps_mode passthrough`): by
    default ffmpeg keeps a constant rate by duplicating frames whenever its writes are late, and
    under TCG that fed on itself (measured with a consumer at 4 fps: 54 of 60 frames duplicates,
    the picture 6 s behind after 12 s and falling further behind).
    A new screen size (resize) restarts ffmpeg with a new grab size. v4l2loopback forgets its
    format, and with exclusive_caps=1 its capture side, once every opener has closed it (the
    daemon closes its capture when idle): its keep_format control, set once the first writer
    gave the format, keeps both across the restart. The frame's size never changes."""

    def __init__(self) -> None:
        self.grabber: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.grab()
        # The capture side shows up once the writer set the format (exclusive_caps).
        until(lambda: "Video Capture" in _caps(), "the loopback device's capture side", 60)
        sh("v4l2-ctl", "-d", LOOPBACK, "-c", "keep_format=1")

    def resize(self, width: int, height: int) -> None:
        """X's screen to width x height (xrandr, as a desktop's display settings do), and the
        grabber restarted at that size: the frame's size stays, the picture in it changes."""
        global screen_size
        sh("xrandr", "--display", DISPLAY, "-s", f"{width}x{height}")
        screen_size = (width, height)
        self.grab()

    def grab(self) -> None:
        if self.grabber is not None:
            stop(self.grabber)
            _started.remove(self.grabber)
        width, height = screen_size
        x, y, w, h = fitted(width, height)
        self.grabber = spawn(
            "ffmpeg",
            "ffmpeg", "-hide_banner", "-loglevel", "warning", "-nostdin",
            "-f", "x11grab", "-draw_mouse", "1", "-framerate", str(FEED_FPS),
            "-video_size", f"{width}x{height}", "-i", DISPLAY,
            "-vf", f"scale={w}:{h}:flags=bilinear,pad={FRAME_W}:{FRAME_H}:{x}:{y}:black",
            "-pix_fmt", FFMPEG_PIX_FMT, "-fps_mode", "passthrough", "-f", "v4l2", LOOPBACK,
        )  # fmt: skip


def _caps() -> str:
    return sh("v4l2-ctl", "-d", LOOPBACK, "--info", check=False)


# -- the test application ------------------------------------------------------------------------


class App:
    """The Tk application (app.py) under Debian's python3, its record and its state socket."""

    def __init__(self) -> None:
        self.record = WORK / "app-record.jsonl"
        self.socket = SCRATCH / "app.sock"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = spawn(
            "app",
            "/usr/bin/python3", str(HERE / "app.py"),
            "--record", str(self.record), "--socket", str(self.socket),
            "--size", f"{WIDTH}x{HEIGHT}",
            env={"DISPLAY": DISPLAY},
        )  # fmt: skip
        until(lambda: self.socket.exists() and self.events(0, "ready"), "the app's start", 120)

    def request(self, cmd: str, **args: Any) -> dict[str, Any]:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(30)
            s.connect(str(self.socket))
            s.sendall(json.dumps({"cmd": cmd, **args}).encode() + b"\n")
            reply = b""
            while not reply.endswith(b"\n"):
                chunk = s.recv(65536)
                if not chunk:
                    break
                reply += chunk
        out: dict[str, Any] = json.loads(reply)
        return out

    def state(self) -> dict[str, Any]:
        return self.request("state")

    def wait_state(self, key: str, value: Any, timeout: float = EVENT_TIMEOUT_S) -> None:
        """Until the app's state[key] is `value` (a tool's reply can come before the desktop
        has handled its last reports); fail with the value it had."""
        last: list[Any] = []

        def check() -> bool:
            last[:] = [self.state()[key]]
            return bool(last[0] == value)

        try:
            until(check, f"the app's {key}", timeout)
        except AssertionError:
            assert last[0] == value, f"the app's {key} stayed {last[0]!r}"

    def reset(self) -> None:
        assert self.request("reset") == {"ok": True}

    def warp(self, x: int, y: int) -> None:
        """Move the desktop's pointer as its own mouse would (not through the gadget)."""
        assert self.request("warp", x=x, y=y) == {"ok": True}

    def mark(self) -> int:
        """The record's length now: events after it are the next action's."""
        return len(self._lines())

    def _lines(self) -> list[str]:
        if not self.record.exists():
            return []
        text = self.record.read_text()
        return text.splitlines() if text.endswith("\n") else text.splitlines()[:-1]

    def events(self, since: int, kind: str | None = None) -> list[dict[str, Any]]:
        got = [json.loads(line) for line in self._lines()[since:]]
        return [e for e in got if kind is None or e["ev"] == kind]

    def wait_events(
        self, since: int, kind: str, count: int = 1, timeout: float = EVENT_TIMEOUT_S
    ) -> list[dict[str, Any]]:
        """At least `count` events of `kind` after `since`; all of them."""
        return list(
            until(
                lambda: (e := self.events(since, kind)) and len(e) >= count and e,
                f"{count} {kind} event(s) in the app's record",
                timeout,
            )
        )


def centre(rect: list[int]) -> tuple[float, float]:
    x0, y0, x1, y1 = rect
    return (x0 + x1) / 2, (y0 + y1) / 2


def normalized(x: float, y: float) -> dict[str, float]:
    """A screen pixel as the tools' 0..1000 coordinates (0 and 1000 the first and the last
    pixel, as the daemon maps pixel coordinates)."""
    return {"x": round(x * 1000 / (WIDTH - 1), 3), "y": round(y * 1000 / (HEIGHT - 1), 3)}


# -- Fingertip's daemon --------------------------------------------------------------------------


@dataclass
class ToolReply:
    tool: str
    output: Any
    is_error: bool
    error: dict[str, Any] | None
    duration_ms: float
    wall_s: float
    sent_at: float  # time.monotonic() when the request went out


@dataclass
class Fingertip:
    """fingertipd on the board backend: the gadget on dummy_udc, the capture on LOOPBACK."""

    device_type: str
    layout: str
    proc: DaemonProcess = field(init=False)

    def start(self) -> None:
        home = SCRATCH / f"daemon-{self.device_type}-{self.layout}"
        touch = self.device_type.lower() == "android"
        shutil.rmtree(home, ignore_errors=True)
        home.mkdir(parents=True)
        self.proc = DaemonProcess(
            home,
            {
                "device": {"device_type": self.device_type, "keyboard_layout": self.layout},
                "backend": {"kind": "board"},
                "capture": {
                    "device": LOOPBACK,
                    "width": FRAME_W,
                    "height": FRAME_H,
                    "fps": float(FEED_FPS),
                    "fourcc": FOURCC,
                    # The screen feeder is ffmpeg under TCG: with the machine busy (three
                    # emulators and a CPU hog on two cores) it went silent for more than the
                    # 3 s a real grabber is given, and a screenshot said capture_unavailable.
                    "no_frame_timeout_s": NO_FRAME_TIMEOUT_S,
                },
                "input": {
                    # The host side of this cable is the same emulated machine: under TCG its
                    # USB stack takes seconds, not milliseconds, to take a long program's reports.
                    "write_timeout_ms": WRITE_TIMEOUT_MS,
                    # The emulated display path (X, ffmpeg, the loopback, the reader) shows a
                    # change 0.4-1.1 s after the app drew it (test_timing): a settle time under
                    # that would call the screen from before the action stable.
                    "evidence_stable_ms": EVIDENCE_STABLE_MS,
                    "evidence_timeout_ms": EVIDENCE_TIMEOUT_MS,
                },
                # OCR under TCG: the worker's start alone took 60-90 s here, and a region
                # of the form 120-150 s to read.
                # The worker stays for the daemon's life (by default it exits 20 s after a
                # read): its start costs 60-90 s here, and the text and clear scenarios read
                # minutes apart. Its exit is the board VM tier's to check. OCR is on only for
                # the layouts in OCR_LAYOUTS (time: see there). Two onnxruntime threads: the
                # guest has two vCPUs, and while a text tool reads, the desktop is still.
                "ocr": {
                    "enabled": self.layout in OCR_LAYOUTS,
                    "read_timeout_s": OCR_READ_TIMEOUT_S,
                    "idle_exit_s": 3600.0,
                    "threads": 2,
                },
                "log": {"format": "json", "level": "info"},
                # X binds a touchscreen across its own screen, not across the frame its
                # picture is padded into (as Android binds it to its HDMI display).
                **({"screen": {"hid_span": "screen"}} if touch else {}),
            },
        )
        self.proc.start(timeout=START_TIMEOUT_S)

    def stop(self) -> None:
        with contextlib.suppress(AttributeError):  # never started
            if self.proc.proc is not None:
                cpu = cpu_seconds(self.proc.proc.pid)
                FIGURES[f"cpu: fingertipd {self.device_type} {self.layout}"] = f"{cpu:.0f} s"
            self.proc.stop(timeout=120)
        with contextlib.suppress(OSError, AttributeError):
            shutil.copy(self.proc.log_path, WORK / f"daemon-{self.device_type}-{self.layout}.log")

    def call(self, tool: str, args: dict[str, Any], timeout: float = 300.0) -> ToolReply:
        req = urllib.request.Request(
            f"{self.proc.base}/api/tools/{tool}",
            data=json.dumps({"input": args}).encode(),
            headers={"Content-Type": "application/json"},
        )
        sent = time.monotonic()
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                body = json.loads(resp.read())
        except urllib.error.HTTPError as e:
            body = json.loads(e.read())
        wall = time.monotonic() - sent
        output = body.get("output")
        if isinstance(output, str):
            with contextlib.suppress(ValueError):
                output = json.loads(output)
        return ToolReply(
            tool,
            output,
            bool(body.get("is_error")),
            body.get("error"),
            float(body.get("duration_ms") or 0),
            wall,
            sent,
        )

    def ok(self, tool: str, args: dict[str, Any], timeout: float = 300.0) -> ToolReply:
        reply = self.call(tool, args, timeout)
        assert not reply.is_error, f"{tool}({args}) failed: {reply.error}"
        return reply

    def screenshot(self, name: str | None = None) -> np.ndarray:
        """The screen now, through the screenshot tool; kept as screens/NAME.png if named."""
        image = decode(self.ok("screenshot", {"format": "png"}).output)
        if name is not None:
            save_screen(name, image)
        return image

    @contextlib.contextmanager
    def stream(self, fps: int = 30) -> Iterator[MjpegReader]:
        with urllib.request.urlopen(f"{self.proc.base}/api/stream?fps={fps}", timeout=60) as r:
            yield MjpegReader(r)


def decode(shot: dict[str, Any]) -> np.ndarray:
    """A screenshot tool result (or an HID tool's evidence) as a BGR image, in X's pixels
    (as_x)."""
    data = np.frombuffer(base64.b64decode(shot["data"]), np.uint8)
    image = cv2.imdecode(data, cv2.IMREAD_COLOR)
    assert image is not None, "the screenshot does not decode"
    return as_x(image)


def as_x(image: np.ndarray) -> np.ndarray:
    """A picture of the screen (the daemon crops its frames to the screen it found) scaled
    back to X's own pixels, so checks can use the application's coordinates; a picture of
    another shape (a whole frame, bars included) as it is."""
    w, h = screen_size
    ih, iw = image.shape[:2]
    if (iw, ih) == (w, h) or abs(iw / ih - w / h) > 0.01:
        return image
    return cv2.resize(image, (w, h), interpolation=cv2.INTER_LINEAR)


class MjpegReader:
    """Parts of the daemon's /api/stream, each with its frame number and capture time."""

    def __init__(self, resp: Any) -> None:
        self.resp = resp

    def next(self) -> tuple[int, float, np.ndarray]:
        headers: dict[str, str] = {}
        while True:
            line = self.resp.readline()
            if not line:
                raise EOFError("the stream ended")
            text = line.decode(errors="replace").strip()
            if not text:
                if "content-length" in headers:
                    break
                continue
            if ":" in text:
                k, v = text.split(":", 1)
                headers[k.strip().lower()] = v.strip()
        body = self.resp.read(int(headers["content-length"]))
        image = cv2.imdecode(np.frombuffer(body, np.uint8), cv2.IMREAD_COLOR)
        return int(headers["x-frame-seq"]), float(headers["x-captured-mono"]), as_x(image)


def save_screen(name: str, image: np.ndarray) -> None:
    SCREENS.mkdir(parents=True, exist_ok=True)
    cv2.imwrite(str(SCREENS / f"{name}.png"), image)


def colour_fraction(
    image: np.ndarray, rect: tuple[int, int, int, int], bgr: tuple[int, ...], tolerance: int = 40
) -> float:
    """The share of the pixels in `rect` within `tolerance` of `bgr` (JPEG-safe)."""
    x0, y0, x1, y1 = (max(0, int(v)) for v in rect)
    patch = image[y0:y1, x0:x1].astype(np.int16)
    if patch.size == 0:
        return 0.0
    near = np.abs(patch - np.array(bgr, np.int16)).max(axis=2) <= tolerance
    return float(near.mean())


def evidence(reply: ToolReply, name: str) -> np.ndarray:
    """An HID tool's post-action screenshot, kept as screens/NAME.png."""
    image = decode(reply.output)
    save_screen(name, image)
    return image


def assert_shows(shot: ToolReply, rect: tuple[float, ...], bgr: tuple[int, ...], what: str) -> None:
    """An HID tool's evidence screenshot shows `bgr` over most of `rect`, or fail naming
    `what` and when the frame was captured (a JPEG-safe tolerance)."""
    share = colour_fraction(decode(shot.output), rect, bgr)
    assert share > 0.5, (
        f"the screenshot captured at {shot.output.get('captured_at')} does not show {what} "
        f"({share:.0%} of {rect} matches)"
    )
