"""docs/hardware.md's MCP script runs as printed, with the official client, against the daemon
and its simulated target: it lists the tools, finds and taps Notes, and Notes opens."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.service.daemonproc import REPO, DaemonProcess

PAGE = REPO / "docs" / "hardware.md"
SCRIPT = re.compile(
    r"<!-- run: tests/service/test_hardware_doc.py.*?-->\n```python\n(.*?)^```", re.S | re.M
)


def test_the_mcp_script_taps_notes(tmp_path: Path) -> None:
    match = SCRIPT.search(PAGE.read_text())
    assert match, "docs/hardware.md has no <!-- run: ... --> python block"
    script = tmp_path / "mcp_tap.py"
    script.write_text(match[1])
    d = DaemonProcess(tmp_path).start()
    try:
        done = subprocess.run(
            [sys.executable, str(script)],
            env={"FINGERTIP_MCP": d.base + "/mcp", "PATH": "/usr/bin:/bin"},
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        names, found, tapped = done.stdout.splitlines()[:3]
        assert {"tap_text", "find_text", "screenshot"} <= set(names.split())
        assert "'text': 'Notes'" in found and tapped == "tap_text: ok"
        assert d.sim_state()["app"] == "Notes"  # the target, not only the reply
    finally:
        d.stop()
