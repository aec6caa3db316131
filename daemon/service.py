"""fingertipd: load the config, build the backend and the catalog, serve the transports, and
stop gracefully (HID invocations finish or are cut, everything released, full profile back)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import structlog
from aiohttp import web

from daemon import metrics, systemd, toollab
from daemon.auth import Auth, ensure_state_dir, load_or_create_token
from daemon.backends import Backend, HidOutput, ProfileControl
from daemon.catalog import Catalog, Guard
from daemon.config import Config, ConfigError, load
from daemon.discovery import Announcer
from daemon.engine import engine_for
from daemon.frames import FrameSource
from daemon.runtime import VERSION, Runtime
from daemon.screen.service import Screen
from daemon.tools import build_catalog
from daemon.tools.shell import ShellService
from daemon.transports import limits
from daemon.transports.http import HttpApi, error_body, security_middleware
from daemon.transports.ipc import IpcServer
from daemon.transports.mcp import McpEndpoint
from daemon.transports.openapi import OpenApi
from daemon.transports.ws import WsTransport
from gadget.errors import GadgetError
from gadget.log import configure_logging

log = structlog.get_logger("daemon.service")


class SimulatedBackend:
    """The simulated target plays all three backends (daemon.sim)."""

    def __init__(self, config: Config):
        from daemon.sim.target import SimTarget

        b = config.backend
        self.target = SimTarget(
            config.platform,
            width=b.sim_width or None,
            height=b.sim_height or None,
            reenumerate_s=b.sim_reenumerate_s,
            xkb_names=config.device.layout.xkb,
        )
        self.hid: HidOutput = self.target
        self.profiles: ProfileControl = self.target
        self.frames: FrameSource = self.target

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None


def build_backend(config: Config) -> Backend:
    if config.backend.kind == "simulated":
        return SimulatedBackend(config)
    from daemon.board import BoardBackend

    return BoardBackend(config)


class Daemon:
    """One running daemon: runtime, catalog, aiohttp app and its listeners."""

    def __init__(self, config: Config):
        self.config = config
        self.backend = build_backend(config)
        # Counted at the backend's edge, before the engine and the screen take its parts.
        self.metrics = metrics.Metrics(VERSION, config.platform, config.backend.kind)
        metrics.instrument(self.backend, self.metrics)
        self.rt = Runtime(config, self.backend, Screen(self.backend.frames, config.capture))
        self.rt.shell = ShellService(self.rt)
        self.catalog: Catalog = build_catalog(self.rt)
        self.catalog.observers.append(self.metrics.observe_invocation)
        self.metrics.known_tools(t.name for t in self.catalog.tools(Guard.preset("full-access")))
        self.auth = Auth(config, load_or_create_token(config))
        self.app = web.Application(
            client_max_size=config.server.max_body_bytes,
            middlewares=[
                limits.body_deadline(config.server.body_timeout_s),
                security_middleware(self.auth),
            ],
        )
        self.app["daemon"] = self
        self.app.add_routes(
            HttpApi(
                self.catalog,
                self.auth,
                Guard.preset(config.guard.http),
                config.server.max_body_bytes,
            ).routes()
        )
        ws_guard = Guard.preset(config.guard.ws)
        self.ws = WsTransport(self.catalog, self.auth, ws_guard, self.rt.screen, config.ws)
        self.app.add_routes(self.ws.routes())
        http_guard = Guard.preset(config.guard.http)
        self.app.add_routes(OpenApi(self.catalog, self.auth, http_guard).routes())
        mcp_guard = Guard.preset(config.guard.mcp)
        self.app.add_routes(McpEndpoint(self.catalog, self.auth, mcp_guard).routes())
        self.app.add_routes(toollab.routes())
        self.app.add_routes(self.metrics.routes(self.auth, Guard.preset(config.guard.http)))
        if isinstance(self.backend, SimulatedBackend):
            from daemon.transports.sim_control import routes as sim_routes

            self.app.add_routes(sim_routes(self.backend.target, self.auth))
        # Transports and services register what must run at stop, in reverse order.
        self.on_stop: list[Callable[[], Awaitable[Any]]] = [self.rt.shell.close]
        self.on_stop.append(self.ws.close_all)  # after HID drained: hosts got their answers
        # After the catalog drained: nothing held, any drag undone, the full profile live.
        self.on_stop.append(engine_for(self.rt).close)
        self.runner: web.AppRunner | None = None
        self.ipc = IpcServer(self.catalog, config.ipc, Guard.preset(config.guard.ipc))
        self.announcer = Announcer(config, VERSION)

    async def start(self) -> None:
        await self.backend.start()
        server = self.config.server
        limits.check_fd_budget(server.max_connections, self.config.ipc.max_connections)
        # aiohttp's keepalive_timeout also runs from connect until the first request's header
        # is whole: it is the header timeout as well as the idle limit.
        self.runner = web.AppRunner(
            self.app,
            handler_cancellation=True,
            access_log=None,
            keepalive_timeout=server.header_timeout_s,
        )
        await self.runner.setup()
        busy = limits.too_many_connections("HTTP", server.max_connections, "server")
        answer = limits.http_answer(
            "503 Service Unavailable", json.dumps(error_body(busy)).encode()
        )
        for addr in server.listen:
            await limits.CappedSite(
                self.runner, addr, server.port, server.max_connections, answer
            ).start()
        await self.ipc.start()
        self.on_stop.append(self.ipc.stop)  # closes the socket and removes its file
        http_server = self.runner.server
        assert http_server is not None
        self.metrics.watch_connections(
            {
                "http": lambda: len(http_server.connections),
                "ws": lambda: len(self.ws.sessions),
                "ipc": lambda: self.ipc.open_connections,
            }
        )
        await self.announcer.start()  # once the listeners are up: a host may connect at once
        self.on_stop.append(self.announcer.stop)  # the first to go: withdrawn before we close
        log.info(
            "listening",
            addresses=self.config.server.listen,
            port=self.config.server.port,
            backend=self.config.backend.kind,
            platform=self.config.platform,
            tools=len(self.catalog.tools(Guard.preset("full-access"))),
        )

    async def stop(self) -> None:
        cut = await self.catalog.drain(self.config.server.shutdown_grace_s)
        if cut:
            log.warning("hid_invocations_cut_at_shutdown", count=cut)
        for hook in reversed(self.on_stop):
            try:
                await hook()
            except Exception:
                log.exception("stop_hook_failed", hook=getattr(hook, "__qualname__", repr(hook)))
        if self.runner is not None:
            await self.runner.cleanup()
        await self.backend.close()
        log.info("stopped")


async def serve(config: Config) -> None:
    ensure_state_dir(config.state_dir)
    limits.throttle_accept_errors(asyncio.get_running_loop())  # before anything listens
    daemon = Daemon(config)
    await daemon.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    systemd.notify("READY=1")
    interval = systemd.watchdog_interval()
    watchdog = asyncio.create_task(systemd.watchdog_loop(interval)) if interval else None
    await stop.wait()
    systemd.notify("STOPPING=1")
    log.info("stopping")
    if watchdog is not None:
        watchdog.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watchdog
    await daemon.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fingertipd", description=__doc__)
    parser.add_argument(
        "--config", type=Path, help="config file (default /etc/fingertip/fingertip.toml)"
    )
    parser.add_argument("--check", action="store_true", help="validate the config and exit")
    args = parser.parse_args(argv)
    try:
        config = load(args.config)
    except ConfigError as exc:
        print(f"fingertipd: {exc}", file=sys.stderr)
        return 2
    if args.check:
        print(f"fingertipd: {config.source}: ok")
        return 0
    configure_logging(config.log.level, config.log.format)
    try:
        asyncio.run(serve(config))
    except OSError as exc:  # e.g. the port is taken: one clear line
        print(f"fingertipd: {exc}", file=sys.stderr)
        return 1
    except GadgetError as exc:  # the board backend's gadget (no configfs, no UDC): one line
        print(f"fingertipd: {exc.message}", file=sys.stderr)
        return 1
    return 0
