"""The security posture a user can see: health_check's `security` section and the log at start.

Read from the parts that decide it, never kept beside them: the listeners and the certificate
from daemon.tls, the tokens from daemon.auth (by id and policy, never a secret), each
transport's guard from the config, and who can reach the `shell` tool from the catalog's own
visibility rule.
"""

from __future__ import annotations

import copy
import functools
import time
from collections.abc import Callable
from typing import Any

from daemon.addresses import loopback
from daemon.auth import Auth
from daemon.catalog import CALLER_KINDS, Caller, Catalog, Guard
from daemon.config import Config
from daemon.private_files import set_aside_files
from daemon.tls import RENEW_DAYS, Tls
from daemon.transports.ipc import Access
from daemon.wire import iso_utc

TRANSPORTS = ("http", "ws", "mcp", "ipc")  # the fields of [guard]
SHELL = "shell"
SHELL_POLICY = "critical"  # the shell tool's policy: a client token must allow it
# What needs a token wherever one is required (catalog.needs_token and Caller.admit's rule).
TOKEN_NEEDED_FOR = (
    "write and critical tools, tools that show the screen, the stream and snapshot, the "
    "flight recorder and the WebSocket tool protocol"
)


def posture(config: Config, auth: Auth, tls: Tls, catalog: Catalog) -> Callable[[], dict[str, Any]]:
    """health_check's `security` section, as a function: what the config and the catalog fix is
    worked out once (health_check is called often), the shell's reach at the first call (the
    catalog gets its tools after this is made); the certificate, the token's rotation and the
    warnings are read at each call."""
    server = config.server
    listeners = [
        {"address": a, "port": server.port, "tls": secured, "loopback": loopback(a)}
        for a, secured in tls.listeners
    ]
    access = Access.from_config(config.ipc)
    ipc = {
        "socket": config.ipc.socket,
        "mode": config.ipc.mode,
        "uids": sorted(access.allowed_uids),
        "gids": sorted(access.allowed_gids),
    }
    guards = {t: getattr(config.guard, t) for t in TRANSPORTS}
    shell = functools.cache(lambda: shell_reach(config, auth, catalog, listeners, access))
    clients = auth.client_policies()
    pairing = "[auth].token" if auth.token_file is None else str(auth.token_file)

    def current() -> dict[str, Any]:
        return {
            "listeners": copy.deepcopy(listeners),
            "ipc": copy.deepcopy(ipc),
            "tls": tls.status(),
            "token": {
                "required_off_loopback": True,
                "required_on_loopback": auth.require_on_loopback,
                "needed_for": TOKEN_NEEDED_FOR,
                "pairing_token": pairing,
                "rotated_at": iso_utc(auth.rotated_at) if auth.rotated_at else None,
            },
            "guards": dict(guards),
            "shell": copy.deepcopy(shell()),
            "client_tokens": copy.deepcopy(clients),
            "warnings": warnings(config, tls, listeners) + damaged_warnings(),
            # State files found damaged at start (a power cut), set aside and rebuilt.
            "state_files": set_aside_files(),
        }

    return current


def shell_reach(
    config: Config,
    auth: Auth,
    catalog: Catalog,
    listeners: list[dict[str, Any]],
    access: Access,
) -> dict[str, Any]:
    """Over which transports the shell tool can be called, and by whom."""
    by: list[dict[str, Any]] = []
    tokens = ["pairing"]
    tokens += [c["id"] for c in auth.client_policies() if c["max_policy"] == SHELL_POLICY]
    remote = any(not listener["loopback"] for listener in listeners)
    for transport in TRANSPORTS:
        guard = Guard.preset(getattr(config.guard, transport))
        caller = Caller(transport, guard, authenticated=True, **CALLER_KINDS[transport])
        if not any(spec.name == SHELL for spec in catalog.tools(caller)):
            continue
        if transport == "ipc":
            by.append(
                {
                    "transport": "ipc",
                    "who": f"local processes of uids {sorted(access.allowed_uids)} or gids "
                    f"{sorted(access.allowed_gids)}",
                }
            )
            continue
        holders = f"holders of the tokens {', '.join(tokens)}"
        on_loopback = holders if auth.require_on_loopback else "anyone on this machine"
        who = f"loopback: {on_loopback}"
        if remote:
            who += f"; network: {holders}"
        by.append({"transport": transport, "who": who})
    return {"reachable": bool(by), "by": by}


def damaged_warnings() -> list[str]:
    return [
        f"{n['file']} was damaged ({n['reason']}) and set aside as {n['kept_as']}: "
        f"{n['consequence']}"
        for n in set_aside_files()
    ]


def warnings(config: Config, tls: Tls, listeners: list[dict[str, Any]]) -> list[str]:
    """What weakens the defaults, one sentence each (also a warning line at start)."""
    out = []
    clear = [x["address"] for x in listeners if not x["tls"] and not x["loopback"]]
    if tls.mode == "off":
        where = f" on {', '.join(clear)}" if clear else ""
        out.append(
            "[server].tls is off: tokens, the screen and the flight recorder cross the "
            f"network in clear{where}"
        )
    elif clear:
        out.append(f"no TLS on {', '.join(clear)}")
    every = [x["address"] for x in listeners if x["address"] in ("0.0.0.0", "::")]
    if every:
        out.append(f"[server].listen has {', '.join(every)}: every interface serves the tools API")
    info = tls.info
    now = time.time()
    if info is not None and tls.user and info.ends_within(0, now):
        out.append(f"the TLS certificate expired at {iso_utc(info.not_after)}")
    elif info is not None and tls.user and info.ends_within(RENEW_DAYS, now):
        out.append(f"the TLS certificate ends at {iso_utc(info.not_after)}: renew it, then SIGHUP")
    if tls.last_error:
        out.append(f"the last certificate reload failed (the old one serves): {tls.last_error}")
    return out
