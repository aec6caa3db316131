"""The acceptance test of the whole product (issue 9): a Debian board under QEMU, Fingertip
installed with `make deploy` exactly as a user does it, then driven over the USB network link
from the "phone" (a network namespace inside the guest holding the target's end of the ECM
link), with the guest's USB host side as the target's eyes. The checks run in order on one
boot; each builds on the state the one before left: 1 deploy (again: idempotent; with a bad
config: stops, the daemon keeps running), 2 service and gadget up, 3 tools API and DNS-SD over
ECM, 4 iOS chord isolation (found again by DNS-SD after it), 5 SIGKILL mid-isolation, 6 a power
cut mid-workload and the boot after it (power_cut.py), 7 stop (no longer announced) and undeploy.
"""

from __future__ import annotations

import base64
import json
import os
import random
import re
import shlex
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import power_cut
import pytest
from conftest import HERE, PROJECT, GuestStream
from vm import BoardVM

from daemon import known_boards

FULL, ISOLATED = "0104", "0105"  # idProduct of the full and keyboard-isolated profiles
# Interfaces of the full profile's HID functions (keyboard, consumer, pointer; ECM is 2-3).
FULL_HID_INTERFACES = {"0", "1", "4"}
BTN_LEFT, KEY_LEFTMETA, KEY_A = 0x110, 125, 30
EV_KEY, EV_ABS = 1, 3
ABS_X, ABS_Y = 0, 1
CONFIG_MARK = "# placed by the board test before the first deploy: deploy must keep it"
# Generous bounds for a shared 2-core machine emulating the guest (TCG); they only bound
# failures, nothing waits for them to pass.
LINK_S = 120.0
# What only the OCR engine adds to the board's packages (rapidocr carries its models).
OCR_PACKAGES = " ".join(
    (
        "onnxruntime rapidocr PIL pillow.libs shapely shapely.libs pyclipper omegaconf antlr4 yaml",
        "google flatbuffers colorlog tqdm requests urllib3 certifi charset_normalizer six.py regex",
    )
)
EVENT_S = 90.0
OCR_S = 600.0  # long enough for the first read: the OCR worker's start and its read, under TCG
# The small-board budgets (issue 34), MB: the figures are printed and recorded against them.
IDLE_BUDGET, WORKING_BUDGET, OCR_BUDGET, BACK_WITHIN = 64, 112, 256, 16
FIGURES: dict[str, Any] = {}  # measured by one check, printed with the next ones


def memory(board: BoardVM) -> dict[str, Any]:
    """The daemon's unit: each process's memory and the cgroup's (guest/memory.py)."""
    return dict(json.loads(board.run("python3 /root/memory.py snapshot fingertip.service").stdout))


def figure(record_property: Any, name: str, text: str) -> None:
    record_property(name, text)
    print(f"\nboard memory: {name} = {text}")


def board_ooms(board: BoardVM) -> list[str]:
    """The kernel's kills for the whole board running out of memory (not a unit's limit)."""
    out = board.run("dmesg | grep 'Out of memory: Killed process' || true").stdout
    return [line for line in out.splitlines() if "Memory cgroup" not in line]


def ocr_on(board: BoardVM) -> bool:
    """OCR runs where the board has the RAM (512 MB and more; [ocr] enabled = "auto")."""
    return board.memory_mb >= 512


def phone(board: BoardVM, *args: str, timeout: float = 300.0) -> dict[str, Any]:
    """phone.py in the phone's network namespace; its one JSON line."""
    cmd = "ip netns exec phone python3 /root/phone.py " + " ".join(map(shlex.quote, args))
    out = board.run(cmd, timeout=timeout).stdout.strip().splitlines()
    assert out, f"phone.py printed nothing for {args}"
    return dict(json.loads(out[-1]))


def link_state(board: BoardVM) -> str:
    """Both ends of the USB network link, for failure messages."""
    return board.run(
        "ip -br addr show usb0; ip -n phone -br link; ip -n phone -br addr; "
        "dmesg | grep -E 'ecm|cdc_ether|notify' | tail -12",
        check=False,
    ).stdout


def tool_output(answer: dict[str, Any], board: BoardVM | None = None) -> Any:
    """The tool's result from an HTTP answer that must be a success."""
    if answer.get("status") != 200 and board is not None:
        raise AssertionError(f"{answer}\nlink state:\n{link_state(board)}")
    assert answer.get("status") == 200, answer
    body = answer["body"]
    assert body["is_error"] is False, body.get("error")
    return json.loads(body["output"])


def health(board: BoardVM) -> dict[str, Any]:
    """health_check from the phone, retried while its link (re)appears."""
    answer = phone(board, "call", "health_check", "--retry-until", str(LINK_S))
    return dict(tool_output(answer, board))


def discovered(board: BoardVM, *, expect: bool = True, tries: int = 5) -> list[dict[str, Any]]:
    """This board as `fingertip discover` in the phone's namespace hears it over the ECM link
    (a fresh browse each time, nothing cached); browsed again while the link may still be
    coming up, until it is heard (expect) or for one window (not expect)."""
    board_id = board.run("cat /var/lib/fingertip/board-id").stdout.strip()
    ours: list[dict[str, Any]] = []
    for _ in range(tries if expect else 1):
        out = board.run("ip netns exec phone fingertip discover --seconds 3", timeout=120).stdout
        heard = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        ours = [b for b in heard if b["txt"].get("board_id") == board_id]
        if bool(ours) == expect:
            break
    return ours


def opened(lines: list[dict[str, Any]], product: str) -> set[str]:
    """Interfaces of `product` whose evdev nodes the recorder opened in `lines`."""
    return {x["interface"] for x in lines if x.get("open") and x.get("product") == product}


def key_events(lines: list[dict[str, Any]], product: str) -> list[tuple[int, int]]:
    return [
        (x["code"], x["value"])
        for x in lines
        if x.get("type") == EV_KEY and x.get("product") == product
    ]


def journal_since(board: BoardVM, cursor: str) -> list[dict[str, Any]]:
    """The daemon's JSON log lines after `cursor`."""
    out = board.run(
        f"journalctl -u fingertip.service -o cat --no-pager --after-cursor={shlex.quote(cursor)}"
    ).stdout
    lines = []
    for line in out.splitlines():
        if line.startswith("{"):
            try:
                lines.append(json.loads(line))
            except ValueError:
                continue
    return lines


