"""The WebSocket wire codec: envelopes, the gzip-base64-json wrapper, ASFT frames (pure)."""

from __future__ import annotations

import base64
import contextlib
import gzip
import json
import tracemalloc
import zlib
from dataclasses import dataclass
from typing import Any

import pytest
from aiohttp import WSCloseCode
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daemon.errors import ToolError
from daemon.transports import ws_codec as c

# -- strategies -----------------------------------------------------------------------------

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.text()
    | st.floats(allow_nan=False, allow_infinity=False)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner, max_size=5)
    ),
    max_leaves=20,
)
json_objects = st.dictionaries(st.text(max_size=8), json_values, max_size=6)
ids = st.text(min_size=1).filter(lambda s: s.strip() != "")
opt_text = st.none() | st.text()


def raw_wrapper(raw: bytes, **overrides: Any) -> dict[str, Any]:
    packed = gzip.compress(raw, mtime=0)
    wrapper: dict[str, Any] = {
        "$ansightEncoding": "gzip-base64-json",
        "contentType": "application/json",
        "originalByteCount": len(raw),
        "compressedByteCount": len(packed),
        "data": base64.b64encode(packed).decode(),
    }
    wrapper.update(overrides)
    return {k: v for k, v in wrapper.items() if v is not None}


def reason_of(wrapper: Any, max_bytes: int = 1 << 20) -> str:
    with pytest.raises(ToolError) as info:
        c.unwrap_payload(wrapper, max_bytes)
    assert info.value.code == "tool_protocol_invalid_request"
    assert info.value.details is not None
    return str(info.value.details["reason"])


# -- envelope -------------------------------------------------------------------------------


@dataclass(frozen=True)
class EnvelopeFields:
    kind: str
    message_id: str
    reply_to: str | None
    session_id: str | None
    sent_at: str
    payload: Any

    def encode(self) -> str:
        return c.encode_envelope(
            self.kind,
            self.message_id,
            self.reply_to,
            self.session_id,
            self.sent_at,
            c.dumps(self.payload),
        )


envelope_fields = st.builds(
    EnvelopeFields,
    kind=ids,
    message_id=ids,
    reply_to=opt_text,
    session_id=opt_text,
    sent_at=st.text(),
    payload=json_values,
)


@given(envelope_fields)
def test_envelope_round_trip_in_contract_field_order(f: EnvelopeFields) -> None:
    text = f.encode()
    keys = list(json.loads(text))
    order = ["type", "id", "replyTo", "sessionId", "sentAt", "capability", "payload"]
    assert keys == [k for k in order if k in keys]
    assert ("replyTo" in keys) == (f.reply_to is not None)
    assert ("sessionId" in keys) == (f.session_id is not None)
    env = c.decode_envelope(text)
    assert env is not None
    assert (env.type, env.id, env.reply_to, env.session_id, env.sent_at) == (
        f.kind,
        f.message_id,
        f.reply_to,
        f.session_id,
        f.sent_at,
    )
    assert env.capability == "tool.exec"
    assert env.payload == f.payload


@given(envelope_fields)
def test_envelope_is_the_compact_serialization_of_the_ordered_object(f: EnvelopeFields) -> None:
    obj: dict[str, Any] = {"type": f.kind, "id": f.message_id}
    if f.reply_to is not None:
        obj["replyTo"] = f.reply_to
    if f.session_id is not None:
        obj["sessionId"] = f.session_id
    obj.update(sentAt=f.sent_at, capability="tool.exec", payload=f.payload)
    assert f.encode() == json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


@given(json_values)
def test_strict_loads_reads_text_and_bytes_alike(value: Any) -> None:
    text = json.dumps(value, ensure_ascii=False)
    assert c.loads_strict(text) == c.loads_strict(text.encode("utf-16")) == value


@pytest.mark.parametrize("text", ["NaN", "[Infinity]", '{"a":-Infinity}'])
def test_strict_loads_refuses_non_json_constants(text: str) -> None:
    for value in (text, text.encode()):
        with pytest.raises(ValueError, match="is not JSON"):
            c.loads_strict(value)


def test_strict_loads_refuses_a_byte_order_mark_by_name() -> None:
    with pytest.raises(ValueError, match="BOM"):
        c.loads_strict('\ufeff{"a":1}')


