"""sd_notify without a dependency: READY, WATCHDOG and STOPPING datagrams to $NOTIFY_SOCKET."""

from __future__ import annotations

import asyncio
import os
import socket

import structlog

log = structlog.get_logger("daemon.systemd")


def notify(message: str) -> bool:
    """Send one notification; False when not run by systemd (no NOTIFY_SOCKET)."""
    addr = os.environ.get("NOTIFY_SOCKET")
    if not addr:
        return False
    if addr.startswith("@"):  # abstract namespace
        addr = "\0" + addr[1:]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.connect(addr)
            sock.sendall(message.encode())
        return True
    except OSError as exc:
        log.warning("sd_notify_failed", message=message, error=str(exc))
        return False


def watchdog_interval() -> float | None:
    """Half of WATCHDOG_USEC when the watchdog is meant for this process, else None."""
    usec = os.environ.get("WATCHDOG_USEC")
    pid = os.environ.get("WATCHDOG_PID")
    if not usec or (pid and pid != str(os.getpid())):
        return None
    try:
        return int(usec) / 1e6 / 2
    except ValueError:
        return None


async def watchdog_loop(interval: float) -> None:
    """Ping the watchdog from the event loop, so a stuck loop is what stops the pings."""
    while True:
        notify("WATCHDOG=1")
        await asyncio.sleep(interval)
