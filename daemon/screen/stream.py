"""The live view: GET /api/stream (MJPEG, multipart/x-mixed-replace) and GET /api/snapshot.

Sharing. Viewers asking for the same (fps, quality, max_width) share one *feed*: one pump task
takes a frame from the FrameSource once per interval, encodes it once (or passes the device's
own JPEG through untouched, see encode.encode) and publishes it as a ready-made multipart part.
Each viewer only writes the newest part: a viewer whose socket is slow skips to the newest
frame when its write completes (counted as dropped), so nothing is buffered per viewer beyond
the one part being written (and a kernel send buffer cut to about two parts). A viewer
whose socket takes nothing for [stream].stall_timeout_s is dropped.

On demand. A feed's pump starts with its first viewer and ends with its last; the source
(V4L2Capture, or the simulated target's renderer) reads or renders only while asked, so with no
viewer the board spends no CPU on video.

Capture loss (the documented choice: the stream ends). When the source raises
capture_unavailable, every viewer of that feed gets one last part, `application/json` with the
error ({code, message, retryable, details}), then the closing boundary, and its response ends.
A stream asked for while the capture is gone is refused with 503 and the same error. When the
capture comes back, a new request gets frames again (the Tool Lab reconnects by itself).

No signal (an HDMI bridge whose target is asleep, unplugged, out of range: the error codes of
capture_dv.SIGNAL_STATES). The stream does not end and never freezes on the last frame: it
shows a NO SIGNAL picture naming the state (a part like any other, X-Signal-State set), asks
the capture again every second, and carries on with frames when the source is back.

Who may watch is the routes' business (daemon/transports/stream_http.py).

Each part carries X-Frame-Seq (the source's frame number), X-Timestamp (capture time, Unix
seconds, as ustreamer sends it) and X-Captured-Mono (time.monotonic() of the capture, for
frame-age measurements on the same machine).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import socket
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import structlog
from aiohttp import web

from daemon.config import StreamConfig
from daemon.errors import ToolError
from daemon.frames import Frame, FrameSource

if TYPE_CHECKING:
    from daemon.frames import Image
from daemon.screen.capture_dv import SIGNAL_STATES
from daemon.screen.encode import Encoded, encode
from daemon.wire import query_number

log = structlog.get_logger("daemon.screen.stream")

BOUNDARY = "fingertipframe"
CONTENT_TYPE = f"multipart/x-mixed-replace;boundary={BOUNDARY}"
MAX_WIDTH_RANGE = (16, 8192)
FPS_WINDOW_S = 5.0  # delivered fps is averaged over this window
SEND_BUFFER_MIN, SEND_BUFFER_MAX = 64 << 10, 4 << 20
NO_SIGNAL_RETRY_S = 1.0  # how often a stream showing NO SIGNAL asks the capture again
NO_SIGNAL_WIDTH = 1280


def _small_send_buffer(request: web.Request, part_bytes: int) -> None:
    """Room for about two parts in the kernel, so a slow viewer's socket pushes back at once
    and it skips to the newest frame instead of reading stale ones from a deep buffer (Linux
    autotunes a loopback send buffer to megabytes)."""
    sock = request.transport.get_extra_info("socket") if request.transport else None
    if sock is not None:
        size = min(max(2 * part_bytes, SEND_BUFFER_MIN), SEND_BUFFER_MAX)
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, size)


@dataclass(frozen=True)
class Params:
    """One viewer's request, validated against [stream]. Viewers with equal Params share."""

    fps: float
    quality: int
    max_width: int | None


@dataclass(frozen=True)
class Part:
    seq: int  # the feed's own count of published parts (jumps = frames a viewer skipped)
    captured_at: float
    data: bytes  # boundary, headers and JPEG, ready to write


