"""The WebSocket tool protocol's wire codec (spec/websocket-tool-protocol.txt, contract-notes.md).

Pure functions, no I/O: the envelope (decode strictly, encode in the contract's field order),
the `gzip-base64-json` payload wrapper (encode when it pays, decode with a size bound enforced
while inflating), and ASFT (`ansight.file-transfer.v1`) binary frames. Every wire string is
kept verbatim so existing hosts interoperate.
"""

from __future__ import annotations

import base64
import binascii
import gzip
import json
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from aiohttp import WSCloseCode

from daemon import wire
from daemon.errors import ToolError
from daemon.wire import IMAGE_TYPES, is_artifact

__all__ = ["IMAGE_TYPES", "is_artifact"]  # the neutral module's; the codec's own names follow

CAPABILITY = "tool.exec"
QUERY, CATALOG = "tool.query", "tool.catalog"
CALL, RESULT, ERROR = "tool.call", "tool.result", "tool.error"
BATCH, BATCH_RESULT = "tool.batch", "tool.batch.result"

WRAPPER_KEY = "$ansightEncoding"
WRAPPER_ENCODING = "gzip-base64-json"
WRAPPER_CONTENT_TYPE = "application/json"
WRAP_MIN_BYTES = 32 * 1024
_WRAPPER_FIELDS = frozenset(
    {WRAPPER_KEY, "contentType", "originalByteCount", "compressedByteCount", "data"}
)

INVALID_REQUEST = "tool_protocol_invalid_request"
_CAPABILITY_AND_PAYLOAD = ',"capability":' + json.dumps(CAPABILITY) + ',"payload":'
_NO_ID = "tool.invalid"  # stands in for the id of a request that had none


class FrameViolation(Exception):
    """A message that is not a tool-protocol envelope at all: the socket is closed with `code`."""

    def __init__(self, code: int, reason: str):
        super().__init__(reason)
        self.code = code
        self.reason = reason


class InvalidEnvelope(Exception):
    """A JSON object that fails the envelope rules: answered with tool.error, not a close."""

    def __init__(self, error: ToolError, request_id: str | None, session_id: str | None):
        super().__init__(error.message)
        self.error = error
        self.request_id = request_id
        self.session_id = session_id


@dataclass(frozen=True)
class Envelope:
    type: str
    id: str
    reply_to: str | None = None
    session_id: str | None = None
    sent_at: str | None = None
    capability: str | None = None
    payload: Any = None  # as received: possibly still wrapped (see unwrap_payload)
    size: int = 0  # the message's length in characters (the flight recorder's request size)


# The edge rule (daemon.wire): NaN, Infinity, lone surrogates and deep nesting are refused.
loads_strict = wire.loads
# Built once: json.dumps with non-default options builds a new encoder on every call, which is
# a measurable share of a tool call's own cost.
_encode = wire.encoder(ensure_ascii=False, separators=(",", ":"))


def dumps(value: Any) -> str:
    """Compact JSON, the contract's serialization (and the size the wrapper rule measures)."""
    return _encode(value)


