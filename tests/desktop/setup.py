"""Desktop-tier set-up: the kernel tier's VM, plus what the desktop inside it needs.

Run as `python tests/desktop/setup.py` (make desktop-setup); `run.py` calls `ensure()` itself.
On top of the kernel tier's cache (tests/kernel/setup.py), installs with apt the display server,
its input and video drivers, udev, Tk and ffmpeg on this machine (the guest runs this machine's
root, so what is installed here runs there). The v4l2loopback module for the guest's kernel is
the kernel tier's (tests/kernel/setup.py builds it into the cached kernel's module tree); here
its absence fails the set-up. A second run only checks and returns.
"""

from __future__ import annotations

import fcntl
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "kernel"))
import setup as kernel  # the kernel tier's set-up script

# The desktop: X.Org with the dummy video and libinput input drivers, XKB's tools, xinput and
# xset, udev so the gadget's devices hotplug, Tk for the test application (Debian's python3),
# ffmpeg to copy the screen into the V4L2 loopback device. gcc and make come with the headers.
APT_PACKAGES = (
    "xserver-xorg-core",
    "xserver-xorg-video-dummy",
    "xserver-xorg-input-libinput",
    "x11-xkb-utils",
    "x11-utils",
    "x11-xserver-utils",
    "xinput",
    "xauth",
    "udev",
    "python3-tk",
    "ffmpeg",
    "v4l-utils",
)


def module_path(art: kernel.Artifacts) -> Path:
    """Where the guest finds the loopback module (under the kernel share it mounts)."""
    return kernel.loopback_path(art.kernel.parent.parent, art.kver)


def _say(msg: str) -> None:
    print(f"desktop-setup: {msg}", flush=True)


def ensure() -> kernel.Artifacts:
    """The kernel tier's artifacts, the desktop's packages and the loopback module."""
    art = kernel.ensure()
    with (kernel.CACHE / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # apt and the build take turns with other runs
        kernel.ensure_packages(APT_PACKAGES)
        # The kernel tier's set-up builds it (its MJPEG test uses it too); a miss there is a
        # warning, here a failure: every scenario needs the screen.
        kernel.ensure_loopback(art.kernel.parent.parent, art.kver)
        if not module_path(art).exists():
            raise kernel.CannotRun(f"v4l2loopback was not built for {art.kver} (above)")
    return art


def main() -> int:
    try:
        art = ensure()
    except kernel.CannotRun as e:
        return kernel.skip_or_fail(str(e), "DESKTOP TIER")
    _say(f"ready: kernel {art.kver}, {module_path(art)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
