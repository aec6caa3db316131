"""The recorder: the catalog's observer that keeps every finished invocation in the store.

The observer runs on the event loop and only enqueues (never blocks, never raises); one writer
thread turns invocations into rows (redaction, JSON, reduced JPEGs), inserts them in batches and
prunes by age and size. A write the file system refuses (disk full, read-only folder, I/O error)
turns recording off for the daemon's life with one log line; health_check shows why, and every
tool keeps working.

Every record is bounded (docs/flight-recorder.md): an argument or result document over
MAX_VALUE_BYTES is kept as its first PREFIX_BYTES with its size and sha256, encoded in pieces so
that no single encode of a large value holds the GIL; a call refused before it ran is kept
compact (who, what, the code, the request's size), without its arguments, in the untrusted
share (store.py), as is every call of a caller without the token its connection needs.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import math
import queue
import secrets
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import structlog

from daemon import wire
from daemon.catalog import Catalog, Invocation
from daemon.config import TraceConfig
from daemon.frames import Frame
from daemon.screen.encode import encode
from daemon.trace import store

log = structlog.get_logger("daemon.trace")

REDACTED = "[redacted]"
# An argument or result document is kept whole up to this size (its compact JSON in UTF-8);
# past it, as its first PREFIX_BYTES with its size and sha256 (not replayable).
MAX_VALUE_BYTES = 64 << 10
PREFIX_BYTES = 4 << 10
MAX_STRING_CHARS = 16 << 10  # long result strings (shell output) are cut in the record
# A value with at most this many nodes and string characters is encoded at once (a few µs);
# a larger one in pieces of STEP characters at most, so the writer never holds the GIL long.
SMALL = 8 << 10
STEP = 16 << 10
BATCH = 256
# After the first invocation of a batch the writer waits this long for more: one transaction
# (and one wake-up of this thread) per window instead of one per call, so a burst of calls
# shares the cost; the record is readable this much later. A backlog of a whole batch is
# written at once: waiting then would hold the writer to one batch per window (1,024 calls a
# second), and a faster client filled the queue and lost records (319 of 8,000 at 2,100/s).
BATCH_WINDOW_S = 0.25
# Frames waiting for the writer (past it a new record comes without them). Each is a whole frame
# until the writer makes its thumbnail, 6 MB at 1080p: sixteen held 100 MB when an emulated
# board's writer fell behind, and a 256 MB board ran out of memory. Two: one call behind.
PENDING_FRAMES = 2
_STOP = object()
Built = tuple[store.Row, dict[str, Frame]]  # a record and the frames of its images


def secret_names(schema: Any) -> frozenset[str]:
    """Names of properties a schema marks as secret (writeOnly: true), at any depth and in any
    branch (if/then, allOf, items): redacting by name everywhere errs on the safe side."""
    found: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for name, sub in (node.get("properties") or {}).items():
                if isinstance(sub, dict) and sub.get("writeOnly") is True:
                    found.add(name)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(schema)
    return frozenset(found)


def redact(value: Any, names: frozenset[str]) -> Any:
    if not names:
        return value
    if isinstance(value, dict):
        return {k: REDACTED if k in names else redact(v, names) for k, v in value.items()}
    if isinstance(value, list):
        return [redact(v, names) for v in value]
    return value


def slim_result(value: Any) -> Any:
    """The result without screenshot bytes (kept as images) and with long strings cut."""
    if isinstance(value, dict):
        shot = "format" in value and isinstance(value.get("data"), str)
        return {
            k: ("[image]" if shot and k == "data" else slim_result(v)) for k, v in value.items()
        }
    if isinstance(value, list):
        return [slim_result(v) for v in value]
    if isinstance(value, str) and len(value) > MAX_STRING_CHARS:
        return value[:MAX_STRING_CHARS] + f"...[{len(value) - MAX_STRING_CHARS} chars cut]"
    return value


# Built once: json.dumps with options builds a new encoder on every call (hot on every record).
_encode = json.JSONEncoder(ensure_ascii=False, allow_nan=False, default=repr).encode
_string = json.encoder.encode_basestring  # C: a str as a JSON string, non-ASCII kept


def to_json(value: Any) -> str:
    """JSON for the record whatever arrived (a refused call may carry NaN or odd types).

    The wire's reply encoder writes it first (orjson in the daemon, at a sixth of json's cost:
    the writer holds the GIL while it builds rows, so that cost is taken from the event loop);
    what that refuses (NaN, a type JSON has not) goes the json way with repr for odd types.
    For small values only (bounded_json decides)."""
    with contextlib.suppress(ValueError, TypeError, RecursionError):
        return wire.dumps(value)
    try:
        return _encode(value)
    except (ValueError, TypeError, RecursionError):
        return json.dumps(repr(value)[:MAX_STRING_CHARS])


def small(value: Any, budget: int = SMALL) -> bool:
    """Whether `value` has at most `budget` nodes and string characters together (a walk that
    stops as soon as it knows it has not)."""
    stack, left = [value], budget
    while stack:
        v = stack.pop()
        left -= 1
        if isinstance(v, str):
            left -= len(v)
        elif isinstance(v, dict):
            if len(v) > left:
                return False
            for k, item in v.items():
                left -= len(k) if isinstance(k, str) else 1
                stack.append(item)
        elif isinstance(v, list | tuple):
            if len(v) > left:
                return False
            stack.extend(v)
        if left < 0:
            return False
    return True


def json_chunks(value: Any, depth: int = 0) -> Iterator[str]:
    """`value`'s compact JSON (for JSON data, json.dumps(value, ensure_ascii=False,
    separators=(",", ":")) to the byte) in pieces: a long string in slices of STEP characters,
    so no one encode costs more than a slice. What JSON has not (NaN, odd types, keys that are
    no strings, nesting past 64) is written as its repr's string."""
    if value is None or value is True or value is False:
        yield "null" if value is None else ("true" if value else "false")
    elif isinstance(value, str):
        if len(value) <= STEP:
            yield _string(value)
        else:
            yield '"'
            for at in range(0, len(value), STEP):
                yield _string(value[at : at + STEP])[1:-1]
            yield '"'
    elif isinstance(value, int):
        yield int.__repr__(value)
    elif isinstance(value, float) and math.isfinite(value):
        yield float.__repr__(value)
    elif isinstance(value, dict) and depth < 64:
        yield "{"
        for n, (key, item) in enumerate(value.items()):
            yield ("," if n else "") + _string(key if isinstance(key, str) else str(key)) + ":"
            yield from json_chunks(item, depth + 1)
        yield "}"
    elif isinstance(value, list | tuple) and depth < 64:
        yield "["
        for n, item in enumerate(value):
            if n:
                yield ","
            yield from json_chunks(item, depth + 1)
        yield "]"
    else:
        yield _string(repr(value)[:MAX_STRING_CHARS])


