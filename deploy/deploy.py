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
nothing from it but pip. This file is the two commands; their parts are the modules beside it
(deploy/__init__.py lists them).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import tomllib
from collections.abc import Sequence
from pathlib import Path

if __name__ == "__main__" and not __package__:
    # `python deploy/deploy.py`, as make deploy runs it: sys.path[0] is deploy/, where
    # `deploy` is this file; from the project's root it is the package of deploy's parts.
    sys.path[0] = str(Path(__file__).resolve().parents[1])

from daemon import known_boards
from deploy import PROJECT, DeployError
from deploy.build import (
    build_deps,
    build_wheel,
    build_wheelhouse,
    deps_id,
    send,
    sha256_of,
)
from deploy.health import health_check
from deploy.pure import (
    BoardFacts,
    board_destination,
    board_port,
    health_target,
    ocr_wanted,
    parse_probe,
    parse_result,
    pins,
    release_id,
    secured_addresses,
    summary,
    wheel_content_digest,
    wheel_version,
)
from deploy.ssh import BOARD_SCRIPT, Ssh

BUILD = PROJECT / "build" / "deploy"
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
        digests = {f"wheels/{w.name}": sha256_of(w) for w in wheels}
        digests["dist/fingertip"] = wheel_content_digest(wheel)
        share = {f"share/{Path(rel).name}": PROJECT / rel for rel in SHARE}
        digests.update({name: sha256_of(path) for name, path in share.items()})
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
    parser.add_argument("--port", default="22")
    parser.add_argument("--ssh-config", default="", help="an ssh config file (ssh -F)")
    args = parser.parse_args(argv)
    try:  # checked before anything runs ssh: one line that names the argument
        args.host = board_destination(args.host)
        args.port = board_port(args.port)
    except DeployError as exc:
        why = str(exc).replace("make deploy", f"make {args.command}")
        print(f"{args.command}: {why}", file=sys.stderr)
        return 2
    args.ssh_config = Path(args.ssh_config) if args.ssh_config else None
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
