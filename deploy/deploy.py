"""`make deploy HOST=user@board [PORT=22]` and `make undeploy`: Fingertip onto a board over ssh.

deploy: one ssh connection (ControlMaster, reused by every step), ask the board for its CPU,
Python and C library, build the fingertip wheel and a wheelhouse of binary wheels for exactly
that platform here (the board needs no internet, and the versions are the ones this clone's
venv was tested with), install the third-party ones here into one archive the board only
unpacks (pip on a small board spends minutes unzipping, hashing and byte-compiling), send what
the board lacks, and let deploy/board.sh install it as a new release next to the running one:
venv, units, udev rule, network file, config only when missing; switch, restart, roll back
when the new release does not start. Then the daemon's health check over the network (through
the ssh connection, to the daemon's loopback port) and one line with the version and the
address, and the board's TLS fingerprint, which is also kept for the host's tools
(daemon.known_boards: ~/.config/fingertip/known_boards). Every step prints one line; the first
failure stops with a clear message, and the previous version stays running.

Only the standard library (and daemon.memory and daemon.known_boards, stdlib too: whether the
board's RAM runs OCR, and the pins of known boards): it runs with the clone's venv but needs
nothing from it but pip.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import http.client
import json
import os
import re
import shlex
import shutil
import socket
import ssl
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
import zipfile
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from daemon import known_boards
from daemon.memory import ocr_enabled

PROJECT = Path(__file__).resolve().parents[1]
BUILD = PROJECT / "build" / "deploy"
BOARD_SCRIPT = PROJECT / "deploy" / "board.sh"
# Files of the clone every release carries in its share/ folder under their own names
# (board.sh installs them from there).
SHARE = (
    "systemd/fingertip.service",
    "systemd/fingertip-gadget.service",
    "systemd/fingertip.sysusers",
    "etc/udev/70-fingertip.rules",
    "etc/udev/fingertip-hidg-role",
    "systemd/fingertip-link-reannounce",
    "etc/network/80-fingertip-usb.network",
    "etc/fingertip.toml",
    "deploy/board.sh",
)
HEALTH_TIMEOUT_S = 90.0
MIN_PYTHON = (3, 11)
LOOPBACK = ("127.0.0.1", "::1", "localhost")


class DeployError(Exception):
    """One clear line for the user; the step that failed is printed before it."""


# --- pure parts ------------------------------------------------------------------------------


@dataclass(frozen=True)
class BoardFacts:
    """What `board.sh probe` reported."""

    uid: int
    arch: str  # sysconfig's platform without "linux-": x86_64, aarch64, armv7l, ...
    python: tuple[int, int]
    libc: tuple[str, tuple[int, int]]  # ("glibc", (2, 36))
    current: str | None  # release running now
    wheels: frozenset[str] = field(default_factory=frozenset)  # already on the board
    deps: frozenset[str] = field(default_factory=frozenset)  # deps/<id> complete on the board
    memory_mb: int = 0  # MemTotal
    ocr: str = ""  # [ocr] enabled in the board's config ("auto", "true", "false"), "" = unset


def parse_probe(text: str) -> BoardFacts:
    """`key=value` lines from board.sh probe; DeployError naming what the board lacks."""
    values: dict[str, str] = {}
    wheels: set[str] = set()
    deps: set[str] = set()
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if not sep:
            continue
        if key == "wheel":
            wheels.add(value)
        elif key == "deps":
            deps.add(value)
        else:
            values[key] = value
    if values.get("systemd") != "yes":
        raise DeployError("the board has no systemctl: Fingertip runs as a systemd service")
    if "python" not in values:
        raise DeployError("the board has no python3 (apt install python3 python3-venv)")
    platform = values.get("platform", "")
    if not platform.startswith("linux-"):
        raise DeployError(f"the board's Python reports platform {platform!r}, not linux-*")
    major, minor = (int(x) for x in values["python"].split(".")[:2])
    if (major, minor) < MIN_PYTHON:
        need = ".".join(map(str, MIN_PYTHON))
        raise DeployError(f"the board has Python {values['python']}; Fingertip needs {need}+")
    libc_name, _, libc_version = values.get("libc", "").partition(" ")
    m = re.match(r"^(\d+)\.(\d+)", libc_version)
    if libc_name != "glibc" or m is None:
        raise DeployError(
            f"the board's C library is {values.get('libc') or 'unknown'}; the wheelhouse "
            "needs glibc (manylinux wheels)"
        )
    return BoardFacts(
        uid=int(values.get("uid", "-1")),
        arch=platform.removeprefix("linux-"),
        python=(major, minor),
        libc=(libc_name, (int(m.group(1)), int(m.group(2)))),
        current=values.get("current") or None,
        wheels=frozenset(wheels),
        deps=frozenset(deps),
        memory_mb=int(values.get("memtotal_kb", "0") or 0) // 1024,
        ocr=values.get("ocr", ""),
    )


def ocr_wanted(board_setting: str, template: Mapping[str, Any], memory_mb: int) -> tuple[bool, str]:
    """Whether the board runs OCR, so gets its packages, and why: its config's [ocr] enabled,
    else the template's (installed where the board has none), decided as the daemon decides."""
    setting: bool | str
    if board_setting in ("true", "false"):
        setting, where = board_setting == "true", "the board's config"
    elif board_setting:
        setting, where = board_setting, "the board's config"
    else:
        setting, where = template.get("ocr", {}).get("enabled", "auto"), "the default config"
    on = ocr_enabled(setting, memory_mb)
    value = json.dumps(setting)
    return on, f"[ocr] enabled = {value} in {where}, the board has {memory_mb} MB"


