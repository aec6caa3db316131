"""`make deploy`'s wheelhouse for an aarch64 board that is not here: deploy/build.py's own
build_wheel and build_wheelhouse, given the facts such a board's probe reports (aarch64,
CPython 3.11, glibc 2.36: Debian bookworm, Raspberry Pi OS). Cached in
~/.cache/fingertip/arm64/wheelhouse under deploy's own key (the venv's pins, the platform, the
wheel's requirements), so a second build asks the package index for nothing.

Used by the wheelhouse test (tests/service/test_arm64_wheelhouse.py) and by the arm64 tier
(run.py), which installs from it on an emulated aarch64.
"""

from __future__ import annotations

import contextlib
import fcntl
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from deploy import build as deploy_build
from deploy import pure as deploy_pure
from tests.arm64 import CACHE

# What `board.sh probe` reports on a 64-bit Debian bookworm board.
BOARD = deploy_pure.BoardFacts(
    uid=0, arch="aarch64", python=(3, 11), libc=("glibc", (2, 36)), current=None
)


# The wheelhouse of a board with OCR on (deploy's choice where [ocr] enabled is true, or "auto"
# with 512 MB or more): the one with the most in it, and the one the tier needs.
EXTRAS = ("ocr",)


@dataclass(frozen=True)
class Wheelhouse:
    wheel: Path  # fingertip's own
    folder: Path
    wheels: list[Path]  # everything else the board installs with EXTRAS, pip included


@contextlib.contextmanager
def _turns(name: str) -> Iterator[None]:
    """The test and the tier may build at once (make test): they take turns."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with (CACHE / f".{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def build(dist: Path) -> Wheelhouse:
    """The fingertip wheel into `dist` (a folder of the caller's: another build may replace
    its own at any time), and the cached wheelhouse for BOARD."""
    wheel = deploy_build.build_wheel(dist)
    folder = CACHE / "wheelhouse"
    with _turns("wheelhouse"):
        wheels = deploy_build.build_wheelhouse(wheel, BOARD, folder, EXTRAS)
    return Wheelhouse(wheel, folder, wheels)


# The xkbcommon bindings' build (setuptools, wheel, cffi) and run-time (cffi, pycparser) needs.
SIM_REQUIREMENTS = ("cffi", "setuptools", "wheel")


def sim_wheels() -> Path:
    """A folder of aarch64 wheels for the simulated target's xkbcommon bindings, downloaded as
    deploy downloads the board's (the venv's pins, BOARD's target options; cached under the
    same kind of key). Not through build_wheelhouse: those bindings have no wheel to start
    from (root.xkbcommon_wheel builds one from these)."""
    folder = CACHE / "sim-wheelhouse"
    pins = CACHE / "constraints.txt"  # build_wheelhouse's (the venv's pins): build() first
    target = deploy_pure.pip_download_args(BOARD)
    key = deploy_build.wheelhouse_key(pins.read_text(), target, "\n".join(SIM_REQUIREMENTS))
    stamp = folder / ".made-of"
    with _turns("sim-wheelhouse"):
        if not (stamp.is_file() and stamp.read_text() == key):
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)
            deploy_build._pip(
                "download", "--dest", str(folder), "--constraint", str(pins), *target,
                *SIM_REQUIREMENTS, what="the simulated target's wheels for aarch64",
            )  # fmt: skip
            stamp.write_text(key)  # last: a download cut short is not reused
    return folder