def journal_cursor(board: BoardVM) -> str:
    out = board.run("journalctl -u fingertip.service -n 0 --show-cursor --no-pager").stdout
    m = re.search(r"-- cursor: (\S+)", out)
    assert m, out
    return m.group(1)


def no_key_held(board: BoardVM) -> list[dict[str, Any]]:
    nodes = json.loads(board.run("python3 /root/recorder.py held").stdout)
    assert nodes, "no evdev node of our gadget on the host side"
    return [n for n in nodes if n["held"]]


def run_deploy(
    board: BoardVM, workdir: Path, log: str, target: str = "deploy"
) -> subprocess.CompletedProcess[str]:
    """`make deploy` (or undeploy) as a user runs it; the transcript is kept in the run folder."""
    cmd = [
        "make", "--no-print-directory", target,
        "HOST=root@127.0.0.1", f"PORT={board.port}", f"SSH_CONFIG={board.ssh_config}",
    ]  # fmt: skip
    start = time.monotonic()
    # The pins make deploy keeps (known_boards) go to the run's folder, not the user's.
    env = {**os.environ, "XDG_CONFIG_HOME": str(workdir / "host-config")}
    done = subprocess.run(
        cmd, cwd=PROJECT, capture_output=True, text=True, timeout=1200, check=False, env=env
    )
    took = time.monotonic() - start
    transcript = f"$ {' '.join(cmd)}\n{done.stdout}{done.stderr}"
    transcript += f"(exit {done.returncode}, {took:.0f} s)\n"
    (workdir / log).write_text(transcript)
    print(f"\n{transcript}", flush=True)
    return done


def scaled(template: str, key: str, default: float, value: float) -> str:
    """The config template with `key`'s default line set to `value` (asserting the default, so
    a changed default is seen here rather than silently not scaled)."""
    line = f"{key} = {default}"
    assert line in template, line
    return template.replace(line, f"{key} = {float(value)}")


@pytest.fixture(scope="module")
def deployed(
    board: BoardVM, workdir: Path, phone_link: GuestStream, recorder: GuestStream
) -> Iterator[dict[str, Any]]:
    """`make deploy` from this clone onto the fresh board, as a user runs it (the ssh config
    names the test's key and the board's recorded host key, as a user's ~/.ssh/config does)."""
    template = (PROJECT / "etc" / "fingertip.toml").read_text()
    # This board is emulated: a profile switch took 6-16 s here (udev and the target's drivers
    # under TCG), against the 15 s limit made for a real board's 1-2 s; seen to fail an iOS
    # chord with the machine busy. The limit is a config key, scaled here as the waits are.
    template = scaled(
        template, "profile_switch_timeout_s", 15.0, min(300, round(30 * board.slowness))
    )
    # Likewise the write limit: a real host polls a new keyboard at once, and 750 ms past a
    # program's end is ample there; here the guest's usbhid fetched the iOS chord's four reports
    # over 0.8 s with a core hogged (h5, stop 28: all four arrived, the call said
    # hid_write_timeout).
    template = scaled(template, "write_timeout_ms", 750.0, min(60000, round(5000 * board.slowness)))
    # Likewise the header timeout, which also bounds a TLS handshake: a board does one in
    # milliseconds; this emulated one took 7.7 s with its CPU busy (a probe beside the daemon).
    template = scaled(template, "header_timeout_s", 15.0, min(600, round(30 * board.slowness)))
    # Likewise udev's giving the re-created /dev/hidgN nodes the daemon's group after a switch:
    # milliseconds on a board, more than the 10 s default once in a loaded run here (s26load:
    # board.nodes_not_accessible, then the chord failed with hid_io_failed on EACCES).
    # Likewise the capture's first frame: vivid delivers 5 fps of 1920x1080 under TCG here, and
    # a reopened capture's first frame came later than 3 s (stop 33).
    template = scaled(template, "no_frame_timeout_s", 3.0, min(60, round(10 * board.slowness)))
    # Likewise an OCR read's limit: the engine's start and a read took 105 s here under load
    # (stop 32), against 120 s made for a real board's few seconds.
    template = scaled(template, "read_timeout_s", 120.0, min(3600, round(240 * board.slowness)))
    # A 256 MB board captures at 1280x720, as small boards do (a 1080p raw frame is 6 MB, and
    # the emulated board's vivid holds its own buffers of that size in the kernel): at 1080p
    # the daemon's 105 MB and the kernel's left the VM's 205 MB out of memory (stop 33).
    if not ocr_on(board):
        for key, small in (("width = 1920", "width = 1280"), ("height = 1080", "height = 720")):
            assert key in template
            template = template.replace(key, small)
    assert not re.search(r"^\[gadget\]", template, re.M)  # a table of its own, added here
    template += f"\n[gadget]\nnode_access_timeout = {min(120, round(10 * board.slowness))}.0\n"
    board.run(
        "mkdir -p /etc/fingertip && cat > /etc/fingertip/fingertip.toml",
        input=f"{CONFIG_MARK}\n{template}",
    )
    start = time.monotonic()
    done = run_deploy(board, workdir, "deploy.log")
    seconds = time.monotonic() - start
    assert done.returncode == 0, f"make deploy failed:\n{done.stdout}{done.stderr}"
    token = board.run("cat /var/lib/fingertip/pairing-token").stdout.strip()
    pin = deployed_pin(workdir)
    board.run(f"cat > {PIN_FILE}", input=pin)  # what phone.py pins by default
    yield {
        "stdout": done.stdout,
        "stderr": done.stderr,
        "seconds": seconds,
        "token": token,
        "pin": pin,
    }


PIN_FILE = "/root/board-pin"


def deployed_pin(workdir: Path) -> str:
    """The fingerprint make deploy kept for the board's USB address (learnt through ssh)."""
    known = known_boards.load(workdir / "host-config" / "fingertip" / "known_boards")
    assert "192.168.42.1:8080" in known, known
    return known["192.168.42.1:8080"][0]


