"""The board backend: our gadget on the board's UDC, its /dev/hidgN writers, the V4L2 capture.

Profile switches block (configfs writes, then waiting for the target to enumerate the new
composite), so they run in a worker thread; HID writes stay on the event loop (non-blocking
descriptors). Every rebind re-creates each /dev/hidgN of the gadget, so after a switch the
writers and the LED reader reopen their nodes: old descriptors fail with ESHUTDOWN.

At start the backend reconciles: whatever is live (nothing, or `keyboard-isolated` left by a
crash mid-isolation) becomes the `full` profile, bound, and a no-op when it already is (then
the host kept what a predecessor pressed, and the engine releases it). At close it leaves the
gadget bound with `full`; tearing it down is the systemd unit's ExecStopPost. Releasing is the
input engine's: the writers only write.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import time
from collections.abc import AsyncGenerator, Mapping
from pathlib import Path
from typing import Any

import structlog

from daemon.backends import ROLES, HidOutput, ProfileControl
from daemon.config import Config
from daemon.frames import FrameSource
from daemon.screen.capture import V4L2Capture
from daemon.usb import UsbLink
from gadget import hidg, reports, usbstate
from gadget.configfs import Gadget
from gadget.descriptors import pointer_for
from gadget.errors import ConfigfsError, GadgetError, TargetNotAttached
from gadget.profiles import FULL, build_profile
from gadget.settings import GadgetSettings

log = structlog.get_logger("daemon.board")


class BoardHid:
    """HidOutput over the live profile's /dev/hidgN nodes, plus the keyboard's LED state."""

    def __init__(self, settings: GadgetSettings, platform: str) -> None:
        self.settings = settings
        self._hid_roles = {"pointer": pointer_for(platform).role}  # mouse or touchscreen
        self._writers: dict[str, hidg.HidWriter] = {}  # every role ever seen
        self._live: frozenset[str] = frozenset()  # roles the live profile has a node for
        self._leds: hidg.LedReader | None = None

    @property
    def roles(self) -> frozenset[str]:
        return self._live

    @property
    def leds(self) -> reports.Leds:
        """The target's keyboard LEDs (caps lock ...) as its last output report set them."""
        return self._leds.leds if self._leds is not None else reports.Leds()

    def led_reports(self) -> tuple[int, reports.Leds | None]:
        reader = self._leds
        if reader is None or not reader.known:
            return (0, None)
        return (reader.count, reader.leds)

    async def wait_led_report(self, after: int, timeout: float) -> reports.Leds | None:
        reader = self._leds
        if reader is None:
            await asyncio.sleep(timeout)
            return None
        return await reader.wait_report(after, timeout)

    def attach(self, nodes: Mapping[str, Path]) -> None:
        """Point the writers at the nodes of the profile that just went live. Old descriptors
        are dropped; each writer opens its node on its next write."""
        nodes = {role: path for role, path in nodes.items() if role in ROLES}
        for role, path in nodes.items():
            writer = self._writers.get(role)
            if writer is None or writer.path != path:
                if writer is not None:
                    writer.close()
                hid_role = self._hid_roles.get(role, role)
                writer = hidg.HidWriter(path, hid_role, timeout=self.settings.write_timeout)
                self._writers[role] = writer
            writer.reopen()
        for role in set(self._writers) - set(nodes):
            self._writers[role].close()
        self._live = frozenset(nodes)
        self._attach_leds(nodes.get("keyboard"))
        log.info("board.hid_attached", nodes={r: str(p) for r, p in sorted(nodes.items())})

    def _attach_leds(self, node: Path | None) -> None:
        if self._leds is not None:
            self._leds.close()
            self._leds = None
        if node is None:
            return
        reader = hidg.LedReader(node)
        try:
            reader.start()
        except GadgetError as exc:  # the node vanished again; the next attach retries
            log.warning("board.leds_unavailable", node=str(node), error=exc.message)
            return
        self._leds = reader

    async def write(self, role: str, report: bytes) -> None:
        if role not in ROLES:
            raise ValueError(f"unknown HID role {role!r}; expected one of {', '.join(ROLES)}")
        writer = self._writers.get(role) if role in self._live else None
        if writer is None:
            raise TargetNotAttached(f"{role}: the live USB profile has no {role} function")
        await writer.write(report)

    def refresh(self) -> None:
        """The target came back (woke, or re-configured the device): no writer descriptor from
        before survives; each writer opens its node afresh on its next write. (The LED reader
        keeps its state: it closes itself on a failure and attach() makes a new one.)"""
        for writer in self._writers.values():
            writer.reopen()

    def close(self) -> None:
        for writer in self._writers.values():
            writer.close()
        self._live = frozenset()
        self._attach_leds(None)


