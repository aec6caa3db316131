"""`fingertip discover`: browse DNS-SD for Fingertip boards (the host side of daemon.discovery).

Imported only by that command (the CLI's other commands must start fast): python-zeroconf and
the standard library, nothing else from daemon/.
"""

from __future__ import annotations

import asyncio
import ipaddress
from dataclasses import dataclass, field
from typing import Any

from zeroconf import BadTypeInNameException, IPVersion, ServiceListener, Zeroconf
from zeroconf.asyncio import AsyncServiceBrowser, AsyncServiceInfo, AsyncZeroconf

SERVICE = "_fingertip._tcp.local."  # the same as daemon.discovery.FINGERTIP_SERVICE
RESOLVE_MS = 1500


class _Names(ServiceListener):
    """Instance names heard so far (a goodbye takes one away again). Called on zeroconf's own
    event loop, the one this module's coroutine runs on: no lock."""

    def __init__(self) -> None:
        self.names: set[str] = set()

    def add_service(self, zc: Zeroconf, type_: str, name: str) -> None:
        self.names.add(name)

    def update_service(self, zc: Zeroconf, type_: str, name: str) -> None:
        self.add_service(zc, type_, name)

    def remove_service(self, zc: Zeroconf, type_: str, name: str) -> None:
        self.names.discard(name)


@dataclass
class Found:
    """What a browse heard: the boards that resolved, and the names heard that did not (their
    address, port or TXT never came within RESOLVE_MS: a board busy or going away)."""

    boards: list[dict[str, Any]] = field(default_factory=list)
    unresolved: list[str] = field(default_factory=list)
    # Names heard under our type that zeroconf refuses to resolve (a control character, another
    # service type): anyone on the link can send one, and it must not hide the real boards.
    invalid: list[str] = field(default_factory=list)


def _text(value: bytes | None) -> str | None:
    return None if value is None else value.decode("utf-8", "replace")


def short_name(name: str) -> str:
    return name.removesuffix("." + SERVICE)


def board(info: AsyncServiceInfo) -> dict[str, Any]:
    """One resolved board as `fingertip discover` prints it."""
    return {
        "name": short_name(info.name),
        "host": info.server,
        "addresses": info.parsed_scoped_addresses(),
        "port": info.port,
        "txt": {_text(k): _text(v) for k, v in info.properties.items()},
    }


def _zeroconf(interfaces: list[str] | None) -> AsyncZeroconf:
    if not interfaces:
        return AsyncZeroconf()
    v6 = any(ipaddress.ip_address(i).version == 6 for i in interfaces)
    v4 = any(ipaddress.ip_address(i).version == 4 for i in interfaces)
    version = IPVersion.All if v4 and v6 else IPVersion.V6Only if v6 else IPVersion.V4Only
    return AsyncZeroconf(interfaces=interfaces, ip_version=version)


async def _discover(seconds: float, interfaces: list[str] | None) -> Found:
    azc = _zeroconf(interfaces)
    try:
        heard = _Names()
        browser = AsyncServiceBrowser(azc.zeroconf, SERVICE, listener=heard)
        await asyncio.sleep(seconds)  # the browse window is what the user asked for
        await browser.async_cancel()
        found = Found()
        infos = []
        for name in sorted(heard.names):
            try:
                infos.append(AsyncServiceInfo(SERVICE, name))
            except BadTypeInNameException:
                found.invalid.append(name)
        # All at once: a rack of boards, some of them slow, costs one resolve time, not one each.
        resolved = await asyncio.gather(*(i.async_request(azc.zeroconf, RESOLVE_MS) for i in infos))
        for info, ok in zip(infos, resolved, strict=True):
            if ok:
                found.boards.append(board(info))
            else:
                found.unresolved.append(short_name(info.name))
        return found
    finally:
        await azc.async_close()


def discover(seconds: float, interfaces: list[str] | None = None) -> Found:
    """Browse for `seconds`, then resolve every board heard; each list sorted by name."""
    return asyncio.run(_discover(seconds, interfaces))
