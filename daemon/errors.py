"""Errors are values: a stable code, a human message, whether a retry can help, and details.

Every code is declared once, in CODES below: where it arises (its scope), the HTTP port's status
for it, whether a retry can help, and what it means. The HTTP port's replies, OpenAPI and
docs/errors.md read it, so a new code cannot get a status by accident: tests/unit/
test_error_codes.py walks the source for every code passed to an error constructor and fails on
one not declared here, and on a reply that writes its status by hand (the WebSocket upgrade's
refusals, the raw answers of the TLS gate and the connection cap) with another than declared.

Scopes, and what the status means for each:
  call    the catalog or the HTTP port refuses the call or request: answered with `status`
          everywhere, a tools API call included (the OpenAPI description lists them per status)
  tool    a tool (or the HID engine, the capture, OCR on its behalf) ran and failed: a tools API
          call answers it as the tool's result, 200 with is_error true; where it fails one of
          the port's data routes instead (the live stream's capture gone), `status`
  route   a data route's own refusal (live stream, flight recorder): `status`
  wire    a transport's own protocol error, carried in that protocol's frames (WebSocket, IPC,
          the HTTPS-only port's answer to plain HTTP): `status` where it is answered over HTTP
  record  no reply carries it: the invocation's log line and the flight recorder only
For `tool`, `wire` and `record` codes never answered over HTTP, `status` is 500 (what an
error outside a tool call that no route expects has always been: a bug on our side).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

Scope = Literal["call", "tool", "route", "wire", "record"]


@dataclass(frozen=True)
class Code:
    scope: Scope
    status: int  # the HTTP port's status when this error fails a request (see the module)
    retryable: bool | None  # None: it depends on the case, and the raiser says which
    meaning: str


def _call(status: int, meaning: str, *, retry: bool | None = False) -> Code:
    return Code("call", status, retry, meaning)


def _tool(meaning: str, *, status: int = 500, retry: bool | None = False) -> Code:
    return Code("tool", status, retry, meaning)


def _route(status: int, meaning: str, *, retry: bool | None = False) -> Code:
    return Code("route", status, retry, meaning)


def _wire(meaning: str, *, status: int = 500, retry: bool | None = False) -> Code:
    return Code("wire", status, retry, meaning)


def _record(meaning: str) -> Code:
    return Code("record", 500, None, meaning)


CODES: dict[str, Code] = {
    # -- the catalog's and the HTTP port's refusals of a call or request ------------------------
    "tool_call_payload_invalid": _call(400, "the request's body or envelope is malformed"),
    "tool_arguments_invalid": _call(400, "the arguments fail the tool's schema"),
    "auth_required": _call(401, "the connection needs the pairing or a client token"),
    "tool_execution_denied": _call(403, "the caller's guard or policy forbids it"),
    "host_not_allowed": _call(403, "a Host header that is not one of ours"),
    "origin_not_allowed": _call(403, "a cross-site browser request"),
    "tool_not_found": _call(404, "no tool of that name this caller may see"),
    "request_too_large": _call(413, "a body or frame over the configured limit"),
    "tool_execution_exception": _call(500, "a tool raised unexpectedly: our bug"),
    "tool_result_schema_invalid": _call(500, "a tool's result fails its schema: our bug"),
    "tool_unavailable": _call(503, "the tool cannot run now; details say why", retry=None),
    "too_many_connections": _call(503, "the transport's connection limit is reached", retry=True),
    # -- failures of a tool that ran (a tools API call answers them in a 200) ------------------
    "tool_timeout": _tool("the tool did not finish within its time limit", retry=True),
    # The catalog refuses it before the tool runs, but a tools API call has always answered it
    # in a 200, as it answers a tool's own "busy".
    "hid_busy": _tool("too many HID invocations are accepted and not yet ended", retry=True),
    # Per client and in total, counted in calls (a WebSocket batch counts each of its calls).
    "too_many_calls": _tool("too many calls admitted and not yet ended", retry=True),
    "token_revoked": _tool("the call's token was rotated or revoked before the call started"),
    "calibration_unavailable": _tool("the pointer shows no cursor, or there is no geometry"),
    "cursor_not_found": _tool("calibration found no cursor in the frame", retry=True),
    # An HDMI bridge's source states (daemon/screen/capture_dv.py): the capture is there, the
    # target sends nothing usable yet; a data route (the snapshot) fails with 503.
    "no_cable": _tool("the HDMI bridge sees no source (no +5 V)", status=503, retry=True),
    "no_signal": _tool("the HDMI source sends no signal", status=503, retry=True),
    "no_sync": _tool("the HDMI bridge cannot lock to the source", status=503, retry=True),
    "out_of_range": _tool("the source's timings are beyond the bridge", status=503, retry=True),
    "hid_write_timeout": _tool("the target did not accept HID reports in time", retry=True),
    "hid_io_failed": _tool("writing a HID report failed"),
    "input_engine_stopped": _tool("the daemon is stopping: no more HID input", retry=True),
    "caps_lock_unconfirmed": _tool("the target did not confirm Caps Lock off", retry=True),
    "chord_invalid": _tool("a key chord repeats a key or holds too many"),
    "unknown_key": _tool("a key name the keymap does not know"),
    "untypable_character": _tool("a character the target's layout cannot type"),
    "url_invalid": _tool("the text given as a URL is not one"),
    "drag_not_in_progress": _tool("drag_release without a drag in progress"),
    "drag_already_in_progress": _tool("drag_start while a drag is held", retry=True),
    "drag_in_progress": _tool("another pointer action while a drag is held", retry=True),
    "profile_switch_failed": _tool("switching the USB composite failed", retry=None),
    "target_not_attached": _tool("the target is not attached or not reading", retry=True),
    # A target that sleeps (daemon/usb.py): its USB bus is suspended, and remote wakeup.
    "target_suspended": _tool("the target sleeps (USB suspended): nothing was sent", retry=True),
    "wake_unsupported": _tool("this board's USB controller cannot wake the target"),
    "wakeup_not_enabled": _tool("the target stayed asleep: its host did not enable wakeup"),
    "wake_timeout": _tool("the target answered the wakeup but did not come back", retry=True),
    "gadget_configfs_failed": _tool("configfs or the UDC refused the gadget", retry=True),
    "gadget_error": _tool("another failure on the USB device side"),
    "gadget_endpoint_budget": _tool(
        "the composite needs more endpoints than the UDC has: the message names what to drop"
    ),
    # Virtual media (daemon/media.py): tools, and the upload and download routes' statuses.
    "media_name_invalid": _tool("an image or file name that is not one file's name", status=400),
    "media_not_found": _tool("no image (or file in it) of that name", status=404),
    "media_attached": _tool("the image is attached to the target: detach it first", status=409),
    "media_busy": _tool(
        "the drive holds another image, or the image is uploading", status=409, retry=None
    ),
    "media_locked": _tool(
        "the target locked the drive's medium: eject there, or force", status=409, retry=True
    ),
    "media_unavailable": _tool("the composite has no drive ([gadget].mass_storage)", status=503),
    "media_quota_exceeded": _tool("the upload does not fit the images' quota", status=413),
    "media_disk_full": _tool("the upload does not fit the free disk space", status=507),
    "media_upload_incomplete": _tool("the body did not match its Content-Length", status=400),
    "media_files_invalid": _tool("a file drop's files are not valid or too big", status=400),
    "media_image_unreadable": _tool("the image holds no FAT file system we can read", status=422),
    "capture_unavailable": _tool("the capture device delivers no frames", status=503, retry=True),
    "ocr_busy": _tool("too many OCR runs are queued", retry=True),
    "ocr_disabled": _tool("on-device OCR is off on this board"),
    "ocr_engine_missing": _tool("the OCR engine's packages are not installed"),
    "ocr_engine_failed": _tool("the OCR engine failed to load"),
    "ocr_failed": _tool("the OCR engine failed on this frame"),
    "ocr_unavailable": _tool("the OCR worker hung or died on this read", retry=True),
    "text_not_found": _tool("no text on the screen matches the query", retry=True),
    "text_ambiguous": _tool("several places match and no index was given"),
    "text_index_out_of_range": _tool("the index is past the matches found"),
    "stale_snapshot": _tool("the snapshot no longer matches the screen"),
    "query_invalid": _tool("the text query is not a usable expression"),
    "query_too_expensive": _tool("matching the text query took too long"),
    "region_invalid": _tool("the region is empty or inverted"),
    "text_changes_unavailable": _tool("the screen's text changes cannot be read", retry=True),
    "tool_platform_unsupported": _tool("the tool does not run on this target"),
    "availability_unknown": _tool("the tool's availability probe failed", retry=True),
    "shell_spawn_failed": _tool("the command could not be started"),
    "shell_session_not_found": _tool("no shell session with that id"),
    "shell_session_ended": _tool("the shell session has ended or closed input"),
    "shell_too_many_sessions": _tool("the shell session limit is reached", retry=True),
    "skill_unreadable": _tool("a skill file cannot be read"),
    "token_in_config": _tool("the token is set in the config: rotate it there"),
    "token_not_written": _tool("the new token could not be written"),
    "weather_location_not_found": _tool("no place of that name"),
    "weather_unavailable": _tool("the weather service is unreachable", retry=True),
    "weather_upstream_error": _tool("the weather service answered unusably", retry=None),
    "trace_image_unreadable": _tool("a recorded image cannot be decoded"),
    # -- the HTTP port's data routes (live stream, flight recorder) ----------------------------
    "stream_params_invalid": _route(400, "the stream's query parameters are invalid"),
    "trace_query_invalid": _route(400, "the flight recorder query is invalid"),
    "trace_not_found": _route(404, "no recorded invocation matches"),
    "too_many_viewers": _route(503, "the live stream's viewer limit is reached", retry=True),
    "stream_closed": _route(500, "the stream was closed"),
    "stream_failed": _route(500, "the stream failed"),
    # -- a transport's own protocol ------------------------------------------------------------
    "tls_required": _wire("plain HTTP sent to the HTTPS-only port", status=400),
    "websocket_upgrade_required": _wire("the WebSocket path without an upgrade", status=426),
    "tool_discovery_disabled": _wire("the guard hides the catalog"),
    "tool_protocol_invalid_request": _wire("a WebSocket envelope breaks the rules"),
    "tool_protocol_unknown_type": _wire("a WebSocket message type we do not serve"),
    "tool_protocol_busy": _wire("too many requests running on one WebSocket", retry=True),
    "tool_call_missing_id": _wire("a WebSocket tool call without a toolId"),
    "tool_batch_payload_invalid": _wire("a tool.batch payload is malformed"),
    "tool_batch_size_invalid": _wire("a tool.batch has too few or too many calls"),
    "tool_batch_call_invalid": _wire("a call in a tool.batch is not an object"),
    "ipc_frame_invalid": _wire("an IPC frame is not a request"),
    "ipc_request_invalid": _wire("an IPC request's fields are invalid"),
    "ipc_peer_not_allowed": _wire("the socket's peer may not do this"),
    "ipc_result_unencodable": _wire("the result cannot be sent as msgpack"),
    # -- only in the log line and the flight recorder ------------------------------------------
    "client_gone": _record("the client left before a non-HID call ended"),
    "tool_cancelled_at_shutdown": _record("a HID call cut at shutdown"),
}

# The codes with which a tools API call is refused with a status of its own, derived: any other
# error in a call's reply is the tool's result (200).
CALL_STATUS = {code: c.status for code, c in CODES.items() if c.scope == "call"}


def http_status(code: str, *, tool_call: bool = False) -> int:
    """The HTTP port's status for an error with `code`: in the reply to a tools API call (the
    tool is known and answered), 200 unless the call was refused; elsewhere the code's status.
    An undeclared code (the unit tier keeps there being none) is a bug on our side: 500, or in a
    call the tool's result."""
    if tool_call:
        return CALL_STATUS.get(code, 200)
    known = CODES.get(code)
    return known.status if known is not None else 500


class ToolError(Exception):
    """Raised by tools and the catalog; every transport maps it the same way. `retryable`
    defaults to what CODES declares for the code (False where it depends on the case)."""

    def __init__(
        self,
        code: str,
        message: str,
        *,
        retryable: bool | None = None,
        details: dict[str, Any] | None = None,
    ):
        super().__init__(message)
        self.code = code
        self.message = message
        if retryable is None:
            known = CODES.get(code)
            retryable = bool(known is not None and known.retryable)
        self.retryable = retryable
        self.details = details

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "code": self.code,
            "message": self.message,
            "retryable": self.retryable,
        }
        if self.details is not None:
            out["details"] = self.details
        return out