def decode_envelope(text: str) -> Envelope | None:
    """One text message -> Envelope; None when it is addressed to another capability.

    Raises FrameViolation when the text is not a JSON object (nothing to answer to) and
    InvalidEnvelope when it is an object that breaks the envelope rules.
    """
    try:
        obj = loads_strict(text)
    except ValueError as exc:  # wire.WireError: not JSON, NaN, too deep, lone surrogate
        raise FrameViolation(WSCloseCode.INVALID_TEXT, f"message is not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise FrameViolation(WSCloseCode.INVALID_TEXT, "message is not a JSON object")
    capability = obj.get("capability")
    if isinstance(capability, str) and capability.strip() and capability != CAPABILITY:
        return None  # peers ignore requests for another capability
    raw_id, raw_session = obj.get("id"), obj.get("sessionId")
    request_id = raw_id if isinstance(raw_id, str) and raw_id.strip() else None
    session_id = raw_session if isinstance(raw_session, str) else None
    try:
        kind = obj.get("type")
        if not isinstance(kind, str) or not kind.strip():
            raise ValueError("envelope needs a non-empty string 'type'")
        if request_id is None:
            raise ValueError("envelope needs a non-empty string 'id'")
        for key in ("replyTo", "sessionId", "sentAt", "capability"):
            value = obj.get(key)
            if value is not None and not isinstance(value, str):
                raise ValueError(f"envelope field {key!r} must be a string")
    except ValueError as exc:
        error = ToolError(INVALID_REQUEST, f"invalid tool protocol envelope: {exc}")
        raise InvalidEnvelope(error, request_id, session_id) from None
    return Envelope(
        type=kind,
        id=request_id,
        reply_to=obj.get("replyTo"),
        session_id=session_id,
        sent_at=obj.get("sentAt"),
        capability=capability,
        payload=obj.get("payload"),
        size=len(text),
    )


def envelope_head(
    kind: str, message_id: str, reply_to: str | None, session_id: str | None, sent_at: str
) -> str:
    """An envelope up to its payload, in the contract's field order: type, id, replyTo,
    sessionId, sentAt, capability, then `"payload":`. The head is strings only, each encoded
    alone (the same text `dumps` of the whole object gives, at a third of the cost)."""
    quote = _encode
    parts = ['{"type":', quote(kind), ',"id":', quote(message_id)]
    if reply_to is not None:
        parts += (',"replyTo":', quote(reply_to))
    if session_id is not None:
        parts += (',"sessionId":', quote(session_id))
    parts += (',"sentAt":', quote(sent_at), _CAPABILITY_AND_PAYLOAD)
    return "".join(parts)


def encode_envelope(
    kind: str,
    message_id: str,
    reply_to: str | None,
    session_id: str | None,
    sent_at: str,
    payload_json: str,
) -> str:
    """A whole envelope; the payload arrives already serialized (and maybe wrapped), so it is
    encoded once."""
    return envelope_head(kind, message_id, reply_to, session_id, sent_at) + payload_json + "}"


# -- a batch result as it is produced ------------------------------------------------------

# A tool.batch.result whose items reach this many characters is sent as they are produced, in
# WebSocket fragments of one message (RFC 6455 5.4), not built whole: 32 inline screenshots at
# quality 100 were 40 MB of text, and each batch held them (and three copies) until its end.
STREAM_MIN_CHARS = 256 * 1024


def batch_open(requested: int) -> str:
    """The start of a streamed batch result's payload: its items follow, then batch_close."""
    return '{"requested":' + str(requested) + ',"results":['


def batch_close(success: bool, completed: int, stopped_early: bool) -> str:
    """The end of a streamed batch result (what is known only once its calls have run), and of
    its envelope. The members are the whole result's; only their order differs."""
    return (
        '],"success":' + ("true" if success else "false") + ',"completed":' + str(completed)
        + ',"stoppedEarly":' + ("true" if stopped_early else "false") + "}}"
    )  # fmt: skip


def batch_whole(success: bool, completed: int, requested: int, items: list[str]) -> str:
    """A batch result built whole from its items' JSON: the text dumps() gives the dict."""
    return (
        '{"success":' + ("true" if success else "false") + ',"completed":' + str(completed)
        + ',"requested":' + str(requested) + ',"stoppedEarly":'
        + ("true" if len(items) < requested else "false") + ',"results":['
        + ",".join(items) + "]}"
    )  # fmt: skip


OP_CONTINUATION, OP_TEXT = 0x0, 0x1


def frame_header(opcode: int, fin: bool, length: int) -> bytes:
    """An unmasked server frame's header (RFC 6455 5.2), RSV bits clear: a message sent this
    way is not compressed, which permessage-deflate allows message by message (RFC 7692 6)."""
    first = (0x80 if fin else 0) | opcode
    if length < 126:
        return struct.pack("!BB", first, length)
    if length < 65536:
        return struct.pack("!BBH", first, 126, length)
    return struct.pack("!BBQ", first, 127, length)


def response_ids(request_id: str | None) -> tuple[str, str | None]:
    """(id, replyTo) of the response to a request: `<id>.response` and the request id."""
    if request_id is None:
        return f"{_NO_ID}.response", None
    return f"{request_id}.response", request_id


# -- the gzip-base64-json wrapper -----------------------------------------------------------


def compress_payload(raw: bytes) -> str | None:
    """The wrapper's JSON text for the compact payload `raw`, or None when it does not pay
    (below 32 KiB, or base64 of the gzip not shorter). Deterministic (gzip mtime 0)."""
    if len(raw) < WRAP_MIN_BYTES:
        return None
    packed = gzip.compress(raw, compresslevel=6, mtime=0)
    data = base64.b64encode(packed).decode("ascii")
    if len(data) >= len(raw):
        return None
    return dumps(
        {
            WRAPPER_KEY: WRAPPER_ENCODING,
            "contentType": WRAPPER_CONTENT_TYPE,
            "originalByteCount": len(raw),
            "compressedByteCount": len(packed),
            "data": data,
        }
    )


def may_wrap(text: str) -> bool:
    """Whether compact JSON `text` can reach 32 KiB as UTF-8 (cheap; no encoding)."""
    return len(text) * 4 >= WRAP_MIN_BYTES


def wrap_text(text: str) -> str:
    """The payload text to send for compact JSON `text`: the wrapper when it pays, else text."""
    if not may_wrap(text):
        return text
    return compress_payload(text.encode()) or text


def encode_payload(payload: Any) -> str:
    """A response payload's JSON text: wrapped when the rule says so, else plain compact JSON."""
    return wrap_text(dumps(payload))


def _wrapper_error(reason: str, message: str) -> ToolError:
    return ToolError(
        INVALID_REQUEST,
        f"invalid {WRAPPER_ENCODING} payload: {message}",
        details={"reason": reason},
    )


def _byte_count(wrapper: dict[str, Any], key: str) -> int | None:
    value = wrapper.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _wrapper_error("invalid_byte_count", f"{key} must be a non-negative integer")
    return value


def inflate_bounded(packed: bytes, max_bytes: int) -> bytes:
    """Gunzip one complete gzip member, refusing (without producing it) any output beyond
    `max_bytes`: zlib stops at max_length, so a bomb costs at most max_bytes + 1 bytes."""
    inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)  # gzip framing only
    try:
        out = inflater.decompress(packed, max_bytes + 1)
    except zlib.error as exc:
        raise _wrapper_error("invalid_gzip", f"gzip data is corrupt: {exc}") from None
    if len(out) > max_bytes:
        raise _wrapper_error("payload_too_large", f"decoded payload exceeds {max_bytes} bytes")
    if not inflater.eof:
        raise _wrapper_error("invalid_gzip", "gzip data is truncated")
    if inflater.unused_data:
        raise _wrapper_error("invalid_gzip", "trailing bytes after the gzip member")
    return out