def test_1_make_deploy_installs_and_reports(
    board: BoardVM, workdir: Path, deployed: dict[str, Any], record_property: Any
) -> None:
    record_property("deploy_s", round(deployed["seconds"]))
    timings = re.search(r"^deploy timings: (.*)$", deployed["stderr"], re.M)
    assert timings is not None, deployed["stderr"]
    record_property("deploy_steps", timings.group(1))
    last = deployed["stdout"].strip().splitlines()[-1]
    assert re.fullmatch(
        rf"fingertip \S+ \(release \S+\) is running on root@127\.0\.0\.1:{board.port}: "
        r"https://192\.168\.42\.1:8080",
        last,
    ), last
    # The TLS fingerprint, printed and kept for the host's tools.
    assert (
        f"TLS fingerprint {deployed['pin']} (pinned for 192.168.42.1:8080 in "
        in (deployed["stdout"])
    )
    # The config the board had was kept, not replaced by the template.
    config = board.run("cat /etc/fingertip/fingertip.toml").stdout
    assert config.startswith(CONFIG_MARK)
    release = re.search(r"\(release (\S+)\)", last)
    assert release is not None
    current = board.run("readlink /opt/fingertip/current").stdout.strip()
    assert current == f"releases/{release.group(1)}"
    # The install's size, and the share of the packages only the OCR engine brings.
    site = "/opt/fingertip/deps/*/site-packages"
    sizes = board.run(
        f"du -sk {site} | cut -f1; cd {site} && "
        f"du -skc $(ls -d {OCR_PACKAGES} 2>/dev/null) | tail -n 1"
    ).stdout.split()
    total_mb, ocr_mb = int(sizes[0]) / 1024, int(sizes[1]) / 1024
    record_property("install_mb", f"{total_mb:.0f} (OCR packages {ocr_mb:.0f})")
    print(f"\nboard install: third-party packages {total_mb:.0f} MB, OCR's {ocr_mb:.0f} MB")
    # The OCR engine's packages go only where OCR runs: decided from the board's RAM.
    said = re.search(r"^deploy \[4/7\] .*$", deployed["stdout"], re.M)
    assert said is not None, deployed["stdout"]
    if ocr_on(board):
        assert "with the OCR engine" in said.group(0) and ocr_mb > 100, (said.group(0), ocr_mb)
    else:
        assert "without the OCR engine" in said.group(0), said.group(0)
        engine = board.run(f"ls -d {site}/onnxruntime {site}/rapidocr 2>/dev/null; true").stdout
        assert engine.strip() == "", engine
    # Idempotent: the same build again is the same release, installed once.
    again = run_deploy(board, workdir, "deploy-again.log")
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"release {release.group(1)} already installed" in again.stdout
    assert again.stdout.strip().splitlines()[-1] == last
    # A step that fails stops the deploy with a clear message; the running daemon stays.
    pid = board.run("systemctl show -p MainPID --value fingertip").stdout.strip()
    board.run("cp /etc/fingertip/fingertip.toml /root/good.toml")
    board.run("printf '\\n[nonsense]\\nx = 1\\n' >> /etc/fingertip/fingertip.toml")
    bad = run_deploy(board, workdir, "deploy-bad-config.log")
    board.run("cp /root/good.toml /etc/fingertip/fingertip.toml")
    assert bad.returncode != 0
    assert "does not pass the new version's check" in bad.stderr, bad.stderr
    assert board.run("systemctl show -p MainPID --value fingertip").stdout.strip() == pid


def test_2_service_active_and_gadget_enumerated(
    board: BoardVM,
    workdir: Path,
    deployed: dict[str, Any],
    recorder: GuestStream,
    record_property: Any,
) -> None:
    assert board.run("systemctl is-active fingertip-gadget fingertip").stdout.split() == [
        "active",
        "active",
    ]
    pid = board.run("systemctl show -p MainPID --value fingertip").stdout.strip()
    assert board.run(f"ps -o user= -p {pid}").stdout.strip() == "fingertip"
    # The target's host stack enumerated the full composite: its three HID inputs and the
    # ECM link (the phone's keeper adopted a cdc_ether interface).
    recorder.wait_for(
        lambda lines: opened(lines, FULL) >= FULL_HID_INTERFACES, "the full profile", LINK_S
    )
    # udev: stable names, the daemon's group, nobody else.
    for role in ("keyboard", "consumer", "pointer"):
        node = f"/dev/fingertip/{role}"
        out = board.run(f"readlink -f {node} && stat -L -c '%G %a' {node}").stdout.split()
        assert re.fullmatch(r"/dev/hidg\d+", out[0]) and out[1:] == ["fingertip", "660"], out
    # The CLI is on root's PATH and talks to the daemon over the local socket; the gadget
    # tool shows the live profile.
    catalog = json.loads(board.run("fingertip catalog").stdout)
    assert catalog["type"] == "catalog" and "keyboard_tap" in json.dumps(catalog["catalog"])
    assert json.loads(board.run("fingertip-gadget status").stdout)["profile"] == "full"
    verify = board.run(
        "systemd-analyze verify /etc/systemd/system/fingertip.service "
        "/etc/systemd/system/fingertip-gadget.service 2>&1",
        check=False,
    )
    assert verify.returncode == 0 and not verify.stdout.strip(), verify.stdout
    security = board.run("systemd-analyze security --no-pager fingertip.service").stdout
    gadget_unit = board.run("systemd-analyze security --no-pager fingertip-gadget.service").stdout
    (workdir / "security.txt").write_text(f"{security}\n{gadget_unit}")
    m = re.search(r"Overall exposure level for fingertip\.service: ([\d.]+) (\S+)", security)
    assert m, security
    print(f"\nsystemd-analyze security fingertip.service: {m.group(1)} {m.group(2)}")
    record_property("exposure", f"{m.group(1)} {m.group(2)}")
    assert float(m.group(1)) <= 4.0, security
    # Idle after start: the gadget up, nothing captured yet, no OCR worker.
    idle = memory(board)
    assert [p["ocr_worker"] for p in idle["procs"]] == [False], idle
    FIGURES["idle"] = idle
    figure(
        record_property,
        "memory_idle",
        f"{idle['pss']:.1f} MB PSS ({idle['rss']:.1f} RSS, cgroup {idle['cgroup_current']:.1f}); "
        f"budget {IDLE_BUDGET}",
    )


