"""fingertipd's command line (also `python -m daemon`).

It imports the config alone until the config is known to be good: `--check` runs before every
deploy's restart, and on a small board (or the board VM under emulation) the whole daemon's
imports (aiohttp, NumPy, OpenCV, the tools) take half a minute where the config takes seconds.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from daemon.config import ConfigError, load


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="fingertipd",
        description="Serve the tool catalog over HTTP, WebSocket and the local IPC socket.",
    )
    parser.add_argument(
        "--config", type=Path, help="config file (default /etc/fingertip/fingertip.toml)"
    )
    parser.add_argument(
        "--port", type=int, help="serve on this port instead of [server].port (1-65535)"
    )
    parser.add_argument(
        "--listen",
        action="append",
        metavar="ADDRESS",
        help="bind this IP address instead of [server].listen (repeatable)",
    )
    parser.add_argument(
        "--require-token",
        action="store_true",
        help="require the pairing token on loopback too ([auth].require_on_loopback): for a "
        "machine other people use",
    )
    parser.add_argument("--check", action="store_true", help="validate the config and exit")
    args = parser.parse_args(argv)
    server: dict[str, object] = {}
    if args.port is not None:
        server["port"] = args.port
    if args.listen:
        server["listen"] = args.listen
    overrides = {"server": server}
    if args.require_token:
        overrides["auth"] = {"require_on_loopback": True}
    try:
        config = load(args.config, overrides)
    except ConfigError as exc:
        print(f"fingertipd: {exc}", file=sys.stderr)
        return 2
    if args.check:
        for key, use in config.retired:
            print(f"fingertipd: {config.source}: {key} is retired and ignored; use {use}")
        print(f"fingertipd: {config.source}: ok")
        return 0
    from daemon.service import run  # the daemon proper: only once the config is good

    return run(config)


if __name__ == "__main__":
    sys.exit(main())
