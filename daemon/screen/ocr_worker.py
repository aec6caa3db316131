"""The OCR worker process: `python -m daemon.screen.ocr_worker`, started by the daemon's OCR
service (daemon.screen.ocr) on the first read. It loads the engine, answers reads on its
standard input and output, and exits at the end of its input (the daemon closes it when OCR
has been idle) or when it is killed. Nothing of it outlives an idle spell, and nothing that goes
wrong in it (out of memory, a crash, a hang) reaches the daemon but as a failed read.

The wire, both ways: messages of an 8-byte prefix (header length, payload length: big-endian
u32s), a msgpack header map, then the payload's bytes.
- worker -> daemon first: {"version", "ms"} once the engine loaded, or {"fatal": reason} and
  exit status 1 when it cannot load (a broken install: the daemon does not retry it).
- daemon -> worker: {"id", "op": "read", "shape": [h, w, 3]} + the image's BGR bytes.
- worker -> daemon: {"id", "lines": [[text, score, box, [[word, score, box], ...]], ...], "ms"}
  or {"id", "error": reason} when the engine raised on that image.

The module's top imports nothing heavy: the daemon imports it for the wire's pure helpers.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import struct
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import msgpack

PREFIX = struct.Struct(">II")
CHUNK = 1 << 20  # the daemon writes a frame in slices of this size
MAX_HEADER = 16 << 20  # a screenful of lines is a few KB; this only bounds a corrupt prefix
MAX_PAYLOAD = 8192 * 8192 * 3  # the largest frame the capture config allows, in BGR
# Whom the kernel's OOM killer takes first when the board (or the unit's MemoryMax) runs out:
# this process, never the daemon that holds the target's keyboard. Raising one's own score
# needs no privilege.
OOM_SCORE_ADJ = 1000


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


# --- the worker's side (blocking I/O: this process does nothing else) ----------------------


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


def _raise_oom_score() -> None:
    # Not Linux, or /proc read-only: the daemon still survives whatever happens here.
    with contextlib.suppress(OSError):
        Path("/proc/self/oom_score_adj").write_text(str(OOM_SCORE_ADJ))


def serve(threads: int, stdin: BinaryIO, stdout: BinaryIO) -> int:
    _raise_oom_score()
    started = time.monotonic()
    try:
        import numpy as np

        from daemon.memory import give_back_memory, map_large_blocks
        from daemon.screen.ocr import line_item
        from daemon.screen.ocr_engine import RapidEngine

        map_large_blocks()
        engine = RapidEngine(threads)
    except Exception as exc:  # a missing package or model: reported once, not retried
        send(stdout, {"fatal": repr(exc)})
        return 1
    send(stdout, {"version": engine.version, "ms": round((time.monotonic() - started) * 1000)})
    for header, payload in requests(stdin):
        rid = header.get("id")
        try:
            h, w, c = (int(n) for n in header["shape"])
            image = np.frombuffer(payload, np.uint8).reshape(h, w, c)
        except (KeyError, TypeError, ValueError) as exc:
            raise ProtocolError(f"bad read request: {exc!r}") from None
        began = time.monotonic()
        try:
            lines = engine.read(image)
        except Exception as exc:  # this image only: the worker goes on
            send(stdout, {"id": rid, "error": repr(exc)})
            continue
        finally:
            del image, payload
            give_back_memory()
        ms = round((time.monotonic() - began) * 1000)
        send(stdout, {"id": rid, "lines": [line_item(ln) for ln in lines], "ms": ms})
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m daemon.screen.ocr_worker")
    parser.add_argument("--threads", type=int, default=1, help="onnxruntime threads per run")
    args = parser.parse_args(argv)
    # The wire gets the real standard output; anything a library prints lands on stderr (the
    # daemon's log) instead of in the middle of a message.
    wire_out = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    return serve(args.threads, sys.stdin.buffer, wire_out)


if __name__ == "__main__":
    sys.exit(main())