def test_3_tools_api_over_usb_ecm(
    board: BoardVM, deployed: dict[str, Any], recorder: GuestStream, record_property: Any
) -> None:
    answer = phone(board, "get", "/api/tools", "--retry-until", str(LINK_S))
    assert answer.get("status") == 200, f"{answer}\n{link_state(board)}"
    names = {t["name"] for t in answer["body"]["tools"]}
    assert {"health_check", "screenshot", "touch_gesture", "keyboard_tap"} <= names

    # The phone's screen is private: from the phone's side of the link, a screenshot needs the
    # pairing token as a write tool does.
    refused = phone(board, "call", "screenshot", "--retry-until", str(LINK_S))
    assert refused.get("status") == 401, refused
    assert refused["body"]["error"]["code"] == "auth_required", refused
    token = ("--token", deployed["token"])
    shot = tool_output(phone(board, "call", "screenshot", *token))
    jpeg = np.frombuffer(base64.b64decode(shot["data"]), np.uint8)
    frame = cv2.imdecode(jpeg, cv2.IMREAD_COLOR)
    assert frame is not None, "the screenshot is not an image"
    assert (frame.shape[1], frame.shape[0]) == (shot["width"], shot["height"])
    assert float(frame.std()) > 10, "a flat frame: not vivid's test pattern"

    # Working: screenshots taken and one viewer of the live stream at 15 fps (on the board's
    # loopback: what the daemon holds does not depend on where the viewer is).
    for _ in range(3):
        tool_output(phone(board, "call", "screenshot", *token))
    url = f"http://127.0.0.1:8080/api/stream?fps=15&token={deployed['token']}"
    viewer = board.popen(f"python3 -u /root/memory.py stream {shlex.quote(url)} 20")
    try:
        assert viewer.stdout is not None
        assert "first_frame" in viewer.stdout.readline(), "the stream sent no frame"
        working = memory(board)  # while the viewer takes frames
        viewed = json.loads(viewer.stdout.readline())
    finally:
        viewer.wait(120)
    figure(
        record_property,
        "memory_working",
        f"{working['pss']:.1f} MB PSS ({working['rss']:.1f} RSS, cgroup "
        f"{working['cgroup_current']:.1f}) with screenshots and a stream viewer "
        f"({viewed['frames']} frames in {viewed['seconds']:.0f} s); budget {WORKING_BUDGET}",
    )
    assert board_ooms(board) == []
    if ocr_on(board):
        read_text(board, deployed, shot, record_property)
    else:
        # OCR off (a 256 MB board): the text tools are listed as unavailable, and say why.
        listed = phone(board, "get", "/api/tools", *token)["body"]["tools"]
        runtime = next(t for t in listed if t["name"] == "screen_text")["runtime"]
        assert runtime["code"] == "ocr_disabled" and runtime["remediation"], runtime
        refused = phone(board, "call", "screen_text", *token)["body"]["error"]
        assert refused["details"]["code"] == "ocr_disabled", refused

    # A tap at (250, 750) of 1000: the absolute mouse moves there, then clicks.
    since = recorder.mark()
    tap = {"input": {"type": "tap", "point": {"x": 250, "y": 750}}}
    out = tool_output(
        phone(board, "call", "touch_gesture", json.dumps(tap), "--token", deployed["token"])
    )
    assert out["action_output"]["ok"] is True, out

    def clicked(lines: list[dict[str, Any]]) -> bool:
        return [(c, v) for c, v in key_events(lines, FULL) if c == BTN_LEFT] == [
            (BTN_LEFT, 1),
            (BTN_LEFT, 0),
        ]

    lines = recorder.wait_for(lambda ls: clicked(ls) and ls, "the click", EVENT_S, since)
    press = next(i for i, x in enumerate(lines) if x.get("code") == BTN_LEFT)
    absolute = {x["code"]: x["value"] for x in lines[:press] if x.get("type") == EV_ABS}
    assert abs(absolute[ABS_X] - 32767 * 250 / 1000) <= 2, absolute
    assert abs(absolute[ABS_Y] - 32767 * 750 / 1000) <= 2, absolute

    # A host on the link finds the board by DNS-SD, on the ECM address only, with its TXT.
    ours = discovered(board)
    assert len(ours) == 1, f"{ours}\n{link_state(board)}"
    version = health(board)["version"]
    assert ours[0]["addresses"] == ["192.168.42.1"] and ours[0]["port"] == 8080, ours
    txt = ours[0]["txt"]
    assert (txt["version"], txt["device_type"], txt["platform"]) == (version, "iOS", "ios"), txt
    assert (txt["tools"], txt["ws"], txt["mcp"]) == ("/api/tools", "/api/ws", "/mcp"), txt


