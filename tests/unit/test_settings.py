"""GadgetSettings: defaults, validation of a [gadget] table, messages that name the key."""

from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path
from typing import Any

import pytest

from daemon.config import from_mapping
from gadget.settings import ROLES, GadgetSettings, retired_keys


def test_defaults_are_valid_and_distinct_per_profile() -> None:
    s = GadgetSettings()
    assert s.name == "fingertip"
    assert s.udc is None
    assert s.vendor_id == 0x1D6B
    assert s.bcd_usb == 0x0200
    assert s.manufacturer == "Fingertip"
    assert s.function_order == ("keyboard", "consumer", "ecm", "pointer")
    assert s.product_id_isolated != s.product_id_full
    assert s.bcd_device_isolated != s.bcd_device_full
    assert s.serial_isolated != s.serial_full
    assert s.gadget_dir == Path("/sys/kernel/config/usb_gadget/fingertip")


def test_derived_macs_are_stable_unicast_and_locally_administered() -> None:
    s = GadgetSettings()
    for mac in (s.host_mac, s.dev_mac):
        first = int(mac.split(":")[0], 16)
        assert first & 0x01 == 0, "multicast bit must be clear"
        assert first & 0x02 == 0x02, "locally administered bit must be set"
        assert len(mac.split(":")) == 6
    assert s.host_mac != s.dev_mac
    assert GadgetSettings().host_mac == s.host_mac  # stable across runs
    other = GadgetSettings(serial_full="board-2", serial_isolated="board-2-k")
    assert other.host_mac != s.host_mac  # two boards, two addresses


def test_from_table_reads_a_toml_gadget_table() -> None:
    doc = tomllib.loads(
        """
        [gadget]
        name = "ft2"
        udc = "fe980000.usb"
        configfs_root = "/tmp/cfg"
        vendor_id = 0x1209
        product_id_full = 0x0001
        product_id_isolated = 0x0002
        serial_full = "A1"
        serial_isolated = "A1-K"
        ecm_host_addr = "02:AA:BB:CC:DD:EE"
        function_order = ["keyboard", "ecm", "consumer", "pointer"]
        attach_timeout = 3
        settle_delay = 0.25
        hid_no_out_endpoint = false
        """
    )
    s = GadgetSettings.from_table(doc["gadget"])
    assert s.name == "ft2"
    assert s.udc == "fe980000.usb"
    assert s.configfs_root == Path("/tmp/cfg")
    assert (s.vendor_id, s.product_id_full, s.product_id_isolated) == (0x1209, 1, 2)
    assert s.host_mac == "02:aa:bb:cc:dd:ee"
    assert s.function_order == ("keyboard", "ecm", "consumer", "pointer")
    assert s.attach_timeout == 3.0 and isinstance(s.attach_timeout, float)
    assert s.settle_delay == 0.25
    assert s.hid_no_out_endpoint is False


def test_empty_udc_means_the_only_one() -> None:
    assert GadgetSettings.from_table({"udc": ""}).udc is None


def test_unknown_key_is_named() -> None:
    with pytest.raises(ValueError, match=r"^gadget\.colour: unknown key \(known: name, udc"):
        GadgetSettings.from_table({"colour": "blue"})


def test_retired_keys_are_accepted_ignored_and_named() -> None:
    """A board config from before the release setting moved to [input] still loads (an
    upgrade must not stop the daemon); the keys are named for the daemon's one warning."""
    table = {"release_repeat": 0, "release_interval": "anything", "write_timeout": 0.5}
    assert GadgetSettings.from_table(table) == GadgetSettings(write_timeout=0.5)
    assert retired_keys(table) == [
        ("gadget.release_interval", "input.release_interval_ms"),
        ("gadget.release_repeat", "input.release_repeats"),
    ]
    config = from_mapping({"gadget": table, "input": {"release_repeats": 5}}, "old.toml")
    assert config.retired == tuple(retired_keys(table))
    assert config.input.release_repeats == 5  # the one setting, untouched by the old keys
    assert from_mapping({}).retired == ()
    assert "release_repeat" not in {f.name for f in dataclasses.fields(GadgetSettings)}


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("product_id_full", 0x10000, "gadget.product_id_full: expected an integer 0..0xffff"),
        ("product_id_full", -1, "gadget.product_id_full: expected an integer 0..0xffff"),
        ("vendor_id", "0x1d6b", "gadget.vendor_id: expected an integer 0..0xffff"),
        ("bcd_usb", True, "gadget.bcd_usb: expected an integer 0..0xffff"),
        ("name", "a/b", "gadget.name: expected a directory name"),
        ("name", "", "gadget.name: expected a directory name"),
        ("udc", "../x", "gadget.udc: expected a UDC name"),
        ("configfs_root", "relative/path", "gadget.configfs_root: expected an absolute path"),
        ("serial_full", "", "gadget.serial_full: expected a non-empty string"),
        ("product_full", "x" * 127, "gadget.product_full: expected a non-empty string"),
        ("ecm_host_addr", "03:00:00:00:00:01", "gadget.ecm_host_addr: expected a unicast MAC"),
        ("ecm_dev_addr", "02:00:00:00:00", "gadget.ecm_dev_addr: expected a unicast MAC"),
        ("function_order", ["keyboard", "consumer", "ecm"], "gadget.function_order: expected"),
        ("function_order", ["keyboard"] * 4, "gadget.function_order: expected each of"),
        ("function_order", ["keyboard", "consumer", "ecm", "mouse"], "gadget.function_order:"),
        ("attach_timeout", 0, "gadget.attach_timeout: expected a number of seconds 0.1..120"),
        ("attach_timeout", float("nan"), "gadget.attach_timeout: expected a number of seconds"),
        ("settle_delay", "1s", "gadget.settle_delay: expected a number of seconds 0..10"),
        ("max_power", 900, "gadget.max_power: expected milliamperes 0..500"),
        ("write_timeout", 0, "gadget.write_timeout: expected a number of seconds 0.01..10"),
        ("hid_no_out_endpoint", 1, "gadget.hid_no_out_endpoint: expected true or false"),
    ],
)
def test_bad_values_name_the_key(key: str, value: Any, expected: str) -> None:
    with pytest.raises(ValueError) as info:
        GadgetSettings.from_table({key: value})
    assert str(info.value).startswith(expected)


@pytest.mark.parametrize(
    ("table", "expected"),
    [
        ({"product_id_isolated": 0x0104}, "gadget.product_id_isolated: must differ"),
        ({"serial_isolated": "fingertip-0001"}, "gadget.serial_isolated: must differ"),
        (
            {"ecm_host_addr": "02:00:00:00:00:01", "ecm_dev_addr": "02:00:00:00:00:01"},
            "gadget.ecm_dev_addr: must differ",
        ),
    ],
)
def test_cross_key_rules_name_the_key(table: dict[str, Any], expected: str) -> None:
    with pytest.raises(ValueError, match=f"^{expected}"):
        GadgetSettings.from_table(table)


def test_every_role_is_in_the_default_order() -> None:
    assert sorted(GadgetSettings().function_order) == sorted(ROLES)
