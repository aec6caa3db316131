"""The daemon's counters for GET /metrics (prometheus_client; the route is
daemon/transports/metrics_http.py).

Where each number comes from:
- invocations and their latency: a catalog observer (Catalog.observers), one call per finished
  invocation of any transport;
- HID reports, write errors, profile switches: thin wrappers around the backend's HidOutput
  and ProfileControl (Counted: the backend as the engine and the tools take it; gadget/ and
  the backend itself know nothing);
- capture frames, frame age, faults: a wrapper around the backend's FrameSource (frames counted
  by the source's own sequence numbers, so frames nobody asked for between two calls count too);
- open connections: read from the transports at scrape time;
- the process collector (CPU, memory, fds of this process).

A scrape never captures, never calls into the backend and takes no lock of the HID flow: it
reads counters (each behind prometheus_client's own short lock).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Callable, Iterable, Mapping
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    Info,
    ProcessCollector,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from daemon.backends import Backend, HidOutput, ProfileControl
from daemon.catalog import Invocation
from daemon.errors import ToolError
from daemon.frames import Frame, FrameSource
from daemon.usb import UsbLink
from gadget import reports
from gadget.errors import GadgetError
from gadget.usbstate import STATES

# No *_created series: one more line per label set for a timestamp nobody graphs.
disable_created_metrics()  # type: ignore[no-untyped-call]

# A tool name the catalog does not know (a typo, a hostile client) is counted under this one
# label value: every distinct name sent would otherwise grow the series without bound.
UNKNOWN_TOOL = "_unknown"

# From a 5 ms read to the 300 s HID limit.
INVOCATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
# A switch re-enumerates the composite: around a second on a phone, up to the 15 s limit.
SWITCH_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 3, 5, 10, 15, 30)
# How old a frame is when it is handed to a tool (the newest one a source has).
# The capture's states (daemon/screen/capture_dv.py's STATES, before any was known: unknown).
CAPTURE_STATES = (
    "unknown",
    "no_device",
    "no_cable",
    "no_signal",
    "no_sync",
    "out_of_range",
    "streaming",
)
FRAME_AGE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)


class Metrics:
    """Every metric of one daemon, in a registry of its own."""

    def __init__(self, version: str, platform: str, backend: str) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        ProcessCollector(registry=r)
        Info("fingertip_build", "Version, platform and backend of this daemon", registry=r).info(
            {"version": version, "platform": platform, "backend": backend}
        )
        self.invocations = Counter(
            "fingertip_tool_invocations",
            "Finished tool invocations by tool, transport, outcome and error code",
            ["tool", "transport", "outcome", "code"],
            registry=r,
        )
        self.invocation_seconds = Histogram(
            "fingertip_tool_invocation_duration_seconds",
            "Tool invocation latency as the catalog measured it",
            ["tool", "transport"],
            buckets=INVOCATION_BUCKETS,
            registry=r,
        )
        self.hid_reports = Counter(
            "fingertip_hid_reports_written", "HID reports the target accepted", ["role"], registry=r
        )
        self.hid_errors = Counter(
            "fingertip_hid_write_errors",
            "HID report writes that failed",
            ["role", "code"],
            registry=r,
        )
        self.profile_switches = Counter(
            "fingertip_profile_switches",
            "USB profile switch requests by target profile and outcome "
            "(switched, unchanged, failed, cancelled)",
            ["profile", "outcome"],
            registry=r,
        )
        self.profile_switch_seconds = Histogram(
            "fingertip_profile_switch_duration_seconds",
            "How long a profile switch took, re-enumeration included",
            ["profile"],
            buckets=SWITCH_BUCKETS,
            registry=r,
        )
        self.frames = Counter(
            "fingertip_capture_frames", "Frames the capture source delivered", registry=r
        )
        self.frame_age = Histogram(
            "fingertip_capture_frame_age_seconds",
            "Age of each frame when it was handed to a tool",
            buckets=FRAME_AGE_BUCKETS,
            registry=r,
        )
        self.capture_faults = Counter(
            "fingertip_capture_faults",
            "Frame requests that failed, by error code",
            ["code"],
            registry=r,
        )
        self.last_frame_at: float | None = None  # monotonic capture time of the newest frame
        # The capture's last known state (no_signal, streaming, ...; daemon/screen/capture.py),
        # an attribute read: None where the source has none (the simulated target).
        self.capture_state: Callable[[], str | None] = lambda: None
        self._last_seq = 0
        self._known_tools: frozenset[str] = frozenset()
        self._children: dict[tuple[str, str, str, str], tuple[Any, Any]] = {}

    def known_tools(self, names: Iterable[str]) -> None:
        self._known_tools = frozenset(names)

    # -- what the daemon feeds in -----------------------------------------------------------

    def observe_invocation(self, inv: Invocation) -> None:
        """The catalog observer: two counter updates, nothing that blocks."""
        tool = inv.tool if inv.tool in self._known_tools else UNKNOWN_TOOL
        key = (tool, inv.transport, inv.outcome, inv.error_code or "")
        children = self._children.get(key)  # labels() on every call was most of this observer
        if children is None:  # bounded: known tools x transports x outcomes x error codes
            children = self._children[key] = (
                self.invocations.labels(*key),
                self.invocation_seconds.labels(tool, inv.transport),
            )
        children[0].inc()
        children[1].observe(inv.duration_ms / 1000)

    def saw_frame(self, frame: Frame) -> None:
        # The source numbers its frames (+1 each, from 1): the step since the last one seen is
        # how many it delivered meanwhile, to us or to nobody. A smaller number is a restart.
        if frame.seq != self._last_seq:
            step = frame.seq - self._last_seq
            self.frames.inc(step if step > 0 else frame.seq)
            self._last_seq = frame.seq
        self.last_frame_at = max(self.last_frame_at or 0.0, frame.captured_at)
        self.frame_age.observe(max(0.0, time.monotonic() - frame.captured_at))

    def watch_usb(self, link: UsbLink) -> None:
        """The USB link's state and whether the target can be woken, read at scrape time;
        its changes counted as they happen."""
        changes = Counter(
            "fingertip_usb_state_changes",
            "USB state changes by the state entered (suspended: the target fell asleep)",
            ["state"],
            registry=self.registry,
        )
        for state in STATES:
            changes.labels(state)
        link.listeners.append(lambda old, new, raw: changes.labels(new).inc())
        self.registry.register(_Usb(link))

    def watch_connections(self, counts: Mapping[str, Callable[[], int]]) -> None:
        """Open connections per transport, read at scrape time."""
        self.registry.register(_Live(self, counts))

    def scrape(self) -> bytes:
        """The text format (blocking: it reads /proc for the process collector)."""
        return generate_latest(self.registry)


class _Live(Collector):
    """Gauges read at scrape time: open connections per transport, age of the newest frame."""

    def __init__(self, metrics: Metrics, counts: Mapping[str, Callable[[], int]]) -> None:
        self.metrics = metrics
        self.counts = dict(counts)

    def collect(self) -> Iterable[Metric]:
        conns = GaugeMetricFamily(
            "fingertip_open_connections",
            "Open connections per transport (http counts every TCP connection on the server "
            "port, WebSocket ones included)",
            labels=["transport"],
        )
        for transport, count in sorted(self.counts.items()):
            conns.add_metric([transport], count())
        yield conns
        age = GaugeMetricFamily(
            "fingertip_capture_last_frame_age_seconds",
            "Seconds since the newest frame delivered was captured (absent before the first)",
        )
        last = self.metrics.last_frame_at
        if last is not None:
            age.add_metric([], max(0.0, time.monotonic() - last))
        yield age
        state = self.metrics.capture_state()
        if state is not None:
            states = GaugeMetricFamily(
                "fingertip_capture_state",
                "1 for the capture's current state (no_device, no_cable, no_signal, no_sync, "
                "out_of_range, streaming; unknown before it was first asked)",
                labels=["state"],
            )
            for name in CAPTURE_STATES:
                states.add_metric([name], 1.0 if name == state else 0.0)
            yield states


class _Usb(Collector):
    """The USB link's state (1 for the current one) and whether remote wakeup is possible."""

    def __init__(self, link: UsbLink) -> None:
        self.link = link

    def collect(self) -> Iterable[Metric]:
        state = GaugeMetricFamily(
            "fingertip_usb_state",
            "The USB link's state: 1 for the current one (not_attached, attached, configured, "
            "suspended)",
            labels=["state"],
        )
        for name in STATES:
            state.add_metric([name], 1.0 if self.link.state == name else 0.0)
        yield state
        yield GaugeMetricFamily(
            "fingertip_usb_can_wake",
            "1 when wake_target can wake a sleeping target (remote wakeup advertised)",
            value=1.0 if self.link.can_wake else 0.0,
        )


