"""Start-up and shutdown as data (daemon.lifecycle): parts set up in order, torn down in
reverse, every teardown run even when one fails, and a failed set-up undoing what came up."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import AsyncGenerator

import pytest

from daemon import config as cfg
from daemon.lifecycle import Lifecycle, Part, on_stop


def parts(log: list[str], names: str, *, fail_up: str = "", fail_down: str = "") -> list[Part]:
    def part(name: str) -> Part:
        async def run() -> AsyncGenerator[None, None]:
            await asyncio.sleep(0)  # a real await between the steps
            if name == fail_up:
                log.append(f"{name} failed")
                raise OSError(f"{name} cannot start")
            log.append(f"+{name}")
            yield
            log.append(f"-{name}")
            if name == fail_down:
                raise ValueError(f"{name} cannot stop")

        return Part(name, run)

    return [part(n) for n in names]


async def test_set_up_in_order_torn_down_in_reverse() -> None:
    log: list[str] = []
    life = Lifecycle(parts(log, "abc"))
    await life.start()
    assert log == ["+a", "+b", "+c"]
    assert await life.stop() == []
    assert log == ["+a", "+b", "+c", "-c", "-b", "-a"]
    assert await life.stop() == []  # a second stop has nothing left to do
    assert len(log) == 6


async def test_a_failing_teardown_does_not_stop_the_others() -> None:
    log: list[str] = []
    life = Lifecycle(parts(log, "abcd", fail_down="c"))
    await life.start()
    errors = await life.stop()
    assert log[4:] == ["-d", "-c", "-b", "-a"]
    assert [str(e) for e in errors] == ["c cannot stop"]


async def test_a_failing_set_up_tears_down_what_came_up() -> None:
    log: list[str] = []
    life = Lifecycle(parts(log, "abcd", fail_up="c"))
    with pytest.raises(OSError, match="c cannot start"):
        await life.start()
    assert log == ["+a", "+b", "c failed", "-b", "-a"]  # d never started, c was never up
    assert await life.stop() == []


async def test_on_stop_only_stops_and_a_part_must_yield_once() -> None:
    stopped: list[str] = []

    async def stop() -> None:
        stopped.append("x")

    async def no_yield() -> AsyncGenerator[None, None]:
        return
        yield  # an async generator that ends before its first yield

    async def twice() -> AsyncGenerator[None, None]:
        yield
        yield

    life = Lifecycle([on_stop("x", stop), Part("twice", twice)])
    await life.start()
    assert stopped == []
    errors = await life.stop()
    assert stopped == ["x"] and "yielded twice" in str(errors[0])
    life = Lifecycle([on_stop("x", stop), Part("none", no_yield)])
    with pytest.raises(RuntimeError, match="without yielding"):
        await life.start()
    assert stopped == ["x", "x"]  # what came up before it was torn down


def test_the_daemon_s_order_is_its_parts_list() -> None:
    """The daemon's own order, as data: the backend up first and down last; the announcer
    withdrawn, then HID invocations drained, before anything that serves them closes."""
    from daemon.service import build

    with tempfile.TemporaryDirectory() as state:
        daemon = build(
            cfg.from_mapping(
                {
                    "backend": {"kind": "simulated"},
                    "state": {"dir": state},
                    "ipc": {"socket": f"{state}/ipc.sock"},
                }
            )
        )
        names = [p.name for p in daemon.lifecycle.parts]
    assert names[0] == "backend" and names[-1] == "tasks"
    down = names[::-1]
    assert down.index("announcer") < down.index("drain") < down.index("ipc")
    assert down.index("drain") < down.index("input engine") < down.index("http server")
    assert down.index("drain") < down.index("websocket sessions")
    assert names.index("http server") < names.index("listeners") < names.index("announcer")