@given(st.text())
def test_any_text_decodes_or_fails_with_a_protocol_outcome(text: str) -> None:
    with contextlib.suppress(c.FrameViolation, c.InvalidEnvelope):
        c.decode_envelope(text)


@given(json_values)
def test_any_json_value_decodes_or_fails_with_a_protocol_outcome(value: Any) -> None:
    text = json.dumps(value)
    try:
        env = c.decode_envelope(text)
    except c.FrameViolation as exc:
        assert not isinstance(value, dict)
        assert exc.code == WSCloseCode.INVALID_TEXT
        return
    except c.InvalidEnvelope as exc:
        assert isinstance(value, dict)
        assert exc.error.code == "tool_protocol_invalid_request"
        return
    assert isinstance(value, dict)
    if env is not None:
        assert env.type == value["type"] and env.id == value["id"]


@given(json_objects, st.sampled_from(["type", "id"]), st.sampled_from([None, "", "  ", 7, []]))
def test_type_and_id_must_be_non_empty_strings(obj: dict[str, Any], key: str, bad: Any) -> None:
    obj = {**obj, "type": "tool.query", "id": "r1", "capability": "tool.exec", key: bad}
    if bad is None:
        del obj[key]
    with pytest.raises(c.InvalidEnvelope) as info:
        c.decode_envelope(json.dumps(obj))
    assert info.value.error.code == "tool_protocol_invalid_request"
    # The error is correlated whenever the id itself was usable.
    assert info.value.request_id == (None if key == "id" else "r1")


@pytest.mark.parametrize("field", ["replyTo", "sessionId", "sentAt", "capability"])
def test_optional_fields_must_be_strings(field: str) -> None:
    obj = {"type": "tool.query", "id": "r1", field: 5}
    with pytest.raises(c.InvalidEnvelope) as info:
        c.decode_envelope(json.dumps(obj))
    assert info.value.request_id == "r1"


@pytest.mark.parametrize(
    "text",
    ["", "nope", "[1,2]", '"tool.query"', "42", "null", '{"type":"tool.query","id":"x","n":NaN}'],
)
def test_non_objects_are_frame_violations(text: str) -> None:
    with pytest.raises(c.FrameViolation) as info:
        c.decode_envelope(text)
    assert info.value.code == WSCloseCode.INVALID_TEXT


def test_absurd_nesting_is_a_frame_violation_and_a_wrapper_error() -> None:
    deep = "[" * 100_000 + "]" * 100_000
    with pytest.raises(c.FrameViolation):
        c.decode_envelope(deep)
    assert reason_of(raw_wrapper(deep.encode())) == "invalid_json"


def test_other_capabilities_are_ignored_whatever_else_is_wrong() -> None:
    assert c.decode_envelope('{"type":"tool.query","id":"a","capability":"metrics"}') is None
    assert c.decode_envelope('{"capability":"metrics"}') is None
    env = c.decode_envelope('{"type":"tool.query","id":"a","capability":""}')
    assert env is not None and env.id == "a"


def test_response_ids() -> None:
    assert c.response_ids("q1") == ("q1.response", "q1")
    assert c.response_ids(None) == ("tool.invalid.response", None)


# -- the wrapper ----------------------------------------------------------------------------


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow])
@given(json_values, st.integers(min_value=0, max_value=40000))
def test_encode_payload_wraps_exactly_when_the_rule_says(value: Any, pad: int) -> None:
    payload = {"pad": "x" * pad, "value": value}
    raw = c.dumps(payload).encode()
    text = c.encode_payload(payload)
    decoded = json.loads(text)
    if "$ansightEncoding" in decoded:
        assert len(raw) >= 32768
        assert list(decoded) == [
            "$ansightEncoding",
            "contentType",
            "originalByteCount",
            "compressedByteCount",
            "data",
        ]
        assert decoded["originalByteCount"] == len(raw)
        assert decoded["compressedByteCount"] == len(base64.b64decode(decoded["data"]))
        assert len(decoded["data"]) < len(raw)
        assert c.unwrap_payload(decoded, 1 << 20) == json.loads(raw)
    else:
        assert text == raw.decode()
        # Not wrapped: too small, or gzip+base64 would not be shorter.
        packed = base64.b64encode(gzip.compress(raw, mtime=0))
        assert len(raw) < 32768 or len(packed) >= len(raw)


