"""fingertip-gadget as a subprocess, on the parts it can reach honestly without a kernel."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k != "FINGERTIP_CONFIG"}
    environ.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "gadget.cli", *args],
        capture_output=True,
        text=True,
        env=environ,
        timeout=120,
        check=False,
    )


def one_line(text: str) -> str:
    lines = text.splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got {lines!r}"
    return lines[0]


@pytest.fixture
def board(tmp_path: Path) -> Path:
    """A config whose roots point at a temporary tree: configfs with no gadget, one UDC."""
    (tmp_path / "config" / "usb_gadget").mkdir(parents=True)
    udc = tmp_path / "sys" / "class" / "udc" / "dummy_udc.0"
    udc.mkdir(parents=True)
    (udc / "state").write_text("not attached\n")
    (tmp_path / "dev").mkdir()
    config = tmp_path / "fingertip.toml"
    config.write_text(
        f"""
[device]
device_type = "Android"

[server]
port = 8080  # other tables are the daemon's business

[gadget]
configfs_root = "{tmp_path / "config"}"
sysfs_root = "{tmp_path / "sys"}"
dev_root = "{tmp_path / "dev"}"
"""
    )
    return config


def test_status_without_a_gadget(board: Path) -> None:
    result = run("--config", str(board), "status")
    assert result.returncode == 0, result.stderr
    status = json.loads(result.stdout)
    assert status["exists"] is False
    assert status["profile"] is None
    assert status["udc"] is None
    assert status["state"] == "not attached"
    assert status["gadget"] == str(board.parent / "config" / "usb_gadget" / "fingertip")


def test_config_from_the_environment(board: Path) -> None:
    result = run("status", env={"FINGERTIP_CONFIG": str(board)})
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["state"] == "not attached"


def test_down_without_a_gadget_is_a_no_op(board: Path) -> None:
    result = run("--config", str(board), "down")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "no gadget"


def test_up_on_a_plain_directory_fails_cleanly_and_leaves_nothing(board: Path) -> None:
    # A plain directory is not configfs: mkdir makes no attribute files. The apply must fail
    # with one line and roll back to nothing, not leave a half-built tree.
    result = run("--config", str(board), "up", "--profile", "keyboard-isolated")
    assert result.returncode == 1
    line = one_line(result.stderr)
    assert line.startswith("fingertip-gadget: applying profile 'keyboard-isolated' failed:")
    assert line.endswith("previous state restored")
    assert list((board.parent / "config" / "usb_gadget").iterdir()) == []


@pytest.mark.parametrize(
    "args",
    [
        ["bogus"],
        [],
        ["up", "--profile", "fast"],
        ["profile"],
        ["status", "--extra"],
    ],
)
def test_bad_arguments_are_one_line_and_exit_2(board: Path, args: list[str]) -> None:
    result = run("--config", str(board), *args)
    assert result.returncode == 2
    assert one_line(result.stderr).startswith("fingertip-gadget: ")
    assert result.stdout == ""


@pytest.mark.parametrize(
    ("table", "expected"),
    [
        ('colour = "blue"', "gadget.colour: unknown key"),
        ("product_id_full = 70000", "gadget.product_id_full: expected an integer 0..0xffff"),
        ('function_order = ["keyboard"]', "gadget.function_order: expected each of"),
    ],
)
def test_bad_config_keys_are_named(tmp_path: Path, table: str, expected: str) -> None:
    config = tmp_path / "fingertip.toml"
    config.write_text(f"[gadget]\n{table}\n")
    result = run("--config", str(config), "status")
    assert result.returncode == 1
    assert one_line(result.stderr).startswith(f"fingertip-gadget: {config}: {expected}")


def test_bad_device_type_is_named(tmp_path: Path, board: Path) -> None:
    result = run("--config", str(board), "up", "--device-type", "tvOS")
    assert result.returncode == 1
    assert one_line(result.stderr) == (
        "fingertip-gadget: --device-type: expected one of iOS, Android, macOS, windows, linux"
    )
    config = tmp_path / "other.toml"
    config.write_text('[device]\ndevice_type = "Palm"\n')
    result = run("--config", str(config), "status")
    assert result.returncode == 1
    assert "device.device_type: expected one of iOS" in one_line(result.stderr)


def test_missing_or_broken_config_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    result = run("--config", str(missing), "status")
    assert result.returncode == 1
    assert one_line(result.stderr) == f"fingertip-gadget: {missing}: config file not found"
    broken = tmp_path / "broken.toml"
    broken.write_text("[gadget\n")
    result = run("--config", str(broken), "status")
    assert result.returncode == 1
    assert "not valid TOML" in one_line(result.stderr)


def test_help_exits_zero() -> None:
    result = run("--help")
    assert result.returncode == 0
    assert "up" in result.stdout and "status" in result.stdout


def test_logs_are_json_lines_when_stderr_is_not_a_terminal(board: Path) -> None:
    result = run("--config", str(board), "--log-level", "info", "up")
    assert result.returncode == 1
    *logs, error = result.stderr.splitlines()
    events = [json.loads(line) for line in logs]
    assert [e["event"] for e in events] == ["gadget.apply", "gadget.rolled_back"]
    assert all(e["level"] == "info" and "timestamp" in e for e in events)
    assert events[0]["profile"] == "full" and events[0]["platform"] == "android"
    assert error.startswith("fingertip-gadget: applying profile 'full' failed")