def unwrap_payload(payload: Any, max_bytes: int) -> Any:
    """Undo the wrapper on a received payload; anything without `$ansightEncoding` is returned
    as it is. Strict: every failure is a tool_protocol_invalid_request with details.reason."""
    if not isinstance(payload, dict) or WRAPPER_KEY not in payload:
        return payload
    encoding = payload[WRAPPER_KEY]
    if encoding != WRAPPER_ENCODING:
        raise _wrapper_error("unsupported_encoding", f"unsupported encoding {encoding!r}")
    extra = sorted(set(payload) - _WRAPPER_FIELDS)
    if extra:
        raise _wrapper_error("unknown_field", f"unknown wrapper fields {extra}")
    content_type = payload.get("contentType", WRAPPER_CONTENT_TYPE)
    if content_type != WRAPPER_CONTENT_TYPE:
        raise _wrapper_error("unsupported_content_type", f"contentType {content_type!r}")
    original = _byte_count(payload, "originalByteCount")
    compressed = _byte_count(payload, "compressedByteCount")
    if original is not None and original > max_bytes:
        raise _wrapper_error("payload_too_large", f"decoded payload exceeds {max_bytes} bytes")
    data = payload.get("data")
    if not isinstance(data, str) or not data:
        raise _wrapper_error("missing_data", "data must be a non-empty base64 string")
    try:
        packed = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise _wrapper_error("invalid_base64", f"data is not base64: {exc}") from None
    if compressed is not None and compressed != len(packed):
        raise _wrapper_error(
            "byte_count_mismatch", f"compressedByteCount {compressed} != {len(packed)}"
        )
    raw = inflate_bounded(packed, max_bytes)
    if original is not None and original != len(raw):
        raise _wrapper_error("byte_count_mismatch", f"originalByteCount {original} != {len(raw)}")
    try:
        return loads_strict(raw.decode("utf-8"))
    except ValueError as exc:  # wire.WireError; UnicodeDecodeError is a ValueError too
        raise _wrapper_error("invalid_json", f"decoded data is not JSON: {exc}") from None


# -- ASFT binary frames ---------------------------------------------------------------------

