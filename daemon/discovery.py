"""DNS-SD over mDNS (python-zeroconf): how a host finds the boards on its links.

Two services per board, on the port of the HTTP server: `_fingertip._tcp` (the tools API,
WebSocket and MCP paths in its TXT) and `_http._tcp` (the Tool Lab at /). They are announced
only on the [server].listen addresses that are not loopback and not unspecified: zeroconf gets
exactly those addresses as its interfaces, so it joins the mDNS group and answers on no other
interface. An address that is not on the machine right now, or whose link is down (while an
iOS target is isolated to the keyboard the USB link has no ECM function), is waited for: the
watcher looks every POLL_S and announces again, on fresh sockets, once it is back. At stop the
services are withdrawn (goodbye packets).

The board id in the TXT is stable: generated once into the state folder, like the pairing token.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import ipaddress
import re
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import structlog

from daemon.config import Config
from daemon.private_files import read_state, write_atomic

if TYPE_CHECKING:  # zeroconf and ifaddr are imported by a daemon that announces, only
    from zeroconf import ServiceInfo
    from zeroconf.asyncio import AsyncZeroconf

log = structlog.get_logger("daemon.discovery")

FINGERTIP_SERVICE = "_fingertip._tcp.local."
HTTP_SERVICE = "_http._tcp.local."
BOARD_ID_FILE = "board-id"
PATHS = {"tools": "/api/tools", "ws": "/api/ws", "mcp": "/mcp"}
POLL_S = 1.0  # how often the watcher looks for a configured address that came or went


def board_id(state_dir: Path) -> str:
    """This board's stable id (uuid4 hex), made once in the state folder."""
    path = state_dir / BOARD_ID_FILE
    existing = read_state(path, _parse_board_id, "a new board id was made (DNS-SD shows it)")
    if existing:
        return existing
    new = uuid.uuid4().hex
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, (new + "\n").encode())  # a cut never leaves half an id
    except OSError as exc:  # a read-only or full state folder must not stop the daemon
        with contextlib.suppress(OSError):  # the machine's own id, hashed, is stable too
            machine = Path("/etc/machine-id").read_text().strip()
            if machine:
                new = hashlib.sha256(f"fingertip:{machine}".encode()).hexdigest()[:32]
        log.warning("board_id_not_kept", path=str(path), error=str(exc), board_id=new)
    return new


def _parse_board_id(data: bytes) -> str:
    if not re.fullmatch(rb"[0-9a-f]{32}\n", data):
        raise ValueError(f"not a board id ({len(data)} bytes)")
    return data[:32].decode()


def announceable(listen: Iterable[str]) -> list[str]:
    """The listen addresses DNS-SD may use: IP literals, not loopback, not unspecified (0.0.0.0
    would mean every interface, which is never what discovery may do), not multicast."""
    out = []
    for entry in listen:
        try:
            ip = ipaddress.ip_address(entry.split("%")[0])
        except ValueError:
            log.warning("discovery_address_skipped", address=entry, reason="not an IP address")
            continue
        if ip.is_loopback or ip.is_unspecified or ip.is_multicast:
            continue
        if entry not in out:
            out.append(entry)
    return out


def present(addresses: Iterable[str]) -> list[str]:
    """Those of `addresses` an interface of this machine has right now, with its link up. The
    board's USB address stays on usb0 while the target re-enumerates (networkd keeps it), so
    the carrier is what says the link went and came back."""
    import ifaddr

    here: set[str] = set()
    for adapter in ifaddr.get_adapters():
        if not carrier(adapter.name):
            continue
        for ip in adapter.ips:
            here.add(ip.ip if isinstance(ip.ip, str) else ip.ip[0])
    return [a for a in addresses if a.split("%")[0] in here]


def carrier(interface: str) -> bool:
    """The interface's link is up (Linux sysfs; reading fails with EINVAL while it is down)."""
    try:
        return Path(f"/sys/class/net/{interface}/carrier").read_text().strip() == "1"
    except FileNotFoundError:
        return True  # no such file: not Linux, or an interface without a carrier notion
    except OSError:
        return False


def txt(config: Config, version: str, board: str, fingerprint: str = "") -> dict[str, str]:
    """The TXT of _fingertip._tcp; `fp` is the TLS certificate's fingerprint (daemon.tls), the
    pin a host checks before it sends a token (absent while the port has no TLS)."""
    out = {
        "version": version,
        "device_type": config.device.device_type,
        "platform": config.platform,
        **PATHS,
        "board_id": board,
    }
    if fingerprint:
        out["fp"] = fingerprint
    return out


