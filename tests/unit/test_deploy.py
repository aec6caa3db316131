"""deploy/'s pure parts (what the board said, which wheels fit it, release names), and
that the wheelhouse it builds from the runtime dependencies carries everything gadget/ and
daemon/ import. The whole deploy runs for real in the board VM test (tests/board)."""

from __future__ import annotations

import ast
import fcntl
import hashlib
import importlib.metadata as md
import os
import re
import subprocess
import sys
import tarfile
import threading
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from deploy import DeployError, build, pure, ssh
from deploy import deploy as commands
from deploy import health as health_check

PROJECT = Path(__file__).resolve().parents[2]


PROBE = """uid=0
systemd=yes
platform=linux-aarch64
python=3.11.2
libc=glibc 2.36
current=0.1.0-0123456789ab
wheel=numpy-2.2.6-cp311-cp311-manylinux_2_17_aarch64.manylinux2014_aarch64.whl
wheel=structlog-25.1.0-py3-none-any.whl
deps=0123456789ab
"""


def test_probe_of_a_usual_board() -> None:
    facts = pure.parse_probe(PROBE)
    assert facts.arch == "aarch64"
    assert facts.python == (3, 11)
    assert facts.libc == ("glibc", (2, 36))
    assert facts.current == "0.1.0-0123456789ab"
    assert facts.uid == 0
    assert "structlog-25.1.0-py3-none-any.whl" in facts.wheels and len(facts.wheels) == 2
    assert facts.deps == {"0123456789ab"}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("systemd=yes", "systemd=no"), "systemctl"),
        (("python=3.11.2", "python=3.9.2"), "Python 3.9.2"),
        (("libc=glibc 2.36", "libc= "), "glibc"),
        (("libc=glibc 2.36", "libc=musl 1.2"), "glibc"),
        (("platform=linux-aarch64", "platform=macosx-14-arm64"), "linux"),
    ],
)
def test_probe_names_what_the_board_lacks(change: tuple[str, str], message: str) -> None:
    with pytest.raises(DeployError, match=message):
        pure.parse_probe(PROBE.replace(*change))


def test_probe_without_python() -> None:
    text = "".join(line + "\n" for line in PROBE.splitlines() if not line.startswith("python="))
    with pytest.raises(DeployError, match="no python3"):
        pure.parse_probe(text)


def test_platform_tags_cover_every_older_glibc() -> None:
    tags = pure.platform_tags("x86_64", (2, 36))
    assert tags[0] == "manylinux_2_36_x86_64"
    assert tags[-2:] == ["manylinux_2_5_x86_64", "manylinux1_x86_64"]
    assert tags.index("manylinux2014_x86_64") == tags.index("manylinux_2_17_x86_64") + 1
    assert "manylinux2010_x86_64" in tags
    arm = pure.platform_tags("aarch64", (2, 31))
    assert arm[0] == "manylinux_2_31_aarch64" and arm[-1] == "manylinux2014_aarch64"
    assert pure.platform_tags("armv7l", (2, 17)) == [
        "manylinux_2_17_armv7l",
        "manylinux2014_armv7l",
    ]


def test_pip_download_args_name_the_boards_interpreter() -> None:
    args = pure.pip_download_args(pure.parse_probe(PROBE))
    joined = " ".join(args)
    assert "--only-binary=:all:" in args
    assert "--python-version 3.11" in joined and "--abi cp311" in joined
    assert "--implementation cp" in joined
    assert "--platform manylinux_2_36_aarch64" in joined
    assert "x86_64" not in joined


def test_constraints_pin_what_was_tested_but_not_the_project() -> None:
    freeze = (
        "aiohttp==3.9.5\n-e git+https://x/y#egg=fingertip\nfoo @ file:///tmp/foo\npip==23.2.1\n"
    )
    assert pure.constraints(freeze) == "aiohttp==3.9.5\npip==23.2.1\n"