# PEP 600 tags started at glibc 2.5 on x86 and 2.17 elsewhere; legacy names for old wheels.
_LEGACY = {(2, 17): "manylinux2014", (2, 12): "manylinux2010", (2, 5): "manylinux1"}


def platform_tags(arch: str, glibc: tuple[int, int]) -> list[str]:
    """Every manylinux platform tag a board with this glibc runs, newest first (pip does not
    expand `manylinux_2_36_x86_64` to the older ones by itself)."""
    major, newest = glibc
    oldest = 5 if arch in ("x86_64", "i686") else 17
    tags = []
    for minor in range(newest, oldest - 1, -1):
        tags.append(f"manylinux_{major}_{minor}_{arch}")
        legacy = _LEGACY.get((major, minor))
        if legacy is not None:
            tags.append(f"{legacy}_{arch}")
    return tags


def wheelhouse_hint(arch: str) -> str:
    """The likely reason a wheelhouse cannot be built, for the error message."""
    if arch.startswith("armv"):
        # Checked on PyPI (2026-11): no armv7l wheels of numpy, opencv-python-headless, msgpack.
        return (
            f"PyPI has no {arch} wheels of numpy, opencv-python-headless and msgpack: "
            "32-bit ARM boards need a 64-bit (aarch64) OS for make deploy"
        )
    return "a dependency without a binary wheel for this board?"


def pip_download_args(facts: BoardFacts) -> list[str]:
    """pip download's target options: binary wheels for the board's CPython and platform."""
    major, minor = facts.python
    args = ["--only-binary=:all:", "--implementation", "cp"]
    args += ["--python-version", f"{major}.{minor}", "--abi", f"cp{major}{minor}"]
    for tag in platform_tags(facts.arch, facts.libc[1]):
        args += ["--platform", tag]
    return args


def release_id(version: str, digests: Mapping[str, str]) -> str:
    """Names a release by everything it is made of (wheels, units, rules, config template): the
    same build deploys as the same release, which the board then skips installing."""
    h = hashlib.sha256()
    for name in sorted(digests):
        h.update(f"{name}\0{digests[name]}\n".encode())
    return f"{version}-{h.hexdigest()[:12]}"


def wheel_content_digest(path: Path) -> str:
    """A wheel's digest by its members, not its zip bytes (timestamps change every build)."""
    h = hashlib.sha256()
    with zipfile.ZipFile(path) as zf:
        for name in sorted(zf.namelist()):
            h.update(name.encode() + b"\0")
            h.update(hashlib.sha256(zf.read(name)).digest())
    return h.hexdigest()


