"""ECM: the board's interface (configfs `ifname`) and the target's cdc_ether interface both
come up and a ping crosses. The target's side lives in a network namespace made here, inside
the guest, so the two ends are two hosts; link-local addresses, and the guest has no NIC."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest
from board import Board
from usbhost import sh

from gadget.profiles import INSTANCES

NETNS = "fingertip-target"
BOARD_IP, TARGET_IP = "169.254.77.1", "169.254.77.2"


@pytest.fixture
def netns() -> Iterator[str]:
    sh("ip", "netns", "add", NETNS)
    yield NETNS
    sh("ip", "netns", "delete", NETNS)


def test_ecm_link_carries_a_ping(board: Board, netns: str) -> None:
    live = board.up("full", "ios")
    ecm = board.settings.gadget_dir / "functions" / INSTANCES["ecm"]
    board_if = (ecm / "ifname").read_text().strip()
    (target_if,) = live.usb.net_interfaces("cdc_ether")
    # The two ends carry the MACs our settings derived (6.1 shows the MAC as "..\0\n").
    assert (ecm / "dev_addr").read_text().split("\0")[0].strip() == board.settings.dev_mac
    with open(f"/sys/class/net/{target_if}/address") as f:
        assert f.read().strip() == board.settings.host_mac

    # The target's side first: cdc_ether learns the carrier from the gadget's connect
    # notification, sent when the board's interface opens; the host polls for it only while
    # its own interface is up, so bringing the board's side up last never loses it.
    sh("ip", "link", "set", target_if, "netns", netns)
    sh("ip", "-n", netns, "addr", "add", f"{TARGET_IP}/24", "dev", target_if)
    sh("ip", "-n", netns, "link", "set", target_if, "up")
    sh("ip", "addr", "add", f"{BOARD_IP}/24", "dev", board_if)
    sh("ip", "link", "set", board_if, "up")
    # -w: keep trying (ARP, carrier) until one reply or 20 s; event-driven, not a sleep.
    done = subprocess.run(
        ["ip", "netns", "exec", netns, "busybox", "ping", "-c", "1", "-w", "20", BOARD_IP],
        capture_output=True,
        text=True,
        check=False,
    )
    state = sh("ip", "-n", netns, "addr") + sh("ip", "addr", "show", board_if)
    assert "1 packets received" in done.stdout, f"{done.stdout}{done.stderr}\n{state}"
    out = sh("busybox", "ping", "-c", "1", "-w", "20", TARGET_IP)
    assert "1 packets received" in out
