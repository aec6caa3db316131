"""fingertipd: load the config, build the backend and the catalog, serve the transports, and
stop gracefully (HID invocations finish or are cut, everything released, full profile back)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import structlog
from aiohttp import web

from daemon import VERSION, memory, metrics, systemd, toollab, wire
from daemon.auth import Auth, ensure_state_dir, load_or_create_token
from daemon.backends import Backend
from daemon.catalog import Catalog, Guard
from daemon.config import Config
from daemon.discovery import Announcer
from daemon.engine import InputEngine
from daemon.errors import ToolError
from daemon.posture import posture
from daemon.runtime import Runtime
from daemon.screen.ocr import Ocr
from daemon.screen.service import Screen
from daemon.screen.stream import StreamHub
from daemon.tls import Tls
from daemon.tools import build_catalog
from daemon.tools.shell import ShellService
from daemon.trace.recorder import Recorder
from daemon.transports import limits
from daemon.transports.http import HttpApi, security_middleware
from daemon.transports.ipc import IpcServer
from daemon.transports.mcp import McpEndpoint
from daemon.transports.openapi import OpenApi
from daemon.transports.responses import body_limit
from daemon.transports.stream_http import routes as stream_routes
from daemon.transports.trace_http import TraceApi
from daemon.transports.ws import WsTransport
from daemon.wire import error_body
from gadget.errors import GadgetError
from gadget.log import configure_logging

log = structlog.get_logger("daemon.service")

# Plain HTTP sent to a TLS listener: answered, in plain text, by daemon.tls.Gate.
TLS_ONLY = ToolError(
    "tls_required",
    "this port speaks HTTPS only: use https:// (the certificate's fingerprint is in "
    "health_check, `fingertip discover` and the daemon's log)",
)


def build_backend(config: Config) -> Backend:
    # Each backend is imported only when chosen: the simulated one needs the test extras
    # (xkbcommon), which a board does not have.
    if config.backend.kind == "simulated":
        from daemon.sim.backend import SimulatedBackend

        return SimulatedBackend(config)
    from daemon.board import BoardBackend

    return BoardBackend(config)


def build(config: Config) -> Daemon:
    """The composition root: every part made once, in dependency order, none set afterwards."""
    backend = build_backend(config)
    # Counted at the backend's edge, before the engine and the screen take its parts.
    meter = metrics.Metrics(VERSION, config.platform, config.backend.kind)
    metrics.instrument(backend, meter)
    auth = Auth(config, load_or_create_token(config))
    rt = Runtime(
        config,
        backend,
        screen=Screen(backend.frames, config.capture),
        engine=InputEngine(
            backend.hid, backend.profiles, config.input, config.platform, backend.link
        ),
        shell=ShellService(config),
        ocr=Ocr(config.ocr),
        auth=auth,
    )
    rt.status["ocr"] = rt.ocr.status
    rt.status["usb"] = backend.link.status  # health_check: the USB state, whether it can wake
    catalog = build_catalog(rt)
    catalog.observers.append(meter.observe_invocation)
    meter.known_tools(t.name for t in catalog.tools(Guard.preset("full-access")))
    tls = Tls(config)  # its certificate is made or read at start
    rt.status["security"] = posture(config, auth, tls, catalog)
    ws = WsTransport(catalog, auth, Guard.preset(config.guard.ws), config.ws)
    ipc = IpcServer(catalog, config.ipc, Guard.preset(config.guard.ipc))
    app = web.Application(
        client_max_size=config.server.max_body_bytes,
        middlewares=[
            limits.reply_deadline(config.server.send_timeout_s),  # outermost: every reply
            limits.body_deadline(config.server.body_timeout_s),
            body_limit(config.server.max_body_bytes),
            security_middleware(auth),
        ],
    )
    http_guard = Guard.preset(config.guard.http)
    app.add_routes(HttpApi(catalog, auth, http_guard, config.server.max_body_bytes).routes())
    app.add_routes(ws.routes())
    app.add_routes(OpenApi(catalog, auth, http_guard).routes())
    mcp_guard = Guard.preset(config.guard.mcp)
    app.add_routes(McpEndpoint(catalog, auth, mcp_guard, config.server.max_body_bytes).routes())
    app.add_routes(toollab.routes())
    app.add_routes(meter.routes(auth, http_guard))
    # The flight recorder sees every invocation through the catalog's observer hook.
    recorder = Recorder(catalog, config.state_dir, config.trace)
    rt.status["trace"] = recorder.status
    backend.link.listeners.append(recorder.usb_changed)  # each USB state change, recorded
    meter.watch_usb(backend.link)
    trace_api = TraceApi(
        recorder, catalog, auth, http_guard, rt.screen, config.server.send_timeout_s
    )
    app.add_routes(trace_api.routes())
    # The live view: one shared MJPEG feed per (fps, quality, width); health_check reports it.
    stream = StreamHub(backend.frames, config.stream, config.capture.no_frame_timeout_s)
    rt.status["stream"] = stream.metrics
    app.add_routes(stream_routes(stream, auth, catalog.running, http_guard, backend.link.status))
    if config.backend.kind == "simulated":
        from daemon.sim.backend import SimulatedBackend
        from daemon.transports.sim_control import routes as sim_routes

        assert isinstance(backend, SimulatedBackend)
        app.add_routes(sim_routes(backend.target, auth, http_guard))
    announcer = Announcer(config, VERSION, lambda: tls.info.fingerprint if tls.info else "")
    parts = Parts(recorder, stream, meter, announcer, tls)
    return Daemon(rt, catalog, app, ws, ipc, parts)


@dataclass(frozen=True)
class Parts:
    """What the daemon runs beside the transports: the flight recorder, the live stream, the
    metrics, the DNS-SD announcer and the HTTP port's TLS."""

    recorder: Recorder
    stream: StreamHub
    metrics: metrics.Metrics
    announcer: Announcer
    tls: Tls


