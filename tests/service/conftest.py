from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.service import inprocess
from tests.service.daemonproc import DaemonProcess

if TYPE_CHECKING:
    from playwright.sync_api import Browser


@pytest.fixture
def make_daemon(tmp_path: Path) -> Iterator[Callable[..., DaemonProcess]]:
    started: list[DaemonProcess] = []

    def make(overrides: dict[str, dict[str, Any]] | None = None, name: str = "d") -> DaemonProcess:
        folder = tmp_path / f"{name}{len(started)}"
        folder.mkdir()
        proc = DaemonProcess(folder, overrides).start()
        started.append(proc)
        return proc

    yield make
    for proc in started:
        proc.kill()


@pytest.fixture
def daemon(make_daemon: Callable[..., DaemonProcess]) -> DaemonProcess:
    return make_daemon()


@pytest.fixture
async def make_app(tmp_path: Path, aiohttp_client: Any) -> AsyncIterator[inprocess.MakeApp]:
    """Daemons in this process, served by aiohttp's test client (tests/service/inprocess.py)."""
    started: list[inprocess.InProcess] = []

    async def make(overrides: dict[str, dict[str, Any]] | None = None) -> inprocess.InProcess:
        folder = tmp_path / f"app{len(started)}"
        folder.mkdir()
        served = await inprocess.start(folder, aiohttp_client, overrides)
        started.append(served)
        return served

    yield make
    for served in reversed(started):
        await inprocess.stop(served)


@pytest.fixture
async def app(make_app: inprocess.MakeApp) -> inprocess.InProcess:
    return await make_app()


@pytest.fixture
def offloop_addr() -> Iterator[str]:
    """A non-loopback address on `lo` (link-local /32): the page reaches the daemon from
    outside 127.0.0.0/8 while nothing leaves the machine."""
    addr = "169.254.231.3"
    made = subprocess.run(["ip", "addr", "add", f"{addr}/32", "dev", "lo"], capture_output=True)
    if made.returncode != 0:
        pytest.skip(f"cannot add a test address: {made.stderr.decode().strip()}")
    try:
        yield addr
    finally:
        subprocess.run(["ip", "addr", "del", f"{addr}/32", "dev", "lo"], capture_output=True)


CHROMIUM = Path("/usr/bin/chromium")
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture
def browser() -> Iterator[Browser]:
    """Debian's headless Chromium under Playwright (the Tool Lab tests)."""
    from playwright.sync_api import sync_playwright

    if not CHROMIUM.exists():
        pytest.skip("Debian's chromium is missing: run `make browser-setup`")
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        try:
            yield b
        finally:
            b.close()
