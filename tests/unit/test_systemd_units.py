"""The unit files (systemd/) and the udev rule (etc/udev/): `systemd-analyze verify` passes, and
the paths and names they hard-code are the ones the code uses. The board VM test runs them for
real; these catch a broken unit in seconds."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

from daemon.config import BOARD_CONFIG, IpcConfig, ServerConfig
from daemon.transports.limits import FD_RESERVE, MAX_REFUSING
from gadget.cli import DEFAULT_CONFIG
from gadget.profiles import INSTANCES
from gadget.settings import GadgetSettings

PROJECT = Path(__file__).resolve().parents[2]
UNITS = {p.name: p.read_text() for p in sorted((PROJECT / "systemd").glob("*.service"))}
RELEASE_BIN = "/opt/fingertip/current/bin/"  # deploy/board.sh's layout
EXEC = re.compile(r"^Exec\w+=[-@:+!]*(\S+)", re.M)


def systemd_analyze() -> str:
    path = shutil.which("systemd-analyze")
    if path is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("systemd-analyze is missing (make systemd-setup installs it)")
        pytest.skip("systemd-analyze is missing (make systemd-setup installs it)")
    return path


def verify(tmp_path: Path, units: dict[str, str]) -> str:
    """systemd-analyze verify in a throwaway root: this machine's own units (targets, mounts)
    plus `units`, and a stand-in for each program they run (verify checks they exist)."""
    root = tmp_path / "root"
    for d in ("usr/lib/systemd/system", "lib/systemd/system"):
        src = Path("/") / d
        if src.is_dir() and not (root / d).exists():
            shutil.copytree(src, root / d, symlinks=True)
    unit_dir = root / "etc/systemd/system"
    unit_dir.mkdir(parents=True)
    for name, text in units.items():
        (unit_dir / name).write_text(text)
        for program in EXEC.findall(text):
            stub = root / program.lstrip("/")
            stub.parent.mkdir(parents=True, exist_ok=True)
            stub.write_text("#!/bin/sh\n")
            stub.chmod(0o755)
    done = subprocess.run(
        [systemd_analyze(), "verify", f"--root={root}", *units],
        capture_output=True,
        text=True,
        check=False,
    )
    return f"{done.stdout}{done.stderr}".strip() + ("" if done.returncode == 0 else " (failed)")


def test_units_pass_systemd_analyze_verify(tmp_path: Path) -> None:
    assert set(UNITS) == {"fingertip.service", "fingertip-gadget.service"}
    assert verify(tmp_path, UNITS) == ""


def test_verify_catches_a_broken_unit(tmp_path: Path) -> None:
    broken = dict(UNITS)
    broken["fingertip.service"] = broken["fingertip.service"].replace("Type=notify", "Type=notfy")
    assert "notfy" in verify(tmp_path, broken)


def test_units_run_the_console_scripts_with_the_board_config() -> None:
    scripts = tomllib.loads((PROJECT / "pyproject.toml").read_text())["project"]["scripts"]
    assert BOARD_CONFIG == DEFAULT_CONFIG
    for text in UNITS.values():
        for program in EXEC.findall(text):
            if program.startswith(RELEASE_BIN):
                assert program.removeprefix(RELEASE_BIN) in scripts, program
        for config in re.findall(r"--config (\S+)", text):
            assert config == str(BOARD_CONFIG)


def test_units_name_the_gadget_tree_the_gadget_package_builds() -> None:
    gadget_dir = str(GadgetSettings().gadget_dir)
    assert f"ReadWritePaths={gadget_dir}\n" in UNITS["fingertip.service"]
    assert f"fingertip:fingertip {gadget_dir}\n" in UNITS["fingertip-gadget.service"]
    assert "Requires=fingertip-gadget.service" in UNITS["fingertip.service"]
    assert re.search(r"^Type=notify$", UNITS["fingertip.service"], re.M)
    assert re.search(r"^WatchdogSec=", UNITS["fingertip.service"], re.M)


def test_the_fd_limit_covers_the_connection_caps() -> None:
    """Without LimitNOFILE the daemon ran under whatever it was given, and past the fds accept()
    fails for everyone; the default caps plus the reserve must fit under the unit's limit."""
    unit = UNITS["fingertip.service"]
    limit = re.search(r"^LimitNOFILE=(\d+)$", unit, re.M)
    assert limit, "fingertip.service sets no LimitNOFILE"
    caps = ServerConfig().max_connections + IpcConfig().max_connections
    assert caps + MAX_REFUSING + FD_RESERVE <= int(limit.group(1))
    # The daemon ends its shell sessions' children itself; the cgroup is swept after it.
    assert re.search(r"^KillMode=mixed$", unit, re.M)


def test_udev_helper_knows_the_hid_instances() -> None:
    helper = (PROJECT / "etc/udev/fingertip-hidg-role").read_text()
    assert "functions/hid.*/dev" in helper and "${function##*/hid.}" in helper
    roles = {i.removeprefix("hid.") for i in INSTANCES.values() if i.startswith("hid.")}
    assert roles == {"keyboard", "consumer", "pointer"}
    rules = (PROJECT / "etc/udev/70-fingertip.rules").read_text()
    assert 'GROUP="fingertip", MODE="0660"' in rules
    sysusers = (PROJECT / "systemd/fingertip.sysusers").read_text()
    assert re.search(r"^u fingertip ", sysusers, re.M)


def test_the_daemon_unit_bounds_memory_and_outlives_an_ocr_worker_killed_for_it() -> None:
    from daemon.screen.ocr_worker import OOM_SCORE_ADJ

    unit = UNITS["fingertip.service"]
    settings = dict(re.findall(r"^(MemoryHigh|MemoryMax|OOM\w+)=(\S+)$", unit, re.M))
    mb = {k: int(v.removesuffix("M")) for k, v in settings.items() if k.startswith("Memory")}
    # The budget's peak in all during an OCR read is 256 MB: the limits sit above it, in order.
    assert 256 <= mb["MemoryHigh"] < mb["MemoryMax"] <= 512, settings
    # Killed for memory, the worker goes alone: the unit is not stopped for it ...
    assert settings["OOMPolicy"] == "continue"
    # ... and the kernel picks the worker, never the daemon that holds the target's keyboard.
    assert int(settings["OOMScoreAdjust"]) < 0 < OOM_SCORE_ADJ
