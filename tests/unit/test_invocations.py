"""The calls' ledger (daemon/invocations.py): admission per client and in total counted in
calls, reservations for requests of several calls, and a token's revocation cutting its calls
that do not drive the target. On a real event loop, with real asyncio timeouts."""

from __future__ import annotations

import asyncio
import contextvars

import pytest

from daemon import invocations
from daemon.errors import ToolError
from daemon.invocations import Budget, Running, client_of


def test_clients_are_peer_addresses_or_uids() -> None:
    assert client_of("192.168.42.2/lab-page") == "192.168.42.2"
    assert client_of("::1") == "::1"
    assert client_of("pid=12 uid=1000 gid=1000") == "uid=1000"
    assert client_of("") == ""


def test_budget_per_client_and_in_total() -> None:
    budget = Budget(total=5, per_client=3)
    a = budget.take("a", 3)
    with pytest.raises(ToolError) as mine:
        budget.take("a", 1)
    assert mine.value.code == "too_many_calls" and mine.value.retryable
    assert mine.value.details == {"max_client_calls": 3}
    b = budget.take("b", 2)
    with pytest.raises(ToolError) as everyone:
        budget.take("c", 1)
    assert everyone.value.details == {"max_calls": 5}
    a.release()
    a.release()  # once only
    assert (budget.used, budget.by_client) == (2, {"b": 2})
    b.release()
    assert (budget.used, budget.by_client) == (0, {})


def test_a_request_is_refused_whole() -> None:
    budget = Budget(total=64, per_client=32)
    with budget.reserve("a", 30):
        with pytest.raises(ToolError):
            budget.take("a", 3)  # a batch of 3 does not get 2 of its calls
        assert budget.used == 30
    assert budget.used == 0


async def test_calls_inside_a_reservation_draw_on_it() -> None:
    running = Running(Budget(total=4, per_client=4))
    with running.budget.reserve("10.0.0.1", 4):
        tickets = [running.admit("10.0.0.1/x", "pairing") for _ in range(8)]
        assert running.budget.used == 4  # the batch's own four, not eight more
        for t in tickets:
            running.dismiss(t)
    assert running.budget.used == 0
    t = running.admit("10.0.0.1", "pairing")  # outside: one place of its own
    assert running.budget.used == 1
    running.dismiss(t)
    assert running.budget.used == 0
    running.admit("", "")  # the daemon's own calls are not counted
    assert running.budget.used == 0


async def test_a_hid_calls_place_is_kept_until_its_own_task_ends() -> None:
    running = Running(Budget(total=4, per_client=1))
    release = asyncio.Event()
    ticket = running.admit("10.0.0.1", "pairing")

    async def hid() -> None:
        running.enter("tap", "http", "10.0.0.1", "pairing")
        await release.wait()

    task = asyncio.create_task(hid())
    await asyncio.sleep(0)
    running.dismiss(ticket)  # its client left; the action goes on
    with pytest.raises(ToolError):
        running.admit("10.0.0.1", "pairing")
    release.set()
    await task
    await asyncio.sleep(0)
    assert running.budget.used == 0


async def run_call(running: Running, token_id: str, work: asyncio.Future[None]) -> str:
    """A call as the catalog runs it: admitted, entered under its limit, ended."""
    ticket = running.admit("10.0.0.1", token_id)
    try:
        entered = running.enter("long_press", "http", "10.0.0.1", token_id)
        try:
            async with asyncio.timeout(300) as entered.limit:
                await work
            return "ok"
        except TimeoutError:
            assert entered.revoked
            return "token_revoked"
        finally:
            running.leave(entered)
    except ToolError as exc:
        return exc.code
    finally:
        running.dismiss(ticket)


async def test_revoking_cuts_what_does_not_drive_and_lets_a_driving_call_end() -> None:
    running = Running()
    loop = asyncio.get_running_loop()
    driving, queued, other = loop.create_future(), loop.create_future(), loop.create_future()
    first = asyncio.create_task(run_call(running, "pairing", driving))
    second = asyncio.create_task(run_call(running, "pairing", queued))
    third = asyncio.create_task(run_call(running, "client-1", other))
    await asyncio.sleep(0)
    (t1,) = [t for t in running._now if t.task is first]
    t1.driving = True  # what the engine marks once the call holds the HID flow
    assert running.revoke("pairing") == (1, 1)
    assert await second == "token_revoked"
    assert t1.revoked and not first.done()  # it finishes its gesture
    driving.set_result(None)
    other.set_result(None)
    assert await first == "ok" and await third == "ok"  # another token's call is untouched
    assert running.budget.used == 0 and running.snapshot() == []


async def test_a_call_admitted_before_the_revocation_never_enters() -> None:
    running = Running()
    ticket = running.admit("10.0.0.1", "pairing")
    # The rotation runs in a request of its own (here: a context where it is no call).
    contextvars.Context().run(running.revoke, "pairing")
    with pytest.raises(ToolError) as refused:
        running.enter("tap", "http", "10.0.0.1", "pairing")
    assert refused.value.code == "token_revoked"
    running.dismiss(ticket)


async def test_the_revoking_call_goes_on() -> None:
    running = Running()
    me = running.admit("127.0.0.1", "pairing")
    running.enter("rotate_token", "http", "127.0.0.1", "pairing")
    assert invocations.current.get() is me
    assert running.revoke("pairing") == (0, 0) and not me.revoked
