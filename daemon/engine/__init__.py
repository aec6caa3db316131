"""The input engine: pure report programs (program), the deadline executor (executor) and the
one serialized HID flow with iOS isolation and held-state cleanup (flow)."""

from __future__ import annotations

from daemon.engine.flow import HidInvocation, InputEngine

__all__ = ["HidInvocation", "InputEngine"]