ASFT_PROTOCOL = "ansight.file-transfer.v1"
ASFT_MAGIC = b"ASFT"
ASFT_VERSION = 1
FRAME_CHUNK, FRAME_COMPLETE, FRAME_ERROR = 1, 2, 3
CHUNK_MIN, CHUNK_DEFAULT, CHUNK_MAX = 1024, 65536, 524288
# magic, version, frame type, reserved, transferId, int32 sequence, int64 offset, int32 length
_HEADER = struct.Struct("<4sBBH32siqi")
HEADER_BYTES = _HEADER.size  # 56
_HEX = frozenset("0123456789abcdef")
DELIVERY_BINARY, DELIVERY_INLINE = "websocket_binary", "inline"


@dataclass(frozen=True)
class AsftFrame:
    transfer_id: str
    frame_type: int
    sequence: int
    offset: int
    payload: bytes


def _check_transfer_id(transfer_id: str) -> bytes:
    if len(transfer_id) != 32 or not set(transfer_id) <= _HEX:
        raise ValueError("transferId must be 32 lowercase hex characters")
    return transfer_id.encode("ascii")


def asft_frame(
    transfer_id: str, frame_type: int, sequence: int, offset: int, payload: bytes | memoryview = b""
) -> bytes:
    header = _HEADER.pack(
        ASFT_MAGIC,
        ASFT_VERSION,
        frame_type,
        0,
        _check_transfer_id(transfer_id),
        sequence,
        offset,
        len(payload),
    )
    return header + payload


def asft_frames(transfer_id: str, data: bytes, chunk_bytes: int) -> Iterator[bytes]:
    """Chunk frames (sequence from 0, running byte offset), then the complete frame, which
    takes the next sequence number, the total length as offset and an empty payload."""
    if not CHUNK_MIN <= chunk_bytes <= CHUNK_MAX:
        raise ValueError(f"chunkBytes must be within {CHUNK_MIN}..{CHUNK_MAX}")
    view = memoryview(data)
    sequence = 0
    for offset in range(0, len(data), chunk_bytes):
        yield asft_frame(transfer_id, FRAME_CHUNK, sequence, offset, view[offset:][:chunk_bytes])
        sequence += 1
    yield asft_frame(transfer_id, FRAME_COMPLETE, sequence, len(data))


def artifact_size(result: dict[str, Any]) -> int:
    """The decoded byte count (the screenshot's own `size`, else computed from the base64)."""
    size = result.get("size")
    if isinstance(size, int) and not isinstance(size, bool):
        return size
    data: str = result["data"]
    return len(data) * 3 // 4 - data[-2:].count("=")


def detach_artifact(
    result: dict[str, Any], transfer_id: str, chunk_bytes: int
) -> tuple[dict[str, Any], bytes]:
    """Move a screen-bearing result's image out of the JSON: the result keeps its metadata and
    announces the transfer (the contract's fields); the bytes go out as ASFT frames."""
    data = base64.b64decode(result["data"])
    out = {k: v for k, v in result.items() if k != "data"}
    out.update(
        transferId=transfer_id,
        deliveryMode=DELIVERY_BINARY,
        wireProtocol=ASFT_PROTOCOL,
        status="queued",
        chunkBytes=chunk_bytes,
        mimeType=IMAGE_TYPES[result["format"]],
        sizeBytes=len(data),
    )
    return out, data


def parse_asft(frame: bytes) -> AsftFrame:
    """Strictly parse one binary message (what a host does; the tests use it)."""
    if len(frame) < HEADER_BYTES:
        raise ValueError(f"ASFT frame shorter than its {HEADER_BYTES}-byte header")
    magic, version, kind, reserved, tid, sequence, offset, length = _HEADER.unpack_from(frame)
    if magic != ASFT_MAGIC:
        raise ValueError("not an ASFT frame")
    if version != ASFT_VERSION:
        raise ValueError(f"unsupported ASFT version {version}")
    if kind not in (FRAME_CHUNK, FRAME_COMPLETE, FRAME_ERROR) or reserved != 0:
        raise ValueError("bad ASFT frame type or reserved bytes")
    transfer_id = tid.decode("ascii", "replace")
    _check_transfer_id(transfer_id)
    if sequence < 0 or offset < 0 or length != len(frame) - HEADER_BYTES:
        raise ValueError("bad ASFT sequence, offset or payload length")
    return AsftFrame(transfer_id, kind, sequence, offset, bytes(frame[HEADER_BYTES:]))
