"""The running daemon's parts, handed to tool modules. Built once, in order, by
daemon.service.build (the composition root) and never changed after."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from daemon.backends import Backend
from daemon.config import Config
from daemon.screen.geometry import ScreenGeometry

if TYPE_CHECKING:
    from daemon.auth import Auth
    from daemon.engine import InputEngine
    from daemon.media import MediaStore
    from daemon.screen.ocr import Ocr
    from daemon.screen.service import Screen
    from daemon.shell import ShellService


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
    # health_check's sections from the daemon's other parts (OCR, the security posture, the
    # flight recorder, the live stream), by name in the order the reply shows them.
    status: Mapping[str, Callable[[], dict[str, Any]]]
    # Where the target's screen is inside the captured frame: every tool speaks the screen.
    geometry: ScreenGeometry = field(default_factory=ScreenGeometry)
    run_state: RunState = field(default_factory=RunState)
    started_at: float = field(default_factory=time.monotonic)
    media: MediaStore | None = None  # virtual media: images and the drive (daemon.media)

    @property
    def platform(self) -> str:
        return self.config.platform