def read_text(
    board: BoardVM, deployed: dict[str, Any], shot: dict[str, Any], record_property: Any
) -> None:
    """One OCR read over the link, the daemon's memory before, at its peak (its worker
    included) and after, and the worker leaving once OCR is idle."""
    token = ("--token", deployed["token"])
    before = memory(board)
    # On-device OCR over the same link: a well-formed visual tree of vivid's frame. Only a
    # corner where vivid's OSD prints its first text lines (8x16 px characters from
    # x=16, y=16) is read, 154x71 px with the region's margin: under TCG the models run far
    # slower than here, and the first call also loads the engine (52 s in this VM). With
    # `-cpu max` (AVX offered, and emulated very slowly) this read took 136 s in this VM and a
    # 518x103 band did not end in 10 min; the guest CPU is now the AVX-free
    # GUEST_CPU (tests/kernel/setup.py).
    # The region must hold a line's center (an element belongs to a region by its center):
    # y 0..30 of 1000 is 0..32 px, past the first line's center at ~24 px. (0..10, 11 px, held
    # none: the margin let the OCR read both lines, and the region then dropped them.)
    band = {"region": {"x0": 0, "y0": 0, "x1": 60, "y1": 30}}
    try:
        tree = tool_output(
            phone(
                board,
                "call",
                "screen_text",
                json.dumps({"input": band}),
                *token,
                "--timeout",
                str(OCR_S + 30),
                timeout=OCR_S + 90,
            )
        )
    finally:
        # An OCR run outlives a timed-out call, and on the VM's one core it starves udev in
        # the next test's profile switch: the next tests start once it has ended.
        board.run(
            f"timeout {round(OCR_S)} sh -c 'until journalctl -u fingertip "
            "-o cat | grep -q ocr.read; do sleep 1; done'",
            check=False,
            timeout=OCR_S + 30,
        )
        journal = board.run(
            'journalctl -u fingertip -o cat | grep -E \'ocr.loaded|"tool":"screen_text"\'',
            check=False,
        ).stdout
        events = [json.loads(x) for x in journal.splitlines() if x.startswith("{")]
        load_ms = next((e["load_ms"] for e in events if e.get("event") == "ocr.loaded"), None)
        took = next((e["duration_ms"] for e in events if e.get("tool") == "screen_text"), None)
        record_property("first_screen_text_ms", f"{took} (engine load {load_ms})")
        print(f"\nboard: first screen_text (a band) {took} ms, of which engine load {load_ms} ms")
    assert (tree["frame"]["width"], tree["frame"]["height"]) == (shot["width"], shot["height"])
    assert tree["snapshot_id"].startswith(f"f{tree['frame']['seq']}-"), tree["snapshot_id"]
    line_ids = {ln["id"] for ln in tree["lines"]}
    assert all(e["line"] in line_ids for e in tree["elements"]), tree
    assert tree["elements"], f"no text read from vivid's OSD: {tree}"
    # The peak in all: the cgroup's own (page cache included), and the processes' peaks
    # added up (an upper bound: they need not peak at once); the worker still runs.
    during = memory(board)
    assert any(p["ocr_worker"] for p in during["procs"]), during
    rise = during["hwm"] - before["rss"]
    figure(
        record_property,
        "memory_ocr_peak",
        f"cgroup peak {during['cgroup_peak']:.1f} MB, processes' peaks {during['hwm']:.1f} MB "
        f"(the daemon rose {rise:.1f} MB from {before['rss']:.1f} RSS); budget {OCR_BUDGET}",
    )
    assert during["oom_kills"] == 0, during
    # The worker leaves once OCR has been idle ([ocr].idle_exit_s, 20 s), and its memory
    # with it: the unit is back near where it was before the read.
    started = time.monotonic()
    deadline = started + 120 * board.slowness
    while any(p["ocr_worker"] for p in memory(board)["procs"]):
        assert time.monotonic() < deadline, "the idle OCR worker did not exit"
        time.sleep(1)
    took = time.monotonic() - started
    back = memory(board)
    figure(
        record_property,
        "memory_after_ocr",
        f"{back['pss']:.1f} MB PSS {took:.0f} s after the read (before it: "
        f"{before['pss']:.1f}); budget: within {BACK_WITHIN} MB within 30 s",
    )


def test_3b_an_ocr_worker_out_of_memory_costs_only_its_read(
    board: BoardVM, deployed: dict[str, Any], recorder: GuestStream, record_property: Any
) -> None:
    """The unit's memory limit lowered under the daemon's feet: the OCR worker that starts is
    the one the kernel kills, that read answers ocr_unavailable, and the daemon, its pid and
    its HID flow go on."""
    if not ocr_on(board):
        pytest.skip("OCR is off on a board this small")
    unit = "fingertip.service"
    limits = board.run(f"systemctl show -p MemoryMax -p MemoryHigh {unit}").stdout.split()
    pid = board.run(f"systemctl show -p MainPID --value {unit}").stdout.strip()
    restarts = board.run(f"systemctl show -p NRestarts --value {unit}").stdout.strip()
    # Room for the daemon and what it holds now, not for the OCR engine (~100 MB more).
    room = round(memory(board)["cgroup_current"] + 24)
    board.run(f"systemctl set-property --runtime {unit} MemoryMax={room}M")
    try:
        region = {"region": {"x0": 0, "y0": 0, "x1": 60, "y1": 30}}
        answer = phone(
            board,
            "call",
            "screen_text",
            json.dumps({"input": region}),
            "--token",
            deployed["token"],
            "--timeout",
            str(OCR_S),
            timeout=OCR_S + 60,
        )
        after = memory(board)
    finally:
        values = dict(x.split("=", 1) for x in limits)
        board.run(f"systemctl set-property --runtime {unit} MemoryMax={values['MemoryMax']}")
    error = answer["body"]["error"]
    assert error["code"] == "ocr_unavailable" and error["retryable"] is True, answer
    assert "SIGKILL" in error["details"]["worker"], error
    assert after["oom_kills"] >= 1, after
    figure(record_property, "ocr_oom", f"limit {room} MB: {error['details']['worker']}")
    # The daemon went on: the same process, not restarted, answering, and its taps land.
    assert board.run(f"systemctl show -p MainPID --value {unit}").stdout.strip() == pid
    assert board.run(f"systemctl show -p NRestarts --value {unit}").stdout.strip() == restarts
    assert health(board)["ocr"]["worker"] == "stopped"
    since = recorder.mark()
    tap = {"input": {"type": "tap", "point": {"x": 500, "y": 500}}}
    out = tool_output(phone(board, "call", "touch_gesture", json.dumps(tap), "--token",
                            deployed["token"]))  # fmt: skip
    assert out["action_output"]["ok"] is True, out
    recorder.wait_for(
        lambda ls: (
            [(c, v) for c, v in key_events(ls, FULL) if c == BTN_LEFT]
            == [(BTN_LEFT, 1), (BTN_LEFT, 0)]
        ),
        "the click after the OOM kill",
        EVENT_S,
        since,
    )
    assert no_key_held(board) == []


