from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.service.daemonproc import DaemonProcess


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