class Daemon:
    """One built daemon: start() brings its parts up in order, stop() takes them down in the
    reverse order (each start pushes its stop onto one exit stack, so a failed start also
    undoes what had come up)."""

    def __init__(
        self,
        rt: Runtime,
        catalog: Catalog,
        app: web.Application,
        ws: WsTransport,
        ipc: IpcServer,
        parts: Parts,
    ):
        self.rt, self.config, self.backend = rt, rt.config, rt.backend
        self.catalog, self.app, self.ws, self.ipc = catalog, app, ws, ipc
        self.recorder, self.stream = parts.recorder, parts.stream
        self.metrics, self.announcer = parts.metrics, parts.announcer
        self.tls = parts.tls
        self._stack = contextlib.AsyncExitStack()
        self._tasks: set[asyncio.Task[Any]] = set()

    def _on_stop(self, hook: Callable[[], Awaitable[Any]]) -> None:
        async def logged() -> None:  # one failing stop must not keep the others from running
            try:
                await hook()
            except Exception:
                log.exception("stop_hook_failed", hook=getattr(hook, "__qualname__", repr(hook)))

        self._stack.push_async_callback(logged)

    async def start(self) -> None:
        try:
            await self._start()
        except BaseException:
            await self._stack.aclose()
            raise

    async def _start(self) -> None:
        inherited = await self.backend.start()
        self._on_stop(self.backend.close)  # last: `full` left bound
        if inherited:  # the host may still hold what a crashed daemon pressed
            await self.rt.engine.release_everything()
        self.recorder.start()
        # Before the backend closes, after the last invocation ended (the drain runs first).
        self._on_stop(lambda: asyncio.to_thread(self.recorder.stop))
        server = self.config.server
        limits.check_fd_budget(server.max_connections, self.config.ipc.max_connections)
        # aiohttp's keepalive_timeout also runs from connect until the first request's header
        # is whole: it is the header timeout as well as the idle limit.
        runner = web.AppRunner(
            self.app,
            handler_cancellation=True,
            access_log=None,
            keepalive_timeout=server.header_timeout_s,
            logger=limits.server_log(),
        )
        await runner.setup()
        self._on_stop(runner.cleanup)
        self._on_stop(self.rt.shell.close)
        self._on_stop(self.rt.ocr.close)
        self._on_stop(self.stream.close)  # viewers get their closing part
        self._on_stop(self.ws.close_all)  # after HID drained: hosts got their answers
        # After the catalog drained: nothing held, any drag undone, the full profile live.
        self._on_stop(self.rt.engine.close)
        busy = limits.too_many_connections("HTTP", server.max_connections, "server")
        answer = limits.http_answer(
            "503 Service Unavailable", json.dumps(error_body(busy)).encode()
        )
        if self.tls.enabled:  # before any listener: a certificate that cannot be used stops us
            await asyncio.to_thread(self.tls.load)
        plain = limits.http_answer("400 Bad Request", json.dumps(error_body(TLS_ONLY)).encode())
        for addr, secured in self.tls.listeners:
            await limits.CappedSite(
                runner,
                addr,
                server.port,
                server.max_connections,
                answer,
                tls=self.tls if secured else None,
                plain_answer=plain,
            ).start()
        await self.ipc.start()
        http_server = runner.server
        assert http_server is not None
        self.metrics.watch_connections(
            {
                "http": lambda: len(http_server.connections),
                "ws": lambda: len(self.ws.sessions),
                "ipc": lambda: self.ipc.open_connections,
            }
        )
        self._on_stop(self.ipc.stop)  # closes the socket and removes its file
        self._on_stop(self._drain)  # running HID invocations finish or are cut
        await self.announcer.start()  # once the listeners are up: a host may connect at once
        self._on_stop(self.announcer.stop)  # the first to go: withdrawn before we close
        self._on_stop(self._cancel_tasks)  # before the announcer stops: a refresh may run
        if self.tls.enabled:
            self._spawn(self.tls.watch(self._certificate_changed))
        log.info(
            "listening",
            addresses=self.config.server.listen,
            port=self.config.server.port,
            backend=self.config.backend.kind,
            platform=self.config.platform,
            tools=len(self.catalog.tools(Guard.preset("full-access"))),
            ocr=self.rt.ocr.enabled,
        )
        security = self.rt.status["security"]()
        log.info("security_posture", **security)
        for warning in security["warnings"]:
            log.warning("security_warning", message=warning)

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _cancel_tasks(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def reload(self) -> None:
        """SIGHUP: the TLS certificate again (a user's renewed one, say); nothing else."""
        self._spawn(self._reload())

    async def _reload(self) -> None:
        if await self.tls.reload():
            self._certificate_changed()

    def _certificate_changed(self) -> None:
        self._spawn(self.announcer.refresh())  # the TXT's fp= follows the certificate

    async def _drain(self) -> None:
        cut = await self.catalog.drain(self.config.server.shutdown_grace_s)
        if cut:
            log.warning("hid_invocations_cut_at_shutdown", count=cut)

    async def stop(self) -> None:
        await self._stack.aclose()
        log.info("stopped")


async def serve(config: Config) -> None:
    wire.use_orjson()  # the daemon's wire parser (the CLI keeps json alone)
    if config.retired:  # accepted (an upgrade must not stop a board's daemon), said once
        log.warning("config_keys_retired", source=config.source, ignored=dict(config.retired))
    ensure_state_dir(config.state_dir)
    limits.throttle_accept_errors(asyncio.get_running_loop())  # before anything listens
    daemon = build(config)
    await daemon.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGHUP, daemon.reload)  # `systemctl reload fingertip`
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


def run(config: Config) -> int:
    """Serve until SIGTERM; the exit status (fingertipd's command line is daemon.__main__)."""
    memory.map_large_blocks()  # before the first frame: see daemon.memory
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
