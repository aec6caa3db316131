"""The flight recorder over HTTP (daemon/trace): list, one invocation with its images, an
export archive, and replay.

  GET  /api/trace            filters since, until (Unix seconds or ISO 8601), tool, transport,
                             outcome (ok | error | cancelled), limit (1..1000, default 100),
                             cursor (a page's `next`); newest first, at most store.PAGE_BYTES
                             of records a page: `next` is set when more match
  GET  /api/trace/export     the same filters (limit up to 5000, default 1000): a .tar.gz of
                             images/<id>-<kind>.jpg and trace.jsonl (oldest first), streamed
  GET  /api/trace/{id}       one invocation, its images inline (base64 JPEG)
  POST /api/trace/replay     {"ids": [...]} or {"since", "until"}; "checkpoints" (default true),
                             "threshold" (detector units, default 2): see daemon/trace/replay.py

Audit data is sensitive: off loopback every route needs a token (as write tools do), and the
arguments and results of critical tools are shown only to a caller under full-access. Replay
is a write: its steps run through the catalog under the caller's guard (transport "replay").

Every read runs in a thread and holds at most a page (or one record and its images): records
are spliced from their stored JSON, never parsed and encoded again, and a client that takes
nothing of the export for [server].send_timeout_s is dropped.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import sqlite3
import time
from collections.abc import Callable, Generator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import structlog
from aiohttp import web

from daemon.catalog import Caller, Catalog, check_guard
from daemon.errors import ToolError
from daemon.screen.service import Screen
from daemon.throttled import Throttled
from daemon.trace import store
from daemon.trace.recorder import Recorder
from daemon.trace.replay import DEFAULT_THRESHOLD, ReplayStep, replay
from daemon.transports.limits import taken
from daemon.transports.routes import Route, data
from daemon.wire import WireError, dumps, loads

log = structlog.get_logger("daemon.transports.trace_http")

# How long a read just after the daemon's start waits for the writer to open the database
# (a migration of a large file on an SD card takes a while; a loaded machine too).
READY_WAIT_S = 30.0
T = TypeVar("T")


def _bad(message: str) -> ToolError:
    return ToolError("trace_query_invalid", message)


def parse_filter(query: Any, *, default_limit: int, max_limit: int) -> store.Filter:
    try:
        return store.parse_filter(query, default_limit=default_limit, max_limit=max_limit)
    except ValueError as exc:
        raise _bad(str(exc)) from None


def _time(name: str, raw: Any) -> float | None:
    try:
        return store.parse_time(name, raw)
    except ValueError as exc:
        raise _bad(str(exc)) from None


class TraceApi:
    def __init__(
        self,
        recorder: Recorder,
        catalog: Catalog,
        screen: Screen,
        send_timeout_s: float = 30.0,
    ):
        self.recorder = recorder
        self.catalog = catalog
        self.screen = screen
        self.send_timeout_s = send_timeout_s
        self._export_dropped = Throttled("trace_export_reader_stopped")
        # Every read runs on this one thread, in bounded steps (a page, a piece of an export):
        # reads that come together queue here instead of each taking a pool thread, and with
        # it a malloc arena that keeps what it freed (pages and an export at once: +26 MB of
        # peak RSS over the default pool, +7-10 MB on one thread).
        self._reader = ThreadPoolExecutor(1, thread_name_prefix="trace-reader")

    def _thread(self, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        return asyncio.get_running_loop().run_in_executor(self._reader, fn, *args)

    def routes(self) -> list[Route]:
        private = data("the flight recorder", private=True)
        return [
            Route("GET", "/api/trace", self.list, private),
            Route("GET", "/api/trace/export", self.export, private),
            Route("POST", "/api/trace/replay", self.replay, private),
            Route("GET", "/api/trace/{id}", self.one, private),
        ]

    async def _open(self) -> sqlite3.Connection | None:
        """A reader on the database, once the writer made it; None when there is none."""
        if not await self.recorder.wait_ready(READY_WAIT_S):  # not created (recording is off)
            return None

        def open_it() -> sqlite3.Connection | None:
            try:
                return store.open_reader(self.recorder.path)
            except FileNotFoundError:
                return None

        return await self._thread(open_it)

    async def _read(self, fn: Callable[[sqlite3.Connection | None], Any]) -> Any:
        """fn(a reader, or None when there is no database) in a thread."""
        conn = await self._open()

        def run() -> Any:
            try:
                return fn(conn)
            finally:
                if conn is not None:
                    conn.close()

        return await self._thread(run)

    async def list(self, request: web.Request, caller: Caller) -> web.Response:
        hide = not caller.sees_critical
        f = parse_filter(request.query, default_limit=100, max_limit=1000)
        status = dumps(self.recorder.status())

        def listing(conn: sqlite3.Connection | None) -> bytes:
            page = store.page(conn, f, hide_critical=hide) if conn else store.Page([], None, 0)
            return (
                f'{{"count":{len(page.records)},"trace":{status},"next":{dumps(page.next)},'
                f'"invocations":[{",".join(page.records)}]}}'
            ).encode()

        return _json(await self._read(listing))

    async def one(self, request: web.Request, caller: Caller) -> web.Response:
        hide = not caller.sees_critical
        inv_id = request.match_info["id"]

        def record(conn: sqlite3.Connection | None) -> bytes | None:
            found = store.one(conn, inv_id) if conn else None
            if found is None:
                return None
            values, imgs = found
            shots = [
                {
                    "kind": i.kind,
                    "width": i.width,
                    "height": i.height,
                    "format": "jpeg",
                    "data": base64.b64encode(i.jpeg).decode("ascii"),
                }
                for i in imgs
            ]
            return store.record_json(values, dumps(shots), hide_critical=hide).encode()

        body = await self._read(record)
        if body is None:
            raise ToolError("trace_not_found", f"no recorded invocation {inv_id!r}")
        return _json(body)

    async def export(self, request: web.Request, caller: Caller) -> web.StreamResponse:
        hide = not caller.sees_critical
        f = parse_filter(request.query, default_limit=1000, max_limit=5000)
        conn = await self._open()
        chunks = store.export(conn, f, hide_critical=hide)
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        response = web.StreamResponse(
            headers={
                "Content-Type": "application/gzip",
                "Content-Disposition": f'attachment; filename="trace-{stamp}.tar.gz"',
            }
        )
        try:
            await response.prepare(request)
            while (chunk := await self._thread(next, chunks, None)) is not None:
                await taken(request.transport, response.write(chunk), self.send_timeout_s)
            await response.write_eof()
        except ConnectionError as exc:  # the client left, or took nothing for the timeout
            self._export_dropped(error=type(exc).__name__, remote=request.remote)
        except sqlite3.Error as exc:  # the archive is cut: the client must not take it whole
            log.warning("trace_export_failed", error=str(exc))
            if request.transport is not None:
                request.transport.abort()
        finally:
            await self._thread(_close, chunks, conn)
        return response

    async def replay(self, request: web.Request, caller: Caller) -> web.Response:
        guard, token_id = caller.effective, caller.token_id
        check_guard(guard, "trace/replay", "write")  # a replay runs tools: a write
        body = await request.read()
        try:
            doc = loads(body) if body.strip() else {}
        except WireError as exc:
            raise _bad(f"body is not valid JSON: {exc}") from None
        f, checkpoints, threshold = self._replay_request(doc)

        conn = await self._open()
        try:
            try:
                ids = await self._thread(store.ids, conn, f) if conn else []
            except LookupError as exc:
                raise ToolError("trace_not_found", str(exc)) from None
            if not ids:
                raise ToolError("trace_not_found", "no recorded invocation to replay")

            def step(inv_id: str) -> ReplayStep | None:
                assert conn is not None
                record = store.get(conn, inv_id)
                if record is None:
                    return None
                shots = store.images(conn, inv_id)
                return ReplayStep(record, next((i for i in shots if i.kind == "before"), None))

            # One step's record and image in memory at a time, read as its turn comes.
            report = await replay(
                self.catalog,
                self.screen,
                ids,
                lambda inv_id: self._thread(step, inv_id),
                guard=guard,
                client=request.remote or "",
                token_id=token_id,
                checkpoints=checkpoints,
                threshold=threshold,
                quality=self.recorder.config.image_quality,
            )
        finally:
            if conn is not None:
                await self._thread(conn.close)
        return web.json_response(report)

    def _replay_request(self, doc: Any) -> tuple[store.Filter, bool, float]:
        if not isinstance(doc, dict):
            raise _bad("the body must be a JSON object")
        unknown = set(doc) - {"ids", "since", "until", "checkpoints", "threshold"}
        if unknown:
            raise _bad(f"unknown key {sorted(unknown)[0]!r}")
        checkpoints = doc.get("checkpoints", True)
        if not isinstance(checkpoints, bool):
            raise _bad("checkpoints must be true or false")
        threshold = doc.get("threshold", DEFAULT_THRESHOLD)
        if isinstance(threshold, bool) or not isinstance(threshold, int | float):
            raise _bad("threshold must be a number")
        if not 0 <= threshold <= 255:
            raise _bad("threshold must be in 0..255")
        ids = doc.get("ids")
        if ids is not None:
            if (
                not isinstance(ids, list)
                or not 1 <= len(ids) <= 1000
                or not all(isinstance(i, str) for i in ids)
            ):
                raise _bad("ids must be a list of 1..1000 invocation ids")
            if "since" in doc or "until" in doc:
                raise _bad("send either ids or a range (since, until), not both")
            f = store.Filter(ids=tuple(ids), limit=len(ids), oldest_first=True)
            return f, checkpoints, float(threshold)
        since = _time("since", doc.get("since"))
        if since is None:  # a missing or null since would replay the whole history
            raise _bad("send ids, or a range with since (and optionally until)")
        f = store.Filter(
            since=since, until=_time("until", doc.get("until")), limit=1000, oldest_first=True
        )
        return f, checkpoints, float(threshold)


def _json(body: bytes) -> web.Response:
    """A reply whose JSON was written (and encoded) on the reader thread."""
    return web.Response(body=body, content_type="application/json", charset="utf-8")


def _close(chunks: Generator[bytes, None, None], conn: sqlite3.Connection | None) -> None:
    """End an export (its read transaction with it) and its connection."""
    with contextlib.suppress(sqlite3.Error):
        chunks.close()
    if conn is not None:
        conn.close()
