"""The running daemon's parts, handed to tool modules. Built once by daemon.service."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from daemon.backends import Backend
from daemon.config import Config

if TYPE_CHECKING:
    from daemon.screen.service import Screen
    from daemon.tools.shell import ShellService

VERSION = "0.1.0"


@dataclass
class RunState:
    """The agent-run state that `wait_for_wakeup` changes."""

    state: str = "running"  # running | waiting_for_wakeup
    reason: str = ""
    changed_at: float = field(default_factory=time.time)

    def set(self, state: str, reason: str = "") -> None:
        self.state, self.reason, self.changed_at = state, reason, time.time()


@dataclass
class Runtime:
    config: Config
    backend: Backend
    screen: Screen
    shell: ShellService = field(init=False)
    run_state: RunState = field(default_factory=RunState)
    started_at: float = field(default_factory=time.monotonic)
    extras: dict[str, Any] = field(default_factory=dict)

    @property
    def platform(self) -> str:
        return self.config.platform
