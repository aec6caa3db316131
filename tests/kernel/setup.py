"""Kernel-tier setup: Debian's kernel unpacked into a cache, an initramfs built around it, and
the v4l2loopback module built for that kernel.

Run as `python tests/kernel/setup.py` (make kernel-setup); `run.py` calls `ensure()` itself.
Everything lands in ~/.cache/fingertip/kernel/<kernel version>/ (outside the clone, so a fresh
CI clone on the same machine reuses it). A second run only checks and returns.
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import lzma
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
INIT_SCRIPT = HERE / "init.sh"
CACHE = Path(os.environ.get("FINGERTIP_KERNEL_CACHE", Path.home() / ".cache/fingertip/kernel"))

# Debian packages the tier needs on this machine (iproute2 and busybox also serve the guest,
# which runs this machine's root read-only).
APT_PACKAGES = ("qemu-system-x86", "busybox-static", "kmod", "cpio", "iproute2")

# v4l2loopback, the kernel tier's MJPEG grabber (tests/kernel/guest/test_mjpeg_passthrough.py) and
# the desktop tier's screen: built from Debian's dkms source package (downloaded and unpacked,
# never installed, so dkms builds nothing for this machine's kernel) against the guest kernel's
# headers, into the unpacked kernel's own module tree, so it lives and dies with that kernel.
LOOPBACK_SOURCE = "v4l2loopback-dkms"
LOOPBACK_MODULE = "v4l2loopback.ko"

# Loaded in this order (with their dependencies first). hid_multitouch gives the touchscreen
# its MT slots; hid-generic would bind it as a plain digitizer.
MODULES = (
    "virtio_pci",
    "9pnet_virtio",
    "9p",
    "configfs",
    "libcomposite",
    "dummy_hcd",
    "usb_f_hid",
    "usb_f_ecm",
    "usb_f_ncm",
    "usb_f_mass_storage",
    "usbhid",
    "hid_generic",
    "hid_multitouch",
    "evdev",
    "cdc_ether",
    "cdc_ncm",
    # The target's side of virtual media: USB drives, disks, CD-ROMs and the FAT a drop holds.
    "usb_storage",
    "sd_mod",
    "sr_mod",
    "vfat",
    "nls_cp437",
    "nls_iso8859_1",
    "nls_ascii",
    "nls_utf8",
    "vivid",
    "veth",
)
# One vivid instance with only a video capture node: fewer /dev/video* to search, less to load.
MODULE_PARAMS = {"vivid": "n_devs=1 node_types=0x1"}
# Kernel command line of both VM tiers. Under TCG on a busy host the clocksource watchdog sees
# the emulated HPET answer late, marks the TSC unstable and switches to the HPET, whose every
# read is an emulated device access: seen once, the guest then ran several times slower for
# the rest of the run. The TSC of a TCG guest is the host's clock, so it is trusted.
GUEST_CMDLINE = "console=ttyS0 panic=-1 tsc=reliable"
# The guest CPU of both VM tiers: x86-64-v2 (SSE4.2, POPCNT), what NumPy's and OpenCV's wheels
# need, and no AVX. TCG emulates 256-bit vector instructions very slowly, and the wheels pick
# them whenever the CPU offers them: the OCR read of the board check's 154x71 corner took 258 s
# under `qemu-x86_64 -cpu max` and 270 s with Haswell's AVX2, against 14 s as Nehalem.
GUEST_CPU = "Nehalem"


class CannotRun(Exception):
    """The tier cannot run on this machine; the message says why in one line."""


@dataclasses.dataclass(frozen=True)
class Artifacts:
    kver: str
    kernel: Path
    initrd: Path


def preflight() -> None:
    """Raise CannotRun when this machine cannot host the tier at all."""
    if sys.platform != "linux" or os.uname().machine != "x86_64":
        raise CannotRun(f"needs x86_64 Linux, this is {sys.platform}/{os.uname().machine}")
    if os.geteuid() != 0:
        raise CannotRun("needs root (apt-get installs, and QEMU must read the whole root for 9p)")
    if shutil.which("apt-get") is None or shutil.which("dpkg") is None:
        raise CannotRun("needs a Debian-like machine with apt-get and dpkg")


def _run(*cmd: str, cwd: Path | None = None) -> str:
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stderr.strip()}")
    return done.stdout


def _say(msg: str) -> None:
    print(f"kernel-setup: {msg}", flush=True)


def _apt_update() -> None:
    # Third-party sources may be unreachable; what matters is Debian's lists, checked by use.
    subprocess.run(["apt-get", "update", "-qq"], check=False, stdout=subprocess.DEVNULL)


def _installed(package: str) -> bool:
    status = subprocess.run(
        ["dpkg-query", "-W", "-f=${Status}", package], capture_output=True, text=True, check=False
    )
    return "install ok installed" in status.stdout


def ensure_packages(packages: tuple[str, ...] = APT_PACKAGES) -> None:
    """apt-get install whichever of `packages` are missing (the board VM's too)."""
    missing = [p for p in packages if not _installed(p)]
    if not missing:
        return
    _say(f"installing {' '.join(missing)}")
    _apt_update()
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing],
        check=True,
        env=env,
        stdout=subprocess.DEVNULL,
    )