class BoardProfiles:
    """ProfileControl over configfs: apply, wait for the target, then reattach the writers."""

    def __init__(self, gadget: Gadget, platform: str, hid: BoardHid) -> None:
        self.gadget = gadget
        self.platform = platform
        self.hid = hid
        self._profile: str | None = None
        self._lock = asyncio.Lock()
        self.remote_wakeup = False  # advertised in the configuration (decided at start)

    @property
    def profile(self) -> str:
        """The live profile ("none" before start or when the gadget is unbound)."""
        return self._profile or "none"

    async def switch_profile(self, name: str) -> bool:
        """Make `name` live; True when the target re-enumerated. Runs to its end even when the
        caller is cancelled, so the writers always match what is live."""
        task = asyncio.ensure_future(self._switch(name, strict=True))
        task.add_done_callback(_retrieve)
        return await asyncio.shield(task)

    async def reconcile(self) -> bool:
        """Make `full` live whatever is there now; a target that does not come is not fatal
        (writes then fail with target_not_attached until it does)."""
        was = await asyncio.to_thread(self.gadget.live_profile)
        changed = await self._switch(FULL, strict=False)
        log.info("board.reconciled", was=was, profile=self.profile, changed=changed)
        return changed

    async def _switch(self, name: str, *, strict: bool) -> bool:
        async with self._lock:
            try:
                changed = await asyncio.to_thread(self._apply, name, strict)
            finally:
                live, nodes = await asyncio.to_thread(self._observe)
                self._profile = live
                self.hid.attach(nodes)
            return changed

    def _apply(self, name: str, strict: bool) -> bool:
        """(thread) Apply the profile; after a change wait for the target, then settle."""
        settings = self.gadget.settings
        start = time.monotonic()
        profile = build_profile(name, self.platform, settings, remote_wakeup=self.remote_wakeup)
        changed = self.gadget.apply(profile)
        if not changed:
            return False
        self._await_access(settings.node_access_timeout)
        try:
            # Not fooled by the "configured" an unbind leaves behind (see Gadget).
            configured = self.gadget.wait_configured(settings.attach_timeout)
        except ConfigfsError as exc:
            if strict:
                raise
            log.warning("board.target_absent", profile=name, error=exc.message)
            return True
        time.sleep(settings.settle_delay)  # the target loads its drivers for the new composite
        log.info(
            "board.profile_switched",
            profile=name,
            configured_s=round(configured, 3),
            total_s=round(time.monotonic() - start, 3),
        )
        return True

    async def reenumerate(self) -> None:
        """Unbind and bind the live composite unchanged, so the target reads again what it
        reads only at enumeration (the drive's type: CD-ROM or disk); the writers follow."""
        async with self._lock:
            try:
                await asyncio.to_thread(self._rebind)
            finally:
                live, nodes = await asyncio.to_thread(self._observe)
                self._profile = live
                self.hid.attach(nodes)

    def _rebind(self) -> None:
        settings = self.gadget.settings
        self.gadget.unbind()
        self.gadget.bind()
        self._await_access(settings.node_access_timeout)
        try:
            self.gadget.wait_configured(settings.attach_timeout)
        except ConfigfsError as exc:
            log.warning("board.target_absent", after="rebind", error=exc.message)

    def _await_access(self, timeout: float) -> None:
        """(thread) A rebind re-creates the /dev/hidgN nodes root-only and udev then gives them
        the daemon's group (etc/udev/70-fingertip.rules); a daemon running as its own user
        must not open them before that (EACCES, seen in the board VM under load)."""
        deadline = time.monotonic() + timeout
        while True:
            nodes = self.gadget.device_nodes().values()
            waiting = [str(n) for n in nodes if not os.access(n, os.R_OK | os.W_OK)]
            if not waiting:
                return
            if time.monotonic() >= deadline:
                log.warning("board.nodes_not_accessible", nodes=waiting)
                return
            time.sleep(0.02)

    def _observe(self) -> tuple[str | None, dict[str, Path]]:
        """(thread) The live profile and its device nodes, as configfs and sysfs show them."""
        return self.gadget.live_profile(), self.gadget.device_nodes()


def _retrieve(task: asyncio.Future[Any]) -> None:
    """A shielded switch whose caller was cancelled still has its failure logged (and asyncio
    does not warn about an exception nobody retrieved)."""
    exc = None if task.cancelled() else task.exception()
    if exc is not None:
        log.warning("board.switch_failed", error=str(exc))