def test_3_tls_pinned_over_ecm_and_an_impostor_refused(
    board: BoardVM, workdir: Path, deployed: dict[str, Any], phone_link: GuestStream
) -> None:
    """Issue 36: the phone reaches the board over ECM with TLS, pinning the fingerprint it got
    from `fingertip discover` (the one make deploy kept through ssh), and refuses an impostor:
    another certificate on the same address, never sent the token."""
    ours = discovered(board)
    assert len(ours) == 1, f"{ours}\n{link_state(board)}"
    fingerprint = ours[0]["fingerprint"]
    assert fingerprint == ours[0]["txt"]["fp"] == deployed["pin"], ours
    answer = phone(
        board, "call", "health_check", "--pin", fingerprint, "--retry-until", str(LINK_S)
    )
    assert answer.get("tls") in ("TLSv1.3", "TLSv1.2"), answer
    security = tool_output(answer, board)["security"]
    assert security["tls"]["fingerprint"] == fingerprint
    usb = [x for x in security["listeners"] if x["address"] == "192.168.42.1"]
    assert usb == [{"address": "192.168.42.1", "port": 8080, "tls": True, "loopback": False}]
    # Plain HTTP from the phone: a clear refusal, not a hang.
    plain = phone(board, "get", "/api/tools", "--plain")
    assert plain.get("status") == 400, plain
    assert plain["body"]["error"]["code"] == "tls_required"

    # An impostor takes the board's address with a certificate of its own.
    board.put(PROJECT / "tests" / "board" / "guest" / "impostor.py", "/root/impostor.py", "0755")
    make = {
        "op": "make",
        "key": "/root/impostor.key",
        "cert": "/root/impostor.crt",
        "names": ["IP:192.168.42.1"],
        "common_name": "Fingertip impostor",
        "days": 30,
    }
    made = json.loads(
        board.run(
            "/opt/fingertip/current/bin/python -m daemon.tls " + shlex.quote(json.dumps(make)),
            timeout=300,
        ).stdout
    )
    assert made["fingerprint"] != fingerprint
    board.run("systemctl stop fingertip", timeout=300)  # the gadget, and the link, stay up
    impostor = GuestStream(
        board,
        "impostor",
        "exec python3 -u /root/impostor.py /root/impostor.crt /root/impostor.key",
        workdir / "impostor.jsonl",
        parse=True,
    )
    try:
        impostor.wait_for(lambda ls: any(x.get("ready") for x in ls), "the impostor", 60)
        token = ("--token", deployed["token"])
        refused = phone(board, "call", "health_check", "--pin", fingerprint, *token)
        assert refused.get("error", "").startswith("PinMismatch"), refused
        assert made["fingerprint"] in refused["error"]
        impostor.wait_for(lambda ls: any("handshake" in x for x in ls), "the handshake", 60)
        # It got a handshake and nothing after it: never a request, so never the token.
        assert not [x for x in impostor.lines if "request" in x], impostor.lines
    finally:
        impostor.close()
        board.run("systemctl start fingertip", timeout=round(700 * board.slowness))
    # The board again, its key the same after the restart.
    back = phone(board, "call", "health_check", "--retry-until", str(LINK_S))
    assert tool_output(back, board)["security"]["tls"]["fingerprint"] == fingerprint


def test_4_ios_chord_isolates_and_restores(
    board: BoardVM, deployed: dict[str, Any], recorder: GuestStream
) -> None:
    assert health(board)["device_type"] == "iOS"
    cursor = journal_cursor(board)
    since = recorder.mark()
    chord = {"input": {"keys": ["cmd", "a"]}}
    answer = phone(board, "call", "keyboard_tap", json.dumps(chord), "--token", deployed["token"])
    # The composite re-enumerated under the call: the phone's link went and its connection
    # with it, before any answer.
    assert "error" in answer and "status" not in answer, answer

    def chord_seen(lines: list[dict[str, Any]]) -> bool:
        keys = key_events(lines, ISOLATED)
        return (KEY_LEFTMETA, 1) in keys and (KEY_A, 1) in keys and (KEY_LEFTMETA, 0) in keys

    recorder.wait_for(chord_seen, "cmd+a on the keyboard-isolated device", EVENT_S, since)
    keys = key_events(recorder.lines[since:], ISOLATED)
    assert keys.index((KEY_LEFTMETA, 1)) < keys.index((KEY_A, 1)) < keys.index((KEY_A, 0))
    assert keys.index((KEY_A, 0)) < keys.index((KEY_LEFTMETA, 0))
    # The pointer-free profile really was what the target saw, and the full one came back.
    assert opened(recorder.lines[since:], ISOLATED) and "4" not in opened(
        recorder.lines[since:], ISOLATED
    )
    recorder.wait_for(
        lambda ls: opened(ls, FULL) >= FULL_HID_INTERFACES, "the full profile back", LINK_S, since
    )

    # The phone reconnects: the daemon is on the full profile again ...
    assert health(board)["profile"] == "full"
    # ... the invocation ran to its end although its client was gone: keys released and the
    # full profile restored by the input engine, then the call's own end. (Whether the
    # server noticed the client leave depends on whether the phone's reset crossed the link:
    # a call cut short would be logged "cancelled"; one that ran on, "ok".)
    log = journal_since(board, cursor)
    ends = [
        x
        for x in log
        if x.get("event") == "input_invocation_end" and x.get("tool") == "keyboard_tap"
    ]
    assert len(ends) == 1 and ends[0]["switches"] == ["keyboard-isolated", "full"], ends
    assert ends[0]["profile"] == "full"
    calls = [
        x for x in log if x.get("event") == "tool_invocation" and x.get("tool") == "keyboard_tap"
    ]
    assert len(calls) == 1 and calls[0]["outcome"] in ("ok", "cancelled"), calls
    # ... and no key is held on the target.
    assert no_key_held(board) == []
    # The link went and came back: a host browsing now finds the board again.
    assert len(discovered(board)) == 1, link_state(board)


