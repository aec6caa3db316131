"""Start-up and shutdown as data: an ordered list of parts, each an async generator that sets
itself up, yields once, and tears itself down (as aiohttp's cleanup contexts and kvmd's
subsystems do). start() sets them up in order; stop() tears down those that came up in the
reverse order, every one even when another fails (the errors are logged and returned); a set-up
that fails tears down what came up before it, then raises."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from dataclasses import dataclass

import structlog

log = structlog.get_logger("daemon.lifecycle")
_ENDED = object()


@dataclass(frozen=True)
class Part:
    name: str
    run: Callable[[], AsyncGenerator[None, None]]


def on_stop(name: str, stop: Callable[[], Awaitable[object]]) -> Part:
    """A part with nothing to set up: only its place in the order, and `stop` at shutdown."""

    async def run() -> AsyncGenerator[None, None]:
        yield
        await stop()

    return Part(name, run)


class Lifecycle:
    def __init__(self, parts: Sequence[Part]):
        self.parts = tuple(parts)
        self._up: list[tuple[Part, AsyncGenerator[None, None]]] = []

    async def start(self) -> None:
        for part in self.parts:
            running = part.run()
            try:
                if await anext(running, _ENDED) is _ENDED:
                    raise RuntimeError(f"the part {part.name!r} ended without yielding")
            except BaseException:
                await self.stop()
                raise
            self._up.append((part, running))

    async def stop(self) -> list[Exception]:
        """Tear down, in reverse, the parts that came up; their errors, each logged."""
        errors: list[Exception] = []
        while self._up:
            part, running = self._up.pop()
            try:
                await anext(running)
            except StopAsyncIteration:
                continue
            except Exception as exc:  # one failing part must not keep the others up
                log.exception("part_stop_failed", part=part.name)
                errors.append(exc)
                continue
            await running.aclose()
            error = RuntimeError(f"the part {part.name!r} yielded twice")
            log.error("part_stop_failed", part=part.name, error=str(error))
            errors.append(error)
        return errors
