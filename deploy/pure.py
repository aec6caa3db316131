"""What deploy decides from what it is told: the board's probe, the daemon's health check,
the wheels it builds. Pure functions, no I/O."""

from __future__ import annotations

import hashlib
import json
import re
import zipfile
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from daemon import known_boards
from daemon.memory import ocr_enabled
from deploy import DeployError

MIN_PYTHON = (3, 11)
LOOPBACK = ("127.0.0.1", "::1", "localhost")


# The board as ssh's destination: [user@]host, the host a name (or an alias of the ssh
# config), an IPv4 address or an IPv6 one (bare or in brackets, with its zone). Nothing else:
# no option (a leading '-'), no space, quote or other character a shell or ssh would read.
_WORD = r"[A-Za-z0-9_][A-Za-z0-9._-]*"
_IPV6 = r"[0-9A-Fa-f.]*:[0-9A-Fa-f:.]*(?:%[A-Za-z0-9_.-]+)?"
_DESTINATION = re.compile(rf"(?:{_WORD}@)?(?:{_WORD}|{_IPV6}|\[{_IPV6}\])")


def board_destination(host: str) -> str:
    """`host` as given (HOST, --host), when it is one; DeployError naming it otherwise."""
    if not host:
        raise DeployError("HOST (--host) is required: make deploy HOST=user@board [PORT=22]")
    if len(host) > 255 or not _DESTINATION.fullmatch(host):
        raise DeployError(
            f"HOST (--host) {host!r} is not a board: expected user@name or user@address "
            "(letters, digits, '.', '-', '_', ':' and '%' of an IPv6 address; no leading '-')"
        )
    return host


def board_port(text: str) -> int:
    """PORT (--port) as a TCP port number; DeployError naming it otherwise."""
    if not (text.isascii() and text.isdigit() and 0 < int(text) < 65536):
        raise DeployError(f"PORT (--port) {text!r} is not a TCP port: expected 1..65535")
    return int(text)


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