def test_5_sigkill_mid_isolation_restarts_with_full_profile(
    board: BoardVM, workdir: Path, deployed: dict[str, Any], recorder: GuestStream
) -> None:
    assert health(board)["profile"] == "full"
    restarts = int(board.run("systemctl show -p NRestarts --value fingertip").stdout)
    pid = board.run("systemctl show -p MainPID --value fingertip").stdout.strip()
    cursor = journal_cursor(board)
    since = recorder.mark()
    # The kill is armed inside the guest before the chord starts and lands the moment the
    # recorder writes the chord's first key: a kill sent from here after seeing that line came
    # a round trip through ssh later, after the whole chord on a busy machine.
    first_key = {"product": ISOLATED, "type": EV_KEY, "code": KEY_LEFTMETA, "value": 1}
    killer = GuestStream(
        board,
        "killer",
        f"exec python3 -u /root/kill-on.py {recorder.out} {since + 1} "
        f"{shlex.quote(json.dumps(first_key)[1:-1])} fingertip.service",
        workdir / "killer.jsonl",
        parse=True,
    )
    killer.wait_for(lambda ls: any(x.get("armed") for x in ls), "the guest-side kill armed", 60)
    # A long chord (20 repeats) keeps the composite isolated for seconds.
    chord = json.dumps({"input": {"keys": ["cmd", "a"], "repeat": 20}})
    cmd = f"ip netns exec phone python3 /root/phone.py call keyboard_tap {shlex.quote(chord)}"
    client = board.popen(f"{cmd} --token {shlex.quote(deployed['token'])}")
    try:
        recorder.wait_for(
            lambda ls: (KEY_LEFTMETA, 1) in key_events(ls, ISOLATED),
            "the chord on the keyboard-isolated device",
            EVENT_S,
            since,
        )
        killer.wait_for(lambda ls: any(x.get("killed") for x in ls), "the kill", EVENT_S)
    finally:
        client.wait(120)
        killer.close()
    killed_at = since + next(
        i for i, x in enumerate(recorder.lines[since:]) if x.items() >= first_key.items()
    )
    # systemd restarts the daemon, which reconciles the gadget back to the full profile. The
    # recorder sees that at no cost to the guest; systemd is asked only then, and seldom: each
    # systemctl run takes a TCG guest's one CPU for a while, and a loop of them twice a second
    # tripled the restarting daemon's start (97 s against 34 s).
    limit = round(180 * board.slowness)
    recorder.wait_for(
        lambda ls: opened(ls, FULL) >= FULL_HID_INTERFACES,
        "the full profile after the restart",
        limit,
        killed_at,
    )
    board.run(
        f'timeout {limit} sh -c \'until [ "$(systemctl is-active fingertip)" = active ] && '
        f'[ "$(systemctl show -p NRestarts --value fingertip)" -gt {restarts} ]; '
        "do sleep 2; done'",
        timeout=limit + 20,
    )
    assert board.run("systemctl show -p MainPID --value fingertip").stdout.strip() != pid
    assert health(board)["profile"] == "full"
    log = journal_since(board, cursor)
    reconciled = [x for x in log if x.get("event") == "board.reconciled"]
    # The kill landed mid-isolation: the new daemon found keyboard-isolated live.
    assert reconciled and reconciled[-1]["was"] == "keyboard-isolated", reconciled
    assert reconciled[-1]["changed"] is True and reconciled[-1]["profile"] == "full"
    assert no_key_held(board) == []


# The target's view of the drive (run in the guest, whose USB host side is the dummy_hcd the
# gadget is bound to): "seen" waits for a medium on a USB sd disk and prints its size and
# sha256; "gone" waits for its size to drop to 0. Opening the node makes the sd driver look at
# the medium again, as a desktop's udisks does (the kernel polls removable media only when
# told to).
DRIVE_PROBE = r"""
import glob, hashlib, json, os, sys, time
want, deadline = sys.argv[1], time.monotonic() + float(sys.argv[2])
def disks():
    return [p for p in glob.glob("/sys/block/sd*") if "dummy_hcd" in os.path.realpath(p)]
while True:
    for p in disks():
        dev = "/dev/" + os.path.basename(p)
        try:
            os.close(os.open(dev, os.O_RDONLY | os.O_NONBLOCK))
        except OSError:
            pass
        size = int(open(p + "/size").read()) * 512
        if want == "seen" and size > 0:
            with open(dev, "rb") as f:
                digest = hashlib.sha256(f.read()).hexdigest()
            print(json.dumps({"dev": dev, "size": size, "sha256": digest}))
            sys.exit(0)
        if want == "gone" and size == 0:
            print(json.dumps({"dev": dev, "size": 0}))
            sys.exit(0)
    if time.monotonic() > deadline:
        print(json.dumps({"timeout": want, "disks": disks()}))
        sys.exit(1)
    time.sleep(0.2)
"""
# The sandbox the unit's file gives fingertip.service, as systemd shows it in force.
SANDBOX = {
    "ProtectSystem": "strict",
    "ProtectHome": "yes",
    "PrivateTmp": "yes",
    "PrivateUsers": "yes",
    "NoNewPrivileges": "yes",
    "DevicePolicy": "closed",
    "CapabilityBoundingSet": "",
    "User": "fingertip",
}


def drive_probe(board: BoardVM, want: str, limit: float) -> dict[str, Any]:
    done = board.run(
        f"python3 - {want} {limit:.0f}", input=DRIVE_PROBE, timeout=limit + 60, check=False
    )
    out = done.stdout.strip().splitlines()
    assert done.returncode == 0 and out, f"the target's drive: {done.stdout}{done.stderr}"
    return dict(json.loads(out[-1]))


def test_5b_an_uploaded_image_attaches_under_the_sandbox(
    board: BoardVM, deployed: dict[str, Any], recorder: GuestStream, record_property: Any
) -> None:
    """Issue 47 on the deployed board: the drive turned on as a user does (the config and a
    restart of the gadget's unit and the daemon), an image uploaded from
    the phone over TLS with the token, attached, read back byte-exact by the target's host
    side, detached; the daemon inside fingertip.service's sandbox all along."""
    started = time.monotonic()
    token = ("--token", deployed["token"])
    # The config's last table is the [gadget] the deployed fixture added. The emulated UDC
    # (dummy_udc) has far more than a Pi's 8 endpoints, so the drive joins the ECM link
    # rather than replacing it (docs/virtual-media.md: set udc_endpoints to the UDC's count).
    board.run("cp /etc/fingertip/fingertip.toml /root/before-media.toml")
    board.run(
        "printf 'mass_storage = true\\nudc_endpoints = 16\\n' >> /etc/fingertip/fingertip.toml"
    )
    since = recorder.mark()
    # Both named: systemctl then waits for the daemon's start too (Requires= restarts it with
    # the gadget, but as a job of its own that `restart fingertip-gadget` alone does not await).
    board.run("systemctl restart fingertip-gadget fingertip", timeout=round(700 * board.slowness))
    assert board.run("systemctl is-active fingertip").stdout.strip() == "active"
    shown = board.run(f"systemctl show fingertip -p {','.join(SANDBOX)}").stdout
    in_force = dict(line.split("=", 1) for line in shown.splitlines() if "=" in line)
    assert in_force == SANDBOX, in_force
    drive = tool_output(phone(board, "call", "media_list", *token, "--retry-until", str(LINK_S)))
    assert drive["drive"] is True and drive["attached"] is None, drive
    restarted = time.monotonic() - started

    # A 1 MiB image of known bytes, made where the phone is, sent as a user's client sends it.
    board.run("head -c 1048576 /dev/urandom > /root/media-test.img")
    want = board.run("sha256sum /root/media-test.img").stdout.split()[0]
    up = phone(board, "put", "/api/media/images/board-test.img", "--file",
               "/root/media-test.img", *token)  # fmt: skip
    assert up.get("status") == 200, up
    assert up["body"] == {"name": "board-test.img", "size": 1048576, "sha256": want}, up
    # Without the token the same upload is refused before a byte lands.
    refused = phone(board, "put", "/api/media/images/other.img", "--file", "/root/media-test.img")
    assert refused.get("status") == 401, refused
    owner = board.run("stat -c '%U %a' /var/lib/fingertip/media/board-test.img").stdout.split()
    assert owner == ["fingertip", "600"], owner  # the daemon's 0640 under the unit's UMask=0077

    attach = {"input": {"name": "board-test.img", "mode": "flash", "read_only": True}}
    out = tool_output(phone(board, "call", "media_attach", json.dumps(attach), *token), board)
    assert out["attached"]["name"] == "board-test.img", out
    seen = drive_probe(board, "seen", 120 * board.slowness)
    assert (seen["size"], seen["sha256"]) == (1048576, want), seen

    out = tool_output(phone(board, "call", "media_detach", *token), board)
    assert out["detached"] == "board-test.img", out
    assert drive_probe(board, "gone", 60 * board.slowness)["dev"] == seen["dev"]
    # The keyboard and pointer came back with the new composite, and nothing is held.
    assert opened(recorder.lines[since:], FULL) >= FULL_HID_INTERFACES
    assert no_key_held(board) == []
    took = time.monotonic() - started
    record_property("media_s", f"{took:.0f} (of which turning the drive on {restarted:.0f})")
    print(f"\nboard media: {took:.0f} s, of which the restart with the drive {restarted:.0f} s")