def truncated(prefix: str, size: int, digest: str) -> str:
    """The record of a document over MAX_VALUE_BYTES."""
    return _encode({"truncated": True, "bytes": size, "sha256": digest, "prefix": prefix})


def bounded_json(value: Any, limit: int = MAX_VALUE_BYTES) -> str:
    """`value` as the record keeps it: its JSON whole when it is at most `limit` bytes, else
    truncated(its first PREFIX_BYTES, its size, its sha256). A large value is encoded, counted
    and hashed in pieces (json_chunks): no single encode of all of it, under the GIL or not."""
    if small(value):
        text = to_json(value)
        data = text.encode("utf-8", "surrogatepass")
        if len(data) <= limit:
            return text
        return truncated(_prefix(data), len(data), hashlib.sha256(data).hexdigest())
    sha, size = hashlib.sha256(), 0
    kept: list[bytes] = []
    for piece in json_chunks(value):
        data = piece.encode("utf-8", "surrogatepass")
        if size <= limit:  # kept up to the piece that crosses the limit: the prefix is in it
            kept.append(data)
        size += len(data)
        sha.update(data)  # hashlib lets go of the GIL for pieces over 2 KiB
    whole = b"".join(kept)
    if size <= limit:
        return whole.decode("utf-8", "surrogatepass")
    return truncated(_prefix(whole), size, sha.hexdigest())


