"""Virtual media's routes. GET /api/media/images/{name} returns a whole image (a private read,
like media_files). PUT /api/media/images/{name} streams the body to disk
(daemon/media.py bounds it by the quota and the free space, hashes it and renames it into place
once whole). A write, as attaching is: the tools API's token rule and the HTTP guard
(Caller.authorize). The flight recorder records it as the media_upload invocation.

Its body is exempt from [server].body_timeout_s (an image takes minutes over a slow link);
instead each chunk must arrive within that time, so a stalled client holds its upload slot
no longer than a slow header would."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import structlog
from aiohttp import web

from daemon.catalog import CallContext, Caller, Catalog, Invocation
from daemon.errors import ToolError
from daemon.media import CHUNK, MediaStore, check_name
from daemon.transports.responses import error_response
from daemon.transports.routes import Route, action

log = structlog.get_logger("daemon.media")
PATH = "/api/media/images/{name}"
TOOL = "media_upload"  # the name the upload is recorded and authorized under
DOWNLOAD = "media_download"


def routes(store: MediaStore, catalog: Catalog, idle_timeout_s: float) -> list[Route]:
    async def chunks(request: web.Request) -> AsyncIterator[bytes]:
        while True:
            async with asyncio.timeout(idle_timeout_s):
                chunk = await request.content.read(CHUNK)
            if not chunk:
                return
            yield chunk

    async def upload(request: web.Request, caller: Caller) -> web.StreamResponse:
        name = request.match_info["name"]
        ctx = CallContext("http", client=request.remote or "")
        started, wall = time.monotonic(), time.time()
        outcome, code, result = "ok", None, None
        try:
            ctx.ran = True
            made = await store.upload(check_name(name), chunks(request), request.content_length)
            result = made.to_dict()
            return web.json_response(result)
        except ToolError as exc:
            outcome, code = "error", exc.code
            return error_response(exc)
        except TimeoutError:
            outcome, code = "error", "media_upload_incomplete"
            return error_response(
                ToolError(
                    "media_upload_incomplete",
                    f"no data for {idle_timeout_s:g} s: upload it again",
                )
            )
        except (asyncio.CancelledError, ConnectionError):
            outcome, code = "cancelled", "media_upload_incomplete"
            raise
        finally:
            record(
                Invocation(
                    id=ctx.invocation_id,
                    tool=TOOL,
                    transport="http",
                    client=ctx.client,
                    args={"name": name, "content_length": request.content_length},
                    started_at=wall,
                    duration_ms=(time.monotonic() - started) * 1000,
                    outcome=outcome,
                    error_code=code,
                    result=result,
                )
            )

    def record(inv: Invocation) -> None:
        """Hand the upload to the catalog's observers (flight recorder, metrics), as the
        catalog does for a tool call; an observer's fault never reaches the client."""
        log.info("tool_invocation", tool=TOOL, transport="http", outcome=inv.outcome,
                 error_code=inv.error_code, duration_ms=round(inv.duration_ms, 1))  # fmt: skip
        for observer in catalog.observers:
            try:
                observer(inv)
            except Exception:
                log.exception("invocation_observer_failed", tool=TOOL)

    async def download(request: web.Request, caller: Caller) -> web.StreamResponse:
        """The whole image, as the target left it: private (what the target saved), and not
        while it is attached writable (the target may be writing)."""
        path = store.readable(check_name(request.match_info["name"]))
        headers = {"Content-Disposition": f'attachment; filename="{path.name}"'}
        return web.FileResponse(path, chunk_size=CHUNK, headers=headers)

    return [
        Route(
            "PUT",
            PATH,
            upload,
            action(lambda _: (TOOL, "write", False), transport="http"),
            streams_body=True,
        ),
        Route("GET", PATH, download, action(lambda _: (DOWNLOAD, "read", True), transport="http")),
    ]
