"""Configuration the daemon cannot use is refused by `fingertipd --check` (and at start) with
one line that names the file and the key or address, never a traceback: a file that is not
UTF-8, a directory given as --config, a listen address no listener could bind. The gadget CLI
reads the same file the same way."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from daemon.config import Config, ConfigError, ServerConfig, from_mapping


def fingertipd(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "daemon", *args], capture_output=True, text=True, timeout=60
    )


def gadget_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gadget.cli", *args], capture_output=True, text=True, timeout=60
    )


def refused_in_one_line(done: subprocess.CompletedProcess[str], prog: str, text: str) -> None:
    assert done.returncode != 0, done.stdout
    assert "Traceback" not in done.stderr, done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr == f"{prog}: {text}\n"


@pytest.mark.parametrize(
    "content",
    [
        b"[server]\nport = 8080  # caf\xe9 in Latin-1\n",
        b"\xff\xfe[\x00s\x00e\x00r\x00v\x00e\x00r\x00]\x00\n\x00",  # UTF-16 with its BOM
        b'[server]\nallowed_hosts = ["\xed\xa0\x80"]\n',  # a lone surrogate, UTF-8 encoded
    ],
    ids=["latin-1", "utf-16", "surrogate"],
)
def test_a_config_file_that_is_not_utf8_is_named_in_one_line(
    tmp_path: Path, content: bytes
) -> None:
    path = tmp_path / "fingertip.toml"
    path.write_bytes(content)
    at = content.index(next(b for b in content if b >= 0x80).to_bytes(1, "big"))
    why = f"not UTF-8 text (byte {content[at]:#04x} at offset {at}): save it as UTF-8"
    refused_in_one_line(
        fingertipd("--check", "--config", str(path)), "fingertipd", f"{path}: {why}"
    )
    refused_in_one_line(
        gadget_cli("--config", str(path), "status"), "fingertip-gadget", f"{path}: {why}"
    )


def test_a_directory_given_as_the_config_is_named_in_one_line(tmp_path: Path) -> None:
    why = f"{tmp_path}: is a directory, not a config file"
    refused_in_one_line(fingertipd("--check", "--config", str(tmp_path)), "fingertipd", why)
    refused_in_one_line(gadget_cli("--config", str(tmp_path), "status"), "fingertip-gadget", why)


def test_a_device_or_huge_file_is_not_read_whole(tmp_path: Path) -> None:
    why = "/dev/zero: larger than 1024 KiB: not a config file"
    refused_in_one_line(fingertipd("--check", "--config", "/dev/zero"), "fingertipd", why)


def test_a_config_path_that_cannot_be_opened_is_named_in_one_line(tmp_path: Path) -> None:
    plain = tmp_path / "fingertip.toml"
    plain.write_text("[server]\n")
    loop = tmp_path / "loop.toml"
    loop.symlink_to(loop)
    for path, why in [
        (plain / "x.toml", "Not a directory"),
        (loop, "Too many levels of symbolic links"),
    ]:
        text = f"{path}: cannot read the config file: {why}"
        refused_in_one_line(fingertipd("--check", "--config", str(path)), "fingertipd", text)


BAD_ADDRESSES = [
    "999.1.1.1",  # the finding: passed --check, then `Name or service not known` at start
    "192.168.42.1:8080",  # the port is [server].port
    "[::1]",  # IPv6 without brackets
    "localhost",  # a name: resolved by nobody here, and TLS and discovery judge addresses
    "1.2.3.4%usb0",  # a zone is IPv6's
    "",
    " 127.0.0.1",
    "127.0.0.1\x00",
    "fe80::1%",
]


@pytest.mark.parametrize("address", BAD_ADDRESSES)
def test_an_impossible_listen_address_fails_the_check_naming_key_and_address(
    tmp_path: Path, address: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        from_mapping({"server": {"listen": ["127.0.0.1", address]}}, "f.toml")
    assert str(raised.value) == (
        f"f.toml: server: listen: {address!r} is not an IP address (IPv4, or IPv6 without "
        "brackets and port; names are not resolved)"
    )


def test_the_check_refuses_the_impossible_address_from_the_finding(tmp_path: Path) -> None:
    path = tmp_path / "fingertip.toml"
    path.write_text('[server]\nlisten = ["999.1.1.1"]\n')
    done = fingertipd("--check", "--config", str(path))
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert "server: listen: '999.1.1.1' is not an IP address" in done.stderr
    assert done.stderr.startswith(f"fingertipd: {path}: ")


@pytest.mark.parametrize(
    "address", ["127.0.0.1", "192.168.42.1", "0.0.0.0", "::", "::1", "fe80::1%usb0", "2001:db8::1"]
)
def test_ip_addresses_of_both_families_are_accepted(address: str) -> None:
    assert ServerConfig(listen=[address]).listen == [address]
    assert from_mapping({"server": {"listen": [address]}}).server.listen == [address]


def test_the_default_listen_address_passes() -> None:
    assert Config().server.listen == ["127.0.0.1"]
