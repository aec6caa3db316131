"""Profiles on a real host: `fingertip-gadget up` enumerates every function with our identity
and the capabilities we promise; full -> keyboard-isolated -> full really re-enumerates."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import evdev
import expected
import pytest
from board import Board, Live
from evdev import ecodes
from usbhost import frames, no_autorepeat, open_inputs, read_until

from gadget import reports
from gadget.keymap import char_stroke
from gadget.profiles import build_profile

CLI = str(Path(sys.executable).with_name("fingertip-gadget"))


def cli(config: Path, *args: str) -> str:
    done = subprocess.run(
        [CLI, "--config", str(config), *args], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, f"fingertip-gadget {' '.join(args)}: {done.stderr}"
    return done.stdout


def interface_classes(live: Live) -> list[str]:
    return [(i / "bInterfaceClass").read_text().strip() for i in live.usb.interfaces()]


def drivers(live: Live) -> list[str]:
    return [
        (i / "driver").resolve().name if (i / "driver").exists() else "-"
        for i in live.usb.interfaces()
    ]


def check_keyboard(dev: evdev.InputDevice) -> None:
    caps = dev.capabilities(absinfo=False)
    assert set(caps[ecodes.EV_KEY]) >= expected.KEYBOARD_KEYS, [
        ecodes.KEY[k] for k in expected.KEYBOARD_KEYS - set(caps[ecodes.EV_KEY])
    ]
    assert set(caps[ecodes.EV_LED]) >= expected.KEYBOARD_LEDS


def check_consumer(dev: evdev.InputDevice) -> None:
    keys = set(dev.capabilities(absinfo=False)[ecodes.EV_KEY])
    missing = [n for n in expected.CONSUMER_KEYS.values() if ecodes.ecodes[n] not in keys]
    assert not missing, f"consumer control lacks {missing}"


def check_mouse(dev: evdev.InputDevice) -> None:
    caps = dev.capabilities()
    absinfo = dict(caps[ecodes.EV_ABS])
    for axis in (ecodes.ABS_X, ecodes.ABS_Y):
        assert (absinfo[axis].min, absinfo[axis].max) == (0, reports.ABS_MAX)
    buttons = {ecodes.BTN_LEFT, ecodes.BTN_RIGHT, ecodes.BTN_MIDDLE, ecodes.BTN_SIDE}
    assert buttons | {ecodes.BTN_EXTRA} <= set(caps[ecodes.EV_KEY])
    assert {ecodes.REL_WHEEL, ecodes.REL_HWHEEL} <= set(caps[ecodes.EV_REL])
    assert ecodes.INPUT_PROP_DIRECT not in dev.input_props()


def check_touchscreen(dev: evdev.InputDevice) -> None:
    caps = dev.capabilities()
    absinfo = dict(caps[ecodes.EV_ABS])
    assert ecodes.INPUT_PROP_DIRECT in dev.input_props()
    for axis in (ecodes.ABS_MT_POSITION_X, ecodes.ABS_MT_POSITION_Y):
        assert (absinfo[axis].min, absinfo[axis].max) == (0, reports.ABS_MAX)
    assert absinfo[ecodes.ABS_MT_SLOT].max + 1 >= reports.MAX_CONTACTS
    assert ecodes.ABS_MT_TRACKING_ID in absinfo
    assert ecodes.BTN_TOUCH in caps[ecodes.EV_KEY]


CHECKS: dict[str, Callable[[evdev.InputDevice], None]] = {
    "keyboard": check_keyboard,
    "consumer": check_consumer,
    "mouse": check_mouse,
    "touchscreen": check_touchscreen,
}


@pytest.mark.parametrize("device_type", ["iOS", "Android"])
def test_cli_up_full_enumerates_every_function(
    board: Board, tmp_path: Path, device_type: str, record_property: Callable[[str, object], None]
) -> None:
    config = tmp_path / "fingertip.toml"
    config.write_text(f'[device]\ndevice_type = "{device_type}"\n')
    start = time.monotonic()
    out = cli(config, "up", "--profile", "full", "--wait")
    assert "configured" in out
    board.platform = device_type.lower()
    profile = build_profile("full", board.platform, board.settings)
    live = board.wait_live(profile, start)
    record_property(f"cli_up_to_inputs_s[{device_type}]", f"{live.enumerated_s:.2f}")

    # Our identity, as the host read it from the device descriptor and string descriptors.
    s, usb = board.settings, live.usb
    assert (usb.vendor, usb.product, usb.bcd_device) == (
        s.vendor_id,
        s.product_id_full,
        s.bcd_device_full,
    )
    assert (usb.serial, usb.product_name) == (s.serial_full, s.product_full)
    assert (usb.sysfs / "manufacturer").read_text().strip() == s.manufacturer

    # Every function, in link order: HID is one interface, ECM two (control + data).
    classes = {"keyboard": ["03"], "consumer": ["03"], "ecm": ["02", "0a"], "pointer": ["03"]}
    assert interface_classes(live) == [c for fn in profile.functions for c in classes[fn.role]]
    assert "cdc_ether" in drivers(live)
    assert drivers(live).count("usbhid") == 3

    # The host has exactly our report descriptors, each with its one input device.
    roles = {fn.hid.report_desc: fn.hid.role for fn in profile.functions if fn.hid is not None}
    inputs = usb.inputs()
    assert set(inputs) == set(roles)
    for desc, nodes in inputs.items():
        assert len(nodes) == 1, f"{roles[desc]}: {nodes}"
        with open_inputs(nodes) as (dev,):
            CHECKS[roles[desc]](dev)

    status = json.loads(cli(config, "status"))
    assert status["profile"] == "full"
    assert [f["role"] for f in status["functions"]] == list(profile.roles())
    assert cli(config, "down").strip() == "gadget removed"
    board.host.wait_usb_gone(s.vendor_id, s.product_id_full)


async def type_a(board: Board, live: Live) -> None:
    """Press and release 'a' through our writer; the target's keyboard must say KEY_A."""
    usage, mods = char_stroke("a")
    writer = board.writer("keyboard")
    with open_inputs([live.input_node("keyboard")]) as (kbd,):
        no_autorepeat(kbd)
        await writer.write(reports.keyboard(mods, [usage]))
        await writer.write(reports.KEYBOARD_RELEASE)
        events = await read_until(kbd, lambda e: len(frames(e, ecodes.EV_KEY)) == 2, "'a'")
    writer.close()
    assert frames(events, ecodes.EV_KEY) == [
        [(ecodes.EV_KEY, ecodes.KEY_A, 1)],
        [(ecodes.EV_KEY, ecodes.KEY_A, 0)],
    ]


