"""fingertipd: load the config, build the backend and the catalog, serve the transports, and
stop gracefully (HID invocations finish or are cut, everything released, full profile back)."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import signal
import sys
from collections.abc import AsyncGenerator, Coroutine
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
from daemon.lifecycle import Lifecycle, Part, on_stop
from daemon.media import MediaStore, drive_for
from daemon.posture import posture
from daemon.runtime import Runtime
from daemon.screen import calibrate
from daemon.screen.geometry import ScreenFrames, ScreenGeometry, parse_setting, span_setting
from daemon.screen.ocr import Ocr
from daemon.screen.service import Screen
from daemon.screen.stream import StreamHub
from daemon.shell import ShellService
from daemon.tls import Tls
from daemon.tools import new_catalog, register_tools
from daemon.trace.recorder import Recorder
from daemon.transports import limits, media_http, metrics_http, stream_http
from daemon.transports.http import HttpApi, security_middleware
from daemon.transports.ipc import IpcServer
from daemon.transports.mcp import McpEndpoint
from daemon.transports.openapi import OpenApi
from daemon.transports.responses import body_limit
from daemon.transports.routes import mount
from daemon.transports.trace_http import TraceApi
from daemon.transports.ws import WsTransport
from daemon.wire import error_body
from gadget.errors import GadgetError
from gadget.log import configure_logging

log = structlog.get_logger("daemon.service")

# Plain HTTP sent to a TLS listener: answered, in plain text, by transports.tls_gate.Gate.
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
    # Counted at the backend's edge: the engine, the screen and the tools take the counted one.
    meter = metrics.Metrics(VERSION, config.platform, config.backend.kind)
    counted = metrics.Counted(backend, meter)
    auth = Auth(config, load_or_create_token(config))
    tls = Tls(config)  # its certificate is made or read at start
    # The catalog first, its tools last (they take the Runtime): the parts that observe it
    # are made in between.
    catalog = new_catalog(config)
    catalog.observers.append(meter.observe_invocation)
    # The flight recorder sees every invocation through the catalog's observer hook.
    recorder = Recorder(catalog, config.state_dir, config.trace)
    backend.link.listeners.append(recorder.usb_changed)  # each USB state change, recorded
    meter.watch_usb(backend.link)
    # Tools, the stream and the HID map see the target's screen, not the captured frame.
    model = config.screen.model_size
    geometry = ScreenGeometry(
        parse_setting(config.screen.geometry),
        config.platform,
        (model[0], model[1]) if model else None,
        hid_span=span_setting(config.screen.hid_span),
    )
    geometry.calibration = calibrate.load(config.state_dir)  # kept from an earlier run
    frames = ScreenFrames(counted.frames, geometry)
    hooks = getattr(backend.frames, "on_source_change", None)
    if hooks is not None:  # an HDMI bridge: the source's new mode moves its screen in the frame
        hooks.append(lambda _timings: geometry.invalidate())
    # The live view: one shared MJPEG feed per (fps, quality, width); health_check reports it.
    stream = StreamHub(frames, config.stream, config.capture.no_frame_timeout_s)
    ocr = Ocr(config.ocr)
    media = MediaStore(config, drive_for(config, backend))
    rt = Runtime(
        config,
        counted,
        screen=Screen(frames, config.capture),
        engine=InputEngine(
            counted.hid,
            counted.profiles,
            config.input,
            config.platform,
            geometry.hid_map,
            link=backend.link,
        ),
        shell=ShellService(config),
        ocr=ocr,
        auth=auth,
        status={
            "ocr": ocr.status,
            "screen": geometry.status,
            "media": media.status,
            "security": posture(config, auth, tls, catalog),
            "trace": recorder.status,
            "stream": stream.metrics,
            "usb": backend.link.status,  # the USB state, whether the target can be woken
        },
        geometry=geometry,
        media=media,
    )
    register_tools(catalog, rt)
    meter.known_tools(t.name for t in catalog.tools(Guard.preset("full-access")))
    # The network transports' [guard] presets, by name (the route table's Access.guard).
    guards = {name: Guard.preset(getattr(config.guard, name)) for name in ("http", "mcp", "ws")}
    ws = WsTransport(catalog, auth, guards["ws"], config.ws)
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
    max_body = config.server.max_body_bytes
    routes = [
        *HttpApi(catalog, max_body).routes(),
        *ws.routes(),
        *OpenApi(catalog).routes(),
        *McpEndpoint(catalog, max_body).routes(),
        *toollab.routes(),
        *metrics_http.routes(meter),
        *TraceApi(recorder, catalog, rt.screen, config.server.send_timeout_s).routes(),
        *stream_http.routes(stream, auth, catalog.running, geometry.status, backend.link.status),
        *media_http.routes(media, catalog, config.server.body_timeout_s),
    ]
    if config.backend.kind == "simulated":
        from daemon.sim.backend import SimulatedBackend
        from daemon.transports import sim_control

        assert isinstance(backend, SimulatedBackend)
        routes += sim_control.routes(backend.target)
    mount(app, routes, auth, guards)
    announcer = Announcer(config, VERSION, lambda: tls.info.fingerprint if tls.info else "")
    return Daemon(
        rt, backend, catalog, app, ws, ipc, Parts(recorder, stream, meter, announcer, tls)
    )


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
    """One built daemon: start() sets its parts up in the order of parts(), stop() tears them
    down in reverse (daemon.lifecycle)."""

    def __init__(
        self,
        rt: Runtime,
        backend: Backend,
        catalog: Catalog,
        app: web.Application,
        ws: WsTransport,
        ipc: IpcServer,
        parts: Parts,
    ):
        self.rt, self.config, self.backend = rt, rt.config, backend
        self.catalog, self.app, self.ws, self.ipc = catalog, app, ws, ipc
        self.recorder, self.stream = parts.recorder, parts.stream
        self.metrics, self.announcer = parts.metrics, parts.announcer
        self.tls = parts.tls
        # aiohttp's keepalive_timeout also runs from connect until the first request's header
        # is whole: it is the header timeout as well as the idle limit.
        self.runner = web.AppRunner(
            app,
            handler_cancellation=True,
            access_log=None,
            keepalive_timeout=self.config.server.header_timeout_s,
            logger=limits.server_log(),
        )
        self.metrics.watch_connections(
            {
                "http": lambda: len(self.runner.server.connections) if self.runner.server else 0,
                "ws": lambda: len(self.ws.sessions),
                "ipc": lambda: self.ipc.open_connections,
            }
        )
        self.lifecycle = Lifecycle(self.parts())
        self._tasks: set[asyncio.Task[Any]] = set()

    def parts(self) -> list[Part]:
        """The daemon's parts in start-up order: shutdown goes from the last to the first."""
        rt = self.rt
        return [
            Part("backend", self._backend),  # the last to go: `full` left bound
            # The UDC's state followed from here on (the backend read it once as it started);
            # stopped before the backend closes.
            Part("usb link", self.backend.follow_link),
            # Stopped after the last invocation ended (the drain comes first).
            Part("flight recorder", self._recorder),
            Part("http server", self._http_server),
            on_stop("shell", rt.shell.close),
            on_stop("ocr", rt.ocr.close),
            on_stop("live stream", self.stream.close),  # viewers get their closing part
            on_stop("websocket sessions", self.ws.close_all),  # after the drain: hosts answered
            # After the catalog drained: nothing held, any drag undone, the full profile live.
            on_stop("input engine", rt.engine.close),
            Part("listeners", self._listeners),  # closed by the http server's cleanup
            Part("ipc", self._ipc),  # closes the socket and removes its file
            on_stop("drain", self._drain),  # running HID invocations finish or are cut
            Part("announcer", self._announcer),  # withdrawn before anything closes
            Part("tasks", self._watch),  # cancelled first: an announcer refresh may run
        ]

    async def start(self) -> None:
        await self.lifecycle.start()
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

    async def stop(self) -> None:
        await self.lifecycle.stop()
        log.info("stopped")

    # -- the parts ----------------------------------------------------------------------------

    async def _backend(self) -> AsyncGenerator[None, None]:
        inherited = await self.backend.start()
        try:
            if inherited:  # the host may still hold what a crashed daemon pressed
                await self.rt.engine.release_everything()
        except BaseException:
            await self.backend.close()
            raise
        yield
        await self.backend.close()

    async def _recorder(self) -> AsyncGenerator[None, None]:
        self.recorder.start()
        yield
        await asyncio.to_thread(self.recorder.stop)

    async def _http_server(self) -> AsyncGenerator[None, None]:
        server = self.config.server
        limits.check_fd_budget(server.max_connections, self.config.ipc.max_connections)
        await self.runner.setup()
        yield
        await self.runner.cleanup()

    async def _listeners(self) -> AsyncGenerator[None, None]:
        server = self.config.server
        busy = limits.too_many_connections("HTTP", server.max_connections, "server")
        answer = limits.http_answer(
            "503 Service Unavailable", json.dumps(error_body(busy)).encode()
        )
        if self.tls.enabled:  # before any listener: a certificate that cannot be used stops us
            await asyncio.to_thread(self.tls.load)
        plain = limits.http_answer("400 Bad Request", json.dumps(error_body(TLS_ONLY)).encode())
        for addr, secured in self.tls.listeners:
            await limits.CappedSite(
                self.runner,
                addr,
                server.port,
                server.max_connections,
                answer,
                ssl_context=self.tls.context if secured else None,
                handshake_timeout=server.header_timeout_s,
                plain_answer=plain,
            ).start()
        yield

    async def _ipc(self) -> AsyncGenerator[None, None]:
        await self.ipc.start()
        yield
        await self.ipc.stop()

    async def _announcer(self) -> AsyncGenerator[None, None]:
        await self.announcer.start()  # once the listeners are up: a host may connect at once
        yield
        await self.announcer.stop()

    async def _watch(self) -> AsyncGenerator[None, None]:
        if self.tls.enabled:
            self._spawn(self.tls.watch(self._certificate_changed))
        yield
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

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


def port_taken_advice(config: Config) -> str:
    """What to do when another program holds the port (a second `make run`, often)."""
    port = config.server.port
    return (
        f"port {port} is taken by another program (`ss -ltnp 'sport = :{port}'` names it): "
        "stop it, or serve on another port: `fingertipd --port N`, `make run PORT=N`, or "
        f"[server].port in {config.source}"
    )


def run(config: Config) -> int:
    """Serve until SIGTERM; the exit status (fingertipd's command line is daemon.__main__)."""
    memory.map_large_blocks()  # before the first frame: see daemon.memory
    configure_logging(config.log.level, config.log.format)
    try:
        asyncio.run(serve(config))
    except OSError as exc:  # e.g. the port is taken: one clear line
        print(f"fingertipd: {exc}", file=sys.stderr)
        if exc.errno == errno.EADDRINUSE:
            print(f"fingertipd: {port_taken_advice(config)}", file=sys.stderr)
        return 1
    except GadgetError as exc:  # the board backend's gadget (no configfs, no UDC): one line
        print(f"fingertipd: {exc.message}", file=sys.stderr)
        return 1
    return 0