def _prefix(data: bytes) -> str:
    """The first PREFIX_BYTES of UTF-8 `data`, cut on a character's boundary."""
    return data[:PREFIX_BYTES].decode("utf-8", "ignore")


def is_truncated(value: Any) -> bool:
    """Whether a recorded document is kept as a prefix (truncated(), or the preview an older
    daemon wrote)."""
    return isinstance(value, dict) and (value.get("truncated") is True or "args_truncated" in value)


class Recorder:
    def __init__(self, catalog: Catalog, state_dir: Path, config: TraceConfig):
        self.catalog = catalog
        self.config = config
        self.path = state_dir / store.DB_NAME
        self.max_bytes = int(config.max_size_mb * (1 << 20))
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=4096)
        self._pending_frames = 0  # approximate (GIL-atomic int updates); bounds memory only
        self._facts: dict[str, tuple[str, bool, frozenset[str]]] = {}
        self.recorded = 0
        self.dropped = 0
        self.pruned = 0  # records gone by age or size since the start
        self.disabled_reason = "" if config.enabled else "disabled in the config ([trace].enabled)"
        self._thread: threading.Thread | None = None
        # The file found damaged at start and moved aside (file, reason, kept_as), if any.
        self.set_aside: dict[str, str | None] = {}
        self.ready = False  # the database exists and is migrated: readers may open it
        # Done once `ready` is decided either way (made by start(), on the event loop): a reader
        # right after the daemon's start, the writer still opening the file, awaits it instead
        # of finding no history, and holds no thread meanwhile.
        self._settled: asyncio.Future[None] | None = None

    # -- on the event loop ------------------------------------------------------------------

    def start(self) -> None:
        if self.disabled_reason:
            return
        loop = asyncio.get_running_loop()
        settled = self._settled = loop.create_future()

        def done() -> None:
            if not settled.done():
                settled.set_result(None)

        def settle() -> None:  # called from the writer thread
            with contextlib.suppress(RuntimeError):  # the loop has closed: nobody waits
                loop.call_soon_threadsafe(done)

        catalog_observers = self.catalog.observers
        catalog_observers.append(self.observe)
        self._thread = threading.Thread(
            target=self._run, args=(settle,), name="trace-writer", daemon=True
        )
        self._thread.start()

    async def wait_ready(self, timeout: float) -> bool:
        """Whether readers may open the database, once the writer has opened it (or failed to),
        waiting at most `timeout`."""
        if self._settled is not None and not self._settled.done():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._settled), timeout)
        return self.ready

    def observe(self, inv: Invocation) -> None:
        if self.disabled_reason:
            return
        frames = sum(1 for kind, _ in inv.evidence if kind in ("before", "after"))
        if frames and self._pending_frames + frames > PENDING_FRAMES:
            inv = _without_frames(inv)  # the writer is behind: keep the record, not the pixels
            frames = 0
        try:
            self._queue.put_nowait(inv)
            self._pending_frames += frames
        except queue.Full:
            self.dropped += 1

    def usb_changed(self, old: str, new: str, raw: str) -> None:
        """A USB state change (the target slept, woke, was unplugged): a record of its own,
        tool `usb_state` from transport `daemon`, so a history shows why input was refused."""
        self.observe(
            Invocation(
                id=secrets.token_hex(16),
                tool="usb_state",
                transport="daemon",
                client="",
                args={"state": new, "was": old, "udc_state": raw},
                started_at=time.time(),
                duration_ms=0,
                outcome="ok",
                error_code=None,
            )
        )

    def status(self) -> dict[str, Any]:
        """The health_check field."""
        out: dict[str, Any] = {
            "recording": not self.disabled_reason,
            "recorded": self.recorded,
            "dropped": self.dropped,
            "pruned": self.pruned,
        }
        if self.disabled_reason:
            out["reason"] = self.disabled_reason
        if self.set_aside:
            out["set_aside"] = dict(self.set_aside)
        return out

    def stop(self, timeout: float = 10.0) -> None:
        """Write what is queued, then end the thread (blocking: call it in a thread)."""
        if self._thread is None:
            return
        with contextlib.suppress(queue.Full):
            self._queue.put(_STOP, timeout=timeout)
        self._thread.join(timeout)

    # -- on the writer thread -----------------------------------------------------------------

    def _run(self, settle: Callable[[], None]) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = self._open()
            ledger = store.Ledger(conn)
            self.ready = True
        except Exception as exc:  # the file refused (OSError, sqlite3.Error) or worse: said once
            self._disable(exc)
            return
        finally:
            settle()
        try:
            while True:
                try:
                    first = self._queue.get(timeout=self.config.prune_interval_s)
                except queue.Empty:
                    first = None
                batch = [] if first is None else [first]
                if first is not None and first is not _STOP and self._queue.qsize() < BATCH - 1:
                    time.sleep(BATCH_WINDOW_S)
                while len(batch) < BATCH:
                    try:
                        batch.append(self._queue.get_nowait())
                    except queue.Empty:
                        break
                stop = any(item is _STOP for item in batch)
                invocations = [i for i in batch if i is not _STOP]
                try:
                    built = self._rows(invocations)
                    self._write(conn, ledger, [row for row, _ in built])
                    self._write_images(conn, ledger, built)
                except Exception as exc:  # the file refused (OSError, sqlite3.Error) or worse:
                    self._disable(exc)  # either way said once, never a silently dead writer
                    return
                if stop:
                    return
        finally:
            conn.close()

    def _open(self) -> sqlite3.Connection:
        """The writer's connection (0600 with its WAL: audit data). A file that fails its
        integrity check (a cut, a bad SD card) is set aside, kept for reading, and a new one
        started: recording never needs a hand to repair it."""
        try:
            return store.open_writer(self.path, self.max_bytes)
        except store.Damaged as exc:
            kept = store.set_aside(self.path)
            self.set_aside = {
                "file": str(self.path),
                "reason": str(exc),
                "kept_as": str(kept) if kept else None,
            }
            log.error("trace_file_set_aside", **self.set_aside, consequence="a new trail starts")
            if kept is None:
                raise
            return store.open_writer(self.path, self.max_bytes)

    def _write(self, conn: sqlite3.Connection, ledger: store.Ledger, rows: list[store.Row]) -> None:
        """Room first (age, then each share within its part of the cap), then the batch: the
        pages the prune freed take it, so the file stays within its cap."""
        incoming = {True: 0, False: 0}
        for row in rows:
            incoming[row.trusted] += row.size()
        removed = store.prune(conn, self.max_bytes, self.config.max_age_s, ledger, incoming)
        if rows:
            store.insert(conn, rows, ledger)
            self.recorded += len(rows)
            if store.used_bytes(conn) > self.max_bytes:  # the sizes are estimates: make sure
                removed += store.prune(conn, self.max_bytes, self.config.max_age_s, ledger)
        if removed:
            self.pruned += removed
            log.debug("trace_pruned", removed=removed)

    def _write_images(
        self, conn: sqlite3.Connection, ledger: store.Ledger, built: list[Built]
    ) -> None:
        """The batch's pictures, once its records are committed: a record is durable one batch
        window after its call ended, whatever its frames cost to encode (a tap's two 1080p
        frames took seconds of a loaded board VM, past the trail's loss window, and a power
        cut there lost the acknowledged record with them)."""
        shots = []
        for row, chosen in built:
            for kind, frame in chosen.items():
                try:
                    shots.append((row.values[0], row.trusted, self._image(kind, frame)))
                except Exception as exc:  # a picture this code cannot encode is lost alone
                    log.warning("trace_image_dropped", kind=kind, error=repr(exc)[:500])
        if not shots:
            return
        coming = {True: 0, False: 0}
        for _, trusted, image in shots:
            coming[trusted] += store.image_bytes(image)
        removed = store.prune(conn, self.max_bytes, self.config.max_age_s, ledger, coming)
        store.add_images(conn, shots, ledger)
        if store.used_bytes(conn) > self.max_bytes:
            removed += store.prune(conn, self.max_bytes, self.config.max_age_s, ledger)
        self.pruned += removed

    def _rows(self, invocations: list[Invocation]) -> list[Built]:
        rows = []
        for inv in invocations:
            try:
                rows.append(self._row(inv))
            except Exception as exc:  # one record this code cannot build is lost alone
                self.dropped += 1
                log.warning("trace_record_dropped", tool=inv.tool, error=repr(exc)[:500])
        return rows

    def _row(self, inv: Invocation) -> Built:
        """The invocation's record, and the frames its images are made from (_write_images)."""
        frames = [(kind, v) for kind, v in inv.evidence if kind in ("before", "after")]
        self._pending_frames -= len(frames)
        policy, hid, names = self._tool_facts(inv.tool)
        noted = dict(inv.evidence)
        # A call refused before it ran is kept compact: who, what, the code, the request's
        # size (its arguments never reach the recorder: see Catalog._log).
        args_json = bounded_json(redact(inv.args, names)) if inv.ran else "null"
        values = (
            inv.id,
            inv.started_at,
            inv.started_at + inv.duration_ms / 1000,
            inv.duration_ms,
            inv.transport,
            inv.client,
            inv.token_id,
            inv.tool,
            policy,
            int(hid),
            args_json,
            inv.outcome,
            inv.error_code,
            int(inv.client_gone),
            to_json(noted.get("profile_switches", [])),
            to_json(noted.get("released", [])),
            # An input tool's result says what it did (its screenshot is in the images); other
            # results are left out: bulky (screenshots, shell output), often sensitive, and
            # encoding each health_check's would be most of the writer's work.
            bounded_json(slim_result(inv.result)) if hid and inv.result is not None else None,
        )
        # The first "before" and the last "after" (drag_start takes two after-shots).
        chosen: dict[str, Frame] = {}
        for kind, frame in frames:
            if kind == "after" or kind not in chosen:
                chosen[kind] = frame
        row = store.Row(values, trusted=inv.ran and inv.trusted, request_bytes=inv.request_bytes)
        return row, chosen

    def _tool_facts(self, name: str) -> tuple[str, bool, frozenset[str]]:
        """(policy, hid, secret argument names) of a tool, looked up once per name."""
        facts = self._facts.get(name)
        if facts is None:
            try:
                spec = self.catalog.get(name)
                facts = (spec.policy, spec.hid, secret_names(self.catalog.args_schema(spec)))
            except Exception:  # an unknown tool's call is recorded too (tool_not_found)
                facts = ("read", False, frozenset())
            if len(self._facts) < 1024:  # unknown names come from callers: keep it bounded
                self._facts[name] = facts
        return facts

    def _image(self, kind: str, frame: Frame) -> store.Image:
        cfg = self.config
        enc = encode(frame, fmt="jpeg", quality=cfg.image_quality, max_width=cfg.image_max_width)
        return store.Image(kind, enc.width, enc.height, enc.data)

    def _disable(self, exc: BaseException) -> None:
        self.disabled_reason = f"{type(exc).__name__}: {exc}"
        # The one log line: every tool goes on, only the record stops.
        log.warning("trace_recording_disabled", path=str(self.path), reason=self.disabled_reason)
        self._pending_frames = 0
        while True:  # let go of queued frames
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break


def _without_frames(inv: Invocation) -> Invocation:
    from dataclasses import replace

    kept = tuple((k, v) for k, v in inv.evidence if k not in ("before", "after"))
    return replace(inv, evidence=kept)