async def test_profile_switch_full_isolated_full(
    board: Board, record_property: Callable[[str, object], None]
) -> None:
    s = board.settings
    full = board.up("full", "ios")
    await type_a(board, full)

    start = time.monotonic()
    assert board.gadget.apply(build_profile("keyboard-isolated", "ios", s))
    iso = board.wait_live(build_profile("keyboard-isolated", "ios", s), start)
    board.host.wait_usb_gone(s.vendor_id, s.product_id_full)
    record_property("profile_switch_to_isolated_s", f"{iso.enumerated_s:.2f}")
    # A different device to the host: its own product id, bcdDevice, serial; no pointer.
    assert (iso.usb.product, iso.usb.bcd_device, iso.usb.serial) == (
        s.product_id_isolated,
        s.bcd_device_isolated,
        s.serial_isolated,
    )
    assert full.hid("pointer") not in iso.usb.inputs()
    assert "pointer" not in board.gadget.device_nodes()
    await type_a(board, iso)

    start = time.monotonic()
    assert board.gadget.apply(build_profile("full", "ios", s))
    back = board.wait_live(build_profile("full", "ios", s), start)
    board.host.wait_usb_gone(s.vendor_id, s.product_id_isolated)
    record_property("profile_switch_to_full_s", f"{back.enumerated_s:.2f}")
    assert (back.usb.product, back.usb.serial) == (s.product_id_full, s.serial_full)
    assert back.hid("pointer") in back.usb.inputs()
    await type_a(board, back)

    # Applying the live profile again changes nothing: same device on the host (same devnum),
    # and an evdev descriptor opened before keeps delivering.
    with open_inputs([back.input_node("keyboard")]) as (kbd,):
        assert not board.gadget.apply(build_profile("full", "ios", s))
        writer = board.writer("keyboard")
        await writer.write(reports.keyboard(0, [char_stroke("a")[0]]))
        await writer.write(reports.KEYBOARD_RELEASE)
        events = await read_until(kbd, lambda e: len(frames(e, ecodes.EV_KEY)) == 2, "'a'")
        writer.close()
    assert [f[0][1:] for f in frames(events, ecodes.EV_KEY)] == [
        (ecodes.KEY_A, 1),
        (ecodes.KEY_A, 0),
    ]
    assert board.gadget.live_profile() == "full"
    same = board.host.wait_usb(s.vendor_id, s.product_id_full, n_hid=3)
    assert same.devnum == back.usb.devnum