def instance_name(config: Config, board: str) -> str:
    """[discovery].name, else one made from the board; at most the 63 bytes DNS-SD allows (cut
    at a character boundary: the config counts characters)."""
    name = config.discovery.name or f"Fingertip {config.device.device_type} {board[:8]}"
    return name.encode()[:63].decode(errors="ignore")


class Announcer:
    """Keeps the two services announced on whichever configured addresses are up."""

    def __init__(
        self, config: Config, version: str, fingerprint: Callable[[], str] = lambda: ""
    ) -> None:
        self.config = config
        self.version = version
        self.fingerprint = fingerprint  # read at each announcement: a reload may change it
        self.addresses = announceable(config.server.listen)
        self.board = self.name = ""  # made by start(), when there is something to announce
        self._zc: AsyncZeroconf | None = None
        self._live: list[str] = []  # the addresses the current zeroconf instance uses
        self._watcher: asyncio.Task[None] | None = None

    def services(self, addresses: list[str]) -> list[ServiceInfo]:
        from zeroconf import ServiceInfo

        host = f"fingertip-{self.board[:12]}.local."  # unique per board on a shared link
        port = self.config.server.port
        props = txt(self.config, self.version, self.board, self.fingerprint())
        return [
            ServiceInfo(
                FINGERTIP_SERVICE,
                f"{self.name}.{FINGERTIP_SERVICE}",
                port=port,
                properties=props,
                server=host,
                parsed_addresses=addresses,
            ),
            ServiceInfo(
                HTTP_SERVICE,
                f"{self.name}.{HTTP_SERVICE}",
                port=port,
                properties={"path": "/", "board_id": self.board},
                server=host,
                parsed_addresses=addresses,
            ),
        ]

    async def start(self) -> None:
        if not self.config.discovery.enabled:
            log.info("discovery_off", reason="[discovery].enabled is false")
            return
        if not self.addresses:
            log.info("discovery_off", reason="no non-loopback address in [server].listen")
            return
        self.board = board_id(self.config.state_dir)
        self.name = instance_name(self.config, self.board)
        # The first announcement too runs beside the daemon (its probing takes seconds): the
        # daemon is ready as soon as its listeners are.
        self._watcher = asyncio.create_task(self._watch())

    async def _watch(self) -> None:
        while True:
            await self._look()
            await asyncio.sleep(POLL_S)

    async def _look(self) -> None:
        try:
            await self._follow(await asyncio.to_thread(present, self.addresses))
        except Exception:  # a failed announce is retried at the next look, never fatal
            log.exception("discovery_announce_failed")
            with contextlib.suppress(Exception):
                await self._close()

    async def _follow(self, up: list[str]) -> None:
        """Announce on exactly `up`: a change (an address came or went) starts fresh sockets,
        because those bound to a vanished address stay dead after it returns."""
        if up == self._live and (self._zc is not None or not up):
            return
        await self._close()
        if not up:
            log.info("discovery_waiting", addresses=self.addresses)
            return
        from zeroconf import IPVersion
        from zeroconf.asyncio import AsyncZeroconf

        v6 = any(ipaddress.ip_address(a.split("%")[0]).version == 6 for a in up)
        v4 = any(ipaddress.ip_address(a.split("%")[0]).version == 4 for a in up)
        version = IPVersion.All if v4 and v6 else IPVersion.V6Only if v6 else IPVersion.V4Only
        zc = AsyncZeroconf(interfaces=up, ip_version=version)
        self._zc, self._live = zc, up
        for info in self.services(up):
            await zc.async_register_service(info, allow_name_change=True)
        log.info("discovery_announced", name=self.name, addresses=up, board_id=self.board)

    async def refresh(self) -> None:
        """Announce again with what changed (the fingerprint after a certificate reload): the
        services are withdrawn now and the watcher's next look registers them anew."""
        if self._watcher is not None:
            await self._close()

    async def _close(self) -> None:
        zc, self._zc, self._live = self._zc, None, []
        if zc is None:
            return
        try:
            await zc.async_unregister_all_services()  # goodbyes where the link still is
        except Exception as exc:  # the interface went away under it
            log.info("discovery_withdraw_incomplete", error=repr(exc))
        finally:
            await zc.async_close()

    async def stop(self) -> None:
        if self._watcher is None:
            return  # never announced
        self._watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._watcher
        await self._close()
        log.info("discovery_withdrawn", name=self.name)