def test_release_id_follows_the_content() -> None:
    digests = {"wheels/a.whl": "1", "share/fingertip.service": "2"}
    rid = pure.release_id("0.1.0", digests)
    assert re.fullmatch(r"0\.1\.0-[0-9a-f]{12}", rid)
    assert pure.release_id("0.1.0", dict(reversed(list(digests.items())))) == rid
    assert pure.release_id("0.1.0", {**digests, "share/fingertip.service": "3"}) != rid
    assert pure.release_id("0.2.0", digests).startswith("0.2.0-")


def test_every_file_board_sh_installs_is_shipped() -> None:
    shipped = {Path(rel).name for rel in commands.SHARE}
    assert all((PROJECT / rel).is_file() for rel in commands.SHARE)
    board_sh = (PROJECT / "deploy/board.sh").read_text()
    used = set(re.findall(r'"\$(?:share|1)/([\w.-]+)"', board_sh))
    used |= set(re.search(r'^UNITS="([^"]+)"', board_sh, re.M).group(1).split())  # type: ignore[union-attr]
    assert "fingertip.toml" in used and "fingertip.service" in used
    assert used <= shipped, used - shipped


def _wheel(path: Path, files: dict[str, bytes], when: tuple[int, ...]) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in files.items():
            zf.writestr(zipfile.ZipInfo(name, date_time=when), data)  # type: ignore[arg-type]
    return path


def test_wheel_digest_ignores_build_timestamps(tmp_path: Path) -> None:
    files = {"daemon/x.py": b"x = 1\n", "fingertip-0.1.0.dist-info/RECORD": b"r"}
    a = _wheel(tmp_path / "a.whl", files, (2020, 1, 1, 0, 0, 0))
    b = _wheel(tmp_path / "b.whl", dict(reversed(list(files.items()))), (2024, 5, 5, 5, 5, 6))
    c = _wheel(tmp_path / "c.whl", {**files, "daemon/x.py": b"x = 2\n"}, (2020, 1, 1, 0, 0, 0))
    assert pure.wheel_content_digest(a) == pure.wheel_content_digest(b)
    assert pure.wheel_content_digest(a) != pure.wheel_content_digest(c)
    assert pure.wheel_version(Path("fingertip-0.1.0-py3-none-any.whl")) == "0.1.0"


def test_result_line_and_summary() -> None:
    out = "board: restarting\nresult release=0.1.0-abc listen=8080 127.0.0.1 192.168.42.1\n"
    release, port, listen = pure.parse_result(out)
    assert (release, port, listen) == ("0.1.0-abc", 8080, ["127.0.0.1", "192.168.42.1"])
    assert pure.health_target(listen) == "127.0.0.1"
    assert pure.health_target(["192.168.42.1"]) == "192.168.42.1"
    line = pure.summary("0.1.0", release, "root@board:22", port, listen)
    assert line == (
        "fingertip 0.1.0 (release 0.1.0-abc) is running on root@board:22: http://192.168.42.1:8080"
    )
    assert pure.summary("0.1.0", "r", "h:22", 8080, ["::1"]).endswith("http://[::1]:8080")
    with pytest.raises(DeployError):
        pure.parse_result("board: FAILED\n")
    # The addresses with TLS (from the board's health_check) are https.
    line = pure.summary("0.1.0", release, "h:22", port, listen, {"192.168.42.1"})
    assert line.endswith(": https://192.168.42.1:8080")


FP = "sha256//" + "A" * 43 + "="


def health(listeners: list[dict[str, object]], tls: dict[str, object]) -> dict[str, object]:
    return {"ok": True, "security": {"listeners": listeners, "tls": tls}}


def test_pins_from_the_health_check() -> None:
    listeners: list[dict[str, object]] = [
        {"address": "127.0.0.1", "tls": False, "loopback": True},
        {"address": "192.168.42.1", "tls": True, "loopback": False},
        {"address": "fe80::1", "tls": True, "loopback": False},
    ]
    h = health(listeners, {"mode": "auto", "fingerprint": FP})
    assert pure.pins(h, 8080) == (
        FP,
        {"192.168.42.1:8080": (FP, ""), "[fe80::1]:8080": (FP, "")},
    )
    assert pure.secured_addresses(h) == {"192.168.42.1", "fe80::1"}
    # TLS off, or an older daemon without the section: nothing to pin.
    off = health([{**x, "tls": False} for x in listeners], {"mode": "off"})
    assert pure.pins(off, 8080) == ("", {}) and pure.secured_addresses(off) == set()
    assert pure.pins({"ok": True}, 8080) == ("", {})
    assert pure.pins({"ok": True, "security": "garbage"}, 8080) == ("", {})