class BoardBackend:
    """The `board` backend (daemon.backends.Backend): gadget, writers, capture."""

    def __init__(self, config: Config, *, gadget: Gadget | None = None) -> None:
        self.config = config
        self.gadget = gadget or Gadget(config.gadget)
        self.writers = BoardHid(config.gadget, config.platform)
        self.board_profiles = BoardProfiles(self.gadget, config.platform, self.writers)
        self.capture = V4L2Capture(config.capture)
        self.link = UsbLink(state="not attached")
        self._udc_dir: Path | None = None  # the UDC's sysfs folder, found at start
        # The Backend protocol's names (its attributes are mutable, hence the plain types).
        self.hid: HidOutput = self.writers
        self.profiles: ProfileControl = self.board_profiles
        self.frames: FrameSource = self.capture

    @property
    def leds(self) -> reports.Leds:
        return self.writers.leds

    def status(self) -> dict[str, Any]:
        """For health and diagnostics: live profile, HID functions with nodes, LEDs."""
        return {
            "profile": self.board_profiles.profile,
            "hid_roles": sorted(self.writers.roles),
            "leds": dataclasses.asdict(self.writers.leds),
            "leds_known": self.writers.led_reports()[1] is not None,
            "remote_wakeup_advertised": self.board_profiles.remote_wakeup,
        }

    async def start(self) -> bool:
        """Decide remote wakeup, reconcile to `full`, then read the UDC's state once
        (follow_link follows it from then on). True when nothing changed: the host kept its
        state from before us (a crash mid-tap?) and may still hold keys, buttons or contacts."""
        settings = self.config.gadget
        try:
            udc: str | None = await asyncio.to_thread(self.gadget.find_udc)
        except ConfigfsError:
            udc = None  # reconcile says why, in its own words
        driver = usbstate.udc_driver(settings.sysfs_root, udc) if udc else None
        can_wake, why = usbstate.wake_capability(driver, settings.remote_wakeup)
        self.board_profiles.remote_wakeup = can_wake
        inherited = not await self.board_profiles.reconcile()
        udc = udc or await asyncio.to_thread(self.gadget.bound_udc)
        wakeup = None
        if udc is not None and can_wake:
            woken = udc

            async def wakeup() -> None:
                await asyncio.to_thread(usbstate.request_wakeup, settings.sysfs_root, woken)

        self.link.configure(can_wake=can_wake, wake_reason=why, wakeup=wakeup)
        self.link.listeners.append(self._state_changed)
        self._udc_dir = settings.sysfs_root / "class" / "udc" / udc if udc else None
        if self._udc_dir is not None:
            udc_dir = self._udc_dir
            # The state now, before start returns (the engine's first release must know a
            # sleeping target); the watcher then reports only changes. An input call re-reads
            # it too (two small sysfs reads): a sleep that began since the watcher's last look
            # is refused, not written into the gadget.
            self.link.refresh = lambda: self.link.set(usbstate.read_state(udc_dir))
            self.link.refresh()
        log.info("board.usb", udc=udc, driver=driver, remote_wakeup=can_wake, why=why)
        return inherited

    async def follow_link(self) -> AsyncGenerator[None, None]:
        """The daemon's "usb link" part (daemon.lifecycle): the UDC's state followed live by a
        watcher thread of its own, from after start() until before close()."""
        if self._udc_dir is None:  # no UDC: start() said why; nothing to follow
            yield
            return
        loop = asyncio.get_running_loop()

        def changed(raw: str) -> None:  # from the watcher's thread
            loop.call_soon_threadsafe(self.link.set, raw)

        watcher = usbstate.StateWatcher(
            self._udc_dir, changed, interval=self.config.gadget.state_poll_interval
        )
        watcher.start()
        try:
            yield
        finally:
            await asyncio.to_thread(watcher.stop)

    def _state_changed(self, old: str, new: str, raw: str) -> None:
        if new == "configured" and old != "configured":
            self.writers.refresh()  # no descriptor from before the sleep or reset survives

    async def close(self) -> None:
        """Leave `full` bound (the engine's stop restored it already, unless it could not),
        close the writers and the capture."""
        try:
            if self.board_profiles.profile != FULL:
                log.warning("board.restoring_full_at_close", live=self.board_profiles.profile)
                await self.board_profiles.switch_profile(FULL)
        except GadgetError as exc:
            log.warning("board.close_incomplete", code=exc.code, error=exc.message)
        finally:
            self.writers.close()
            await self.capture.aclose()
        log.info("board.closed")
