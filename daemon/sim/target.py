"""The simulated target: stands where the kernel and the phone would be.

It takes the exact HID reports the daemon's writers produce, decodes them with gadget.reports'
unpackers, drives a small virtual device (daemon/sim/device.py) and renders it to frames for the
screenshot path (daemon/sim/render.py). No board needed: `make run` and the service tests use it.

What the virtual device does (simple but honest):

- Screen: 1080x1920 portrait on phones (ios, android), 1920x1080 on desktops. A status bar,
  then a home screen with a grid of named app tiles (Settings, Safari on ios/macos or Chrome
  elsewhere, Messages, Mail, Maps, ...). A tap on a tile opens that app: a "< Home" button, a
  title, one text field and a list of 40 rows. In the browser the field is the URL field.
- Pointer: a touchscreen on android, an absolute mouse elsewhere (left button = contact, as with
  AssistiveTouch). A press and release moving less than 2 % is a tap (held >= 0.5 s: a long
  press, which opens nothing); tapping the field focuses it, tapping a row is recorded. A swipe
  or drag scrolls the list, the content following the contact exactly (no momentum); the wheel
  scrolls by rows. On phones, swipes starting at the edge are gestures: from x <= 1 % to the right
  = back, from y >= 99 % upward = home, from the top down = notifications (recorded only).
  Only the first finger down drives gestures; other fingers are tracked and drawn.
- Keyboard: boot reports read as a host with the configured keyboard layout reads them: an
  xkbcommon state of that layout (daemon/sim/xkbtext.py: shift, AltGr/Option, Caps Lock, dead
  keys through the Compose table), never the typing planner's tables, into the focused field.
  Like a Linux host, it sends the keyboard an LED output report when it enumerates and whenever
  Caps/Num/Scroll Lock changes (`leds_at_enumeration=False`: only on changes;
  `led_reports=False`: a host that never sends one);
  backspace deletes, Enter submits (search: opens the first matching app, or
  the browser when the text looks like a URL; URL field: loads the page). Typing with nothing
  focused is recorded and dropped. Shortcuts: ios Cmd+H home, Cmd+Space search; macos
  Cmd+Space search, Cmd+Q home; windows/linux Alt+F4 home, a bare Win/Super tap opens search;
  Cmd (apple) or Ctrl (others) + A/C/X/V select all/copy/cut/paste, +L focuses the URL field;
  Escape closes search (android: Escape is back).
- Consumer control: AC Home, AC Back, app switch 0x029F (to the previous app), AC Search.
- iOS quirk (target-facts.md): while the pointer is in the composite (profile "full"), every
  shortcut with a modifier other than shift is swallowed by AssistiveTouch (recorded, no effect);
  in "keyboard-isolated" they work. While isolated the pointer node does not exist: pointer writes
  raise TargetNotAttached and no cursor is drawn.
- USB suspend: suspend() is the target falling asleep (its bus suspended). As a real gadget, a
  report written then waits, one per role, and reaches the host at the next resume(); a
  further write is refused. remote_wakeup() resumes it shortly after, if the host enabled
  remote wakeup at its suspend (suspend(wakeup=False): it did not, and stays asleep). Each
  state change goes to `on_usb_state` with the UDC's state name.
- Re-enumeration (profile switch, unplug/plug) takes `reenumerate_s`, during which writes fail;
  the host then forgets everything held (keys, buttons, contacts), recorded in the events.
- Frames are rendered lazily, only when asked for, paced like a camera at `fps`; capture_off()
  makes frame() raise capture_unavailable at once (a real reader would wait out its timeout).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import structlog

from daemon.errors import ToolError
from daemon.frames import Frame
from daemon.screen.geometry import fit
from daemon.sim import keys
from daemon.sim.device import VirtualDevice
from daemon.sim.layout import PHONES, PLATFORMS
from daemon.sim.render import Renderer, hdmi_frame
from gadget import layouts, reports
from gadget.errors import TargetNotAttached
from gadget.profiles import has_role

if TYPE_CHECKING:
    from daemon.frames import Image

log = structlog.get_logger(__name__)

PROFILES = ("full", "keyboard-isolated")
HDMI_SIZE = (1920, 1080)  # the frame a phone's HDMI adapter sends
HIT_SLOP = 6  # pixels around a word's ink that still count as a tap on it
ROLES = ("keyboard", "consumer", "pointer")


class SimTarget:
    """HID sink, profile control and frame source of one simulated target."""

    def __init__(
        self,
        platform: str,
        *,
        width: int | None = None,
        height: int | None = None,
        fps: float = 30.0,
        reenumerate_s: float = 0.05,
        xkb_names: dict[str, str] | None = None,
        led_reports: bool = True,
        leds_at_enumeration: bool = True,
        hdmi: bool = False,
        overscan: float = 0.0,
    ) -> None:
        if platform not in PLATFORMS:
            raise ValueError(f"platform must be one of {', '.join(PLATFORMS)}, not {platform!r}")
        if fps <= 0:
            raise ValueError("fps must be positive")
        portrait = platform in PHONES
        w = width or (1080 if portrait else 1920)
        h = height or (1920 if portrait else 1080)
        self.platform = platform
        self.fps = fps
        self.reenumerate_s = reenumerate_s
        names = xkb_names or layouts.for_target("us", platform).xkb
        self._device = VirtualDevice(platform, w, h, xkb_names=dict(names))
        # The HDMI view: the picture fitted into a 1920x1080 frame inside an overscan border.
        self.hdmi = fit(*HDMI_SIZE, w, h, overscan) if hdmi else None
        self._hits: list[dict[str, Any]] = []  # what each tap landed on (tests' ground truth)
        self._send_leds = led_reports
        self._leds_at_enumeration = leds_at_enumeration
        self._led_count = 0
        self._led_state: reports.Leds | None = None
        self._led_last = reports.Leds()  # the host's own, whether it reported it or not
        self._led_event = asyncio.Event()
        self._enumerated()
        self._switches: list[str] = []
        self._attached = True
        self._enumerated_at = 0.0  # writes fail until this monotonic time (re-enumeration)
        self._capture = True
        self._animating = False
        self._counts = dict.fromkeys(ROLES, 0)
        self._suspended = False
        self._wakeup_enabled = False
        self._queued: dict[str, bytes] = {}  # written while suspended: delivered at resume
        self.on_usb_state: Callable[[str], None] | None = None
        self.wake_delay_s = 0.02  # remote wakeup signalling and the host's resume
        self._renderer = Renderer()
        self._render_lock = asyncio.Lock()
        self._last: Frame | None = None
        self._seq = 0

    # ---- HID side --------------------------------------------------------------------------

    async def write(self, role: str, report: bytes) -> None:
        """Deliver one report as the host would receive it."""
        if role not in ROLES:
            raise ValueError(f"role must be one of {', '.join(ROLES)}, not {role!r}")
        if not self._attached:
            raise TargetNotAttached("simulated target is unplugged")
        if time.monotonic() < self._enumerated_at:
            raise TargetNotAttached("simulated target is re-enumerating")
        if not has_role(self.profile, role):
            raise TargetNotAttached(f"no {role} in the {self.profile} profile")
        if self._suspended:
            if role in self._queued:
                raise TargetNotAttached(f"simulated target is suspended: {role} report not taken")
            self._queued[role] = report
            return
        self._deliver(role, report)

    def _deliver(self, role: str, report: bytes) -> None:
        now = time.monotonic()
        dev = self._device
        if role == "keyboard":
            kb = reports.unpack_keyboard(report)
            dev.keyboard(kb.modifiers, tuple(kb.keys))
            self._host_leds()
        elif role == "consumer":
            dev.consumer(reports.unpack_consumer(report))
        elif self.platform == "android":
            contacts = [
                (c.id, *self._touch_at(c.x, c.y), bool(c.tip)) for c in reports.unpack_touch(report)
            ]
            taps = len(dev.taps)
            dev.touch(contacts, now)
            self._record_hits(taps)
        else:
            m = reports.unpack_mouse(report)
            taps = len(dev.taps)
            dev.mouse(m.buttons, keys.norm(m.x), keys.norm(m.y), m.wheel, m.pan, now)
            self._record_hits(taps)
        self._counts[role] += 1

    def _touch_at(self, x: int, y: int) -> tuple[float, float]:
        """Where a touch lands on the screen, normalized. Android binds a USB touchscreen to
        the external display: with the HDMI view it spans the whole frame, bars included, and
        a touch on a bar lands on the screen's nearest edge."""
        nx, ny = keys.norm(x), keys.norm(y)
        r = self.hdmi
        if r is None:
            return nx, ny
        fx, fy = nx / 1000 * (HDMI_SIZE[0] - 1), ny / 1000 * (HDMI_SIZE[1] - 1)
        sx = (fx - r.x) / max(1, r.w - 1) * 1000
        sy = (fy - r.y) / max(1, r.h - 1) * 1000
        return min(1000.0, max(0.0, sx)), min(1000.0, max(0.0, sy))

    def _record_hits(self, before: int) -> None:
        """Note the word under each new tap, in the picture last rendered (what was seen)."""
        dev = self._device
        for x, y in dev.taps[before:]:
            px, py = x * dev.width / 1000, y * dev.height / 1000
            word = next(
                (
                    w.text
                    for w in self._renderer.drawn
                    if w.box[0] - HIT_SLOP <= px <= w.box[2] + HIT_SLOP
                    and w.box[1] - HIT_SLOP <= py <= w.box[3] + HIT_SLOP
                ),
                None,
            )
            self._hits = [*self._hits[-99:], {"x": round(px), "y": round(py), "word": word}]

    # ---- the host's LED output reports -----------------------------------------------------

    def _leds_now(self) -> reports.Leds:
        x = self._device.xkb
        return reports.Leds(num_lock=x.num_lock, caps_lock=x.caps_lock, scroll_lock=x.scroll_lock)

    def _report_leds(self) -> None:
        if not self._send_leds:
            return
        self._led_count += 1
        self._led_state = self._leds_now()
        self._led_event.set()
        self._led_event = asyncio.Event()

    def _enumerated(self) -> None:
        """A new enumeration: the keyboard knows nothing until the host reports its LEDs,
        which it does at once."""
        self._led_count, self._led_state = 0, None
        if self._leds_at_enumeration:
            self._report_leds()

    def _host_leds(self) -> None:
        if self._send_leds and self._leds_now() != self._led_last:
            self._report_leds()
        self._led_last = self._leds_now()

    def led_reports(self) -> tuple[int, reports.Leds | None]:
        return self._led_count, self._led_state

    async def wait_led_report(self, after: int, timeout: float) -> reports.Leds | None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self._led_count <= after:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return None
            try:
                async with asyncio.timeout(remaining):
                    await self._led_event.wait()
            except TimeoutError:
                return None
        return self._led_state

    # ---- profile side ----------------------------------------------------------------------

    @property
    def profile(self) -> str:
        return self._device.profile

    @property
    def switches(self) -> list[str]:
        return list(self._switches)

    async def switch_profile(self, name: str) -> bool:
        """Make `name` live; re-enumerates (taking reenumerate_s) only when it changes."""
        if name not in PROFILES:
            raise ValueError(f"profile must be one of {', '.join(PROFILES)}, not {name!r}")
        if name == self.profile:
            return False
        self._reenumerate(f"switch to {name}")
        self._device.profile = name
        self._switches.append(name)
        log.info("sim_profile_switched", profile=name)
        await asyncio.sleep(max(0.0, self._enumerated_at - time.monotonic()))
        self._enumerated()
        return True

    def _reenumerate(self, why: str) -> None:
        self._device.release_all(why)
        self._enumerated_at = time.monotonic() + self.reenumerate_s

    # ---- frames ----------------------------------------------------------------------------

    async def frame(self, *, newer_than: float | None = None, timeout: float = 2.0) -> Frame:
        """The newest frame; with `newer_than`, one rendered after that monotonic time."""
        deadline = time.monotonic() + timeout
        period = 1.0 / self.fps
        while True:
            if not self._capture:
                raise ToolError("capture_unavailable", "simulated capture is off", retryable=True)
            frame = await self._newest(period)
            if newer_than is None or frame.captured_at > newer_than:
                return frame
            now = time.monotonic()
            wake = max(frame.captured_at + period, newer_than)
            if wake > deadline:
                raise ToolError(
                    "capture_unavailable",
                    f"no frame newer than requested within {timeout:g} s",
                    retryable=True,
                )
            await asyncio.sleep(wake - now)

    async def _newest(self, period: float) -> Frame:
        """The camera's latest frame: the last one if a period has not passed, else a new one."""
        async with self._render_lock:
            last = self._last
            if last is not None and time.monotonic() - last.captured_at < period:
                return last
            self._seq += 1
            view = self._device.view(self._seq if self._animating else None)
            mono, utc = time.monotonic(), time.time()
            image = await asyncio.to_thread(self._render, view)
            self._last = Frame(image=image, seq=self._seq, captured_at=mono, captured_at_utc=utc)
            return self._last

    def _render(self, view: Any) -> Image:
        image = self._renderer.render(view)
        return image if self.hdmi is None else hdmi_frame(image, self.hdmi, HDMI_SIZE)

    def available(self) -> tuple[bool, str]:
        return (True, "") if self._capture else (False, "simulated capture is off")

    # ---- faults and observation ------------------------------------------------------------

    def _usb_state(self, raw: str) -> None:
        if self.on_usb_state is not None:
            self.on_usb_state(raw)

    @property
    def usb_state(self) -> str:
        if not self._attached:
            return "not attached"
        return "suspended" if self._suspended else "configured"

    def unplug(self) -> None:
        self._attached = False
        self._suspended = False
        self._queued.clear()
        self._device.release_all("unplug")
        log.info("sim_unplugged")
        self._usb_state("not attached")

    def plug(self) -> None:
        if not self._attached:
            self._attached = True
            self._reenumerate("plug")
            self._enumerated()
            log.info("sim_plugged")
            self._usb_state("configured")

    def suspend(self, *, wakeup: bool = True) -> None:
        """The target sleeps; `wakeup`: its host enabled remote wakeup."""
        if not self._attached or self._suspended:
            return
        self._suspended, self._wakeup_enabled = True, wakeup
        log.info("sim_suspended", wakeup_enabled=wakeup)
        self._usb_state("suspended")

    def resume(self) -> None:
        """The target wakes: what waited in the gadget reaches it first (as on a real bus)."""
        if not self._suspended:
            return
        self._suspended = False
        queued, self._queued = self._queued, {}
        for role, report in queued.items():
            self._deliver(role, report)
        log.info("sim_resumed", delivered_late=sorted(queued))
        self._usb_state("configured")

    async def remote_wakeup(self) -> None:
        """The gadget signals remote wakeup: answered only if the host enabled it."""
        if self._suspended and self._wakeup_enabled:
            asyncio.get_running_loop().call_later(self.wake_delay_s, self.resume)

    def capture_off(self) -> None:
        self._capture = False

    def capture_on(self) -> None:
        self._capture = True

    def set_animating(self, on: bool) -> None:
        self._animating = on

    def set_keyboard(self, on: bool) -> None:
        """Keep the on-screen keyboard up while a field has focus (or never)."""
        self._device.show_keyboard = on

    def tile_center(self, name: str) -> tuple[float, float]:
        """Normalized centre of a home-screen tile's icon, for tests and demos."""
        tile = next((t for t in self._device.layout.tiles if t.name == name), None)
        if tile is None:
            raise KeyError(f"no tile named {name!r}")
        return (tile.icon.x0 + tile.icon.x1) / 2, (tile.icon.y0 + tile.icon.y1) / 2

    def field_center(self) -> tuple[float, float]:
        """Normalized centre of the text field of an app or the search screen."""
        f = self._device.layout.field
        return (f.x0 + f.x1) / 2, (f.y0 + f.y1) / 2

    def state(self) -> dict[str, Any]:
        """JSON-able: everything a test or the dev server wants to assert on."""
        return {
            **self._device.state(),
            "profile": self.profile,
            "switches": self.switches,
            "attached": self._attached,
            "usb_state": self.usb_state,
            "queued_while_suspended": sorted(self._queued),
            "capture": self._capture,
            "animating": self._animating,
            "keyboard": self._device.show_keyboard,
            "hdmi": None if self.hdmi is None else self.hdmi.to_list(),
            "hits": list(self._hits),
            "frames_rendered": self._seq,  # grows only while someone takes frames
            "size": [self._device.width, self._device.height],
            "reports": dict(self._counts),
        }