def wheel_version(path: Path) -> str:
    """`1.2.3` from `name-1.2.3-py3-none-any.whl`."""
    return path.name.split("-")[1]


def constraints(freeze: str) -> str:
    """`pip freeze` of this venv as constraints: the board gets the versions tested here.
    Editable and direct-URL lines (this project itself) are not constraints."""
    keep = [
        line
        for line in freeze.splitlines()
        if "==" in line and not line.startswith(("-e", "#")) and " @ " not in line
    ]
    return "".join(f"{line}\n" for line in keep)


def parse_result(text: str) -> tuple[str, int, list[str]]:
    """(release, port, listen addresses) from board.sh's `result release=... listen=PORT A B`."""
    for line in reversed(text.splitlines()):
        m = re.match(r"^result release=(\S+) listen=(\d+)((?: \S+)*)$", line.strip())
        if m:
            return m.group(1), int(m.group(2)), m.group(3).split()
    raise DeployError("the board did not report the installed release")


def health_target(listen: Sequence[str]) -> str:
    """The address the health check reaches through ssh: loopback when the daemon listens
    there, else its first address."""
    for addr in listen:
        if addr in LOOPBACK:
            return addr
    if not listen:
        raise DeployError("the board's config listens on no address")
    return listen[0]


def host_port(addr: str, port: int) -> str:
    """`addr:port`, an IPv6 address in brackets (a URL's and a Host header's form)."""
    return f"[{addr}]:{port}" if ":" in addr else f"{addr}:{port}"


def summary(
    version: str,
    release: str,
    dest: str,
    port: int,
    listen: Sequence[str],
    secured: Collection[str] = (),
) -> str:
    """The one line a deploy ends with (https for the `secured` addresses)."""
    remote = [a for a in listen if a not in LOOPBACK]
    shown = remote or list(listen)
    urls = " ".join(f"{'https' if a in secured else 'http'}://{host_port(a, port)}" for a in shown)
    return f"fingertip {version} (release {release}) is running on {dest}: {urls}"


def pins(health: Mapping[str, object], port: int) -> tuple[str, dict[str, tuple[str, str]]]:
    """(fingerprint, known_boards entries) from the board's health_check: its TLS listeners
    that are not loopback, each pinned to the certificate's fingerprint."""
    security = health.get("security")
    if not isinstance(security, dict):
        return "", {}
    tls = security.get("tls") or {}
    fingerprint = str(tls.get("fingerprint") or "") if isinstance(tls, dict) else ""
    entries = {}
    for listener in security.get("listeners") or []:
        if fingerprint and listener.get("tls") and not listener.get("loopback"):
            entries[known_boards.endpoint(listener["address"], port)] = (fingerprint, "")
    return fingerprint, entries


def secured_addresses(health: Mapping[str, object]) -> set[str]:
    security = health.get("security")
    listeners = security.get("listeners") or [] if isinstance(security, dict) else []
    return {x["address"] for x in listeners if isinstance(x, dict) and x.get("tls")}


# --- ssh -------------------------------------------------------------------------------------


