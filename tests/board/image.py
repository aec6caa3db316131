"""The board VM's disk: a Debian root filesystem with systemd, sshd and Python, as an ext4 image
with the kernel and initrd it boots (/work/shared/board-vm.md has the recipe and its timings).

`python tests/board/image.py` (make board-setup) builds it once into
~/.cache/fingertip/board/<recipe>/, outside the clone. <recipe> hashes this file and the kernel
package, so the image is rebuilt only when it is missing or when the recipe changes. The kernel is
the one the kernel tier boots (its setup.kernel_package()), so both tiers test the same kernel.
The image also holds the ssh key pair the test logs in with and the guest's host key, recorded
as a known_hosts line: the test verifies the guest rather than trusting whatever answers.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent
CACHE = Path(os.environ.get("FINGERTIP_BOARD_CACHE", Path.home() / ".cache/fingertip/board"))
SUITE = "bookworm"
HOST_ALIAS = "fingertip-board-vm"  # the guest's name in known_hosts (HostKeyAlias)

# On this machine: building the image, booting it, talking to it.
HOST_PACKAGES = ("debootstrap", "e2fsprogs", "qemu-system-x86", "openssh-client")
# In the guest: what a small board's Debian has, plus what the checks use (iproute2 for the
# phone's network namespace). python3-venv because boards often lack it: deploy must not care.
GUEST_PACKAGES = (
    "systemd", "systemd-sysv", "udev", "dbus", "openssh-server", "python3", "python3-venv",
    "kmod", "iproute2", "ca-certificates", "iputils-ping", "procps", "netbase",
)  # fmt: skip
# The board's hardware stand-ins: a UDC whose host side is this kernel, and a capture device.
GUEST_MODULES = ("dummy_hcd", "libcomposite", "vivid")
# Timers that would compete with the test for the one emulated CPU.
MASKED_UNITS = (
    "apt-daily.timer", "apt-daily-upgrade.timer", "e2scrub_all.timer", "fstrim.timer",
    "systemd-tmpfiles-clean.timer",
)  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Image:
    home: Path
    disk: Path
    kernel: Path
    initrd: Path
    key: Path  # private key whose public half is root's authorized_keys in the guest
    known_hosts: Path  # the guest's host key under HOST_ALIAS


def kernel_script(name: str) -> ModuleType:
    """tests/kernel/<name>.py (scripts, not a package, and named like this folder's own): the
    kernel tier's preflight, apt and kernel choice (setup), run folders and junit (run)."""
    path = HERE.parent / "kernel" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"fingertip_kernel_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    path_before = list(sys.path)
    spec.loader.exec_module(module)
    sys.path[:] = path_before  # run.py puts its folder first; this folder's run.py stays "run"
    return module


kernel_tier = kernel_script("setup")
# This machine cannot build or boot the board VM (the kernel tier's reasons, and the build's).
CannotRun = kernel_tier.CannotRun


def _say(msg: str) -> None:
    print(f"board-image: {msg}", flush=True)


def _run(*cmd: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
    if done.returncode != 0:
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-20:])
        raise RuntimeError(f"{' '.join(cmd)} failed ({done.returncode}):\n{tail}")
    return done.stdout


def debian_mirrors(texts: list[str]) -> tuple[str, str]:
    """(main archive, security archive) URIs from apt source files (one-line or deb822)."""
    main = security = ""
    for text in texts:
        entries: list[tuple[str, list[str]]] = []
        for stanza in re.split(r"\n\s*\n", text):
            fields = dict(re.findall(r"^(URIs|Suites):\s*(.+)$", stanza, re.M))
            if "URIs" in fields:
                suites = fields.get("Suites", "").split()
                entries += [(uri, suites) for uri in fields["URIs"].split()]
        for line in text.splitlines():
            m = re.match(r"^\s*deb\s+(?:\[[^]]*\]\s+)?(\S+)\s+(\S+)", line)
            if m:
                entries.append((m.group(1), [m.group(2)]))
        for uri, suites in entries:
            if not main and SUITE in suites:
                main = uri
            if not security and f"{SUITE}-security" in suites:
                security = uri
    return (
        main or "http://deb.debian.org/debian",
        security or "http://deb.debian.org/debian-security",
    )