def test_the_tls_certificate_must_be_the_one_the_health_check_names() -> None:
    der = b"certificate bytes"
    named = hashlib.sha256(der).hexdigest().upper()
    pairs = ":".join(named[i : i + 2] for i in range(0, 64, 2))
    h = health([], {"certificate_sha256": pairs})
    health_check._check_certificate(h, der)
    health_check._check_certificate(h, b"")  # plain HTTP: nothing to compare
    with pytest.raises(DeployError, match="not the one its health check names"):
        health_check._check_certificate(h, b"another certificate")
    with pytest.raises(DeployError):
        health_check._check_certificate({"ok": True}, der)
    tls_required = {"error": {"code": "tls_required"}}
    assert health_check._tls_required(400, tls_required)
    assert not health_check._tls_required(200, tls_required)
    assert not health_check._tls_required(400, {"error": "x"})
    assert not health_check._tls_required(400, [])


def _runtime_closure(extra: str = "") -> set[str]:
    """Distributions `pip install fingertip[extra]` brings, as the board gets them."""
    todo, seen = [("fingertip", extra)], set()
    while todo:
        name, wanted = todo.pop()
        name = canonicalize_name(name)
        if (name, wanted) in seen:
            continue
        seen.add((name, wanted))
        for line in md.requires(name) or []:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({"extra": wanted}):
                todo.append((req.name, ""))
    return {name for name, _ in seen}


def _imports(path: Path) -> set[str]:
    """Top-level modules a file imports, except under `if TYPE_CHECKING:`."""
    tree = ast.parse(path.read_text())
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip |= {id(n) for n in ast.walk(node)}
    names = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


# Modules the board daemon never imports: the layout data generator (development only) and the
# simulated target's XKB reader (`make run` and the tests). Their imports come with `.[test]`.
DEV_ONLY = {"gadget/xkbgen.py": {"evdev", "xkbcommon"}, "daemon/sim/xkbtext.py": {"xkbcommon"}}
# The OCR engine, imported by the OCR worker process alone: its packages come with `.[ocr]`,
# which `make deploy` installs where OCR is on.
OCR_ONLY = {"daemon/screen/ocr_engine.py"}


def test_everything_the_code_imports_ships_to_the_board() -> None:
    closure, with_ocr = _runtime_closure(), _runtime_closure("ocr")
    assert {"onnxruntime", "rapidocr"} <= with_ocr - closure  # an extra, not the base
    owners = md.packages_distributions()
    missing = {}
    for package in ("gadget", "daemon"):
        for path in sorted((PROJECT / package).rglob("*.py")):
            where = str(path.relative_to(PROJECT))
            dev_only = DEV_ONLY.get(where, set())
            imported = _imports(path) - set(sys.stdlib_module_names) - {"gadget", "daemon"}
            for module in imported - dev_only:
                dists = {canonicalize_name(d) for d in owners.get(module, [module])}
                if not dists & (with_ocr if where in OCR_ONLY else closure):
                    missing[f"{where}: {module}"] = sorted(dists)
    assert missing == {}, "imported but not a runtime dependency in pyproject.toml"


def test_whether_a_board_gets_ocr_follows_its_config_and_its_memory() -> None:
    template = {"ocr": {"enabled": "auto"}}
    assert pure.ocr_wanted("", template, 460)[0] is True  # a Pi Zero 2 W (512 MB)
    on, why = pure.ocr_wanted("", template, 215)  # a 256 MB board
    assert on is False and "default config" in why and "215 MB" in why
    assert pure.ocr_wanted("true", template, 215)[0] is True
    assert pure.ocr_wanted("false", template, 4000) == (
        False,
        "[ocr] enabled = false in the board's config, the board has 4000 MB",
    )
    assert pure.ocr_wanted("auto", {}, 400)[0] is True
    facts = pure.parse_probe(PROBE + "memtotal_kb=482012\nocr=auto\n")
    assert (facts.memory_mb, facts.ocr) == (470, "auto")
    assert (pure.parse_probe(PROBE).memory_mb, pure.parse_probe(PROBE).ocr) == (0, "")