class Ssh:
    """One master connection to the board; every command and forward goes through it."""

    def __init__(self, host: str, port: int, config: Path | None) -> None:
        self.host, self.port, self.config = host, port, config
        self._dir = Path(tempfile.mkdtemp(prefix="ftd-"))  # ControlPath must be short
        self.control = self._dir / "ctl"
        self.sudo: list[str] = []

    def _base(self) -> list[str]:
        cmd = ["ssh"]
        if self.config is not None:
            cmd += ["-F", str(self.config)]
        return [*cmd, "-p", str(self.port), "-o", f"ControlPath={self.control}"]

    def _remote(self, command: Sequence[str]) -> list[str]:
        """ssh's argv for `command` on the board (quoted for the remote shell, under sudo)."""
        remote = " ".join(shlex.quote(c) for c in [*self.sudo, *command])
        return [*self._base(), "-o", "ControlMaster=no", self.host, remote]

    def open(self) -> None:
        # -f after authentication: a password or key prompt still works on a terminal.
        cmd = [*self._base(), "-o", "ControlMaster=yes", "-o", "ControlPersist=600"]
        cmd += ["-o", "ConnectTimeout=15", "-o", "ServerAliveInterval=10", "-f", "-N", self.host]
        done = subprocess.run(cmd, stdin=None, capture_output=False, check=False)
        if done.returncode != 0:
            raise DeployError(
                f"ssh {self.host} -p {self.port} failed (exit {done.returncode}); a new board? "
                f"ssh to it once by hand to check and accept its host key"
            )

    def run(
        self, command: Sequence[str], *, stdin: bytes | None = None, check: str | None = None
    ) -> subprocess.CompletedProcess[bytes]:
        """A command on the board (argv, quoted for the remote shell). With `check`, a
        failure raises DeployError(check) and the command's stderr is shown."""
        done = subprocess.run(
            self._remote(command),
            input=stdin,
            stdout=subprocess.PIPE,
            stderr=None,  # the board's messages go straight to the user
            check=False,
        )
        if check is not None and done.returncode != 0:
            raise DeployError(check)
        return done

    def board_script(self, *args: str, check: str) -> str:
        """deploy/board.sh COMMAND ARGS on the board (read from stdin: nothing to copy first)."""
        done = self.run(["sh", "-s", "--", *args], stdin=BOARD_SCRIPT.read_bytes(), check=check)
        out = done.stdout.decode(errors="replace")
        for line in out.splitlines():
            if not line.startswith("result "):
                print(f"  {line}", flush=True)
        return out

    def stream(self, command: Sequence[str]) -> subprocess.Popen[bytes]:
        return subprocess.Popen(self._remote(command), stdin=subprocess.PIPE)

    @contextlib.contextmanager
    def forward(self, addr: str, port: int) -> Iterator[Path]:
        """A local Unix socket reaching addr:port on the board through the connection."""
        sock = self._dir / "http"
        spec = f"{sock}:{addr}:{port}"
        cmd = [*self._base(), "-O", "forward", "-L", spec, self.host]
        if subprocess.run(cmd, capture_output=True, check=False).returncode != 0:
            raise DeployError(f"ssh could not forward to {addr}:{port} on the board")
        try:
            yield sock
        finally:
            cancel = [*self._base(), "-O", "cancel", "-L", spec, self.host]
            subprocess.run(cancel, capture_output=True, check=False)
            sock.unlink(missing_ok=True)

    def close(self) -> None:
        subprocess.run([*self._base(), "-O", "exit", self.host], capture_output=True, check=False)
        shutil.rmtree(self._dir, ignore_errors=True)


# --- health check ----------------------------------------------------------------------------


class _UnixHTTPConnection(http.client.HTTPConnection):
    """HTTP, or HTTPS with `tls`, over the ssh forward's Unix socket. The certificate is not
    verified here: ssh authenticated the board, and the health check that comes back over this
    connection says which fingerprint to pin (checked against this connection's certificate)."""

    def __init__(self, path: Path, host: str, timeout: float, tls: bool = False) -> None:
        super().__init__(host, timeout=timeout)  # `host` is only the Host header
        self._path = path
        self._tls = tls
        self.peer_certificate = b""

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(str(self._path))
        if self._tls:
            ctx = ssl.create_default_context()
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
            tls = ctx.wrap_socket(sock)
            self.peer_certificate = tls.getpeercert(binary_form=True) or b""
            self.sock = tls
            return
        self.sock = sock


def _tls_required(status: int, data: object) -> bool:
    """The daemon's answer to plain HTTP on a TLS listener (daemon.tls.Gate)."""
    error = data.get("error") if isinstance(data, dict) else None
    return status == 400 and isinstance(error, dict) and error.get("code") == "tls_required"


