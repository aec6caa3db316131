"""The HTTP port's error replies outside a tool call, shared by every route on it (the tools API,
the live stream, the flight recorder, /metrics), so no route module imports another's.

The pure half of the rule (status maps, bodies, timestamps) is daemon.wire, which the one-shot
CLI imports and which therefore stays free of aiohttp; this module only wraps it in responses.
"""

from __future__ import annotations

from aiohttp import web

from daemon.errors import ToolError
from daemon.wire import DATA_STATUS, STATUS, error_body


def error_response(error: ToolError) -> web.Response:
    """An error raised outside any tool call, with the tools API's body shape and status map."""
    return web.json_response(error_body(error), status=STATUS.get(error.code, 500))


def data_error(error: ToolError) -> web.Response:
    """The refusal of one of the port's data routes (stream, snapshot, live, flight recorder):
    the tools API's body, the data routes' statuses (DATA_STATUS)."""
    return web.json_response(error_body(error), status=DATA_STATUS.get(error.code, 500))
