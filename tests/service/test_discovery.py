"""DNS-SD against the real daemon, without a kernel VM: the board's services are heard on a
configured address (a link-local /32 on `lo`), and nothing is announced on loopback or on an
interface that is not configured (a veth of our own); re-announced when the address
comes back; withdrawn at stop. `fingertip discover` prints what a host hears."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from zeroconf import (
    DNSOutgoing,
    DNSPointer,
    ServiceBrowser,
    ServiceInfo,
    ServiceListener,
    Zeroconf,
    const,
)

from daemon import known_boards
from daemon.discovery import BOARD_ID_FILE, FINGERTIP_SERVICE, HTTP_SERVICE
from tests.service.daemonproc import DaemonProcess

FINGERTIP = Path(sys.executable).with_name("fingertip")
ADDR = "169.254.231.22"  # ours: other tests use other link-local addresses
DUMMY, DUMMY_ADDR = "ft-disc0", "169.254.232.22"
MDNS_GROUP_HEX = "FB0000E0"  # 224.0.0.251 as /proc/net/igmp prints it
Make = Callable[..., DaemonProcess]


def ip(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["ip", *args], capture_output=True)


@pytest.fixture(autouse=True)
def known_boards_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`fingertip discover` reads the host's pins: a folder of the test's, never the user's."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))


@pytest.fixture
def addresses() -> Iterator[None]:
    """ADDR on lo (configured in the tests), and an interface with an address that is not."""
    made = ip("addr", "add", f"{ADDR}/32", "dev", "lo")
    if made.returncode != 0:
        pytest.skip(f"cannot add a test address (needs root and iproute2): {made.stderr!r}")
    try:
        # A veth pair: an interface that has multicast, unlike lo, and that nobody configured.
        made = ip("link", "add", DUMMY, "type", "veth", "peer", "name", DUMMY + "p")
        if made.returncode != 0:
            pytest.skip(f"cannot add a veth interface: {made.stderr!r}")
        ip("link", "set", DUMMY + "p", "up")
        ip("link", "set", DUMMY, "up")
        ip("addr", "add", f"{DUMMY_ADDR}/32", "dev", DUMMY)
        yield
    finally:
        ip("addr", "del", f"{ADDR}/32", "dev", "lo")
        ip("link", "del", DUMMY)


class Heard(ServiceListener):
    def __init__(self) -> None:
        self.names: set[str] = set()
        self.changed = threading.Condition()

    def add_service(self, zc: Zeroconf, type_: str, name: str) -> None:
        with self.changed:
            self.names.add(name)
            self.changed.notify_all()

    def update_service(self, zc: Zeroconf, type_: str, name: str) -> None:
        self.add_service(zc, type_, name)

    def remove_service(self, zc: Zeroconf, type_: str, name: str) -> None:
        with self.changed:
            self.names.discard(name)
            self.changed.notify_all()

    def wait(self, pred: Callable[[set[str]], bool], timeout: float = 20.0) -> set[str]:
        with self.changed:
            assert self.changed.wait_for(lambda: pred(self.names), timeout), self.names
            return set(self.names)


class Browser:
    """A host browsing on one address, with a fresh cache."""

    def __init__(self, address: str, service: str = FINGERTIP_SERVICE) -> None:
        self.zc = Zeroconf(interfaces=[address])
        self.heard = Heard()
        self.browser = ServiceBrowser(self.zc, service, self.heard)

    def close(self) -> None:
        self.browser.cancel()
        self.zc.close()


def mdns_members() -> dict[str, int]:
    """Interface -> how many sockets joined 224.0.0.251 there (from /proc/net/igmp)."""
    out: dict[str, int] = {}
    device = ""
    for line in Path("/proc/net/igmp").read_text().splitlines()[1:]:
        if not line.startswith((" ", "\t")):
            device = line.split()[1].rstrip(":")
        elif line.split()[0] == MDNS_GROUP_HEX:
            out[device] = out.get(device, 0) + int(line.split()[1])
    return out


def daemon_udp_ports(pid: int) -> list[tuple[str, int]]:
    """(local address, port) of each UDP socket the process holds."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = fd.readlink().name
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = []
    for table in ("udp", "udp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[9] in inodes:
                host, port = fields[1].split(":")
                found.append((host, int(port, 16)))
    return found


def discover_until(
    done: Callable[[list[dict[str, Any]], str], bool],
) -> tuple[list[dict[str, Any]], str]:
    """`fingertip discover` on ADDR: the boards it lists and its stderr. A busy machine may need
    a longer browse window than 1.5 s to hear a board (s27g, a core hogged, heard none): the
    window grows until `done(boards, stderr)` or a minute has gone."""
    deadline = time.monotonic() + 60
    seconds = 1.5
    while True:
        proc = subprocess.run(
            [str(FINGERTIP), "discover", "--seconds", str(seconds), "--interface", ADDR],
            capture_output=True,
            timeout=60,
        )
        assert proc.returncode == 0, proc.stderr
        boards = [json.loads(line) for line in proc.stdout.decode().splitlines()]
        stderr = proc.stderr.decode()
        if done(boards, stderr) or time.monotonic() > deadline:
            return boards, stderr
        seconds = min(seconds * 2, 12)


def wait_for_event(d: DaemonProcess, event: str, count: int = 1, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while sum(e.get("event") == event for e in d.log_events()) < count:
        assert time.monotonic() < deadline, f"no {event} x{count} in:\n{d.logs()[-3000:]}"
        time.sleep(0.05)


def test_nothing_is_announced_with_loopback_only(make_daemon: Make) -> None:
    d = make_daemon({"server": {"listen": ["127.0.0.1", "::1"]}})
    assert d.proc is not None
    wait_for_event(d, "discovery_off")
    assert [p for p in daemon_udp_ports(d.proc.pid) if p[1] == 5353] == []


def test_announced_only_where_configured_and_found_again(
    make_daemon: Make, addresses: None
) -> None:
    before = mdns_members()
    d = make_daemon({"server": {"listen": ["127.0.0.1", ADDR]}, "discovery": {"name": "rack 7"}})
    assert d.proc is not None
    wait_for_event(d, "discovery_announced")
    board = (d.state_dir / BOARD_ID_FILE).read_text().strip()

    # The daemon joined the mDNS group on lo (where ADDR is) and nowhere else: not on the
    # unconfigured interface; its sockets are the mDNS one and ADDR's responder only.
    after = mdns_members()
    assert after.get("lo", 0) > before.get("lo", 0)
    assert after.get(DUMMY, 0) == 0
    ours = daemon_udp_ports(d.proc.pid)
    assert {host for host, _ in ours} <= {"00000000", "16E7FEA9"}, ours  # 0.0.0.0, ADDR

    host = Browser(ADDR)
    web = Browser(ADDR, HTTP_SERVICE)
    try:
        host.heard.wait(lambda n: f"rack 7.{FINGERTIP_SERVICE}" in n)
        web.heard.wait(lambda n: f"rack 7.{HTTP_SERVICE}" in n)
        info = host.zc.get_service_info(FINGERTIP_SERVICE, f"rack 7.{FINGERTIP_SERVICE}", 30000)
        assert info is not None and info.port == d.port
        assert info.parsed_addresses() == [ADDR]
        fingerprint = d.health()["security"]["tls"]["fingerprint"]  # ADDR has TLS (auto)
        assert info.decoded_properties == {
            "version": "0.1.0",
            "device_type": "iOS",
            "platform": "ios",
            "tools": "/api/tools",
            "ws": "/api/ws",
            "mcp": "/mcp",
            "board_id": board,
            "fp": fingerprint,
        }
    finally:
        web.close()

    # What a host with many boards runs: one JSON line per board, its announced fingerprint
    # compared with the pins this host keeps (none yet).
    def ours(boards: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [b for b in boards if b["txt"].get("board_id") == board]

    boards, _ = discover_until(lambda boards, _: bool(ours(boards)))
    assert ours(boards) == [
        {
            "name": "rack 7",
            "host": f"fingertip-{board[:12]}.local.",
            "addresses": [ADDR],
            "port": d.port,
            "txt": info.decoded_properties,
            "fingerprint": fingerprint,
            "known": "new",
        }
    ]
    # Pinned (as make deploy keeps it): a match; another key kept for it: CHANGED, said loudly.
    known_boards.remember({known_boards.endpoint(ADDR, d.port): (fingerprint, board)})
    boards, err = discover_until(lambda boards, _: bool(ours(boards)))
    assert ours(boards)[0]["known"] == "match" and "not the one kept" not in err
    other = "sha256//" + "Q" * 43 + "="
    known_boards.remember({known_boards.endpoint(ADDR, d.port): (other, board)})
    boards, err = discover_until(lambda boards, _: bool(ours(boards)))
    assert ours(boards)[0]["known"] == "CHANGED"
    assert f"announces fingerprint {fingerprint}, not the one kept" in err

    # The address goes (the USB link while an iOS target is isolated) and comes back: the
    # board answers a host with an empty cache again, from fresh sockets.
    host.close()
    ip("addr", "del", f"{ADDR}/32", "dev", "lo")
    wait_for_event(d, "discovery_waiting")
    ip("addr", "add", f"{ADDR}/32", "dev", "lo")
    wait_for_event(d, "discovery_announced", count=2)
    host = Browser(ADDR)
    try:
        host.heard.wait(lambda n: f"rack 7.{FINGERTIP_SERVICE}" in n)
        # Stopped: the goodbye takes it away from the host's view at once.
        assert d.stop() == 0
        host.heard.wait(lambda n: f"rack 7.{FINGERTIP_SERVICE}" not in n)
    finally:
        host.close()
    wait_for_event(d, "discovery_withdrawn")


def test_discovery_off_binds_nothing(make_daemon: Make, addresses: None) -> None:
    d = make_daemon({"server": {"listen": [ADDR]}, "discovery": {"enabled": False}})
    assert d.proc is not None
    wait_for_event(d, "discovery_off")
    assert [p for p in daemon_udp_ports(d.proc.pid) if p[1] == 5353] == []


def ghost_answer(instance: str) -> bytes:
    """An mDNS answer naming a board (its PTR record) that nothing will resolve: no SRV, TXT
    or address ever follows, as from a board that went away or is too busy to answer."""
    out = DNSOutgoing(const._FLAGS_QR_RESPONSE | const._FLAGS_AA)
    ptr = DNSPointer(FINGERTIP_SERVICE, const._TYPE_PTR, const._CLASS_IN, 120, instance)
    out.add_answer_at_time(ptr, 0)
    return out.packets()[0]


NOT_LISTED = [
    (
        f"ghost.{FINGERTIP_SERVICE}",
        "fingertip: board 'ghost' was heard but did not resolve within 1500 ms "
        "(no address, port or TXT answer); not listed\n",
    ),
    # A name zeroconf refuses to resolve crashed the whole browse (a traceback, no board listed):
    # anyone on the link could hide every board with one packet.
    (
        "evil._http._tcp.local.",
        "fingertip: 'evil._http._tcp.local.' was heard as a board but is no valid name; "
        "not listed\n",
    ),
    (
        f"bad\x07name.{FINGERTIP_SERVICE}",
        "fingertip: 'bad\\x07name._fingertip._tcp.local.' was heard as a board but is no valid "
        "name; not listed\n",
    ),
]


@pytest.mark.parametrize(("instance", "said"), NOT_LISTED)
def test_discover_names_a_board_it_cannot_list(addresses: None, instance: str, said: str) -> None:
    """Two boards are heard: one answers (a real responder on ADDR), the other never resolves
    or has a name that cannot be resolved. The first is listed on stdout; the second is named on
    stderr, not dropped without a word."""
    responder = Zeroconf(interfaces=[ADDR])
    info = ServiceInfo(
        FINGERTIP_SERVICE,
        f"answers.{FINGERTIP_SERVICE}",
        addresses=[socket.inet_aton(ADDR)],
        port=8080,
        properties={"board_id": "answers"},
        server="answers.local.",
    )
    responder.register_service(info)
    stop = threading.Event()
    sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sender.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(ADDR))
    packet = ghost_answer(instance)

    def announce() -> None:  # again and again, so any browse window hears it
        while not stop.is_set():
            sender.sendto(packet, (const._MDNS_ADDR, const._MDNS_PORT))
            stop.wait(0.2)

    thread = threading.Thread(target=announce, daemon=True)
    thread.start()
    try:
        boards, stderr = discover_until(lambda boards, stderr: bool(boards) and said in stderr)
        names = [b["name"] for b in boards]
        assert names == ["answers"], (names, stderr)
        assert stderr == said
    finally:
        stop.set()
        thread.join()
        sender.close()
        responder.unregister_service(info)
        responder.close()
