"""`fingertip discover`: browse DNS-SD for Fingertip boards (the host side of daemon.discovery).

Imported only by that command (the CLI's other commands must start fast): python-zeroconf and
the standard library, nothing else from daemon/.
"""

from __future__ import annotations

import ipaddress
import threading
import time
from typing import Any

from zeroconf import IPVersion, ServiceBrowser, ServiceListener, Zeroconf

SERVICE = "_fingertip._tcp.local."  # the same as daemon.discovery.FINGERTIP_SERVICE
RESOLVE_MS = 1500


class _Names(ServiceListener):
    """Instance names heard so far (a goodbye takes one away again)."""

    def __init__(self) -> None:
        self.names: set[str] = set()
        self.lock = threading.Lock()

    def add_service(self, zc: Zeroconf, type_: str, name: str) -> None:
        with self.lock:
            self.names.add(name)

    def update_service(self, zc: Zeroconf, type_: str, name: str) -> None:
        self.add_service(zc, type_, name)

    def remove_service(self, zc: Zeroconf, type_: str, name: str) -> None:
        with self.lock:
            self.names.discard(name)


def _text(value: bytes | None) -> str | None:
    return None if value is None else value.decode("utf-8", "replace")


def board(zc: Zeroconf, name: str) -> dict[str, Any] | None:
    """One board as `fingertip discover` prints it, or None when it does not resolve."""
    info = zc.get_service_info(SERVICE, name, timeout=RESOLVE_MS)
    if info is None:
        return None
    return {
        "name": name.removesuffix("." + SERVICE),
        "host": info.server,
        "addresses": info.parsed_scoped_addresses(),
        "port": info.port,
        "txt": {_text(k): _text(v) for k, v in info.properties.items()},
    }


def discover(seconds: float, interfaces: list[str] | None = None) -> list[dict[str, Any]]:
    """Browse for `seconds`, then resolve every board heard; sorted by name."""
    if interfaces:
        v6 = any(ipaddress.ip_address(i).version == 6 for i in interfaces)
        v4 = any(ipaddress.ip_address(i).version == 4 for i in interfaces)
        version = IPVersion.All if v4 and v6 else IPVersion.V6Only if v6 else IPVersion.V4Only
        zc = Zeroconf(interfaces=interfaces, ip_version=version)
    else:
        zc = Zeroconf()
    try:
        heard = _Names()
        browser = ServiceBrowser(zc, SERVICE, heard)
        time.sleep(seconds)  # the browse window is what the user asked for
        browser.cancel()
        with heard.lock:
            names = sorted(heard.names)
        found = (board(zc, n) for n in names)
        return [b for b in found if b is not None]
    finally:
        zc.close()
