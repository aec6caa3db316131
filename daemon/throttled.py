"""Warnings an attacker can repeat at their own pace (refused connections, failed handshakes,
unparsable requests, accept errors): logged at most once per interval, with a count."""

from __future__ import annotations

import time
from typing import Any

import structlog

log = structlog.get_logger("daemon.throttled")

LOG_INTERVAL_S = 10.0


class Throttled:
    """A warning that may repeat at an attacker's pace: logged at most once per interval; the
    next line says how many were left out in between."""

    def __init__(self, event: str, interval: float = LOG_INTERVAL_S):
        self.event = event
        self.interval = interval
        self._next = 0.0
        self._suppressed = 0

    def __call__(self, **fields: Any) -> None:
        now = time.monotonic()
        if now < self._next:
            self._suppressed += 1
            return
        log.warning(self.event, suppressed=self._suppressed, **fields)
        self._next, self._suppressed = now + self.interval, 0
