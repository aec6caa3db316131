"""fingertip-gadget: bring the composite up or down, switch profiles, show its status.

For systemd's ExecStartPre/ExecStopPost and for people at a board. Reads [device].device_type
and [gadget] of the daemon's config file and nothing else. Errors are one line on stderr and a
non-zero exit.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from gadget.configfs import Gadget
from gadget.errors import GadgetError
from gadget.log import LEVELS, configure_logging
from gadget.profiles import PLATFORMS, PROFILES, build_profile
from gadget.settings import ConfigFileMissing, GadgetSettings, read_config_file

PROG = "fingertip-gadget"
DEFAULT_CONFIG = Path("/etc/fingertip/fingertip.toml")
DEVICE_TYPES = ("iOS", "Android", "macOS", "windows", "linux")


class _GadgetCliParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # One line, not argparse's usage block: systemd's journal shows it whole.
        self.exit(2, f"{PROG}: {message} (see {self.prog} --help)\n")


def platform_of(device_type: str, where: str) -> str:
    """iOS, Android, macOS, windows, linux -> the lowercase platform id."""
    platform = device_type.lower() if isinstance(device_type, str) else ""
    if platform not in PLATFORMS:
        raise ValueError(f"{where}: expected one of {', '.join(DEVICE_TYPES)}")
    return platform


def load_config(path: Path | None) -> tuple[str, GadgetSettings]:
    """(platform, settings) from the config file; the default file may be missing."""
    explicit = path is not None or "FINGERTIP_CONFIG" in os.environ
    path = path or Path(os.environ.get("FINGERTIP_CONFIG", DEFAULT_CONFIG))
    try:
        data = read_config_file(path)
    except ConfigFileMissing:
        if explicit:
            raise
        data = {}
    device, table = data.get("device", {}), data.get("gadget", {})
    for name, value in (("device", device), ("gadget", table)):
        if not isinstance(value, dict):
            raise ValueError(f"{path}: {name}: expected a table")
    try:
        platform = platform_of(device.get("device_type", "iOS"), "device.device_type")
        return platform, GadgetSettings.from_table(table)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None


def _parser() -> argparse.ArgumentParser:
    p = _GadgetCliParser(prog=PROG, description=__doc__.splitlines()[0])
    p.add_argument("--config", type=Path, help=f"config file (default {DEFAULT_CONFIG})")
    p.add_argument("--log-level", choices=LEVELS, default="warning")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def switch_options(cmd: argparse.ArgumentParser) -> None:
        cmd.add_argument("--device-type", help="override [device].device_type")
        cmd.add_argument(
            "--wait", action="store_true", help="wait until the target configured the device"
        )

    up = sub.add_parser("up", help="make a profile live (default: full)")
    up.add_argument("--profile", choices=PROFILES, default="full")
    switch_options(up)
    profile = sub.add_parser("profile", help="switch to profile NAME")
    profile.add_argument("name", choices=PROFILES, metavar="NAME")
    switch_options(profile)
    sub.add_parser("down", help="unbind and remove the gadget")
    sub.add_parser("status", help="print the live gadget as JSON")
    return p


def _switch(gadget: Gadget, name: str, platform: str, wait: bool) -> str:
    settings = gadget.settings
    changed = gadget.apply(build_profile(name, platform, settings))
    line = (
        f"{name} ({platform}) live on {gadget.bound_udc()}: {'changed' if changed else 'unchanged'}"
    )
    if wait:
        seconds = gadget.wait_configured(settings.attach_timeout)
        if changed:
            time.sleep(settings.settle_delay)  # let the target load its drivers
        line += f", configured after {seconds:.2f} s"
    return line


def run(args: argparse.Namespace) -> str:
    """Carry out one command; returns what to print on stdout."""
    platform, settings = load_config(args.config)
    gadget = Gadget(settings)
    if args.command == "status":
        return json.dumps(gadget.status(), indent=2)
    if args.command == "down":
        return "gadget removed" if gadget.teardown() else "no gadget"
    if args.device_type is not None:
        platform = platform_of(args.device_type, "--device-type")
    name = args.profile if args.command == "up" else args.name
    return _switch(gadget, name, platform, args.wait)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    configure_logging(args.log_level)
    try:
        print(run(args))
    except GadgetError as exc:
        print(f"{PROG}: {exc.message}", file=sys.stderr)
        return 1
    except (ValueError, OSError) as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