def health_check(sock: Path, addr: str, port: int, timeout: float) -> dict[str, object]:
    """POST /api/tools/health_check until it answers ok or `timeout` passes; over TLS once the
    daemon says the address has it."""
    host = host_port(addr, port)  # a Host the daemon accepts
    deadline = time.monotonic() + timeout
    last = "no answer"
    tls = False
    while time.monotonic() < deadline:
        conn = _UnixHTTPConnection(sock, host, timeout=15, tls=tls)
        try:
            body = json.dumps({"input": {}})
            conn.request(
                "POST", "/api/tools/health_check", body, {"Content-Type": "application/json"}
            )
            resp = conn.getresponse()
            data = json.loads(resp.read())
            if _tls_required(resp.status, data) and not tls:
                tls = True
                continue
            if resp.status == 200 and not data.get("is_error"):
                output = json.loads(data["output"])
                if isinstance(output, dict) and output.get("ok") is True:
                    _check_certificate(output, conn.peer_certificate)
                    return output
            last = f"HTTP {resp.status}: {data.get('error') or data.get('output')}"
        except (OSError, http.client.HTTPException, ValueError, KeyError) as exc:
            last = f"{type(exc).__name__}: {exc}"
        finally:
            conn.close()
        time.sleep(1)
    raise DeployError(f"no healthy answer from the daemon within {timeout:.0f} s ({last})")


def _check_certificate(health: Mapping[str, object], der: bytes) -> None:
    """Over TLS: the certificate this connection got is the one health_check describes (what
    a browser shows; the key's fingerprint needs a parser this script does without)."""
    if not der:
        return
    security = health.get("security")
    tls = security.get("tls") if isinstance(security, dict) else None
    said = str(tls.get("certificate_sha256", "")) if isinstance(tls, dict) else ""
    got = hashlib.sha256(der).hexdigest().upper()
    if said.replace(":", "") != got:
        raise DeployError(
            f"the board's TLS certificate ({got}) is not the one its health check names "
            f"({said or 'none'}): something between ssh and the daemon answers"
        )


# --- building here ---------------------------------------------------------------------------


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


def _sha256(path: Path) -> str:
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


# --- the two commands ------------------------------------------------------------------------