def part_bytes(encoded: Encoded, frame: Frame) -> bytes:
    head = (
        f"--{BOUNDARY}\r\n"
        "Content-Type: image/jpeg\r\n"
        f"Content-Length: {len(encoded.data)}\r\n"
        f"X-Frame-Seq: {frame.seq}\r\n"
        f"X-Timestamp: {frame.captured_at_utc:.6f}\r\n"
        f"X-Captured-Mono: {frame.captured_at:.6f}\r\n\r\n"
    )
    return head.encode("ascii") + encoded.data + b"\r\n"


def no_signal_picture(state: str, reason: str, width: int) -> Image:
    """A dark frame that says NO SIGNAL and why, 16:9, `width` wide."""
    import cv2
    import numpy as np

    height = width * 9 // 16
    image = np.full((height, width, 3), 24, np.uint8)
    scale = width / 640
    font = cv2.FONT_HERSHEY_SIMPLEX
    title = "NO SIGNAL" if state == "no_signal" else state.replace("_", " ").upper()
    for text, size, y, colour in (
        (title, 1.6 * scale, 0.45, (255, 255, 255)),
        (reason[:64], 0.5 * scale, 0.62, (200, 200, 200)),
    ):
        thick = max(1, round(size * 2))
        (tw, _), _ = cv2.getTextSize(text, font, size, thick)
        org = ((width - tw) // 2, int(height * y))
        cv2.putText(image, text, org, font, size, colour, thick, cv2.LINE_AA)
    return image


def no_signal_part(error: ToolError, params: Params, seq: int) -> bytes:
    """The multipart part shown while an HDMI source sends no usable signal."""
    import cv2

    state = error.code
    width = min(params.max_width or NO_SIGNAL_WIDTH, NO_SIGNAL_WIDTH)
    image = no_signal_picture(state, error.message, width)
    ok, jpeg = cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, params.quality])
    assert ok
    data = jpeg.tobytes()
    now = time.time()
    head = (
        f"--{BOUNDARY}\r\n"
        "Content-Type: image/jpeg\r\n"
        f"Content-Length: {len(data)}\r\n"
        f"X-Signal-State: {state}\r\n"
        f"X-Frame-Seq: 0\r\n"
        f"X-Timestamp: {now:.6f}\r\n\r\n"
    )
    return head.encode("ascii") + data + b"\r\n"


def error_part(error: ToolError) -> bytes:
    body = json.dumps(error.to_dict()).encode()
    head = f"--{BOUNDARY}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    return head.encode("ascii") + body + b"\r\n" + f"--{BOUNDARY}--\r\n".encode("ascii")


def parse_params(query: Any, config: StreamConfig) -> Params:
    """fps, quality and max_width from the query string, within [stream]'s bounds."""
    unknown = set(query) - {"fps", "quality", "max_width", "token"}
    if unknown:
        raise _bad(f"unknown query parameter(s): {', '.join(sorted(unknown))}")
    repeated = sorted(k for k in set(query) if len(query.getall(k)) > 1)
    if repeated:
        raise _bad(f"query parameter(s) given twice: {', '.join(repeated)}")
    fps = _number(query, "fps", config.default_fps, 0.5, config.max_fps, float)
    quality = _number(
        query, "quality", config.default_quality, config.min_quality, config.max_quality, int
    )
    width = query.get("max_width")
    max_width = None if width is None else _number(query, "max_width", 0, *MAX_WIDTH_RANGE, int)
    return Params(float(fps), int(quality), None if max_width is None else int(max_width))


def _number(query: Any, name: str, default: float, lo: float, hi: float, kind: type) -> float:
    text = query.get(name)
    if text is None:
        return min(max(default, lo), hi)
    try:
        value = query_number(text, kind)
    except ValueError:
        raise _bad(f"{name} must be a{'n integer' if kind is int else ' number'}") from None
    if not lo <= value <= hi:  # NaN fails this too
        raise _bad(f"{name} must be in {lo:g}..{hi:g}")
    return float(value)


def _bad(message: str) -> ToolError:
    return ToolError("stream_params_invalid", message)