def test_6_power_cut_mid_workload_loses_nothing(
    board: BoardVM,
    workdir: Path,
    deployed: dict[str, Any],
    recorder: GuestStream,
    phone_link: GuestStream,
    record_property: Any,
) -> None:
    """The board deployed and checked above loses its power mid-workload (BOARD_POWER_CUTS
    times, one by default) and boots again from the same disk: power_cut.py says what each
    boot must show. No boot or deploy of its own: ~2-3 min of an idle machine's VM time."""
    start = time.monotonic()
    seed = int(os.environ.get("POWER_CUT_SEED", str(time.time_ns() % 10**9)))
    rng = random.Random(seed)
    # The usual start: the running daemon's last one (5's restart), by systemd's stamps.
    usual, _ = power_cut.wait_active(board)
    before = power_cut.pair(board)
    known = power_cut.Known(usual, {before["token"].strip()}, {before["fingerprint"]})
    board.put(HERE / "guest" / "power-cut-workload.py", power_cut.WORKLOAD, "0755")
    # What the guest logged before the first cut (its journal may not outlive one).
    journal = board.run("journalctl -b --no-pager -o short-monotonic", check=False)
    (workdir / "journal-before-cut.txt").write_text(journal.stdout)
    power_cut.say(
        board,
        f"power cuts: {power_cut.CUTS} (POWER_CUT_SEED={seed}), loss window "
        f"{power_cut.WINDOW_S} s, usual start {usual:.0f} s",
    )

    def target_reads_again() -> None:
        """The guest's helpers went with the boot: the target's side reads our devices again
        before the next workload (usbhid polls a device only while a node is open: without
        the recorder the pointer's reports were never read and every tap after the first cut
        answered target_not_attached), and the checks after this test see the link."""
        since = recorder.mark(), phone_link.mark()
        recorder.restart()
        phone_link.restart()
        recorder.wait_for(lambda ls: any(x.get("ready") for x in ls), "the recorder", 60, since[0])
        phone_link.wait_for(
            lambda ls: any(x.startswith("phone-link: ready") for x in ls),
            "the phone's link keeper",
            60,
            since[1],
        )

    failures = []
    for cut in range(1, power_cut.CUTS + 1):
        problems = power_cut.cut_once(board, rng, cut, known)
        if problems:
            failures.append(f"cut {cut}: {'; '.join(problems)}")
        if board.proc is None or board.proc.poll() is not None:
            break  # the board did not come back: nothing more to cut
        target_reads_again()
    cuts_s = time.monotonic() - start
    record_property("power_cuts_s", f"{cuts_s:.0f} for {power_cut.CUTS} cut(s)")
    assert board.proc is not None and board.proc.poll() is None, "\n".join(failures)
    now = power_cut.pair(board)
    deployed["token"], deployed["pin"] = now["token"].strip(), now["fingerprint"]
    board.run(f"cat > {PIN_FILE}", input=now["fingerprint"])
    assert not failures, "\n".join(failures)


def test_7_make_undeploy_removes_it_and_keeps_the_config(
    board: BoardVM, workdir: Path, deployed: dict[str, Any], recorder: GuestStream
) -> None:
    # Stopped, the board is no longer announced (the gadget, and so the link, stay up).
    assert len(discovered(board)) == 1
    board.run("systemctl stop fingertip")
    assert discovered(board, expect=False) == []
    since = recorder.mark()
    done = run_deploy(board, workdir, "undeploy.log", "undeploy")
    assert done.returncode == 0, done.stdout + done.stderr
    states = board.run("systemctl is-active fingertip fingertip-gadget", check=False).stdout
    assert states.split() == ["inactive", "inactive"]
    gone = (
        "/opt/fingertip /etc/systemd/system/fingertip.service "
        "/etc/systemd/system/fingertip-gadget.service /etc/udev/rules.d/70-fingertip.rules "
        "/etc/systemd/network/80-fingertip-usb.network /sys/kernel/config/usb_gadget/fingertip "
        "/usr/local/bin/fingertip /usr/local/bin/fingertip-gadget"
    )
    left = board.run(f"for p in {gone}; do [ -e $p ] && echo $p; done; true").stdout.split()
    assert left == []
    # The gadget went down with its unit: the target saw the device leave.
    recorder.wait_for(
        lambda ls: {x["gone"] for x in ls if x.get("gone") and x["product"] == FULL},
        "the device to leave the target",
        EVENT_S,
        since,
    )
    assert board.run("cat /etc/fingertip/fingertip.toml").stdout.startswith(CONFIG_MARK)
    # Nothing on the board ran out of memory in the whole run (3b's kill was the unit's limit).
    assert board_ooms(board) == []