def _apt_source_texts() -> list[str]:
    files = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]
    return [f.read_text(errors="replace") for f in files if f.is_file()]


def vivid_options() -> str:
    """As in the kernel tier: one instance with only a capture node."""
    return str(kernel_tier.MODULE_PARAMS["vivid"])


def recipe_key(kernel_pkg: str) -> str:
    h = hashlib.sha256(Path(__file__).read_bytes())
    h.update(kernel_pkg.encode())
    h.update(vivid_options().encode())
    return h.hexdigest()[:16]


def mounts_under(root: Path) -> list[Path]:
    """Mount points at or below `root`, deepest first (findmnt -R prints nothing when root
    itself is not a mount point, so read /proc/self/mounts)."""
    found = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        point = Path(line.split()[1].replace("\\040", " "))
        if point == root or root in point.parents:
            found.append(point)
    return sorted(found, key=lambda p: len(p.parts), reverse=True)


def unmount_all(root: Path) -> None:
    for point in mounts_under(root):
        if subprocess.run(["umount", str(point)], check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(point)], check=False)


@contextlib.contextmanager
def chroot_mounts(root: Path) -> Iterator[None]:
    """proc and sysfs for the package scripts; never this machine's /dev."""
    try:
        _run("mount", "-t", "proc", "proc", str(root / "proc"))
        _run("mount", "-t", "sysfs", "sys", str(root / "sys"))
        yield
    finally:
        unmount_all(root)


def _write(root: Path, rel: str, text: str, mode: int = 0o644) -> None:
    path = root / rel.lstrip("/")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)


def _in_chroot(root: Path, *cmd: str) -> str:
    env = {
        "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
        "DEBIAN_FRONTEND": "noninteractive",
        "LANG": "C.UTF-8",
        "HOME": "/root",
    }
    return _run("chroot", str(root), *cmd, env=env)


def build(home: Path, kernel_pkg: str) -> None:
    """Build the whole image into `home` (a fresh folder)."""
    root = home / "root"
    mirror, security = debian_mirrors(_apt_source_texts())
    _say(f"debootstrap {SUITE} from {mirror} (about a minute)")
    _run(
        "debootstrap", "--variant=minbase", f"--include={','.join(GUEST_PACKAGES)}",
        SUITE, str(root), mirror,
    )  # fmt: skip
    _write(root, "/usr/sbin/policy-rc.d", "#!/bin/sh\nexit 101\n", 0o755)  # start nothing
    _write(
        root,
        "/etc/apt/sources.list",
        f"deb {mirror} {SUITE} main\ndeb {mirror} {SUITE}-updates main\n"
        f"deb {security} {SUITE}-security main\n",
    )
    shutil.copy2("/etc/resolv.conf", root / "etc/resolv.conf", follow_symlinks=True)
    with chroot_mounts(root):
        _say(f"installing {kernel_pkg} and systemd-resolved in the chroot (about a minute)")
        _in_chroot(root, "apt-get", "update", "-qq")
        install = ("apt-get", "install", "-y", "-qq", "--no-install-recommends")
        _in_chroot(root, *install, kernel_pkg, "initramfs-tools", "zstd")
        _in_chroot(root, *install, "systemd-resolved")  # last: it replaces /etc/resolv.conf
        _in_chroot(root, "apt-get", "clean")
        _in_chroot(root, "systemctl", "enable", "systemd-networkd", "serial-getty@ttyS0.service")
        _in_chroot(root, "systemctl", "mask", *MASKED_UNITS)
    (root / "usr/sbin/policy-rc.d").unlink()
    configure(root, home)
    kver = kernel_pkg.removeprefix("linux-image-")
    shutil.copy2(root / f"boot/vmlinuz-{kver}", home / "vmlinuz")
    shutil.copy2(root / f"boot/initrd.img-{kver}", home / "initrd.img")
    _say("making the ext4 image")
    _run("mkfs.ext4", "-q", "-F", "-L", "board", "-d", str(root), str(home / "board.ext4"), "4G")
    shutil.rmtree(root)


