"""Releasing at the daemon's edges, on the simulated target: a start that finds the host as a
crashed daemon left it, and an old board config that still names the retired [gadget] release
keys. (An invocation's end, the stop, faults and cancellation: test_input_tools.py and
tests/unit/test_engine.py, test_board.py.)"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from daemon.config import load
from daemon.service import build
from daemon.sim.backend import SimulatedBackend
from gadget import keymap, reports
from tests.service.daemonproc import REPO, free_port, write_config
from tests.service.test_input_tools import NOTHING_HELD, Make, held, ok, state

RETIRED = {"release_repeat": 7, "release_interval": 0.5}


async def test_a_start_that_finds_keys_held_releases_every_role(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "fingertip.toml"
    tables = {
        "device": {"device_type": "iOS"},
        "server": {"listen": ["127.0.0.1"], "port": free_port()},
        "backend": {"kind": "simulated"},
        "state": {"dir": str(tmp_path / "state")},
        "ipc": {"socket": str(tmp_path / "ipc.sock")},
        "discovery": {"enabled": False},
    }
    write_config(path, tables)
    daemon = build(load(path))
    assert isinstance(daemon.backend, SimulatedBackend)
    target = daemon.backend.target
    # What a crashed daemon left on a host that has not re-enumerated since.
    await target.write("keyboard", reports.keyboard(reports.MOD_LSHIFT, [keymap.key("a").usage]))
    await target.write("consumer", reports.consumer(0xE9))
    await target.write("pointer", reports.mouse(reports.BUTTON_LEFT, 9830, 9830))
    st = target.state()
    assert st["keys_down"] == ["a"] and st["buttons_down"] == ["left"] and st["consumer_down"]

    async def kept_its_state() -> bool:
        return True  # BoardBackend.start's answer when reconciling changed nothing (test_board)

    monkeypatch.setattr(daemon.backend, "start", kept_its_state)
    await daemon.start()
    try:
        st = target.state()
        assert held(st) == NOTHING_HELD and st["consumer_down"] is None
        assert st["reports"] == {"keyboard": 1 + 3, "consumer": 1 + 3, "pointer": 1 + 3}
        assert (st["pointer"]["x"], st["pointer"]["y"]) == (500.0, 500.0)  # nothing known: centre
    finally:
        await daemon.stop()


async def test_a_config_with_the_retired_gadget_keys_starts_warns_once_and_they_do_nothing(
    make_daemon: Make,
) -> None:
    d = make_daemon({"gadget": RETIRED, "input": {"release_repeats": 2}})
    await ok(d, "keyboard_tap", {"keys": ["a"]})
    st = await state(d)
    assert held(st) == NOTHING_HELD
    assert st["reports"]["keyboard"] == 1 + 2  # the press, then [input].release_repeats all-ups
    warned = [e for e in d.log_events() if e.get("event") == "config_keys_retired"]
    assert len(warned) == 1 and warned[0]["level"] == "warning"
    assert warned[0]["ignored"] == {
        "gadget.release_interval": "input.release_interval_ms",
        "gadget.release_repeat": "input.release_repeats",
    }


def test_check_names_the_retired_keys_and_passes(tmp_path: Path) -> None:
    path = tmp_path / "fingertip.toml"
    write_config(path, {"gadget": RETIRED})
    out = subprocess.run(
        [sys.executable, "-m", "daemon", "--check", "--config", str(path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert f"{path}: gadget.release_repeat is retired and ignored; use input.release_repeats" in (
        out.stdout
    )
    assert out.stdout.splitlines()[-1] == f"fingertipd: {path}: ok"
