"""The OCR worker process: `python -m daemon.screen.ocr_worker`, started by the daemon's OCR
service (daemon.screen.ocr) on the first read. It loads the engine, answers reads on its
standard input and output, and exits at the end of its input (the daemon closes it when OCR
has been idle) or when it is killed. Nothing of it outlives an idle spell, and nothing that goes
wrong in it (out of memory, a crash, a hang) reaches the daemon but as a failed read.

The wire and its framing: daemon.screen.ocr_wire.

The module's top imports nothing heavy: the engine loads in serve().
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from pathlib import Path
from typing import BinaryIO

from daemon.screen.ocr_wire import ProtocolError, line_item, requests, send

# Whom the kernel's OOM killer takes first when the board (or the unit's MemoryMax) runs out:
# this process, never the daemon that holds the target's keyboard. Raising one's own score
# needs no privilege.
OOM_SCORE_ADJ = 1000


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