def configure(root: Path, home: Path) -> None:
    """Hostname, fstab, locale, machine-id, ssh access, network, serial console, modules."""
    _write(root, "/etc/hostname", "fingertip-board\n")
    _write(root, "/etc/hosts", "127.0.0.1 localhost\n127.0.1.1 fingertip-board\n")
    _write(root, "/etc/fstab", "/dev/vda / ext4 defaults,errors=remount-ro 0 1\n")
    _write(root, "/etc/default/locale", "LANG=C.UTF-8\n")  # or pam_env complains at each login
    _write(root, "/etc/machine-id", hashlib.sha256(os.urandom(32)).hexdigest()[:32] + "\n")
    _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "fingertip-board-test",
         "-f", str(home / "id_ed25519"))  # fmt: skip
    pub = (home / "id_ed25519.pub").read_text()
    _write(root, "/root/.ssh/authorized_keys", pub, 0o600)
    (root / "root/.ssh").chmod(0o700)
    _write(
        root,
        "/etc/ssh/sshd_config.d/fingertip-board.conf",
        "PermitRootLogin prohibit-password\nPasswordAuthentication no\nUseDNS no\n",
    )
    host_key = (root / "etc/ssh/ssh_host_ed25519_key.pub").read_text().split()
    (home / "known_hosts").write_text(f"{HOST_ALIAS} {host_key[0]} {host_key[1]}\n")
    # Only the VM's NIC: the target's end of the USB link belongs to the test's "phone".
    wired = "[Match]\nDriver=virtio_net\n\n[Network]\nDHCP=yes\n"
    _write(root, "/etc/systemd/network/20-wired.network", wired)
    _write(root, "/etc/modules-load.d/fingertip-board.conf", "\n".join(GUEST_MODULES) + "\n")
    _write(root, "/etc/modprobe.d/fingertip-board.conf", f"options vivid {vivid_options()}\n")


def ensure() -> Image:
    """The cached image for the current recipe, built when missing."""
    kernel_tier.preflight()
    CACHE.mkdir(parents=True, exist_ok=True)
    with (CACHE / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # concurrent runs take turns
        return _ensure_locked()


def _image(home: Path) -> Image:
    return Image(
        home=home,
        disk=home / "board.ext4",
        kernel=home / "vmlinuz",
        initrd=home / "initrd.img",
        key=home / "id_ed25519",
        known_hosts=home / "known_hosts",
    )


def _ensure_locked() -> Image:
    kernel_tier.ensure_packages()
    kernel_tier.ensure_packages(HOST_PACKAGES)
    try:
        kernel_pkg = kernel_tier.kernel_package()
    except RuntimeError:
        cached = sorted(CACHE.glob("*/ready"), key=lambda p: p.stat().st_mtime)
        if not cached:
            raise
        _say("WARNING: cannot look up the current kernel package; using the cached image")
        return _image(cached[-1].parent)
    home = CACHE / recipe_key(kernel_pkg)
    if (home / "ready").exists():
        return _image(home)
    for old in CACHE.iterdir():  # an image is ~1 GB on disk: keep only the current recipe's
        if old.is_dir():
            unmount_all(old)
            shutil.rmtree(old, ignore_errors=True)
    work = Path(tempfile.mkdtemp(prefix=".build-", dir=CACHE))
    try:
        build(work, kernel_pkg)
        (work / "ready").write_text(kernel_pkg + "\n")
        work.rename(home)
    finally:
        if work.exists():
            unmount_all(work)
            shutil.rmtree(work, ignore_errors=True)
    _say(f"ready: {home}")
    return _image(home)


def main() -> int:
    try:
        img = ensure()
    except CannotRun as e:
        return skip_or_fail(str(e))
    _say(f"image {img.disk}")
    return 0


def skip_or_fail(reason: str) -> int:
    return int(kernel_tier.skip_or_fail(reason, "BOARD VM TEST"))


if __name__ == "__main__":
    sys.exit(main())
