"""The serialized HID flow: one per daemon, every HID invocation from every transport queues for
it (asyncio.Lock is first-come first-served), and runs its programs inside a HidInvocation.

A HidInvocation is one invocation's scope:
- iOS keyboard isolation: a keyboard program holding a modifier other than shift runs in the
  `keyboard-isolated` profile (AssistiveTouch swallows such shortcuts while the pointer is in the
  composite); consecutive ones share the phase, keys without modifiers do not end it, a pointer
  program restores `full` first. After a switch the engine waits `isolation_settle_ms` beyond
  the target's enumeration before the next report.
- Whatever ends the invocation (return, error, the catalog's limit, client gone, shutdown), its
  end releases every role the target may still hold and restores `full`, shielded from further
  cancellation. The only thing that outlives an invocation on purpose is a confirmed drag
  (drag_start with a stable screen), and that is undone after `drag_limit_s` if no drag_release
  comes.
- A call whose token is revoked while it waits for the flow never gets it (the catalog cuts
  it, and the flow checks again as it is let in); one that holds the flow plays its current
  program to the end, starts no other (token_revoked), and ends as any invocation does.
- A target that sleeps (daemon/usb.py: its USB bus suspended) gets nothing: an invocation is
  refused with target_suspended before it queues and again when the flow is its, unless it
  wakes the target first ([input].wake_first, wake_target); a program the target falls asleep
  under is cut at once (a report written then would wait in the gadget and arrive late). What
  may be held then is released the moment the target is back, before anything else, so the
  host sees at worst a whole press and release, never a key left down.
- The engine is the one place that knows what is held (executor.Held) and releases it (one
  release program, [input].release_repeats / release_interval_ms): at an invocation's end,
  before a profile switch, at a start that inherits the host's state (release_everything) and
  at stop. The gadget's writers only write.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import structlog

from daemon import evidence, invocations
from daemon.backends import ROLES, HidOutput, ProfileControl
from daemon.config import InputConfig
from daemon.engine import program as prog
from daemon.engine.executor import Held, execute, release
from daemon.engine.program import Point, Pointer, Program, Step
from daemon.errors import ToolError
from daemon.evidence import note
from daemon.screen.geometry import HidMap
from daemon.usb import UsbLink, suspended_error
from gadget import reports
from gadget.errors import GadgetError
from gadget.profiles import FULL, ISOLATED, has_role

log = structlog.get_logger("daemon.engine")

DragRole = Literal["none", "start", "release"]
T = TypeVar("T")


async def run_to_end(aw: Awaitable[T]) -> T:
    """Await `aw` to its end even if the caller is cancelled meanwhile; the cancellation is
    re-raised afterwards. For cleanup that must not be cut short."""
    task = asyncio.ensure_future(aw)
    interrupted = False
    while not task.done():
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            if task.done() and task.cancelled():
                raise
            interrupted = True
    if interrupted:
        raise asyncio.CancelledError
    return task.result()


def required_profile(program: Sequence[Step], isolate: bool) -> str | None:
    """The profile a program needs: `full` for any pointer report, `keyboard-isolated` (only
    when isolating) for a modifier other than shift, None when either will do."""
    if any(step.role == "pointer" for step in program):
        return FULL
    if isolate and prog.program_modifiers(program) & ~prog.SHIFT_BITS:
        return ISOLATED
    return None


def caps_word(leds: reports.Leds | None) -> str:
    """on, off, or unknown (no LED report from the target since it enumerated)."""
    if leds is None:
        return "unknown"
    return "on" if leds.caps_lock else "off"


@dataclass
class Drag:
    """A confirmed drag: contact down at `at`, started at `start`."""

    start: Point
    at: Point
    expires: float  # monotonic
    button: str = "left"  # the mouse button held
    token_id: str = ""  # the token of the call that began it (a rotation ends it early)


class HidInvocation:
    """One HID invocation's access to the flow. Obtained from InputEngine.invocation()."""

    def __init__(self, engine: InputEngine, tool: str):
        self.engine = engine
        self.tool = tool
        self.switches: list[str] = []
        self._keep_contact = False
        self._finished = False

    @property
    def pointer_at(self) -> Point | None:
        return self.engine.pointer_at

    async def run(self, program: Program) -> None:
        """Run one program, switching profile first if it needs another one."""
        if self._finished:
            raise RuntimeError("session already finished")
        if not program:
            return
        ticket = invocations.current.get()
        if ticket is not None and ticket.revoked:  # its token was rotated: no next gesture
            raise invocations.token_revoked(self.tool)
        prog.checked(program)  # the bounds, whoever built it: refused before its first report
        want = required_profile(program, self.engine.isolates)
        if want is not None:
            await self.engine.use_profile(want, self)
        await self.engine.play(program, self.tool)

    async def type_text(self, typed: Program, *, caps_sensitive: bool) -> dict[str, Any]:
        """Run a typing program planned for Caps Lock off, so the text comes out as planned
        whatever the target's Caps Lock is, and leave Caps Lock as it was found.

        Only a text Caps Lock would change (`caps_sensitive`) looks at it. Known on (the
        target's last LED report): Caps Lock is pressed before the text and again after it.
        Not known (no LED report since the target enumerated): after waiting caps_lock_wait_ms
        for the report hosts send when a keyboard enumerates, one press finds out, as the
        target answers it with an LED report (then a second press puts back what was found,
        before or after the text); a target that never answers gets a second press (undoing
        the first, whatever the state was) and the text typed as if Caps Lock were off, with
        caps_lock "unknown" in the result; until the engine next switches the profile it is
        not probed again. Shift does not undo Caps Lock on every target
        (Apple's keep capitals), so the text is never planned against Caps Lock on.
        """
        want = required_profile(typed, self.engine.isolates)
        if want is not None:  # switch first: an enumeration forgets the LED state
            await self.engine.use_profile(want, self)
        if not caps_sensitive:
            await self.run(typed)
            return {"caps_lock": caps_word(self.engine.hid.led_reports()[1])}
        hid = self.engine.hid
        count, leds = hid.led_reports()
        presses = 0
        wait = self.engine.cfg.caps_lock_wait_ms / 1000
        if leds is None and self.engine.leds_silent:  # it did not answer a probe: no second
            await self.run(typed)
            return {"caps_lock": "unknown", "caps_lock_presses": 0}
        if leds is None:  # hosts usually send their LED state when a keyboard enumerates
            leds = await hid.wait_led_report(count, wait)
            count = hid.led_reports()[0]
        if leds is None:
            leds = await self._press_caps(count)
            presses += 1
            if leds is None:
                self.engine.leds_silent = True
                await self._press_caps(None)
                await self.run(typed)
                return {"caps_lock": "unknown", "caps_lock_presses": presses + 1}
            found = not leds.caps_lock
        else:
            found = leds.caps_lock
        if leds.caps_lock:
            after = await self._press_caps(hid.led_reports()[0])
            presses += 1
            if after is None or after.caps_lock:
                raise ToolError(
                    "caps_lock_unconfirmed",
                    "the target did not report Caps Lock off after it was pressed; nothing "
                    "was typed",
                    retryable=True,
                )
        try:
            await self.run(typed)
        finally:
            if found:
                await self._press_caps(hid.led_reports()[0])
                presses += 1
        return {"caps_lock": "on" if found else "off", "caps_lock_presses": presses}

    async def _press_caps(self, after: int | None) -> reports.Leds | None:
        """Press Caps Lock; with `after` (the LED report count before), wait for the target's
        LED report answering it and return the state it set (None if none came)."""
        await self.run(prog.caps_lock_tap(self.engine.cfg))
        if after is None:
            return None
        wait = self.engine.cfg.caps_lock_wait_ms / 1000
        return await self.engine.hid.wait_led_report(after, wait)

    def keep_contact(self, start: Point, at: Point, button: str = "left") -> None:
        """drag_start confirmed: the contact outlives this invocation, for `drag_limit_s`."""
        self._keep_contact = True
        engine = self.engine
        ticket = invocations.current.get()
        token_id = ticket.token_id if ticket is not None else ""
        expires = time.monotonic() + engine.cfg.drag_limit_s
        engine.begin_drag(Drag(start, at, expires, button, token_id))

    async def finish(self) -> None:
        """Release whatever may be held and restore `full`; idempotent. The invocation's end
        calls it anyway; tools call it early to take their evidence after it."""
        if self._finished:
            return
        self._finished = True
        engine = self.engine
        if not self._keep_contact:
            engine.end_drag()
        released = await engine.release_all(keep_pointer=self._keep_contact)
        restored = await engine.restore_full(self)
        note("released", released)
        note("profile_switches", list(self.switches))
        if released or restored or self.switches:
            log.info(
                "input_invocation_end",
                tool=self.tool,
                released=released,
                switches=self.switches,
                profile=engine.profiles.profile,
                drag_kept=self._keep_contact,
            )