def test_incompressible_large_payloads_stay_plain() -> None:
    import os

    payload = {"blob": base64.b85encode(os.urandom(60000)).decode()}
    assert c.encode_payload(payload) == c.dumps(payload)


def test_large_compressible_payload_is_wrapped_deterministically() -> None:
    payload = {"rows": [{"i": i, "name": "row"} for i in range(3000)]}
    first, second = c.encode_payload(payload), c.encode_payload(payload)
    assert first == second and json.loads(first)["$ansightEncoding"] == "gzip-base64-json"


@given(json_objects)
def test_plain_payloads_pass_through_unwrap(obj: dict[str, Any]) -> None:
    obj.pop("$ansightEncoding", None)
    assert c.unwrap_payload(obj, 1024) is obj


@given(st.dictionaries(st.sampled_from(sorted(c._WRAPPER_FIELDS)), json_values))
def test_unwrap_of_arbitrary_wrappers_fails_only_with_protocol_errors(
    wrapper: dict[str, Any],
) -> None:
    wrapper["$ansightEncoding"] = wrapper.get("$ansightEncoding", "gzip-base64-json")
    try:
        c.unwrap_payload(wrapper, 4096)
    except ToolError as exc:
        assert exc.code == "tool_protocol_invalid_request"


@given(st.binary(max_size=300))
def test_unwrap_of_arbitrary_bytes_fails_only_with_protocol_errors(blob: bytes) -> None:
    for data in (blob, gzip.compress(blob, mtime=0)):
        wrapper = {"$ansightEncoding": "gzip-base64-json", "data": base64.b64encode(data).decode()}
        try:
            value = c.unwrap_payload(wrapper, 4096)
        except ToolError as exc:
            assert exc.code == "tool_protocol_invalid_request"
        else:
            assert value == json.loads(zlib.decompress(data, 31).decode())


@given(json_values)
def test_unwrap_round_trip(value: Any) -> None:
    raw = c.dumps(value).encode()
    assert c.unwrap_payload(raw_wrapper(raw), 1 << 20) == value


def test_unwrap_strictness() -> None:
    good = b'{"toolId":"health_check"}'
    assert c.unwrap_payload(raw_wrapper(good), 1024) == {"toolId": "health_check"}
    assert reason_of(raw_wrapper(good, **{"$ansightEncoding": "brotli"})) == "unsupported_encoding"
    assert reason_of(raw_wrapper(good, contentType="text/plain")) == "unsupported_content_type"
    assert reason_of(raw_wrapper(good, extra=1)) == "unknown_field"
    assert reason_of(raw_wrapper(good, data="")) == "missing_data"
    assert reason_of(raw_wrapper(good, data=5)) == "missing_data"
    assert reason_of({"$ansightEncoding": "gzip-base64-json"}) == "missing_data"
    assert reason_of(raw_wrapper(good, data="not base64!")) == "invalid_base64"
    assert reason_of(raw_wrapper(good, data="QUJD\nREVG")) == "invalid_base64"
    assert reason_of(raw_wrapper(good, data="QUJDRA")) == "invalid_base64"  # bad padding
    plain = base64.b64encode(good).decode()
    assert reason_of(raw_wrapper(good, data=plain, compressedByteCount=None)) == "invalid_gzip"
    zlib_not_gzip = base64.b64encode(zlib.compress(good)).decode()
    assert (
        reason_of(raw_wrapper(good, data=zlib_not_gzip, compressedByteCount=None)) == "invalid_gzip"
    )
    packed = gzip.compress(good, mtime=0)
    truncated = base64.b64encode(packed[:-6]).decode()
    assert reason_of(raw_wrapper(good, data=truncated, compressedByteCount=None)) == "invalid_gzip"
    trailing = base64.b64encode(packed + b"xx").decode()
    assert reason_of(raw_wrapper(good, data=trailing, compressedByteCount=None)) == "invalid_gzip"
    two = base64.b64encode(packed + packed).decode()
    assert reason_of(raw_wrapper(good, data=two, compressedByteCount=None)) == "invalid_gzip"
    assert reason_of(raw_wrapper(b"\xff\xfe{}")) == "invalid_json"
    assert reason_of(raw_wrapper(b'{"a":')) == "invalid_json"
    assert reason_of(raw_wrapper(b'{"a":NaN}')) == "invalid_json"
    assert reason_of(raw_wrapper(good, originalByteCount=3)) == "byte_count_mismatch"
    assert reason_of(raw_wrapper(good, compressedByteCount=3)) == "byte_count_mismatch"
    assert reason_of(raw_wrapper(good, originalByteCount=-1)) == "invalid_byte_count"
    assert reason_of(raw_wrapper(good, originalByteCount=True)) == "invalid_byte_count"
    assert reason_of(raw_wrapper(good, originalByteCount="25")) == "invalid_byte_count"


