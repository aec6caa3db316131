"""The arm64 tier's board: Debian bookworm for arm64 (CPython 3.11, glibc 2.36, what the boards'
Debian-based OS has) in a folder, run on this x86_64 machine by QEMU's user-mode emulator.

`python tests/arm64/root.py` (make arm64-setup) builds it once into
~/.cache/fingertip/arm64/root-<recipe>/; run.py calls session() itself. Built by debootstrap's
first stage here and its second stage inside the root, through binfmt_misc (about 10 minutes,
most of it dpkg under emulation). Besides what a board has (python3, python3-venv), the root
holds what the simulated target needs (XKB data) and what builds its `xkbcommon` bindings,
which have no aarch64 wheel: xkbcommon_wheel() builds that wheel there, once.

Emulation: the kernel hands every aarch64 executable to qemu-aarch64-static through Debian's own
binfmt rule (qemu-user-static's /usr/lib/binfmt.d/qemu-aarch64.conf, with the F flag: the
emulator is opened when the rule is registered, so it runs inside the root too, and every
process the daemon starts, its OCR worker included, is emulated as well). emulation() registers
the rule for the time it needs it and removes it afterwards when it was not there before, so the
machine stays as it was found. The emulated CPU is a Cortex-A53 (a Raspberry Pi Zero 2 W's, 3's,
the lowest common aarch64 of the boards): a wheel that needs a newer instruction fails here as it
would there.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import inspect
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))  # run as a script (make arm64-setup) too
sys.path.insert(0, str(HERE.parent / "board"))
# The board VM's Debian mirror lookup and mount clean-up, and through it the kernel tier's
# preflight, apt installs, loud skip and run folders.
import image as board_image  # noqa: E402 (the board tier's scripts, not a package)
import vm as board_vm  # noqa: E402

from tests.arm64 import CACHE  # noqa: E402

kernel_tier = board_image.kernel_tier
CannotRun = kernel_tier.CannotRun
die_with_parent = board_vm._die_with_parent

SUITE = board_image.SUITE  # bookworm: CPython 3.11, glibc 2.36
HOST_PACKAGES = ("qemu-user-static", "debootstrap")
# What a board has for make deploy, then the simulated target's XKB layouts and Compose table,
# then what compiles the xkbcommon bindings' cffi module against libxkbcommon (their Python
# build requirements come as wheels: wheelhouse.sim_wheels).
ROOT_PACKAGES = (
    "python3", "python3-venv",
    "xkb-data", "libx11-data", "libxkbcommon0",
    "gcc", "libc6-dev", "python3-dev", "libxkbcommon-dev",
)  # fmt: skip
QEMU_CPU = "cortex-a53"
PATH = "/usr/sbin:/usr/bin:/sbin:/bin"

BINFMT = Path("/proc/sys/fs/binfmt_misc")
BINFMT_ENTRY = "qemu-aarch64"  # the name Debian's rule registers
DEBIAN_RULE = Path("/usr/lib/binfmt.d/qemu-aarch64.conf")


def _say(msg: str) -> None:
    print(f"arm64-setup: {msg}", flush=True)


def _run(*cmd: str, timeout: float | None = None, env: Mapping[str, str] | None = None) -> str:
    done = subprocess.run(
        cmd, capture_output=True, text=True, check=False, timeout=timeout, env=env
    )
    if done.returncode != 0:
        tail = "\n".join((done.stderr + done.stdout).strip().splitlines()[-20:])
        raise RuntimeError(f"{' '.join(cmd[:6])} ... failed ({done.returncode}):\n{tail}")
    return done.stdout


# --- emulation -------------------------------------------------------------------------------


def _binfmt_flags() -> str:
    for line in (BINFMT / BINFMT_ENTRY).read_text().splitlines():
        if line.startswith("flags:"):
            return line.split(":", 1)[1].strip()
    return ""


@contextlib.contextmanager
def emulation() -> Iterator[None]:
    """aarch64 executables run here while inside (callers hold the tier's lock). binfmt_misc is
    mounted and Debian's rule registered only when they are not already; what this made is
    undone on the way out. A marker in the cache remembers a registration whose run was
    killed, so the next run removes it when it is done."""
    if not DEBIAN_RULE.is_file():
        raise CannotRun(f"{DEBIAN_RULE} is missing (qemu-user-static installs it)")
    mounted = False
    if not (BINFMT / "register").exists():
        done = subprocess.run(
            ["mount", "-t", "binfmt_misc", "binfmt_misc", str(BINFMT)],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise CannotRun(f"cannot mount binfmt_misc at {BINFMT}: {done.stderr.strip()}")
        mounted = True
    ours = CACHE / "binfmt-registered-by-the-arm64-tier"
    entry = BINFMT / BINFMT_ENTRY
    try:
        if not entry.exists():
            rule = next(ln for ln in DEBIAN_RULE.read_text().splitlines() if ln.startswith(":"))
            ours.touch()  # first: a run killed right after registering still owns it
            try:
                (BINFMT / "register").write_text(rule)
            except OSError as e:
                raise CannotRun(f"cannot register {DEBIAN_RULE} with binfmt_misc: {e}") from e
        elif "F" not in _binfmt_flags():
            raise CannotRun(
                f"{entry} is registered without the F flag, so the emulator cannot run inside "
                "a chroot: re-register it with F (Debian's qemu-user-static rule has it)"
            )
        yield
    finally:
        if ours.exists():
            if entry.exists():
                entry.write_text("-1")  # removes the entry
            ours.unlink()
        if mounted:
            subprocess.run(["umount", str(BINFMT)], check=False)


def chroot_command(
    root: Path,
    argv: Sequence[str],
    *,
    binds: Mapping[Path, str] | None = None,
    writable: Mapping[Path, str] | None = None,
) -> list[str]:
    """`argv` inside the root, in a mount and PID namespace of their own: proc, tmpfs on /tmp
    and /dev/shm, `binds` (host folder -> path inside, read-only) and `writable` (read-write)
    are mounted there and vanish with it, and every process started inside dies with its first
    one. So nothing is left mounted or running whatever happens, and the cached root only
    changes where a command writes outside those mounts.

    No sysfs: this machine's lists x86 CPUs, and onnxruntime's cpuinfo for aarch64, finding
    CPUs there but no ARM ones in /proc/cpuinfo (QEMU 7.2 shows this machine's), segfaults at
    import. Without sysfs it gives up with a warning, and onnxruntime takes the CPU's features
    from the auxiliary vector, which QEMU fills in for the emulated Cortex-A53. No core files:
    an emulated crash would write the emulator's whole address space."""
    mounts = [
        "ulimit -c 0",
        f"mount -t proc proc {shlex.quote(str(root / 'proc'))}",
        f"mount -t tmpfs tmpfs {shlex.quote(str(root / 'tmp'))}",
        f"mount -t tmpfs tmpfs {shlex.quote(str(root / 'dev/shm'))}",
    ]
    for table, options in ((binds or {}, "-o ro "), (writable or {}, "")):
        for src, inside in table.items():
            target = shlex.quote(str(root / inside.lstrip("/")))
            mounts.append(f"mkdir -p {target}")
            mounts.append(f"mount --bind {options}{shlex.quote(str(src))} {target}")
    inner = " ".join(shlex.quote(a) for a in argv)
    script = " && ".join([*mounts, f"exec chroot {shlex.quote(str(root))} {inner}"])
    return ["unshare", "--mount", "--pid", "--fork", "--kill-child", "sh", "-c", script]


def chroot_env(**extra: str) -> dict[str, str]:
    """The environment of a command in the root: nothing of this machine's but what is named."""
    return {"PATH": PATH, "LANG": "C.UTF-8", "HOME": "/root", "QEMU_CPU": QEMU_CPU, **extra}


def in_root(root: Path, *argv: str, timeout: float, **kw: Mapping[Path, str]) -> str:
    """Run a command in the root to its end; its output, or RuntimeError with its tail."""
    return _run(*chroot_command(root, argv, **kw), timeout=timeout, env=chroot_env())


# --- the root --------------------------------------------------------------------------------


def build_root(home: Path) -> None:
    """debootstrap's first stage here, its second stage in the root (emulated)."""
    root = home / "root"
    mirror, _security = board_image.debian_mirrors(board_image._apt_source_texts())
    _say(f"debootstrap --foreign --arch=arm64 {SUITE} from {mirror} (first stage, ~1 min)")
    _run(
        "debootstrap", "--foreign", "--arch=arm64", "--variant=minbase",
        f"--include={','.join(ROOT_PACKAGES)}", SUITE, str(root), mirror,
    )  # fmt: skip
    _say("debootstrap --second-stage in the root under qemu-aarch64 (~10 min: dpkg emulated)")
    # Its own mount namespace: whatever the package scripts mount goes with it.
    _run(
        "unshare", "--mount", "--fork", "chroot", str(root), "/debootstrap/debootstrap",
        "--second-stage", env=chroot_env(),
    )  # fmt: skip


def recipe_key() -> str:
    """Changes when what goes into the root changes (not when the rest of this file does)."""
    h = hashlib.sha256(inspect.getsource(build_root).encode())
    h.update("\0".join([SUITE, *ROOT_PACKAGES]).encode())
    return h.hexdigest()[:16]


def _ensure_root() -> Path:
    home = CACHE / f"root-{recipe_key()}"
    if (home / "ready").exists():
        return home
    for old in CACHE.glob("root-*"):  # a root is ~600 MB: keep only the current recipe's
        board_image.unmount_all(old)
        shutil.rmtree(old, ignore_errors=True)
    work = Path(tempfile.mkdtemp(prefix=".build-", dir=CACHE))
    start = time.monotonic()
    try:
        build_root(work)
        (work / "ready").write_text(f"{SUITE} arm64\n")
        work.rename(home)
    finally:
        if work.exists():
            board_image.unmount_all(work)
            shutil.rmtree(work, ignore_errors=True)
    _say(f"root ready in {time.monotonic() - start:.0f} s: {home}")
    return home


def xkbcommon_wheel(home: Path, sdist: Path, wheels: Path) -> Path:
    """The xkbcommon bindings built into an aarch64 wheel in the root, once per sdist and root:
    PyPI has only their sdist, which compiles a cffi module against libxkbcommon. `wheels`
    holds their build requirements for aarch64 (wheelhouse.sim_wheels)."""
    out = home / "built" / sdist.name.removesuffix(".tar.gz")
    found = sorted(out.glob("*.whl"))
    if found:
        return found[0]
    _say(f"building {sdist.name} for aarch64 in the root (once, ~1 min)")
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    pip = "/tmp/build/bin/pip --disable-pip-version-check --quiet"
    script = (
        f"python3 -m venv /tmp/build && {pip} install --no-index --find-links /wheels cffi "
        f"setuptools wheel && {pip} wheel --no-index --no-build-isolation --no-deps "
        f"--wheel-dir /out /sdist/{sdist.name}"
    )
    in_root(
        home / "root", "sh", "-c", script, timeout=1800,
        binds={sdist.parent: "/sdist", wheels: "/wheels"}, writable={out: "/out"},
    )  # fmt: skip
    (wheel,) = out.glob("*.whl")
    return wheel


@contextlib.contextmanager
def locked() -> Iterator[None]:
    """Runs of this tier take turns: they share the root and its venv."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with (CACHE / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


@contextlib.contextmanager
def session() -> Iterator[Path]:
    """The tier's lock, host packages, emulation and the root (built when missing): its home
    folder, with the root in home/root. CannotRun when this machine cannot host the tier."""
    kernel_tier.preflight()  # x86_64 Linux, root, apt
    with locked():
        kernel_tier.ensure_packages(HOST_PACKAGES)
        with emulation():
            yield _ensure_root()


def main() -> int:
    try:
        with session() as home:
            machine = in_root(home / "root", "uname", "-m", timeout=60).strip()
            _say(f"ready: {home} ({machine} under qemu-aarch64 -cpu {QEMU_CPU})")
    except CannotRun as e:
        return skip_or_fail(str(e))
    return 0


def skip_or_fail(reason: str) -> int:
    return int(kernel_tier.skip_or_fail(reason, "ARM64 TIER"))


if __name__ == "__main__":
    sys.exit(main())
