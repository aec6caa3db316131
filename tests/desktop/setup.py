"""Desktop-tier set-up: the kernel tier's VM, plus what the desktop inside it needs.

Run as `python tests/desktop/setup.py` (make desktop-setup); `run.py` calls `ensure()` itself.
On top of the kernel tier's cache (tests/kernel/setup.py), installs with apt the display server,
its input and video drivers, udev, Tk and ffmpeg on this machine (the guest runs this machine's
root, so what is installed here runs there), and builds the v4l2loopback module for the guest's
kernel from Debian's v4l2loopback-dkms source against that kernel's headers. The module goes
into the unpacked kernel's own module tree (lib/modules/KVER/extra/), so it lives and dies with
that kernel in the cache. A second run only checks and returns.
"""

from __future__ import annotations

import fcntl
import shutil
import sys
import tempfile
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
LOOPBACK_SOURCE = "v4l2loopback-dkms"
MODULE = "v4l2loopback.ko"


def module_path(art: kernel.Artifacts) -> Path:
    """Where the guest finds the loopback module (under the kernel share it mounts)."""
    return art.kernel.parent.parent / "lib/modules" / art.kver / "extra" / MODULE


def _say(msg: str) -> None:
    print(f"desktop-setup: {msg}", flush=True)


def build_loopback(kver: str, dest: Path) -> None:
    """Build v4l2loopback from Debian's dkms source package against `kver`'s headers."""
    headers = Path(f"/usr/src/linux-headers-{kver}")
    if not headers.is_dir():
        raise RuntimeError(f"no kernel headers at {headers} (linux-headers-{kver})")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        try:
            kernel._run("apt-get", "download", "-qq", LOOPBACK_SOURCE, cwd=work)
        except RuntimeError:
            kernel._apt_update()
            kernel._run("apt-get", "download", "-qq", LOOPBACK_SOURCE, cwd=work)
        (deb,) = work.glob("*.deb")
        kernel._run("dpkg", "-x", str(deb), str(work / "x"))
        (src,) = (work / "x/usr/src").glob("v4l2loopback-*")
        _say(f"building {src.name} for {kver}")
        kernel._run("make", "-C", str(headers), f"M={src}", "modules")
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp_dest = dest.with_suffix(".tmp")
        shutil.copy2(src / MODULE, tmp_dest)
        tmp_dest.rename(dest)


def ensure() -> kernel.Artifacts:
    """The kernel tier's artifacts, the desktop's packages and the loopback module."""
    art = kernel.ensure()
    with (kernel.CACHE / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # apt and the build take turns with other runs
        kernel.ensure_packages(APT_PACKAGES)
        dest = module_path(art)
        if not dest.exists():  # the headers only to build it (a cached kernel may be gone)
            kernel.ensure_packages((f"linux-headers-{art.kver}",))
            build_loopback(art.kver, dest)
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
