"""Virtual media's routes. GET /api/media/images/{name} returns a whole image (a private read,
like media_files). PUT /api/media/images/{name} streams the body to disk
(daemon/media.py bounds it by the quota and the free space, hashes it and renames it into place
once whole). A write, as attaching is: the tools API's token rule and the HTTP guard
(Caller.authorize). The flight recorder records it as the media_upload invocation, through
the catalog's one path (Catalog.record), as a tool call: refused by the token rule or the guard
(the route wrapper tells `refused`) or for its name, compact as a refused call is (who, the
code, the size; not its arguments); run, with its name, length and result.

Its body is exempt from [server].body_timeout_s (an image takes minutes over a slow link);
instead each chunk must arrive within that time, so a stalled client holds its upload slot
no longer than a slow header would."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from aiohttp import web

from daemon.catalog import Began, CallContext, Caller, Catalog
from daemon.errors import ToolError
from daemon.media import CHUNK, MediaStore, check_name
from daemon.transports.responses import error_response
from daemon.transports.routes import Route, action

PATH = "/api/media/images/{name}"
TOOL = "media_upload"  # the name the upload is recorded and authorized under
DOWNLOAD = "media_download"


def routes(store: MediaStore, catalog: Catalog, idle_timeout_s: float) -> list[Route]:
    def context(request: web.Request, caller: Caller) -> CallContext:
        return CallContext(
            "http",
            client=caller.peer,
            token_id=caller.token_id,
            trusted=caller.trusted,
            request_bytes=request.content_length,
        )

    def refused(request: web.Request, caller: Caller, exc: ToolError) -> None:
        catalog.record(TOOL, Began.now(), "error", exc.code, context(request, caller))

    async def chunks(request: web.Request) -> AsyncIterator[bytes]:
        while True:
            async with asyncio.timeout(idle_timeout_s):
                chunk = await request.content.read(CHUNK)
            if not chunk:
                return
            yield chunk

    async def upload(request: web.Request, caller: Caller) -> web.StreamResponse:
        name = request.match_info["name"]
        ctx = context(request, caller)
        began = Began.now()
        args = {"name": name, "content_length": request.content_length}
        outcome, code, result = "ok", None, None
        try:
            checked = check_name(name)
            ctx.ran = True  # a bad name is refused as a bad argument is: its record keeps none
            made = await store.upload(checked, chunks(request), request.content_length)
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
        finally:  # the trail and the log line as for a tool call: the catalog's one path
            catalog.record(TOOL, began, outcome, code, ctx, args=args, result=result)

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
            action(lambda _: (TOOL, "write", False), transport="http", on_refused=refused),
            streams_body=True,
        ),
        Route("GET", PATH, download, action(lambda _: (DOWNLOAD, "read", True), transport="http")),
    ]