# -- the counting wrappers around the backend's parts -------------------------------------------


class CountingHid:
    """HidOutput that counts each report written and each failed write, by role."""

    def __init__(self, inner: HidOutput, metrics: Metrics) -> None:
        self.inner = inner
        self.metrics = metrics
        self._written: dict[str, Any] = {}  # role -> its counter (labels() per report cost 20x)

    async def write(self, role: str, report: bytes) -> None:
        try:
            await self.inner.write(role, report)
        except GadgetError as exc:
            self.metrics.hid_errors.labels(role, exc.code).inc()
            raise
        except Exception:
            self.metrics.hid_errors.labels(role, "exception").inc()
            raise
        counter = self._written.get(role)
        if counter is None:
            counter = self._written[role] = self.metrics.hid_reports.labels(role)
        counter.inc()

    def led_reports(self) -> tuple[int, reports.Leds | None]:
        return self.inner.led_reports()

    async def wait_led_report(self, after: int, timeout: float) -> reports.Leds | None:
        return await self.inner.wait_led_report(after, timeout)

    def __getattr__(self, name: str) -> Any:  # anything else the backend's writer offers
        return getattr(self.inner, name)


class CountingProfiles:
    """ProfileControl that counts switches by outcome and times them."""

    def __init__(self, inner: ProfileControl, metrics: Metrics) -> None:
        self.inner = inner
        self.metrics = metrics

    @property
    def profile(self) -> str:
        return self.inner.profile

    async def switch_profile(self, name: str) -> bool:
        started = time.monotonic()
        outcome = "failed"
        try:
            changed = await self.inner.switch_profile(name)
            outcome = "switched" if changed else "unchanged"
            return changed
        except asyncio.CancelledError:
            outcome = "cancelled"
            raise
        finally:
            self.metrics.profile_switches.labels(name, outcome).inc()
            if outcome != "unchanged":
                self.metrics.profile_switch_seconds.labels(name).observe(time.monotonic() - started)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class CountingFrames:
    """FrameSource that counts delivered frames and failed requests."""

    def __init__(self, inner: FrameSource, metrics: Metrics) -> None:
        self.inner = inner
        self.metrics = metrics

    async def frame(self, *, newer_than: float | None = None, timeout: float = 2.0) -> Frame:
        try:
            frame = await self.inner.frame(newer_than=newer_than, timeout=timeout)
        except ToolError as exc:
            self.metrics.capture_faults.labels(exc.code).inc()
            raise
        self.metrics.saw_frame(frame)
        return frame

    def available(self) -> tuple[bool, str]:
        return self.inner.available()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class Counted:
    """A backend as the daemon's parts take it: its HID output, profiles and frames counted.
    The backend itself is left as it is; starting, closing and anything else it offers (the
    board's status, the simulated target) are its own."""

    def __init__(self, backend: Backend, metrics: Metrics) -> None:
        self.inner = backend
        self.hid: HidOutput = CountingHid(backend.hid, metrics)
        self.profiles: ProfileControl = CountingProfiles(backend.profiles, metrics)
        self.frames: FrameSource = CountingFrames(backend.frames, metrics)
        self.link: UsbLink = backend.link  # not counted: its changes are (watch_usb)
        if hasattr(backend.frames, "capture_status"):  # a capture device (not the simulated target)
            capture = backend.frames
            metrics.capture_state = lambda: str(getattr(capture, "state", "unknown"))

    async def start(self) -> bool:
        return await self.inner.start()

    def follow_link(self) -> AsyncGenerator[None, None]:
        return self.inner.follow_link()

    async def close(self) -> None:
        await self.inner.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)
