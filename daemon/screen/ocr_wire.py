"""The wire between the daemon's OCR service (daemon.screen.ocr) and its worker process
(daemon.screen.ocr_worker), on the worker's standard input and output.

Messages both ways: an 8-byte prefix (header length, payload length: big-endian u32s), a
msgpack header map, then the payload's bytes.
- worker -> daemon first: {"version", "ms"} once the engine loaded, or {"fatal": reason} and
  exit status 1 when it cannot load (a broken install: the daemon does not retry it).
- daemon -> worker: {"id", "op": "read", "shape": [h, w, 3]} + the image's BGR bytes.
- worker -> daemon: {"id", "lines": [[text, score, box, [[word, score, box], ...]], ...], "ms"}
  or {"id", "error": reason} when the engine raised on that image.

Pure helpers and the worker's blocking reads and writes; nothing heavy is imported here.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any, BinaryIO

import msgpack

from daemon.screen.ocr_types import Box, Line, Word

PREFIX = struct.Struct(">II")
CHUNK = 1 << 20  # the daemon writes a frame in slices of this size
MAX_HEADER = 16 << 20  # a screenful of lines is a few KB; this only bounds a corrupt prefix
MAX_PAYLOAD = 8192 * 8192 * 3  # the largest frame the capture config allows, in BGR


class ProtocolError(Exception):
    """A message that breaks the wire's rules (sizes, types)."""


def encode(header: dict[str, Any], payload_len: int = 0) -> tuple[bytes, bytes]:
    """The prefix and header of one message; its payload's bytes follow them."""
    packed: bytes = msgpack.packb(header, use_bin_type=True)
    return PREFIX.pack(len(packed), payload_len), packed


def sizes(prefix: bytes) -> tuple[int, int]:
    header_len, payload_len = PREFIX.unpack(prefix)
    if not 0 < header_len <= MAX_HEADER or payload_len > MAX_PAYLOAD:
        raise ProtocolError(f"message sizes out of bounds: {header_len}, {payload_len}")
    return int(header_len), int(payload_len)


def decode_header(data: bytes) -> dict[str, Any]:
    try:
        header = msgpack.unpackb(data, raw=False, strict_map_key=True)
    except Exception as exc:  # msgpack raises several kinds for corrupt input
        raise ProtocolError(f"header is not msgpack: {exc!r}") from None
    if not isinstance(header, dict):
        raise ProtocolError("header is not a map")
    return header


def _box(value: Any) -> Box:
    x0, y0, x1, y1 = (int(v) for v in value)
    return x0, y0, x1, y1


def line_item(line: Line) -> list[Any]:
    """One line as the worker's reply carries it."""
    words = [[w.text, w.confidence, list(w.box)] for w in line.words]
    return [line.text, line.confidence, list(line.box), words]


def line_from(item: Any) -> Line:
    """The line a reply's item carries (ProtocolError when it is malformed)."""
    try:
        text, score, box, words = item
        return Line(
            str(text),
            float(score),
            _box(box),
            tuple(Word(str(t), float(s), _box(b)) for t, s, b in words),
        )
    except (TypeError, ValueError) as exc:
        raise ProtocolError(f"malformed line {item!r}: {exc}") from None


# --- the worker's side (blocking I/O: that process does nothing else) ----------------------


def _read_exactly(stream: BinaryIO, n: int) -> bytes | None:
    """n bytes, or None at a clean end of input (before the first byte)."""
    chunks, got = [], 0
    while got < n:
        chunk = stream.read(n - got)
        if not chunk:
            if got == 0:
                return None
            raise ProtocolError(f"input ended {n - got} bytes before the message's end")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def requests(stream: BinaryIO) -> Iterator[tuple[dict[str, Any], bytes]]:
    while True:
        prefix = _read_exactly(stream, PREFIX.size)
        if prefix is None:
            return
        header_len, payload_len = sizes(prefix)
        header = decode_header(_read_exactly(stream, header_len) or b"")
        payload = b""
        if payload_len:
            payload = _read_exactly(stream, payload_len) or b""
        yield header, payload


def send(stream: BinaryIO, header: dict[str, Any]) -> None:
    for part in encode(header):
        stream.write(part)
    stream.flush()
