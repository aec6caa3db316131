"""The input engine: pure report programs (program), the deadline executor (executor) and the
one serialized HID flow with iOS isolation and held-state cleanup (flow)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from daemon.engine.flow import InputEngine, Session

if TYPE_CHECKING:
    from daemon.runtime import Runtime

__all__ = ["InputEngine", "Session", "engine_for"]


def engine_for(rt: Runtime) -> InputEngine:
    """The daemon's one engine (made on first use, kept in rt.extras)."""
    engine = rt.extras.get("input_engine")
    if engine is None:
        backend = rt.backend
        engine = InputEngine(backend.hid, backend.profiles, rt.config.input, rt.platform)
        rt.extras["input_engine"] = engine
    assert isinstance(engine, InputEngine)
    return engine