def bomb(decoded_bytes: int) -> bytes:
    """A gzip member inflating to `decoded_bytes` zeros, built without holding them."""
    deflater = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = bytes(1 << 20)
    parts = [deflater.compress(block) for _ in range(decoded_bytes >> 20)]
    return b"".join(parts) + deflater.flush()


def test_gzip_bomb_is_refused_while_inflating_at_bounded_cost() -> None:
    packed = bomb(256 << 20)  # 256 MiB of zeros in about 250 KiB
    assert len(packed) < 1 << 20
    data = base64.b64encode(packed).decode()
    limit = 1 << 20
    # The honest size is refused before any inflating; a lie (or no size) while inflating.
    for declared in (256 << 20, 10, None):
        wrapper = {"$ansightEncoding": "gzip-base64-json", "data": data}
        if declared is not None:
            wrapper["originalByteCount"] = declared
        tracemalloc.start()
        try:
            assert reason_of(wrapper, limit) == "payload_too_large"
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        # A few times the bound (zlib's output buffer) plus the input: never the 256 MiB.
        assert peak < 3 * limit + 2 * len(packed)


def test_inflate_bound_is_exact() -> None:
    raw = b"a" * 1000
    packed = gzip.compress(raw)
    assert c.inflate_bounded(packed, 1000) == raw
    with pytest.raises(ToolError):
        c.inflate_bounded(packed, 999)


# -- ASFT -----------------------------------------------------------------------------------

transfer_ids = st.text(alphabet="0123456789abcdef", min_size=32, max_size=32)


@settings(max_examples=50)
@given(transfer_ids, st.binary(max_size=5000), st.integers(min_value=1024, max_value=3000))
def test_asft_frames_reassemble(transfer_id: str, data: bytes, chunk: int) -> None:
    frames = [c.parse_asft(f) for f in c.asft_frames(transfer_id, data, chunk)]
    *chunks, last = frames
    assert [f.sequence for f in frames] == list(range(len(frames)))
    assert all(f.frame_type == c.FRAME_CHUNK and 0 < len(f.payload) <= chunk for f in chunks)
    assert [f.offset for f in chunks] == list(range(0, len(data), chunk))
    assert b"".join(f.payload for f in chunks) == data
    assert (last.frame_type, last.offset, last.payload) == (c.FRAME_COMPLETE, len(data), b"")
    assert all(f.transfer_id == transfer_id for f in frames)


def test_asft_header_layout() -> None:
    tid = "0123456789abcdef" * 2
    frame = c.asft_frame(tid, c.FRAME_CHUNK, 7, 1 << 33, b"xyz")
    assert len(frame) == c.HEADER_BYTES + 3 == 59
    assert frame[0:4] == b"ASFT" and frame[4] == 1 and frame[5] == 1 and frame[6:8] == b"\0\0"
    assert frame[8:40] == tid.encode()
    assert int.from_bytes(frame[40:44], "little") == 7
    assert int.from_bytes(frame[44:52], "little") == 1 << 33
    assert int.from_bytes(frame[52:56], "little") == 3
    assert frame[56:] == b"xyz"
    error = c.parse_asft(c.asft_frame(tid, c.FRAME_ERROR, 0, 0, b"gone"))
    assert error.frame_type == c.FRAME_ERROR and error.payload == b"gone"


@pytest.mark.parametrize(
    "mutate",
    [
        lambda f: f[:55],
        lambda f: b"ASFX" + f[4:],
        lambda f: f[:4] + b"\x02" + f[5:],
        lambda f: f[:5] + b"\x09" + f[6:],
        lambda f: f[:6] + b"\x01" + f[7:],
        lambda f: f[:8] + b"G" + f[9:],
        lambda f: f + b"extra",
        lambda f: f[:-1],
    ],
)
def test_asft_parse_is_strict(mutate: Any) -> None:
    good = c.asft_frame("ab" * 16, c.FRAME_CHUNK, 0, 0, b"data")
    c.parse_asft(good)
    with pytest.raises(ValueError):
        c.parse_asft(mutate(good))


