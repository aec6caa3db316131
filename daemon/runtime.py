"""The running daemon's parts, handed to tool modules. Built once, in order, by
daemon.service.build (the composition root) and never changed after."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from daemon.backends import Backend
from daemon.config import Config

if TYPE_CHECKING:
    from daemon.auth import Auth
    from daemon.engine import InputEngine
    from daemon.media import MediaStore
    from daemon.screen.ocr import Ocr
    from daemon.screen.service import Screen
    from daemon.tools.shell import ShellService


@dataclass
class RunState:
    """The agent-run state that `wait_for_wakeup` changes."""

    state: str = "running"  # running | waiting_for_wakeup
    reason: str = ""
    changed_at: float = field(default_factory=time.time)

    def set(self, state: str, reason: str = "") -> None:
        self.state, self.reason, self.changed_at = state, reason, time.time()


@dataclass(frozen=True)
class Runtime:
    config: Config
    backend: Backend
    screen: Screen
    engine: InputEngine  # the one serialized HID flow every input tool shares
    shell: ShellService
    ocr: Ocr  # the text tools' OCR service; its engine loads on the first read
    auth: Auth  # the network's tokens (rotate_token)
    run_state: RunState = field(default_factory=RunState)
    # health_check's sections from parts built after the catalog (the flight recorder's state):
    # filled by the composition root, read by health_check.
    status: dict[str, Callable[[], dict[str, Any]]] = field(default_factory=dict)
    started_at: float = field(default_factory=time.monotonic)
    media: MediaStore | None = None  # virtual media: images and the drive (daemon.media)

    @property
    def platform(self) -> str:
        return self.config.platform