class InputEngine:
    """The HID flow of one daemon over one HidOutput and one ProfileControl."""

    def __init__(
        self,
        hid: HidOutput,
        profiles: ProfileControl,
        cfg: InputConfig,
        platform: str,
        hid_map: Callable[[], HidMap] | None = None,
        link: UsbLink | None = None,
    ) -> None:
        self.hid = hid
        self.link = link or UsbLink()  # none given: a target that never sleeps
        self.profiles = profiles
        self.cfg = cfg
        self.platform = platform
        self.isolates = platform == "ios"
        self._pointer = Pointer.for_platform(platform, cfg)
        # Where the target's screen is for the HID (daemon.screen.geometry): read per program.
        self._hid_map = hid_map
        self.held = Held(self._pointer.kind)
        self.leds_silent = False  # the target did not answer a Caps Lock probe (this enumeration)
        # A switch that outlived its limit: it goes on (a board's switch runs to its end) and
        # may make its profile live later, so the engine waits it out before the next one and
        # brings `full` back by itself if no invocation does.
        self._late_switch: asyncio.Future[bool] | None = None
        self._restorer: asyncio.Task[None] | None = None
        self.drag: Drag | None = None
        self._flow = asyncio.Lock()
        self._closed = False
        self._drag_timer: asyncio.TimerHandle | None = None
        self._drag_expiry: asyncio.Task[None] | None = None
        self._resume_release: asyncio.Task[None] | None = None
        self.link.listeners.append(self._usb_changed)

    # -- the flow ------------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def invocation(
        self, tool: str, *, drag: DragRole = "none", asleep_ok: bool = False
    ) -> AsyncIterator[HidInvocation]:
        """Queue for the flow, then hold it for one invocation; its end cleans up, always.
        A sleeping target refuses it (target_suspended) or, with [input].wake_first, is woken
        first; `asleep_ok` lets it in as it is (wake_target)."""
        self._check_open()
        self._check_awake(tool, asleep_ok)  # at once, not after queueing behind others
        async with self._flow:
            self._check_open()
            ticket = invocations.current.get()
            if ticket is not None:  # the call this is; its token may have gone meanwhile
                if ticket.revoked:
                    raise invocations.token_revoked(tool)
                ticket.driving = True  # from now on a revocation lets its gesture end
            self._check_drag(tool, drag)
            self._check_awake(tool, asleep_ok)
            session = HidInvocation(self, tool)
            try:
                if self.link.state == "suspended" and not asleep_ok:
                    await self.wake()  # wake_first: woken, then the input goes once
                yield session
                if evidence.current.get() is not None:
                    # Evidence asked with the call: of the end state, before the flow is let go.
                    await run_to_end(session.finish())
                    await evidence.take_in_flow()
            finally:
                await run_to_end(session.finish())

    @property
    def busy(self) -> bool:
        return self._flow.locked()

    @property
    def pointer(self) -> Pointer:
        """The pointer with the screen geometry's current HID map."""
        if self._hid_map is None:
            return self._pointer
        return dataclasses.replace(self._pointer, map=self._hid_map())

    @property
    def pointer_at(self) -> Point | None:
        """Where the mouse cursor is (last report sent); None when unknown or a touchscreen,
        which has no resting position."""
        last = self.held.last.get("pointer")
        if last is None or self.pointer.kind != "mouse":
            return None
        m = reports.unpack_mouse(last)
        return Point(*self.pointer.map.from_abs(m.x, m.y))

    async def play(self, program: Program, tool: str = "input") -> None:
        """Execute a program with the write limit over the whole of it, cut when the target
        falls asleep (target_suspended); errors become ToolErrors."""
        if self.link.suspended.is_set():
            raise suspended_error(tool)
        limit = (prog.duration_ms(program) + self.cfg.write_timeout_ms) / 1000
        try:
            async with asyncio.timeout(limit):
                await self._unless_asleep(execute(self.hid, program, self.held), tool)
        except TimeoutError:
            raise ToolError(
                "hid_write_timeout",
                f"the target did not accept HID reports within {self.cfg.write_timeout_ms:g} ms",
                retryable=True,
            ) from None
        except GadgetError as e:
            raise ToolError(e.code, e.message, retryable=e.retryable) from None

    async def _unless_asleep(self, aw: Awaitable[T], tool: str) -> T:
        """Await `aw`, cutting it when the target falls asleep meanwhile: the write it was in
        is abandoned (its role stays held, released at the resume) and target_suspended is
        raised."""
        work = asyncio.ensure_future(aw)
        asleep = asyncio.ensure_future(self.link.suspended.wait())
        try:
            await asyncio.wait((work, asleep), return_when=asyncio.FIRST_COMPLETED)
        finally:  # also when this task is cancelled: nothing outlives it
            asleep.cancel()
            if not work.done():
                work.cancel()
                await asyncio.wait((work,))
        if work.cancelled():
            log.warning("input_cut_by_suspend", tool=tool, holding=self.held.holding())
            raise suspended_error(tool)
        return work.result()

    def _check_awake(self, tool: str, asleep_ok: bool) -> None:
        self.link.refresh()
        if self.link.state == "suspended" and not (asleep_ok or self.cfg.wake_first):
            raise suspended_error(tool)

    async def wake(self) -> dict[str, Any]:
        """Wake the target (in the flow) and release whatever it may hold from before its
        sleep, before any new input; ToolErrors say why it could not."""
        result = await self.link.wake(self.cfg.wake_timeout_s)
        result["released"] = await self.release_all(keep_pointer=self.drag is not None)
        return result

    def _usb_changed(self, old: str, new: str, raw: str) -> None:
        """Back from a sleep with something maybe held (a report that waited in the gadget
        arrives now): release it at once, in the flow (an invocation holding it does so
        itself after its wake)."""
        if old != "suspended" or new == "suspended" or self._closed:
            return
        if not self.held.holding():
            return
        if self._resume_release is None or self._resume_release.done():
            self._resume_release = asyncio.ensure_future(self._release_in_flow())

    async def _release_in_flow(self) -> None:
        try:
            async with self._flow:
                released = await self.release_all(keep_pointer=self.drag is not None)
                log.info("released_after_resume", released=released)
        except Exception:  # a task nobody awaits: its fault is logged, never lost
            log.exception("release_after_resume_failed")

    async def use_profile(self, name: str, session: HidInvocation | None = None) -> bool:
        """Make `name` live; after a real switch, wait the settle before any report."""
        await self._wait_late_switch()
        if self.profiles.profile == name:
            return False
        # Nothing is held between programs (each ends with its release); should anything be, a
        # switch that fails half way must not leave it down on the composite that stays.
        await self.release_all(keep_pointer=self.drag is not None)
        switch = asyncio.ensure_future(self.profiles.switch_profile(name))
        try:
            async with asyncio.timeout(self.cfg.profile_switch_timeout_s):
                changed = await asyncio.shield(switch)
        except BaseException as exc:
            if not switch.done():  # timed out, or its invocation cancelled: it goes on
                self._late_switch = switch
                switch.add_done_callback(self._late_switch_ended)
            if not isinstance(exc, TimeoutError):
                raise self._switch_failed(name, exc) from None
            raise ToolError(
                "profile_switch_failed",
                f"switching the USB composite to {name!r} did not finish within "
                f"{self.cfg.profile_switch_timeout_s:g} s",
                retryable=True,
            ) from None
        if not changed:
            return False
        self._re_enumerated()
        if session is not None:
            session.switches.append(name)
        log.info("profile_switched", profile=name, tool=session.tool if session else None)
        await asyncio.sleep(self.cfg.isolation_settle_ms / 1000)
        return True

    async def release_all(self, *, keep_pointer: bool = False) -> list[str]:
        """Send the all-up report of every role that may be held; returns those roles.

        A release the target refuses (unplugged, re-enumerating, stalled) is logged, not raised:
        a host that is not listening holds nothing, and the next write starts from a clean state.
        """
        held = self.held
        roles = [r for r in held.holding() if not (keep_pointer and r == "pointer")]
        if not roles:
            return []
        if self.link.suspended.is_set():
            # Written now, a release would wait in the gadget (or be refused behind the report
            # that does): it goes the moment the target is back (_usb_changed).
            held.suspect(roles)
            log.info("release_deferred_until_resume", roles=roles)
            return []
        releases = {role: held.release_report(role) for role in roles}
        program = prog.release_program(self.cfg, releases)
        failed = await release(self.hid, program, self.cfg.write_timeout_ms / 1000)
        for role, (delivered, exc) in failed.items():
            log.warning(
                "release_write_failed",
                role=role,
                delivered=delivered,
                code=exc.code if isinstance(exc, GadgetError) else "hid_write_timeout",
                reason=exc.message if isinstance(exc, GadgetError) else "write timed out",
            )
        for role, report in releases.items():
            held.unsure.discard(role)
            held.last[role] = report
        return roles

    async def release_everything(self) -> list[str]:
        """All-up on every role the live profile has, whatever this engine believes held: at
        a start that inherits the host's state (a crashed daemon may have left keys down) and
        at stop. A mouse goes up where it was last sent, the centre if nothing was."""
        live = [r for r in ROLES if has_role(self.profiles.profile, r)]
        self.held.suspect(live)
        return await self.release_all()

    @staticmethod
    def _switch_failed(name: str, exc: BaseException) -> BaseException:
        """What a switch that ended in `exc` raises: a gadget fault is the tool's error;
        anything else (a cancellation) goes on as it is."""
        if isinstance(exc, GadgetError):
            return ToolError(
                "profile_switch_failed",
                f"switching the USB composite to {name!r} failed: {exc.message}",
                retryable=exc.retryable,
            )
        return exc

    def _re_enumerated(self) -> None:
        self.held.forget()  # the host dropped everything held when it re-enumerated
        self.leds_silent = False

    async def _wait_late_switch(self) -> None:
        """Let a switch that outlived its limit end (bounded once more) before the next one:
        until it has, which profile is live is not known."""
        late = self._late_switch
        if late is None:
            return
        limit = self.cfg.profile_switch_timeout_s
        try:
            async with asyncio.timeout(limit):
                changed = await asyncio.shield(late)
        except TimeoutError:
            raise ToolError(
                "profile_switch_failed",
                f"an earlier switch of the USB composite still runs after another {limit:g} s",
                retryable=True,
            ) from None
        except Exception:  # its failure was its own invocation's; the board observed what is live
            changed = True
        if self._late_switch is late:
            self._late_switch = None
        if changed:
            self._re_enumerated()

    def _late_switch_ended(self, late: asyncio.Future[bool]) -> None:
        """The late switch ended: with no invocation to do it, bring `full` back (queued
        behind any invocation, which does it itself)."""
        if not late.cancelled():
            late.exception()  # retrieved: its failure was reported by its invocation
        if self._closed or (self._restorer is not None and not self._restorer.done()):
            return
        self._restorer = asyncio.ensure_future(self._restore_in_flow())

    async def _restore_in_flow(self) -> None:
        try:
            async with self._flow:
                if not self._closed:
                    await self.restore_full()
        except Exception:  # a task nobody awaits: its fault is logged, never lost
            log.exception("profile_restore_failed_in_background")

    async def restore_full(self, session: HidInvocation | None = None) -> bool:
        try:
            return await self.use_profile(FULL, session)
        except ToolError as e:
            # The next pointer action retries the switch before it acts.
            log.error("profile_restore_failed", code=e.code, reason=e.message)
            return False

    # -- drags ----------------------------------------------------------------------------------

    def _check_drag(self, tool: str, role: DragRole) -> None:
        if role == "release":
            if self.drag is None:
                raise ToolError(
                    "drag_not_in_progress",
                    "no drag is in progress: call drag_start first (a drag_start that returned "
                    "screen_stable=false, or one left longer than the drag limit, was already "
                    "moved back and released)",
                )
            return
        if self.drag is not None:
            left = max(0.0, self.drag.expires - time.monotonic())
            code = "drag_already_in_progress" if role == "start" else "drag_in_progress"
            raise ToolError(
                code,
                f"a drag is in progress (contact held at {self.drag.at.to_dict()}): finish it "
                f"with drag_release at the confirmed point before {tool}; it is undone "
                f"automatically in {left:.0f} s",
                retryable=True,
                details={"drag": self.drag_dict()},
            )

    def drag_dict(self) -> dict[str, Any]:
        d = self.drag
        if d is None:
            return {}
        return {
            "start": d.start.to_dict(),
            "at": d.at.to_dict(),
            "button": d.button,
            "expires_in_s": round(max(0.0, d.expires - time.monotonic()), 1),
        }

    def begin_drag(self, drag: Drag) -> None:
        self.drag = drag
        delay = max(0.0, drag.expires - time.monotonic())
        self._drag_timer = asyncio.get_running_loop().call_later(delay, self._expire)

    def end_drag(self) -> None:
        self.drag = None
        if self._drag_timer is not None:
            self._drag_timer.cancel()
            self._drag_timer = None

    def revoke(self, token_id: str) -> None:
        """`token_id` was revoked: a drag its call began is undone now, not at its limit."""
        drag, timer = self.drag, self._drag_timer
        if drag is not None and timer is not None and token_id and drag.token_id == token_id:
            timer.cancel()  # (no timer: its undo already runs)
            self._expire()

    def _expire(self) -> None:
        self._drag_timer = None
        self._drag_expiry = asyncio.create_task(self._undo_drag())

    async def _undo_drag(self) -> None:
        """The drag limit passed: move back to the start and lift, as an invocation of its own."""
        invocations.current.set(None)  # the engine's own, whoever's call began the drag
        try:
            async with self.invocation("drag_limit", drag="release") as s:
                d = self.drag
                assert d is not None
                log.warning("drag_expired", start=d.start.to_dict(), at=d.at.to_dict())
                await s.run(prog.drag_cancel(self.cfg, self.pointer, d.at, d.start, d.button))
        except ToolError as e:
            log.warning("drag_expiry_failed", code=e.code, reason=e.message)
            if e.code == "target_suspended":
                # Nothing can be written to a sleeping target: the drag ends here, and the
                # release at its resume (_usb_changed) lifts the button with the rest.
                self.end_drag()

    # -- stop -----------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise ToolError(
                "input_engine_stopped", "the daemon is stopping; no more HID input", retryable=True
            )

    async def close(self) -> None:
        """The daemon's stop hook: after the catalog has drained, leave nothing held, any drag
        released, and the `full` profile live."""
        self._closed = True
        self.end_drag()
        if self._drag_expiry is not None and not self._drag_expiry.done():
            self._drag_expiry.cancel()
        locked = False
        try:
            async with asyncio.timeout(self.cfg.profile_switch_timeout_s):
                await self._flow.acquire()
                locked = True
        except TimeoutError:
            log.error("input_flow_stuck_at_stop")  # release anyway: nothing may stay down
        try:
            released = await self.release_everything()
            await self.restore_full()
        finally:
            if locked:
                self._flow.release()
        if self._restorer is not None:  # waiting for the flow: the stop did its work
            self._restorer.cancel()
        if self._resume_release is not None:  # likewise: the release above did its work
            self._resume_release.cancel()
        log.info(
            "input_engine_stopped",
            released=released,
            holding=self.held.holding(),
            profile=self.profiles.profile,
        )
