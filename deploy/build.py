"""Built here for the board: the fingertip wheel, the wheelhouse of binary wheels for its
platform, its third-party packages installed into one archive, and sending it all over."""

from __future__ import annotations

import fcntl
import hashlib
import shutil
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from deploy import PROJECT, DeployError
from deploy.pure import BoardFacts, constraints, pip_download_args, wheelhouse_hint
from deploy.ssh import Ssh


def _pip(*args: str, what: str) -> None:
    cmd = [sys.executable, "-m", "pip", "--disable-pip-version-check", *args]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        lines = [ln for ln in (done.stderr + done.stdout).splitlines() if "is ignored" not in ln]
        tail = "\n".join(f"    {ln}" for ln in lines[-12:])
        raise DeployError(f"{what} failed:\n{tail}")


def build_wheel(out: Path) -> Path:
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    (PROJECT / "build").mkdir(exist_ok=True)
    # Builds of this tree take turns: setuptools builds in build/ (make test builds wheels for
    # the arm64 wheelhouse test while the board VM deploys).
    with (PROJECT / "build" / ".wheel-lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        # setuptools copies into build/lib over what an earlier build left there: a module
        # since moved or deleted (daemon/tools/input.py) would ship again. Only its folders
        # go: build/deploy keeps the wheelhouse and the board packages for the next deploy.
        for left in [PROJECT / "build" / "lib", *(PROJECT / "build").glob("bdist.*")]:
            shutil.rmtree(left, ignore_errors=True)
        _pip(
            "wheel", "--quiet", "--no-deps", "--wheel-dir", str(out), str(PROJECT),
            what="pip wheel",
        )  # fmt: skip
    (wheel,) = out.glob("fingertip-*.whl")
    return wheel


def wheel_requirements(path: Path) -> str:
    """The Requires-Dist lines of a wheel's METADATA."""
    with zipfile.ZipFile(path) as zf:
        meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        text = zf.read(meta).decode(errors="replace")
    return "\n".join(ln for ln in text.splitlines() if ln.startswith("Requires-Dist:"))


def wheelhouse_key(
    pins: str, target: Sequence[str], requires: str, extras: Sequence[str] = ()
) -> str:
    """What a wheelhouse is made of: the same pins, board platform, requirements and extras
    make the same wheels, so the next deploy (this board again, or the next board of a rack)
    reuses them instead of asking the package index for every one again."""
    parts = [pins, *target, requires, *sorted(extras)]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def build_wheelhouse(
    wheel: Path, facts: BoardFacts, out: Path, extras: Sequence[str] = ()
) -> list[Path]:
    """Binary wheels of everything the board runs (and pip, which installs them there), with
    the fingertip wheel's `extras` (["ocr"]: the OCR engine)."""
    freeze = subprocess.run(
        [sys.executable, "-m", "pip", "freeze", "--all", "--exclude-editable"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    pins = out.parent / "constraints.txt"
    pins.parent.mkdir(parents=True, exist_ok=True)
    pins.write_text(constraints(freeze))
    target = pip_download_args(facts)
    key = wheelhouse_key(pins.read_text(), target, wheel_requirements(wheel), extras)
    wanted = f"{wheel}[{','.join(sorted(extras))}]" if extras else str(wheel)
    stamp = out / ".made-of"  # the key, then the wheels it gave: all must still be there
    made = stamp.read_text().split("\n") if stamp.is_file() else []
    if not (made[:1] == [key] and all((out / name).is_file() for name in made[1:])):
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        _pip(
            "download", "--dest", str(out), "--constraint", str(pins), *target, wanted,
            "pip",
            what=f"the wheelhouse for {facts.arch} / CPython "
            f"{'.'.join(map(str, facts.python))} ({wheelhouse_hint(facts.arch)})",
        )  # fmt: skip
        names = sorted(p.name for p in out.glob("*.whl"))
        stamp.write_text("\n".join([key, *names]))  # last: a download cut short is not reused
    return sorted(p for p in out.glob("*.whl") if not p.name.startswith("fingertip-"))


def deps_id(manifest: str) -> str:
    """The name of a set of third-party wheels on the board, deps/<id> (board.sh derives the
    same from the manifest it is sent: `sha256sum <manifest | cut -c1-12`)."""
    return hashlib.sha256(manifest.encode()).hexdigest()[:12]


def _root_owned(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


def build_deps(wheels: Sequence[Path], facts: BoardFacts, out: Path, ident: str) -> Path:
    """The board's third-party packages installed here, as deps-<id>.tar.gz: site-packages and
    `compiled-for`, the bytecode's cache tag. pip installs for the board's platform and CPython
    (wheels are only unpacked; nothing of the board's runs here). The bytecode is compiled here
    when this Python is the board's minor version, else left to the board; either way
    unchecked-hash pycs: deps/<id> never changes once unpacked, so imports never stat a source.
    Kept in `out` for the next board of the same platform (a rack deploys one build to many)."""
    same_python = sys.version_info[:2] == facts.python
    tag = sys.implementation.cache_tag if same_python else ""
    bundle = out / f"deps-{ident}{'-' + tag if tag else ''}.tar.gz"
    if bundle.is_file():
        return bundle
    shutil.rmtree(out, ignore_errors=True)  # the newest set only
    tree = out / "tree"
    site = tree / "site-packages"
    _pip(
        "install", "--quiet", "--no-deps", "--no-index", "--no-compile", "--target", str(site),
        *pip_download_args(facts), *map(str, wheels),
        what=f"installing the wheels for {facts.arch} / CPython "
        f"{'.'.join(map(str, facts.python))} here",
    )  # fmt: skip
    if same_python:
        compiled = subprocess.run(
            [sys.executable, "-m", "compileall", "-q", "-j", "0", "--invalidation-mode",
             "unchecked-hash", str(site)],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if compiled.returncode != 0:
            raise DeployError(f"byte-compiling the board's packages failed:\n{compiled.stdout}")
    (tree / "compiled-for").write_text(f"{tag}\n")
    partial = out / "bundle.part"
    # gzip's own default level, not tarfile's 9: on these 430 MB, 9 took 91 s and 6 took 37 s
    # for a bundle 0.5 % larger.
    with tarfile.open(partial, "w:gz", compresslevel=6) as tar:
        for child in sorted(tree.iterdir()):
            tar.add(child, arcname=child.name, filter=_root_owned)
    partial.rename(bundle)  # last: a bundle cut short is never reused
    shutil.rmtree(tree)
    return bundle


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def send(ssh: Ssh, files: Mapping[str, Path]) -> None:
    """Stream `files` (name in the staging folder -> local path) into /opt/fingertip/incoming."""
    proc = ssh.stream(
        ["sh", "-c", "rm -rf /opt/fingertip/incoming && mkdir -p /opt/fingertip/incoming && "
         "tar -xmf - -C /opt/fingertip/incoming"]
    )  # fmt: skip
    assert proc.stdin is not None
    try:
        # PAX, not USTAR: no 100-character limit on names (a wheel with several manylinux tags
        # passes it); GNU tar reads PAX.
        with tarfile.open(fileobj=proc.stdin, mode="w|", format=tarfile.PAX_FORMAT) as tar:
            for name, path in sorted(files.items()):
                info = _root_owned(tar.gettarinfo(str(path), arcname=name))
                with path.open("rb") as fh:
                    tar.addfile(info, fh)
        proc.stdin.close()
    except BrokenPipeError:
        pass
    if proc.wait() != 0:
        raise DeployError("copying to the board failed (disk full? see above)")