def test_asft_rejects_bad_ids_and_chunk_sizes() -> None:
    with pytest.raises(ValueError):
        c.asft_frame("AB" * 16, c.FRAME_CHUNK, 0, 0)
    with pytest.raises(ValueError):
        list(c.asft_frames("ab" * 16, b"x", 1023))
    with pytest.raises(ValueError):
        list(c.asft_frames("ab" * 16, b"x", 524289))


def test_empty_artifact_is_one_complete_frame() -> None:
    (only,) = (c.parse_asft(f) for f in c.asft_frames("ab" * 16, b"", 1024))
    assert (only.frame_type, only.sequence, only.offset) == (c.FRAME_COMPLETE, 0, 0)


@given(st.binary(max_size=2000), st.sampled_from(["jpeg", "png"]))
def test_detach_artifact(data: bytes, fmt: str) -> None:
    result = {
        "width": 1,
        "height": 2,
        "format": fmt,
        "size": len(data),
        "data": base64.b64encode(data).decode(),
    }
    assert c.is_artifact(result) and c.artifact_size(result) == len(data)
    without_size = {k: v for k, v in result.items() if k != "size"}
    assert c.artifact_size(without_size) == len(data)
    announced, raw = c.detach_artifact(result, "cd" * 16, 4096)
    assert raw == data
    assert "data" not in announced
    assert announced == {
        "width": 1,
        "height": 2,
        "format": fmt,
        "size": len(data),
        "transferId": "cd" * 16,
        "deliveryMode": "websocket_binary",
        "wireProtocol": "ansight.file-transfer.v1",
        "status": "queued",
        "chunkBytes": 4096,
        "mimeType": f"image/{fmt}",
        "sizeBytes": len(data),
    }


def test_only_image_results_are_artifacts() -> None:
    assert not c.is_artifact({"data": "AAAA"})
    assert not c.is_artifact({"data": 5, "format": "jpeg"})
    assert not c.is_artifact("jpeg")


# -- a batch result built whole, or streamed -------------------------------------------------

items_st = st.lists(
    st.dictionaries(st.text(max_size=5), st.one_of(st.integers(), st.text(max_size=20))),
    max_size=5,
)


@given(items_st, st.booleans(), st.integers(0, 32), st.integers(0, 8))
def test_a_batch_result_is_the_same_json_whole_or_streamed(
    items: list[dict[str, Any]], success: bool, completed: int, extra: int
) -> None:
    requested = len(items) + extra
    texts = [c.dumps(i) for i in items]
    stopped = len(items) < requested
    whole = {
        "success": success,
        "completed": completed,
        "requested": requested,
        "stoppedEarly": stopped,
        "results": items,
    }
    assert c.batch_whole(success, completed, requested, texts) == c.dumps(whole)
    head = c.envelope_head("tool.batch.result", "b.response", "b", None, "2026-01-01T00:00:00Z")
    streamed = head + c.batch_open(requested) + ",".join(texts)
    streamed += c.batch_close(success, completed, stopped)
    env = json.loads(streamed)
    assert list(env) == ["type", "id", "replyTo", "sentAt", "capability", "payload"]
    assert env["payload"] == whole
    assert list(env["payload"])[:2] == ["requested", "results"]


@pytest.mark.parametrize("length", [0, 125, 126, 65535, 65536, 1 << 20])
def test_frame_headers(length: int) -> None:
    first = c.frame_header(c.OP_TEXT, False, length)
    last = c.frame_header(c.OP_CONTINUATION, True, length)
    assert first[0] == 0x01 and last[0] == 0x80  # FIN clear then set; RSV clear: uncompressed
    size = {2: first[1], 4: int.from_bytes(first[2:4], "big"), 10: int.from_bytes(first[2:], "big")}
    assert len(first) in size and size[len(first)] == length
    assert first[1] & 0x80 == 0  # a server's frames are not masked
    assert len(first) == (2 if length < 126 else 4 if length < 65536 else 10)
