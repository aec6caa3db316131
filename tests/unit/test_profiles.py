"""Profiles: which functions, in which order, with which identity, for which target."""

from __future__ import annotations

import pytest

from gadget import descriptors
from gadget.profiles import (
    PLATFORMS,
    PROFILES,
    build_profile,
    config_label,
    parse_label,
)
from gadget.settings import GadgetSettings

S = GadgetSettings()


@pytest.mark.parametrize("platform", ["ios", "macos", "windows", "linux"])
def test_full_links_the_mouse_last_for_mouse_platforms(platform: str) -> None:
    p = build_profile("full", platform, S)
    assert p.roles() == ("keyboard", "consumer", "ecm", "pointer")
    assert [f.instance for f in p.functions] == [
        "hid.keyboard",
        "hid.consumer",
        "ecm.usb0",
        "hid.pointer",
    ]
    assert p.functions[0].hid == descriptors.KEYBOARD
    assert p.functions[1].hid == descriptors.CONSUMER
    assert p.functions[2].hid is None
    assert p.functions[3].hid == descriptors.MOUSE


def test_full_uses_the_touchscreen_for_android() -> None:
    p = build_profile("full", "android", S)
    assert p.functions[-1].role == "pointer"
    assert p.functions[-1].hid == descriptors.TOUCHSCREEN


@pytest.mark.parametrize("platform", PLATFORMS)
def test_isolated_has_no_pointer_and_its_own_identity(platform: str) -> None:
    full = build_profile("full", platform, S)
    iso = build_profile("keyboard-isolated", platform, S)
    assert iso.roles() == ("keyboard", "consumer", "ecm")
    assert all(f.hid is None or f.hid.role != "mouse" for f in iso.functions)
    assert iso.identity.id_product != full.identity.id_product
    assert iso.identity.bcd_device != full.identity.bcd_device
    assert iso.identity.serial != full.identity.serial
    assert iso.identity.id_vendor == full.identity.id_vendor
    # The functions both share are the same functions.
    assert iso.functions == full.functions[:3]


def test_identity_comes_from_settings() -> None:
    s = GadgetSettings(vendor_id=0x1209, product_id_full=0x7, serial_full="X", product_full="P")
    ident = build_profile("full", "ios", s).identity
    assert (ident.id_vendor, ident.id_product, ident.serial, ident.product) == (
        0x1209,
        0x7,
        "X",
        "P",
    )
    assert ident.manufacturer == "Fingertip"
    assert ident.bcd_usb == 0x0200


def test_function_order_is_configurable() -> None:
    s = GadgetSettings(function_order=("keyboard", "pointer", "consumer", "ecm"))
    assert build_profile("full", "ios", s).roles() == ("keyboard", "pointer", "consumer", "ecm")
    assert build_profile("keyboard-isolated", "ios", s).roles() == ("keyboard", "consumer", "ecm")


def test_ecm_carries_the_mac_addresses() -> None:
    s = GadgetSettings(ecm_host_addr="02:00:00:00:00:01", ecm_dev_addr="02:00:00:00:00:02")
    ecm = build_profile("full", "ios", s).functions[2]
    assert ecm.attributes() == {"host_addr": b"02:00:00:00:00:01", "dev_addr": b"02:00:00:00:00:02"}


def test_hid_attributes_come_from_the_descriptor() -> None:
    kb = build_profile("full", "ios", S).functions[0]
    attrs = kb.attributes()
    assert attrs["protocol"] == b"1"
    assert attrs["subclass"] == b"1"
    assert attrs["report_length"] == str(descriptors.KEYBOARD.report_length).encode()
    assert attrs["report_desc"] == descriptors.KEYBOARD.report_desc
    assert kb.optional_attrs == {"no_out_endpoint": "1"}
    no_opt = build_profile("full", "ios", GadgetSettings(hid_no_out_endpoint=False))
    assert no_opt.functions[0].optional_attrs == {}


def test_label_records_name_and_link_order() -> None:
    p = build_profile("keyboard-isolated", "ios", S)
    assert parse_label(p.config_label) == (
        "keyboard-isolated",
        ("hid.keyboard", "hid.consumer", "ecm.usb0"),
    )
    assert parse_label(config_label("full", ("a", "b"))) == ("full", ("a", "b"))
    assert parse_label("Conf 1") is None
    assert parse_label("") is None


def test_unknown_names_list_the_valid_ones() -> None:
    with pytest.raises(ValueError, match="unknown profile 'fast'; valid: full, keyboard-isolated"):
        build_profile("fast", "ios", S)
    with pytest.raises(ValueError, match="unknown platform 'tvos'; valid: ios, android, macos"):
        build_profile("full", "tvos", S)
    assert PROFILES == ("full", "keyboard-isolated")
