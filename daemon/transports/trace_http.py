"""The flight recorder over HTTP (daemon/trace): list, one invocation with its images, an
export archive, and replay.

  GET  /api/trace            filters since, until (Unix seconds or ISO 8601), tool, transport,
                             outcome (ok | error | cancelled), limit (1..1000, default 100);
                             newest first
  GET  /api/trace/export     the same filters (limit up to 5000, default 1000): a .tar.gz of
                             trace.jsonl (oldest first) and images/<id>-<kind>.jpg
  GET  /api/trace/{id}       one invocation, its images inline (base64 JPEG)
  POST /api/trace/replay     {"ids": [...]} or {"since", "until"}; "checkpoints" (default true),
                             "threshold" (detector units, default 2): see daemon/trace/replay.py

Audit data is sensitive: off loopback every route needs a token (as write tools do), and the
arguments and results of critical tools are shown only to a caller under full-access. Replay
is a write: its steps run through the catalog under the caller's guard (transport "replay").
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import tarfile
import time
from typing import Any

from aiohttp import web

from daemon.auth import Auth
from daemon.catalog import Caller, Catalog, Guard
from daemon.errors import ToolError
from daemon.screen.service import Screen
from daemon.trace import store
from daemon.trace.recorder import Recorder
from daemon.trace.replay import DEFAULT_THRESHOLD, ReplayStep, replay
from daemon.transports.responses import data_error
from daemon.wire import WireError, iso_utc, loads

HIDDEN = "arguments and results of critical tools need a full-access caller"
# How long a read just after the daemon's start waits for the writer to open the database
# (a migration of a large file on an SD card takes a while; a loaded machine too).
READY_WAIT_S = 30.0


async def _json_off_loop(doc: Any) -> web.Response:
    """web.json_response's bytes, encoded in a thread: a page of 1,000 records (arguments up
    to 64 KiB each) or a record's images would hold the event loop, and with it HID deadlines."""
    text = await asyncio.to_thread(json.dumps, doc)
    return web.Response(text=text, content_type="application/json")


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
        self, recorder: Recorder, catalog: Catalog, auth: Auth, guard: Guard, screen: Screen
    ):
        self.recorder = recorder
        self.catalog = catalog
        self.auth = auth
        self.guard = guard
        self.screen = screen

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/api/trace", self.list),
            web.get("/api/trace/export", self.export),
            web.post("/api/trace/replay", self.replay),
            web.get("/api/trace/{id}", self.one),
        ]

    def _caller(self, request: web.Request) -> Caller:
        caller = self.auth.caller("http", self.guard, request)
        caller.admit("the flight recorder", private=True)
        return caller

    def _shown(self, record: dict[str, Any], guard: Guard) -> dict[str, Any]:
        record["started_at_iso"] = iso_utc(record["started_at"])
        if record["policy"] == "critical" and not guard.permits("critical"):
            record["args"] = record["result"] = None
            record["hidden"] = HIDDEN
        return record

    async def _read(self, fn: Any, *args: Any) -> Any:
        if not await self.recorder.wait_ready(READY_WAIT_S):  # not created (recording is off)
            return None

        def run() -> Any:
            try:
                conn = store.open_reader(self.recorder.path)
            except FileNotFoundError:
                return None
            try:
                return fn(conn, *args)
            finally:
                conn.close()

        return await asyncio.to_thread(run)

    async def list(self, request: web.Request) -> web.Response:
        try:
            guard = self._caller(request).effective
            f = parse_filter(request.query, default_limit=100, max_limit=1000)
        except ToolError as exc:
            return data_error(exc)
        rows = await self._read(store.select, f) or []
        doc = {
            "count": len(rows),
            "trace": self.recorder.status(),
            "invocations": [self._shown(r, guard) for r in rows],
        }
        return await _json_off_loop(doc)

    async def one(self, request: web.Request) -> web.Response:
        try:
            guard = self._caller(request).effective
        except ToolError as exc:
            return data_error(exc)
        inv_id = request.match_info["id"]

        def both(conn: Any) -> tuple[Any, list[store.Image]]:
            return store.get(conn, inv_id), store.images(conn, inv_id)

        found = await self._read(both)
        if found is None or found[0] is None:
            return data_error(ToolError("trace_not_found", f"no recorded invocation {inv_id!r}"))
        record, imgs = found
        record = self._shown(record, guard)
        record["images"] = [
            {
                "kind": i.kind,
                "width": i.width,
                "height": i.height,
                "format": "jpeg",
                "data": base64.b64encode(i.jpeg).decode("ascii"),
            }
            for i in imgs
        ]
        return await _json_off_loop(record)

    async def export(self, request: web.Request) -> web.Response:
        try:
            guard = self._caller(request).effective
            f = parse_filter(request.query, default_limit=1000, max_limit=5000)
        except ToolError as exc:
            return data_error(exc)
        f = store.Filter(**{**f.__dict__, "oldest_first": True})

        def archive(conn: Any) -> bytes:
            buf = io.BytesIO()
            with tarfile.open(fileobj=buf, mode="w:gz") as tar:
                lines = []
                for rec in store.select(conn, f):
                    lines.append(json.dumps(self._shown(rec, guard), ensure_ascii=False))
                    for img in store.images(conn, rec["id"]):
                        _add(tar, f"images/{rec['id']}-{img.kind}.jpg", img.jpeg)
                _add(tar, "trace.jsonl", ("\n".join(lines) + "\n" if lines else "").encode())
            return buf.getvalue()

        data = await self._read(archive)
        if data is None:  # no database yet: an archive with an empty trace.jsonl
            buf = io.BytesIO()
            with tarfile.open(fileobj=buf, mode="w:gz") as tar:
                _add(tar, "trace.jsonl", b"")
            data = buf.getvalue()
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        return web.Response(
            body=data,
            content_type="application/gzip",
            headers={"Content-Disposition": f'attachment; filename="trace-{stamp}.tar.gz"'},
        )

    async def replay(self, request: web.Request) -> web.Response:
        try:
            caller = self._caller(request)
            guard, token_id = caller.effective, caller.token_id
            if not guard.permits("write"):
                raise ToolError(
                    "tool_execution_denied",
                    f"replay is a write; this caller is limited to {guard.max_policy!r}",
                )
            body = await request.read()
            try:
                doc = loads(body) if body.strip() else {}
            except WireError as exc:
                raise _bad(f"body is not valid JSON: {exc}") from None
            f, checkpoints, threshold = self._replay_request(doc)
        except ToolError as exc:
            return data_error(exc)

        def load(conn: Any) -> list[ReplayStep]:
            records = store.select(conn, f)
            if f.ids is not None:  # the order asked for, each id once
                by_id = {r["id"]: r for r in records}
                missing = [i for i in f.ids if i not in by_id]
                if missing:
                    raise ToolError("trace_not_found", f"no recorded invocation {missing[0]!r}")
                records = [by_id[i] for i in dict.fromkeys(f.ids)]
            return [
                ReplayStep(
                    r, next((i for i in store.images(conn, r["id"]) if i.kind == "before"), None)
                )
                for r in records
            ]

        try:
            steps = await self._read(load)
        except ToolError as exc:
            return data_error(exc)
        if not steps:
            return data_error(ToolError("trace_not_found", "no recorded invocation to replay"))
        report = await replay(
            self.catalog,
            self.screen,
            steps,
            guard=guard,
            client=request.remote or "",
            token_id=token_id,
            checkpoints=checkpoints,
            threshold=threshold,
            quality=self.recorder.config.image_quality,
        )
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


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = int(time.time())
    info.mode = 0o600
    tar.addfile(info, io.BytesIO(data))
