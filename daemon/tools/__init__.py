"""Tool definitions. Each module exposes `tools(rt) -> list[ToolSpec]`; register_tools holds
them all — the one place a tool module is registered."""

from __future__ import annotations

from daemon.catalog import Catalog
from daemon.config import Config
from daemon.invocations import Budget, Running
from daemon.runtime import Runtime


def new_catalog(config: Config) -> Catalog:
    """The daemon's catalog, without tools yet: the parts that observe it (the flight recorder,
    the security posture) are built before the Runtime the tools take."""
    cfg = config.server
    return Catalog(
        config.platform,
        tool_timeout_s=cfg.tool_timeout_s,
        hid_timeout_s=cfg.hid_timeout_s,
        max_pending_hid=cfg.max_pending_hid,
        running=Running(Budget(cfg.max_calls, cfg.max_client_calls)),
    )


def register_tools(catalog: Catalog, rt: Runtime) -> None:
    from daemon.tools import calibration, input, media, screen, shell, system, text, usb

    rt.auth.on_revoke(catalog.running.revoke)  # a rotated token's queued calls never start
    rt.auth.on_revoke(rt.engine.revoke)  # and a drag it holds is undone
    for module in (system, shell, screen, input, usb, text, calibration, media):
        for spec in module.tools(rt):
            catalog.register(spec)
