"""The README's five-minute tour runs: every command in its sh blocks, in order, in a shell,
against the daemon `make run` starts (etc/fingertip.dev.toml, with this test's port, state folder
and socket in place of 8080 and .fingertip/; curl failing on an HTTP error status). A command the
tour cannot run here must say so in the README (`# needs a board`), and is skipped."""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

from tests.service.daemonproc import REPO, DaemonProcess, write_config

README = REPO / "README.md"
TOUR = re.compile(r"<!-- tour:.*?-->(.*?)<!-- tour: end -->", re.S)
SH_BLOCK = re.compile(r"^```sh\n(.*?)^```", re.S | re.M)
BOARD_ONLY = "# needs a board"


def tour_commands(readme: str) -> list[str]:
    """The tour's shell commands, one per line (backslash continuations joined)."""
    match = TOUR.search(readme)
    assert match, "README.md has no <!-- tour: ... --> ... <!-- tour: end --> section"
    commands = []
    for block in SH_BLOCK.findall(match[1]):
        for line in block.replace("\\\n", " ").splitlines():
            if line.strip() and not line.lstrip().startswith("#"):
                commands.append(line.strip())
    return commands


def test_the_tour_is_found_and_starts_with_make_run() -> None:
    commands = tour_commands(README.read_text())
    assert commands[0] == "make run"
    assert len(commands) >= 8


def test_every_command_of_the_readme_tour_runs(tmp_path: Path) -> None:
    commands = tour_commands(README.read_text())
    assert commands.pop(0) == "make run"  # started here as `make run` would, on a free port
    dev = tomllib.loads((REPO / "etc" / "fingertip.dev.toml").read_text())
    folder = tmp_path / "daemon"
    folder.mkdir()
    daemon = DaemonProcess(folder)
    for table, values in dev.items():
        daemon.tables.setdefault(table, {}).update(values)
    daemon.tables["server"].update(port=daemon.port)
    daemon.tables["state"]["dir"] = str(daemon.state_dir)
    daemon.tables["ipc"]["socket"] = str(folder / "ipc.sock")
    daemon.tables["log"]["format"] = "json"
    write_config(daemon.config_path, daemon.tables)
    daemon.start()
    work = tmp_path / "work"
    work.mkdir()
    try:
        ran = 0
        for command in commands:
            if BOARD_ONLY in command:
                continue
            here = (
                command.replace("http://127.0.0.1:8080", daemon.base)
                .replace(".fingertip/ipc.sock", str(folder / "ipc.sock"))
                .replace(".fingertip/", f"{daemon.state_dir}/")
                .replace(".venv/bin/", f"{REPO}/.venv/bin/")
                .replace("curl -s ", "curl -sS --fail-with-body ")  # an HTTP error fails here
            )
            done = subprocess.run(
                ["bash", "-o", "pipefail", "-c", here],
                cwd=work,
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert done.returncode == 0, (
                f"README tour command failed ({done.returncode}): {command}\n"
                f"stdout: {done.stdout[-2000:]}\nstderr: {done.stderr[-2000:]}"
            )
            assert not re.search(r'"is_error": ?true', done.stdout), f"{command}: {done.stdout}"
            ran += 1
        assert ran >= 8
        # What the tour promises happened on the target, not only in the replies.
        assert (work / "screen.jpg").read_bytes()[:2] == b"\xff\xd8"
        state = daemon.sim_state()
        assert (state["app"], state["texts"].get("Notes")) == ("Notes", "hello from the tour")
    finally:
        daemon.stop()
