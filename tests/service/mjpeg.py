"""Reading GET /api/stream as a client does: aiohttp's own multipart reader over the response."""

from __future__ import annotations

import time
from dataclasses import dataclass

import aiohttp


@dataclass(frozen=True)
class Part:
    content_type: str
    body: bytes
    seq: int | None  # X-Frame-Seq
    captured_mono: float | None  # X-Captured-Mono (time.monotonic() of the capture)
    received_mono: float  # time.monotonic() when the whole part was read


class Stream:
    """The parts of one open stream response; `next()` is None after the closing boundary."""

    def __init__(self, response: aiohttp.ClientResponse):
        self.response = response
        self.reader = aiohttp.MultipartReader(response.headers, response.content)

    async def next(self) -> Part | None:
        part = await self.reader.next()
        if part is None:
            return None
        assert isinstance(part, aiohttp.BodyPartReader)
        body = await part.read()
        seq = part.headers.get("X-Frame-Seq")
        mono = part.headers.get("X-Captured-Mono")
        return Part(
            part.headers.get("Content-Type", ""),
            bytes(body),
            int(seq) if seq else None,
            float(mono) if mono else None,
            time.monotonic(),
        )