def kernel_package() -> str:
    """The versioned package linux-image-amd64 depends on (e.g. linux-image-6.1.0-50-amd64)."""

    def lookup() -> str | None:
        out = subprocess.run(
            ["apt-cache", "depends", "linux-image-amd64"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout
        for line in out.splitlines():
            dep = line.strip().removeprefix("Depends:").strip()
            if line.strip().startswith("Depends:") and dep.startswith("linux-image-"):
                return dep
        return None

    pkg = lookup()
    if pkg is None:
        _apt_update()
        pkg = lookup()
    if pkg is None:
        raise RuntimeError("apt-cache depends linux-image-amd64 names no linux-image-* package")
    return pkg


def _modules_dir(root: Path, kver: str) -> Path:
    for sub in ("lib/modules", "usr/lib/modules"):
        if (root / sub / kver).is_dir():
            return root / sub / kver
    raise RuntimeError(f"no modules for {kver} under {root}")


def ensure_kernel(pkg: str) -> tuple[str, Path]:
    """Download and unpack `pkg` once; return (kver, unpacked root)."""
    kver = pkg.removeprefix("linux-image-")
    home = CACHE / kver
    root = home / "root"
    if (home / "unpacked").exists():
        return kver, root
    _say(f"downloading and unpacking {pkg}")
    home.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=home) as tmp:
        try:
            _run("apt-get", "download", "-qq", pkg, cwd=Path(tmp))
        except RuntimeError:
            _apt_update()  # stale lists point at a file the archive no longer has
            _run("apt-get", "download", "-qq", pkg, cwd=Path(tmp))
        (deb,) = Path(tmp).glob("*.deb")
        shutil.rmtree(root, ignore_errors=True)
        _run("dpkg", "-x", str(deb), str(root))
    moddir = _modules_dir(root, kver)
    if moddir.parent != root / "lib/modules":  # depmod -b looks under lib/modules
        (root / "lib/modules").mkdir(parents=True, exist_ok=True)
        (root / "lib/modules" / kver).symlink_to(moddir)
    _run("depmod", "-b", str(root), kver)
    (home / "unpacked").touch()
    for old in CACHE.iterdir():  # an unpacked kernel is ~400 MB: keep only the current one
        if old != home and old.is_dir() and (old / "unpacked").exists():
            shutil.rmtree(old, ignore_errors=True)
    return kver, root


def loopback_path(root: Path, kver: str) -> Path:
    """Where the guest finds the loopback module (under the kernel share it mounts)."""
    return root / "lib/modules" / kver / "extra" / LOOPBACK_MODULE


def build_loopback(kver: str, dest: Path) -> None:
    """Build v4l2loopback from Debian's dkms source package against `kver`'s headers."""
    headers = Path(f"/usr/src/linux-headers-{kver}")
    if not headers.is_dir():
        raise RuntimeError(f"no kernel headers at {headers} (linux-headers-{kver})")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        try:
            _run("apt-get", "download", "-qq", LOOPBACK_SOURCE, cwd=work)
        except RuntimeError:
            _apt_update()
            _run("apt-get", "download", "-qq", LOOPBACK_SOURCE, cwd=work)
        (deb,) = work.glob("*.deb")
        _run("dpkg", "-x", str(deb), str(work / "x"))
        (src,) = (work / "x/usr/src").glob("v4l2loopback-*")
        _say(f"building {src.name} for {kver}")
        _run("make", "-C", str(headers), f"M={src}", "modules")
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp_dest = dest.with_suffix(".tmp")
        shutil.copy2(src / LOOPBACK_MODULE, tmp_dest)
        tmp_dest.rename(dest)


def ensure_loopback(root: Path, kver: str) -> None:
    """The loopback module for `kver`, built once (the headers only then: gcc comes with them).
    Under CI=true a failure fails the set-up; elsewhere the MJPEG test skips, saying why."""
    dest = loopback_path(root, kver)
    if dest.exists():
        return
    try:
        ensure_packages((f"linux-headers-{kver}",))
        build_loopback(kver, dest)
    except (RuntimeError, subprocess.CalledProcessError) as e:
        if os.environ.get("CI", "").lower() == "true":
            raise
        _say(f"WARNING: v4l2loopback not built, the MJPEG passthrough test will skip: {e}")


def recipe_hash() -> str:
    """Changes whenever this file or the /init script changes, so the initramfs is rebuilt."""
    h = hashlib.sha256()
    for f in (Path(__file__).resolve(), INIT_SCRIPT):
        h.update(f.read_bytes())
    busybox = shutil.which("busybox") or "/bin/busybox"
    h.update(Path(busybox).read_bytes())
    return h.hexdigest()[:16]


def module_load_order(root: Path, kver: str) -> list[Path]:
    """Every module file to insmod, dependencies first, each once."""
    order: list[Path] = []
    for name in MODULES:
        out = _run("modprobe", "-d", str(root), "-S", kver, "--show-depends", name)
        for line in out.splitlines():
            parts = line.split()
            if parts[:1] == ["insmod"] and Path(parts[1]) not in order:
                order.append(Path(parts[1]))
    return order


def build_initramfs(root: Path, kver: str, dest: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp)
        for d in ("bin", "dev", "proc", "sys", "host", "lib/modules"):
            (tree / d).mkdir(parents=True)
        busybox = Path(shutil.which("busybox") or "/bin/busybox")
        shutil.copy2(busybox, tree / "bin/busybox")
        for applet in _run(str(busybox), "--list").split():
            # A `busybox` symlink would replace the binary with a self-link (/init error -40).
            if applet != "busybox" and "/" not in applet:
                (tree / "bin" / applet).symlink_to("busybox")
        load = []
        for ko in module_load_order(root, kver):
            name = ko.name.removesuffix(".xz")
            data = lzma.decompress(ko.read_bytes()) if ko.suffix == ".xz" else ko.read_bytes()
            (tree / "lib/modules" / name).write_bytes(data)
            params = MODULE_PARAMS.get(name.removesuffix(".ko").replace("-", "_"), "")
            load.append(f"{name} {params}".rstrip())
        (tree / "modules.load").write_text("\n".join(load) + "\n")
        shutil.copy2(INIT_SCRIPT, tree / "init")
        (tree / "init").chmod(0o755)
        files = _run("find", ".", "-print0", cwd=tree)
        tmp_dest = dest.with_name(f"{dest.name}.{os.getpid()}.tmp")
        with tmp_dest.open("wb") as out:
            subprocess.run(
                ["cpio", "--quiet", "-o", "-0", "-H", "newc"],
                input=files.encode(),
                cwd=tree,
                stdout=out,
                check=True,
            )
        tmp_dest.rename(dest)


def ensure() -> Artifacts:
    """Make sure packages, kernel and initramfs are in place; quick when they already are."""
    preflight()
    CACHE.mkdir(parents=True, exist_ok=True)
    with (CACHE / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # concurrent runs (apt, unpacking) take turns
        return _ensure_locked()


def _ensure_locked() -> Artifacts:
    ensure_packages()
    try:
        kver, root = ensure_kernel(kernel_package())
    except (RuntimeError, subprocess.CalledProcessError) as e:
        cached = sorted(CACHE.glob("*/unpacked"))
        if not cached:
            raise
        kver = cached[-1].parent.name
        root = cached[-1].parent / "root"
        _say(f"WARNING: cannot fetch the current kernel ({e}); using cached {kver}")
    ensure_loopback(root, kver)
    kernel = root / "boot" / f"vmlinuz-{kver}"
    initrd = CACHE / kver / f"initramfs-{recipe_hash()}.cpio"
    if not initrd.exists():
        _say(f"building {initrd}")
        for old in initrd.parent.glob("initramfs-*"):
            old.unlink()
        build_initramfs(root, kver, initrd)
    return Artifacts(kver=kver, kernel=kernel, initrd=initrd)


def skip_or_fail(reason: str, tier: str = "KERNEL TIER") -> int:
    """The one loud line when a VM tier cannot run; a failure under CI=true."""
    ci = os.environ.get("CI", "").lower() == "true"
    verdict = "FAILED (CI=true requires it)" if ci else "SKIPPED"
    print(f"!!!!! {tier} {verdict}: {reason} !!!!!", flush=True)
    return 1 if ci else 0


def main() -> int:
    try:
        art = ensure()
    except CannotRun as e:
        return skip_or_fail(str(e))
    _say(f"ready: kernel {art.kver}, {art.initrd}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