@dataclass(eq=False)
class Feed:
    """One encoding of the capture and the viewers that share it."""

    params: Params
    viewers: int = 0
    latest: Part | None = None
    ended: ToolError | None = None
    task: asyncio.Task[None] | None = None
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    def publish(self, part: Part) -> None:
        self.latest = part
        self._wake()

    def end(self, error: ToolError) -> None:
        self.ended = error
        self._wake()

    def _wake(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def after(self, seq: int) -> Part | None:
        """The newest part newer than `seq`, waiting for it; None once the feed ended."""
        while True:
            if self.ended is not None:
                return None
            if self.latest is not None and self.latest.seq > seq:
                return self.latest
            await self._changed.wait()


@dataclass
class Counters:
    encoded: int = 0
    passed_through: int = 0
    delivered: int = 0
    dropped: int = 0
    stalled_viewers: int = 0
    ended_by_capture_loss: int = 0
    no_signal_parts: int = 0


class StreamHub:
    """Feeds by Params, their pumps, the counters health_check reports."""

    def __init__(self, source: FrameSource, config: StreamConfig, frame_timeout_s: float):
        self.source = source
        self.config = config
        self.frame_timeout_s = frame_timeout_s
        self.feeds: dict[Params, Feed] = {}
        self.counters = Counters()
        self._deliveries: collections.deque[float] = collections.deque(
            maxlen=int(config.max_viewers * config.max_fps * FPS_WINDOW_S) + 1
        )
        self._responses: set[web.StreamResponse] = set()

    @property
    def viewers(self) -> int:
        return sum(f.viewers for f in self.feeds.values())

    @property
    def capturing(self) -> bool:
        return any(f.task is not None and not f.task.done() for f in self.feeds.values())

    def metrics(self) -> dict[str, Any]:
        # Deliveries are appended in time order: those older than the window leave from the
        # left, so health_check counts the window without scanning it.
        cutoff = time.monotonic() - FPS_WINDOW_S
        deliveries = self._deliveries
        while deliveries and deliveries[0] <= cutoff:
            deliveries.popleft()
        recent = len(deliveries)
        c = self.counters
        return {
            "viewers": self.viewers,
            "feeds": len(self.feeds),
            "capturing": self.capturing,
            "delivered_fps": round(recent / FPS_WINDOW_S, 1),
            "frames_encoded": c.encoded,
            "frames_passed_through": c.passed_through,
            "frames_delivered": c.delivered,
            "frames_dropped": c.dropped,
            "stalled_viewers": c.stalled_viewers,
            "ended_by_capture_loss": c.ended_by_capture_loss,
            "no_signal_parts": c.no_signal_parts,
        }

    # ---- viewers ----------------------------------------------------------------------------

    def join(self, params: Params) -> Feed:
        if self.viewers >= self.config.max_viewers:
            raise ToolError(
                "too_many_viewers",
                f"{self.config.max_viewers} streams are open ([stream].max_viewers)",
                retryable=True,
            )
        feed = self.feeds.get(params)
        if feed is None or feed.ended is not None:
            feed = self.feeds[params] = Feed(params)
        feed.viewers += 1
        if feed.task is None:
            feed.task = asyncio.create_task(self._pump(feed), name=f"stream-pump {params}")
        return feed

    def leave(self, feed: Feed) -> None:
        feed.viewers -= 1
        if feed.viewers == 0:
            if feed.task is not None:
                feed.task.cancel()
            if self.feeds.get(feed.params) is feed:
                del self.feeds[feed.params]

    async def watch(self, request: web.Request, params: Params) -> web.StreamResponse:
        feed = self.join(params)
        try:
            first = await feed.after(0)
            if first is None:
                assert feed.ended is not None
                raise feed.ended  # nothing was sent yet: the route answers with the error
            response = web.StreamResponse(
                headers={
                    "Content-Type": CONTENT_TYPE,
                    "Cache-Control": "no-store, no-cache, must-revalidate",
                    "Pragma": "no-cache",
                    "X-Content-Type-Options": "nosniff",
                }
            )
            await response.prepare(request)
            _small_send_buffer(request, len(first.data))
            self._responses.add(response)
            try:
                await self._deliver(feed, response, first)
            finally:
                self._responses.discard(response)
            return response
        finally:
            self.leave(feed)

    async def _deliver(self, feed: Feed, response: web.StreamResponse, part: Part | None) -> None:
        last = 0
        while part is not None:
            if last and part.seq > last + 1:
                self.counters.dropped += part.seq - last - 1
            try:
                async with asyncio.timeout(self.config.stall_timeout_s):
                    await response.write(part.data)
            except TimeoutError:
                self.counters.stalled_viewers += 1
                log.info("stream.viewer_stalled", timeout_s=self.config.stall_timeout_s)
                return
            except (ConnectionError, RuntimeError):  # the viewer went away mid-write
                return
            self.counters.delivered += 1
            self._deliveries.append(time.monotonic())
            last = part.seq
            part = await feed.after(last)
        assert feed.ended is not None
        with contextlib.suppress(ConnectionError, RuntimeError):
            await response.write(error_part(feed.ended))
            await response.write_eof()

    # ---- the pump (one per feed) ------------------------------------------------------------

    async def _pump(self, feed: Feed) -> None:
        params = feed.params
        interval = 1.0 / params.fps
        seq = 0
        last: Frame | None = None
        due = time.monotonic()
        log.info("stream.capture_started", fps=params.fps, quality=params.quality)
        try:
            while True:
                # The newest frame once per interval (never the same one twice).
                await asyncio.sleep(max(0.0, due - time.monotonic()))
                newer = last.captured_at if last is not None else None
                try:
                    frame = await self.source.frame(newer_than=newer, timeout=self.frame_timeout_s)
                except ToolError as exc:
                    if exc.code not in SIGNAL_STATES:
                        raise
                    seq += 1
                    data = await asyncio.to_thread(no_signal_part, exc, params, seq)
                    feed.publish(Part(seq, time.monotonic(), data))
                    self.counters.no_signal_parts += 1
                    last = None
                    due = time.monotonic() + NO_SIGNAL_RETRY_S
                    continue
                encoded = await asyncio.to_thread(
                    encode, frame, quality=params.quality, max_width=params.max_width
                )
                if frame.jpeg is not None and encoded.data is frame.jpeg:
                    self.counters.passed_through += 1
                else:
                    self.counters.encoded += 1
                seq += 1
                feed.publish(Part(seq, frame.captured_at, part_bytes(encoded, frame)))
                last = frame
                due = max(due + interval, time.monotonic() - interval)  # no burst after a stall
        except ToolError as exc:
            self.counters.ended_by_capture_loss += 1
            log.warning("stream.capture_lost", code=exc.code, reason=exc.message)
            feed.end(exc)
        except asyncio.CancelledError:
            feed.end(ToolError("stream_closed", "the stream was closed"))
            raise
        except Exception as exc:  # a bug: end the viewers with it rather than hang them
            log.exception("stream.pump_failed")
            feed.end(ToolError("stream_failed", f"the stream failed: {exc!r}"))
        finally:
            if self.feeds.get(feed.params) is feed:
                del self.feeds[feed.params]
            log.info("stream.capture_stopped", fps=params.fps, quality=params.quality)

    async def snapshot(self, params: Params) -> tuple[Frame, Encoded]:
        frame = await self.source.frame(timeout=self.frame_timeout_s)
        encoded = await asyncio.to_thread(
            encode, frame, quality=params.quality, max_width=params.max_width
        )
        return frame, encoded

    async def close(self) -> None:
        """At shutdown: end every pump (viewers get the closing part) and wait for them."""
        tasks = [f.task for f in self.feeds.values() if f.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