def test_the_board_daemon_loads_without_the_dev_only_packages() -> None:
    """The dev-only imports above stay behind the simulated backend: the board's daemon, CLI
    and gadget tool load with those packages absent (seen once: a top-level import of the
    simulated backend stopped the board's daemon at start)."""
    blocked = sorted(set().union(*DEV_ONLY.values()))
    code = (
        f"import sys; sys.modules.update(dict.fromkeys({blocked!r}));"
        "import daemon.service, daemon.board, daemon.cli, gadget.cli"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=PROJECT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_a_32_bit_arm_board_is_told_why_its_wheelhouse_fails() -> None:
    assert "aarch64" in pure.wheelhouse_hint("armv7l")
    assert "numpy" in pure.wheelhouse_hint("armv6l")
    assert "numpy" not in pure.wheelhouse_hint("aarch64")


def test_a_wheelhouse_made_of_the_same_things_is_reused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    meta = b"Name: fingertip\nVersion: 0.1.0\nRequires-Dist: aiohttp>=3.9\n"
    wheel = _wheel(
        tmp_path / "fingertip-0.1.0-py3-none-any.whl",
        {"fingertip-0.1.0.dist-info/METADATA": meta},
        (2020, 1, 1, 0, 0, 0),
    )
    assert build.wheel_requirements(wheel) == "Requires-Dist: aiohttp>=3.9"
    facts = pure.parse_probe(PROBE)
    downloads: list[tuple[str, ...]] = []

    def fake_pip(*args: str, what: str) -> None:  # stands in for the package index
        downloads.append(args)
        dest = Path(args[args.index("--dest") + 1])
        (dest / "numpy-2.2.6-cp311-cp311-manylinux_2_17_aarch64.whl").write_bytes(b"w")

    monkeypatch.setattr(build, "_pip", fake_pip)
    out = tmp_path / "build" / "wheelhouse"
    first = build.build_wheelhouse(wheel, facts, out)
    again = build.build_wheelhouse(wheel, facts, out)
    assert [p.name for p in first] == [p.name for p in again] and len(downloads) == 1
    # Another board platform, or other pins, is another wheelhouse.
    other = pure.parse_probe(PROBE.replace("linux-aarch64", "linux-x86_64"))
    build.build_wheelhouse(wheel, other, out)
    assert len(downloads) == 2
    # A wheel gone from the wheelhouse (cleaned by hand, a disk error) is fetched again.
    (wheel_file,) = out.glob("numpy-*.whl")
    wheel_file.unlink()
    assert [p.name for p in build.build_wheelhouse(wheel, other, out)] == [wheel_file.name]
    assert len(downloads) == 3
    key = build.wheelhouse_key("a==1\n", ["--platform", "x"], "")
    assert key != build.wheelhouse_key("a==2\n", ["--platform", "x"], "")
    assert key != build.wheelhouse_key("a==1\n", ["--platform", "y"], "")
    assert key != build.wheelhouse_key("a==1\n", ["--platform", "x"], "Requires-Dist: b")
    assert key != build.wheelhouse_key("a==1\n", ["--platform", "x"], "", ["ocr"])
    # With the OCR engine: the wheel is asked for with its extra.
    build.build_wheelhouse(wheel, facts, out, ["ocr"])
    assert f"{wheel}[ocr]" in downloads[-1] and str(wheel) not in downloads[-1]


def test_the_wheel_holds_only_what_the_tree_holds(tmp_path: Path) -> None:
    """A module left in build/lib by an earlier build (since moved or deleted) is not shipped."""
    stale = PROJECT / "build" / "lib" / "daemon" / "left_over_from_an_old_build.py"
    stale.parent.mkdir(parents=True, exist_ok=True)
    stale.write_text("raise SystemExit('stale')\n")
    # What deploy keeps for the next deploy (the wheelhouse, the board packages) stays.
    kept = commands.BUILD / "kept-by-test_the_wheel_holds_only_what_the_tree_holds"
    kept.parent.mkdir(parents=True, exist_ok=True)
    kept.write_text("x")
    try:
        wheel = build.build_wheel(tmp_path / "dist")
        assert kept.is_file()
    finally:
        kept.unlink(missing_ok=True)
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
    assert "daemon/service.py" in names
    assert "daemon/left_over_from_an_old_build.py" not in names


def _tiny_wheel(folder: Path) -> Path:
    """A real (pure Python) wheel pip installs: the bundle test needs no package index."""
    meta = "tiny-1.0.dist-info"
    files = {
        "tiny/__init__.py": b"ANSWER = 42\n",
        f"{meta}/METADATA": b"Metadata-Version: 2.1\nName: tiny\nVersion: 1.0\n",
        f"{meta}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n",
    }
    files[f"{meta}/RECORD"] = "".join(f"{n},,\n" for n in [*files, f"{meta}/RECORD"]).encode()
    return _wheel(folder / "tiny-1.0-py3-none-any.whl", files, (2020, 1, 1, 0, 0, 0))


def _bundle_members(bundle: Path) -> dict[str, bytes]:
    with tarfile.open(bundle) as tar:
        out = {}
        for m in tar.getmembers():
            assert m.uid == 0 and m.gid == 0, m.name
            if m.isfile():
                fh = tar.extractfile(m)
                assert fh is not None
                out[m.name] = fh.read()
        return out


def test_the_boards_packages_are_installed_here_and_compiled_for_its_python(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tiny = _tiny_wheel(tmp_path)
    mine = ".".join(map(str, sys.version_info[:2]))
    facts = pure.parse_probe(PROBE.replace("python=3.11.2", f"python={mine}.0"))
    out = tmp_path / "deps"
    bundle = build.build_deps([tiny], facts, out, "0123456789ab")
    members = _bundle_members(bundle)
    tag = sys.implementation.cache_tag
    assert members["compiled-for"] == f"{tag}\n".encode()
    assert members["site-packages/tiny/__init__.py"] == b"ANSWER = 42\n"
    pyc = members[f"site-packages/tiny/__pycache__/__init__.{tag}.pyc"]
    # PEP 552 flags: hash-based, source not checked (deps/<id> never changes once unpacked).
    assert int.from_bytes(pyc[4:8], "little") == 0b01
    # The same set again is the same file, without pip.
    monkeypatch.setattr(build, "_pip", lambda *a, **k: pytest.fail("pip ran again"))
    assert build.build_deps([tiny], facts, out, "0123456789ab") == bundle


def test_a_board_with_another_python_gets_its_packages_uncompiled(tmp_path: Path) -> None:
    tiny = _tiny_wheel(tmp_path)
    other = (3, 12) if sys.version_info[:2] != (3, 12) else (3, 13)
    facts = pure.parse_probe(PROBE.replace("python=3.11.2", f"python={other[0]}.{other[1]}.1"))
    members = _bundle_members(build.build_deps([tiny], facts, tmp_path / "deps", "ab"))
    assert members["compiled-for"] == b"\n"  # board.sh compiles them there
    assert "site-packages/tiny/__init__.py" in members
    assert not [name for name in members if name.endswith(".pyc")]


def test_the_deps_id_is_the_one_board_sh_derives() -> None:
    manifest = "pip-25.0-py3-none-any.whl\nnumpy-2.2.6-cp311-cp311-manylinux_2_17_aarch64.whl\n"
    done = subprocess.run(
        ["sh", "-c", "sha256sum | cut -c1-12"], input=manifest, capture_output=True, text=True
    )
    assert build.deps_id(manifest) == done.stdout.strip()
    board_sh = ssh.BOARD_SCRIPT.read_text()
    assert 'deps_id=$(sha256sum <"$INCOMING/manifest" | cut -c1-12)' in board_sh


def test_builds_of_the_tree_take_turns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """setuptools builds in the tree's build/, which each build clears first: make test builds
    the wheel for the arm64 wheelhouse test while the board VM deploys, so they take turns."""
    building = threading.Event()

    def fake_pip(*args: str, what: str) -> None:  # stands in for setuptools' build
        building.set()
        (Path(args[args.index("--wheel-dir") + 1]) / "fingertip-0.1.0-py3-none-any.whl").touch()

    monkeypatch.setattr(build, "_pip", fake_pip)
    (PROJECT / "build").mkdir(exist_ok=True)
    other = threading.Thread(target=build.build_wheel, args=(tmp_path / "dist",))
    with (PROJECT / "build" / ".wheel-lock").open("w") as held:  # another build's turn
        fcntl.flock(held, fcntl.LOCK_EX)
        other.start()
        assert not building.wait(1.0), "a second build ran while the first held build/"
    other.join(30)
    assert building.is_set() and (tmp_path / "dist" / "fingertip-0.1.0-py3-none-any.whl").exists()


# -- the board's name and port: checked before ssh runs (make deploy HOST=... PORT=...) --------

GOOD_HOSTS = [
    "root@board",
    "board",
    "pi@raspberrypi.local",
    "root@192.168.42.1",
    "root@fe80::1%usb0",
    "root@[fe80::1%usb0]",
    "::1",
    "deploy_user@my-board_2",
]
BAD_HOSTS = [
    "-oProxyCommand=touch pwned",  # an option, not a destination
    "root@-oProxyCommand=x",
    "-board",
    "x'; touch pwned; echo '",  # the finding's recipe injection
    'x"; touch pwned; echo "',
    "x$(touch pwned)",
    "x`touch pwned`",
    "a b",
    "a\tb",
    "a\nb",
    "root@board;id",
    "root@board|id",
    "root@board&",
    "root@@board",
    "@board",
    "root@",
    "root@bo*rd",
    "user:pass@board",
    "b\u00f6rd",
    "b\x00",
    "a" * 256,
]


@pytest.mark.parametrize("host", GOOD_HOSTS)
def test_a_board_name_or_address_is_a_destination(host: str) -> None:
    assert pure.board_destination(host) == host


@pytest.mark.parametrize("host", BAD_HOSTS)
def test_anything_else_is_refused_naming_the_argument(host: str) -> None:
    with pytest.raises(DeployError) as raised:
        pure.board_destination(host)
    assert str(raised.value).startswith(f"HOST (--host) {host!r} is not a board: ")
    assert "\n" not in str(raised.value).replace(repr(host), "")


@pytest.mark.parametrize("port", ["0", "65536", "-1", "22 ", "２２", "", "x", "1e3", "0x16"])
def test_a_port_is_1_to_65535(port: str) -> None:
    with pytest.raises(DeployError, match=r"^PORT \(--port\) .* is not a TCP port"):
        pure.board_port(port)
    assert pure.board_port("22") == 22 and pure.board_port("65535") == 65535


def _fake_ssh(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """A PATH whose `ssh` records its arguments and fails (a fake: no board runs here), so a
    test sees whether deploy got as far as ssh, and with what."""
    folder = tmp_path / "fake-bin"
    folder.mkdir()
    log = tmp_path / "ssh-calls"
    ssh_script = folder / "ssh"
    ssh_script.write_text(
        '#!/bin/sh\nprintf "%s\\n" "$@" >>"$FAKE_SSH_LOG"\necho --- >>"$FAKE_SSH_LOG"\nexit 255\n'
    )
    ssh_script.chmod(0o755)
    env = {**os.environ, "PATH": f"{folder}:{os.environ['PATH']}", "FAKE_SSH_LOG": str(log)}
    return env, log


def _ssh_calls(log: Path) -> list[list[str]]:
    if not log.exists():
        return []
    return [call.strip("\n").split("\n") for call in log.read_text().split("---\n") if call]


@pytest.mark.parametrize("host", BAD_HOSTS[:8])
def test_a_hostile_host_never_reaches_ssh(tmp_path: Path, host: str) -> None:
    env, log = _fake_ssh(tmp_path)
    for command in ("deploy", "undeploy"):
        done = subprocess.run(
            [sys.executable, str(PROJECT / "deploy" / "deploy.py"), command, f"--host={host}"],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert done.returncode == 2, done.stderr
        assert done.stderr.startswith(f"{command}: HOST (--host) {host!r} is not a board: ")
        assert done.stderr.count("\n") == 1 + host.count("\n") and "Traceback" not in done.stderr
        assert _ssh_calls(log) == []
    assert not (tmp_path / "pwned").exists()


def test_ssh_gets_the_destination_after_double_dash(tmp_path: Path) -> None:
    env, log = _fake_ssh(tmp_path)
    done = subprocess.run(
        [sys.executable, str(PROJECT / "deploy" / "deploy.py"), "deploy",
         "--host", "root@board", "--port", "2222"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 1 and "ssh root@board -p 2222 failed" in done.stderr
    calls = _ssh_calls(log)
    assert calls, "deploy did not run ssh"
    for call in calls:  # the master connection, and `-O exit` at the end
        assert call[call.index("-p") + 1] == "2222"
        assert call[call.index("root@board") - 1] == "--", call


def _make_tree(tmp_path: Path) -> Path:
    """The Makefile in a folder of its own, with `setup` already done (its stamp newer than
    pyproject.toml) and deploy/ the real one: `make deploy` there runs deploy.py for real."""
    tree = tmp_path / "tree"
    (tree / ".venv").mkdir(parents=True)
    (tree / "Makefile").write_text((PROJECT / "Makefile").read_text())
    (tree / "pyproject.toml").write_text("")
    stamp = tree / ".venv" / ".installed-stamp"
    stamp.write_text("")
    os.utime(tree / "pyproject.toml", (1, 1))
    (tree / "deploy").symlink_to(PROJECT / "deploy")
    return tree


@pytest.mark.parametrize(
    "host",
    [
        "x'; touch pwned; echo '",  # the finding
        'x"; touch pwned; echo "',
        "x$$(touch pwned)",
        "$(shell touch pwned)",  # make's own expansion
        "x`touch pwned`",
        "-oProxyCommand=touch pwned",
    ],
)
def test_make_deploy_passes_host_without_a_shell_reading_it(tmp_path: Path, host: str) -> None:
    tree = _make_tree(tmp_path)
    env, log = _fake_ssh(tmp_path)
    bin_dir = str(Path(sys.executable).parent)
    done = subprocess.run(
        ["make", "--no-print-directory", "-C", str(tree), "deploy", f"BIN={bin_dir}",
         f"HOST={host}", "PORT=22"],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode != 0, done.stdout
    assert not (tree / "pwned").exists() and not (tmp_path / "pwned").exists()
    assert not (PROJECT / "pwned").exists()
    assert f"deploy: HOST (--host) {host!r} is not a board: " in done.stderr, done.stderr
    assert _ssh_calls(log) == []


def test_make_deploy_hands_host_and_port_to_ssh_as_given(tmp_path: Path) -> None:
    tree = _make_tree(tmp_path)
    env, log = _fake_ssh(tmp_path)
    env["HOST"], env["PORT"] = "from-the-environment", "1"  # only the command line counts
    bin_dir = str(Path(sys.executable).parent)
    done = subprocess.run(
        ["make", "--no-print-directory", "-C", str(tree), "deploy", f"BIN={bin_dir}",
         "HOST=pi@fe80::1%usb0", "PORT=2222"],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode != 0 and "ssh pi@fe80::1%usb0 -p 2222 failed" in done.stderr
    first = _ssh_calls(log)[0]
    assert first[-2:] == ["--", "pi@fe80::1%usb0"] and first[first.index("-p") + 1] == "2222"
    without = subprocess.run(
        ["make", "--no-print-directory", "-C", str(tree), "deploy", f"BIN={bin_dir}"],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert without.returncode != 0
    assert "deploy: HOST (--host) is required" in without.stderr
