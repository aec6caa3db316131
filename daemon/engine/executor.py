"""The one small loop that plays a report program on absolute monotonic deadlines.

Each step's deadline is start + offset, never "previous step + gap", so a late wake-up or a slow
write delays one report and not every report after it. asyncio wakes timers up to ~1 ms late
(epoll has millisecond resolution), so the loop sleeps until SPIN_S before a deadline and then
yields (sleep(0)) until it; measured here that takes the p99 error from ~1.7 ms to ~0.2 ms for
at most SPIN_S of busy-yielding per report.

Held tracks what the target may still hold, so whoever ends an invocation can release exactly
that: the last report written per role, and the roles whose last write did not complete (the
report may or may not have reached the host, so they are released anyway). It is the one record
of what was sent: the gadget's writers remember nothing. `release` plays release programs, where
no failed write may stop the writes after it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Sequence

from daemon.backends import HidOutput
from daemon.engine.program import Step, pointer_held, pointer_release
from gadget import reports
from gadget.errors import GadgetError

SPIN_S = 0.0015


class Held:
    """What the target may still hold, per role, and where the absolute pointer was sent."""

    def __init__(self, pointer_kind: str):
        self.pointer_kind = pointer_kind
        self.last: dict[str, bytes] = {}
        self.unsure: set[str] = set()
        # The last pointer report before the host last re-enumerated: a mouse released with
        # nothing sent since goes up there, not at the centre (that would move the cursor).
        self._pointer_before: bytes | None = None

    def suspect(self, roles: Iterable[str]) -> None:
        """Nothing is known about what these roles hold (a crashed predecessor's keys, the
        stop): take them as held, so the next release covers them."""
        self.unsure.update(roles)

    def is_held(self, role: str) -> bool:
        if role in self.unsure:
            return True
        report = self.last.get(role)
        if report is None:
            return False
        if role == "pointer":
            return pointer_held(self.pointer_kind, report)
        return report != reports.release_report(role)

    def holding(self) -> list[str]:
        return [role for role in ("keyboard", "consumer", "pointer") if self.is_held(role)]

    def release_report(self, role: str) -> bytes:
        if role == "pointer":
            last = self.last.get("pointer", self._pointer_before)
            return pointer_release(self.pointer_kind, last)
        return reports.release_report(role)

    def forget(self) -> None:
        """The host re-enumerated: it let go of everything, and where its cursor is now is
        unknown (the next press moves there first)."""
        self._pointer_before = self.last.get("pointer", self._pointer_before)
        self.last.clear()
        self.unsure.clear()


async def sleep_until(deadline: float) -> None:
    delay = deadline - time.monotonic() - SPIN_S
    if delay > 0:
        await asyncio.sleep(delay)
    while time.monotonic() < deadline:  # noqa: ASYNC110 - the spin is the point (see above)
        await asyncio.sleep(0)


async def execute(
    hid: HidOutput, program: Sequence[Step], held: Held, *, start: float | None = None
) -> float:
    """Write every step at start + its offset; returns the start used (monotonic seconds).

    A step whose deadline has passed is written at once (no catch-up bursts are invented, no
    step is skipped). Exceptions from the output propagate; `held` marks the role unsure first.
    """
    t0 = time.monotonic() if start is None else start
    # Hot loop: locals only. `seen` is a clock reading; a deadline at or before it has passed
    # for sure, so a burst of due reports costs one clock read, not one per report.
    last, unsure, write, now = held.last, held.unsure, hid.write, time.monotonic
    seen = now()
    for at_ms, role, report in program:
        deadline = t0 + at_ms / 1000
        if deadline > seen and deadline > (seen := now()):
            await sleep_until(deadline)
            seen = deadline
        last[role] = report
        try:
            await write(role, report)
        except BaseException:
            unsure.add(role)
            raise
        if unsure:
            unsure.discard(role)
    return t0


async def release(
    hid: HidOutput, program: Sequence[Step], timeout_s: float
) -> dict[str, tuple[int, GadgetError | TimeoutError]]:
    """Play a release program (prog.release_program) so that nothing cuts it short: each role's
    steps run beside the others' on the same absolute deadlines (a role whose target stalls
    delays no other role's release), each write has `timeout_s` of its own, and a refused
    write does not stop the ones after it (a target that was re-enumerating may take the next).
    Returns (reports delivered, last error) for each role that had a write fail.
    """
    t0 = time.monotonic()
    failed: dict[str, tuple[int, GadgetError | TimeoutError]] = {}
    by_role: dict[str, list[Step]] = {}
    for step in program:
        by_role.setdefault(step.role, []).append(step)

    async def play(role: str, steps: list[Step]) -> None:
        delivered = 0
        error: GadgetError | TimeoutError | None = None
        for at_ms, _, report in steps:
            await sleep_until(t0 + at_ms / 1000)
            try:
                async with asyncio.timeout(timeout_s):
                    await hid.write(role, report)
                delivered += 1
            except (GadgetError, TimeoutError) as exc:
                error = exc
        if error is not None:
            failed[role] = (delivered, error)

    await asyncio.gather(*(play(role, steps) for role, steps in by_role.items()))
    return failed
