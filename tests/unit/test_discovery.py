"""What DNS-SD may announce on, as pure functions: never loopback, never an address that means
every interface, only what [server].listen names."""

from __future__ import annotations

from pathlib import Path

import pytest

from daemon.config import ConfigError, from_mapping
from daemon.discovery import BOARD_ID_FILE, announceable, board_id, instance_name, txt


def test_only_configured_non_loopback_addresses() -> None:
    listen = ["127.0.0.1", "::1", "127.0.0.53", "192.168.42.1", "0.0.0.0", "::", "fe80::1%usb0"]
    assert announceable(listen) == ["192.168.42.1", "fe80::1%usb0"]
    assert announceable(["localhost", "board.local", "224.0.0.251", "192.168.42.1"]) == [
        "192.168.42.1"
    ]
    assert announceable(["127.0.0.1"]) == [] and announceable([]) == []
    assert announceable(["10.0.0.2", "10.0.0.2"]) == ["10.0.0.2"]


def test_board_id_is_made_once(tmp_path: Path) -> None:
    first = board_id(tmp_path / "state")
    assert len(first) == 32 and int(first, 16) >= 0
    assert board_id(tmp_path / "state") == first
    assert (tmp_path / "state" / BOARD_ID_FILE).read_text().strip() == first
    # A damaged file (not text, too long for a TXT record) is replaced, never fatal.
    for damaged in (b"\xff\xfe\n", b"a" * 300, b""):
        (tmp_path / "state" / BOARD_ID_FILE).write_bytes(damaged)
        again = board_id(tmp_path / "state")
        assert len(again) == 32 and int(again, 16) >= 0
        assert board_id(tmp_path / "state") == again


def test_txt_and_name() -> None:
    config = from_mapping({"device": {"device_type": "Android"}})
    assert txt(config, "0.1.0", "ab" * 16) == {
        "version": "0.1.0",
        "device_type": "Android",
        "platform": "android",
        "tools": "/api/tools",
        "ws": "/api/ws",
        "mcp": "/mcp",
        "board_id": "ab" * 16,
    }
    assert instance_name(config, "0123456789abcdef") == "Fingertip Android 01234567"
    named = from_mapping({"discovery": {"name": "rack 7"}})
    assert instance_name(named, "0123456789abcdef") == "rack 7"


def test_hostile_names() -> None:
    long = from_mapping({"discovery": {"name": "é" * 40}})  # 40 characters, 80 bytes
    assert instance_name(long, "0" * 32) == "é" * 31
    with pytest.raises(ConfigError, match=r"discovery\.name"):
        from_mapping({"discovery": {"name": "tab\there"}})
    with pytest.raises(ConfigError, match=r"discovery\.name"):
        from_mapping({"discovery": {"name": "x" * 64}})
