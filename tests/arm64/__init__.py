"""The arm64 tier (docs/arm64.md): the daemon on an emulated aarch64 (run.py), its Debian root
(root.py) and make deploy's wheelhouse for aarch64 (wheelhouse.py)."""

import os
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[2]
# The root, the wheelhouse and the builds: outside the clone, so a fresh clone reuses them.
CACHE = Path(os.environ.get("FINGERTIP_ARM64_CACHE", Path.home() / ".cache/fingertip/arm64"))