class Steps:
    """The numbered progress lines, and how long each step took: the last line says where a
    slow deploy's time went (a board's CPU and link decide most of it)."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.started: list[tuple[int, float]] = []

    def __call__(self, n: int, text: str) -> None:
        self.started.append((n, time.monotonic()))
        print(f"deploy [{n}/{self.total}] {text}", flush=True)

    def timings(self) -> str:
        ends = [t for _, t in self.started[1:]] + [time.monotonic()]
        spent = ", ".join(
            f"[{n}] {end - t:.1f} s" for (n, t), end in zip(self.started, ends, strict=True)
        )
        return f"deploy timings: {spent}"


def _connect(args: argparse.Namespace) -> tuple[Ssh, BoardFacts]:
    ssh = Ssh(args.host, args.port, args.ssh_config)
    try:
        ssh.open()
        return ssh, _probe(ssh, args.host)
    except BaseException:
        ssh.close()  # no master connection left behind
        raise


def _probe(ssh: Ssh, host: str) -> BoardFacts:
    def probe() -> BoardFacts:
        done = ssh.run(
            ["sh", "-s", "--", "probe"],
            stdin=BOARD_SCRIPT.read_bytes(),
            check="probing the board failed (see above)",
        )
        return parse_probe(done.stdout.decode(errors="replace"))

    facts = probe()
    if facts.uid != 0:
        ssh.sudo = ["sudo", "-n"]
        if ssh.run(["true"]).returncode != 0:
            raise DeployError(
                f"{host} is not root and `sudo -n` needs a password there: deploy as "
                "root@board or allow this user passwordless sudo"
            )
        facts = probe()  # again as root: /opt/fingertip may be readable by root only
    return facts


def deploy(args: argparse.Namespace) -> int:
    step = Steps(7)
    dest = f"{args.host}:{args.port}"
    step(1, f"connecting to {dest} (one ssh connection for every step)")
    ssh, facts = _connect(args)
    try:
        py = ".".join(map(str, facts.python))
        glibc = ".".join(map(str, facts.libc[1]))
        now = facts.current or "nothing installed"
        step(2, f"board: {facts.arch}, CPython {py}, glibc {glibc}; running {now}")
        step(3, "building the fingertip wheel")
        wheel = build_wheel(BUILD / "dist")
        version = wheel_version(wheel)
        template = tomllib.loads((PROJECT / "etc" / "fingertip.toml").read_text())
        ocr, why = ocr_wanted(facts.ocr, template, facts.memory_mb)
        with_ocr = "with the OCR engine" if ocr else "without the OCR engine (~160 MB)"
        step(4, f"wheelhouse for {facts.arch} / CPython {py} / glibc {glibc}, {with_ocr}: {why}")
        wheels = build_wheelhouse(wheel, facts, BUILD / "wheelhouse", ("ocr",) if ocr else ())
        digests = {f"wheels/{w.name}": _sha256(w) for w in wheels}
        digests["dist/fingertip"] = wheel_content_digest(wheel)
        share = {f"share/{Path(rel).name}": PROJECT / rel for rel in SHARE}
        digests.update({name: _sha256(path) for name, path in share.items()})
        release = release_id(version, digests)
        manifest = BUILD / "manifest"
        manifest.write_text("".join(f"{w.name}\n" for w in wheels))
        ident = deps_id(manifest.read_text())
        files: dict[str, Path] = {"manifest": manifest, f"dist/{wheel.name}": wheel, **share}
        # The board keeps pip's wheel (it installs each release's fingertip wheel) and gets
        # everything else installed already, once per set of wheels.
        pip = [w for w in wheels if w.name.startswith("pip-")]
        files.update({f"wheels/{w.name}": w for w in pip if w.name not in facts.wheels})
        if ident in facts.deps:
            packages = f"the third-party packages are there (deps/{ident})"
        else:
            others = [w for w in wheels if w not in pip]
            files[f"deps-{ident}.tar.gz"] = build_deps(others, facts, BUILD / "deps", ident)
            packages = f"the third-party packages for deps/{ident}"
        size = sum(p.stat().st_size for p in files.values()) / 1e6
        step(5, f"sending {len(files)} files, {size:.1f} MB ({packages})")
        send(ssh, files)
        step(6, f"installing release {release} and restarting fingertip.service")
        out = ssh.board_script(
            "install", release, check="installing on the board failed (see above)"
        )
        release, port, listen = parse_result(out)
        addr = health_target(listen)
        step(7, f"health check over the network ({addr}:{port} on the board, via ssh)")
        with ssh.forward(addr, port) as sock:
            try:
                health = health_check(sock, addr, port, HEALTH_TIMEOUT_S)
            except DeployError:
                ssh.board_script("rollback", check="rolling back failed too (see above)")
                raise
        fingerprint, entries = pins(health, port)
        if entries:
            where = known_boards.remember(entries)
            print(f"TLS fingerprint {fingerprint} (pinned for {', '.join(entries)} in {where})")
        elif not fingerprint:
            print("NOTE: no TLS on this board's network addresses ([server].tls)")
        secured = secured_addresses(health)
        print(summary(str(health.get("version", version)), release, dest, port, listen, secured))
        return 0
    finally:
        ssh.close()
        print(step.timings(), file=sys.stderr, flush=True)


def undeploy(args: argparse.Namespace) -> int:
    ssh, _ = _connect(args)
    try:
        ssh.board_script("undeploy", check="undeploy failed on the board (see above)")
        print(f"fingertip removed from {args.host}:{args.port}")
        return 0
    finally:
        ssh.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="deploy", description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=("deploy", "undeploy"))
    parser.add_argument("--host", default="", help="user@board")
    parser.add_argument("--port", type=int, default=22)
    parser.add_argument("--ssh-config", type=Path, help="an ssh config file (ssh -F)")
    args = parser.parse_args(argv)
    if not args.host:
        print(f"{args.command}: HOST is required: make {args.command} HOST=user@board [PORT=22]")
        return 2
    try:
        return deploy(args) if args.command == "deploy" else undeploy(args)
    except DeployError as exc:
        print(f"{args.command}: FAILED: {exc}", file=sys.stderr, flush=True)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
