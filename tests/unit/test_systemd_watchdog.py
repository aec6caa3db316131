"""The systemd watchdog is pinged from the event loop, so a stalled loop misses its pings and
systemd restarts the daemon (rather than a thread keeping a wedged daemon looking alive)."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from pathlib import Path

import pytest

from daemon import systemd


def test_a_blocked_event_loop_sends_no_watchdog_ping(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "notify.sock"
    sink = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sink.bind(str(path))
    sink.settimeout(0.05)
    monkeypatch.setenv("NOTIFY_SOCKET", str(path))
    pings: list[float] = []  # when each ping arrived, stamped by a thread of its own
    done = threading.Event()

    def listen() -> None:
        while not done.is_set():
            try:
                if sink.recv(64) == b"WATCHDOG=1":
                    pings.append(time.monotonic())
            except TimeoutError:
                continue

    async def scenario() -> tuple[float, float]:
        pinger = asyncio.create_task(systemd.watchdog_loop(0.02))
        while len(pings) < 3:  # it pings while the loop runs
            await asyncio.sleep(0.01)
        stalled = time.monotonic()
        time.sleep(0.3)  # the loop is blocked, as by a runaway handler
        resumed = time.monotonic()
        pinger.cancel()
        return stalled, resumed

    listener = threading.Thread(target=listen)
    listener.start()
    try:
        stalled, resumed = asyncio.run(scenario())
    finally:
        done.set()
        listener.join()
        sink.close()
    # 0.3 s at one ping per 20 ms would be 15 pings; allow one already in flight at the stall.
    assert len([t for t in pings if stalled + 0.05 < t < resumed]) == 0, pings
