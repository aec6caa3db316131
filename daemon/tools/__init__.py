"""Tool definitions. Each module exposes `tools(rt) -> list[ToolSpec]`; build_catalog holds them
all — the one place a tool module is registered."""

from __future__ import annotations

from daemon.catalog import Catalog
from daemon.runtime import Runtime


def build_catalog(rt: Runtime) -> Catalog:
    from daemon.tools import input, screen, shell, system, text, usb

    cfg = rt.config.server
    catalog = Catalog(
        rt.platform,
        tool_timeout_s=cfg.tool_timeout_s,
        hid_timeout_s=cfg.hid_timeout_s,
        max_pending_hid=cfg.max_pending_hid,
    )
    for module in (system, shell, screen, input, usb, text):
        for spec in module.tools(rt):
            catalog.register(spec)
    return catalog
