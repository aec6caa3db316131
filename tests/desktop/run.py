"""Desktop-tier runner: the kernel tier's VM booted with tests/desktop/guest.

`python tests/desktop/run.py [PYTEST_ARGS...]` (make desktop-test; DESKTOP_TEST_ARGS passes the
arguments through make). Set-up is the kernel tier's plus the desktop's (setup.py here); the
boot, the console stream, the junit reading and the report are the kernel tier's runner's. Each
run's artifacts (console log, junit xml, every scenario's screens, the X log, the application's
record) land in test-artifacts/desktop/run-*/.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

# The kernel tier's runner and set-up go by their own names (run, setup) on the path; this
# folder's set-up, which shares a name with theirs, is loaded from its file.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "kernel"))
import run as kernel_run

HERE = Path(__file__).resolve().parent

_spec = importlib.util.spec_from_file_location("desktop_setup", HERE / "setup.py")
assert _spec is not None and _spec.loader is not None
desktop_setup = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(desktop_setup)

ARTIFACTS = kernel_run.PROJECT / "test-artifacts" / "desktop"
GUEST = kernel_run.Guest(
    tests="tests/desktop/guest",
    smp=2,
    memory_mb=1536,
    tier="desktop",
    # A scenario takes minutes under TCG: dump the stacks only of one that hangs far longer.
    pytest_args=("-o", "faulthandler_timeout=600"),
)
# A hung guest's bound, not the tier's expected time: on a loaded CI runner the whole tier took
# over 30 min before its OCR scenarios were trimmed, and the suite's own bound is 90.
TIMEOUT_S = float(os.environ.get("DESKTOP_TEST_TIMEOUT", "2700"))


def main(argv: list[str]) -> int:
    return kernel_run.run_tier(
        argv, GUEST, ARTIFACTS, "DESKTOP_TEST_ARGS", TIMEOUT_S, prepare=desktop_setup.ensure
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
