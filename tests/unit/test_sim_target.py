"""The simulated target, fed real packed reports (gadget.reports) as the daemon's writers send."""

from __future__ import annotations

import asyncio
import string
import time

import numpy as np
import pytest

from daemon.engine.program import chord_states
from daemon.errors import ToolError
from daemon.frames import Frame
from daemon.sim import SimTarget
from daemon.sim.control import control
from daemon.sim.layout import ROW_H
from gadget import keymap, reports
from gadget.errors import TargetNotAttached

PRINTABLE = "".join(ch for ch in string.printable if ch.isprintable())


class Hand:
    """Plays the daemon's writers: packs reports with gadget.reports and writes them."""

    def __init__(self, target: SimTarget) -> None:
        self.t = target
        self.touch = target.platform == "android"

    async def _pointer(self, down: bool, x: float, y: float) -> None:
        ax, ay = reports.norm_to_abs(x), reports.norm_to_abs(y)
        if self.touch:
            report = reports.touch([reports.Contact(0, ax, ay, tip=down)])
        else:
            report = reports.mouse(reports.BUTTON_LEFT if down else 0, ax, ay)
        await self.t.write("pointer", report)

    async def move(self, x: float, y: float) -> None:
        ax, ay = reports.norm_to_abs(x), reports.norm_to_abs(y)
        await self.t.write("pointer", reports.mouse(0, ax, ay))

    async def tap(self, x: float, y: float, *, hold_s: float = 0.0) -> None:
        await self._pointer(True, x, y)
        if hold_s:
            await asyncio.sleep(hold_s)
        await self._pointer(False, x, y)

    async def tap_tile(self, name: str) -> None:
        await self.tap(*self.t.tile_center(name))

    async def focus_field(self) -> None:
        await self.tap(*self.t.field_center())

    async def swipe(self, x0: float, y0: float, x1: float, y1: float, steps: int = 12) -> None:
        await self._pointer(True, x0, y0)
        for i in range(1, steps + 1):
            await self._pointer(True, x0 + (x1 - x0) * i / steps, y0 + (y1 - y0) * i / steps)
        await self._pointer(False, x1, y1)

    async def type(self, text: str) -> None:
        for ch in text:
            usage, mods = keymap.char_stroke(ch)
            await self.t.write("keyboard", reports.keyboard(mods, [usage]))
            await self.t.write("keyboard", reports.keyboard())

    async def chord(self, *names: str) -> None:
        """Press in order, release in reverse, as keyboard_tap does."""
        states = chord_states([keymap.key(n) for n in names])
        for report in [*states, *reversed(states[:-1]), reports.KEYBOARD_RELEASE]:
            await self.t.write("keyboard", report)

    async def consumer(self, name: str) -> None:
        await self.t.write("consumer", reports.consumer(keymap.key(name).usage))
        await self.t.write("consumer", reports.CONSUMER_RELEASE)


async def fresh_frame(t: SimTarget) -> Frame:
    return await t.frame(newer_than=time.monotonic())


def assert_nothing_held(t: SimTarget) -> None:
    s = t.state()
    assert s["keys_down"] == [] and s["modifiers_down"] == []
    assert s["buttons_down"] == [] and s["contacts_down"] == [] and s["consumer_down"] is None


# ---- pointer: taps, swipes, edges -----------------------------------------------------------


@pytest.mark.parametrize("platform", ["ios", "android", "macos", "windows", "linux"])
async def test_tap_on_a_tile_opens_that_app(platform: str) -> None:
    t = SimTarget(platform)
    hand = Hand(t)
    home = await fresh_frame(t)
    await hand.tap_tile("Settings")
    s = t.state()
    assert (s["screen"], s["app"]) == ("app", "Settings")
    assert "tap Settings" in s["events"] and "open Settings" in s["events"]
    assert not np.array_equal(home.image, (await fresh_frame(t)).image)
    assert_nothing_held(t)


async def test_a_settings_switch_flips_on_a_tap_and_shows_its_state() -> None:
    t = SimTarget("android")
    hand = Hand(t)
    await hand.tap_tile("Settings")
    assert t.state()["toggles"]["Wi-Fi"] is True
    lay = t._device.layout
    before = await fresh_frame(t)
    y = lay.viewport.y0 + ROW_H / 2  # the first row: Wi-Fi
    await hand.tap(500, y)
    assert t.state()["toggles"]["Wi-Fi"] is False
    after = await fresh_frame(t)
    changed = np.argwhere(np.any(before.image != after.image, axis=2))
    # Only the row's value changed (ON to OFF at its right end), a small part of the screen.
    assert changed[:, 1].min() > t._device.width * 0.8
    await hand.tap(500, y)
    assert t.state()["toggles"]["Wi-Fi"] is True
    assert_nothing_held(t)


async def test_the_on_screen_keyboard_comes_with_focus_and_its_keys_type() -> None:
    t = SimTarget("android")
    hand = Hand(t)
    await control(t, "keyboard_on")
    await hand.tap_tile("Notes")
    assert t._device.scene().keyboard is False  # nothing focused yet
    await hand.focus_field()
    assert t._device.scene().keyboard is True
    lay = t._device.layout
    for letter in "HI":
        key = next(r for name, r in lay.key_rects() if name == letter)
        await hand.tap((key.x0 + key.x1) / 2, (key.y0 + key.y1) / 2)
    assert t.state()["field_text"] == "hi"
    await control(t, "keyboard_off")
    assert t._device.scene().keyboard is False and t.state()["keyboard"] is False
    assert_nothing_held(t)


async def test_touch_release_report_lifts_where_the_finger_was() -> None:
    t = SimTarget("android")
    x, y = (reports.norm_to_abs(v) for v in t.tile_center("Clock"))
    await t.write("pointer", reports.touch([reports.Contact(0, x, y)]))
    for _ in range(3):  # the writers' all-up report (every id at 0,0), sent three times
        await t.write("pointer", reports.touch_release())
    s = t.state()
    assert (s["app"], s["contacts_down"]) == ("Clock", [])
    assert round(s["pointer"]["x"]) == round(reports.abs_to_norm(x))


async def test_tap_between_tiles_opens_nothing_and_long_press_opens_nothing() -> None:
    t = SimTarget("android")
    hand = Hand(t)
    await hand.tap(500, 900)
    assert t.state()["screen"] == "home"
    await hand.tap(*t.tile_center("Maps"), hold_s=0.6)
    s = t.state()
    assert s["screen"] == "home" and s["events"][-1] == "long press Maps"


async def test_swipe_scrolls_the_list_with_the_contact() -> None:
    t = SimTarget("android")
    hand = Hand(t)
    await hand.tap_tile("Notes")
    before = await fresh_frame(t)
    await hand.swipe(500, 800, 500, 400)
    travelled = reports.abs_to_norm(reports.norm_to_abs(800)) - reports.abs_to_norm(
        reports.norm_to_abs(400)
    )
    assert t.state()["scroll_px"] == round(travelled * before.height / 1000)
    assert not np.array_equal(before.image, (await fresh_frame(t)).image)
    # a swipe the other way brings the content back, and the list never scrolls past its top
    await hand.swipe(500, 300, 500, 900)
    assert t.state()["scroll_px"] == 0
    assert np.array_equal(before.image, (await fresh_frame(t)).image)


async def test_wheel_scrolls_by_rows_and_swipe_up_scrolls_the_mouse_list() -> None:
    t = SimTarget("macos")
    hand = Hand(t)
    await hand.tap_tile("Mail")
    x, y = reports.norm_to_abs(500), reports.norm_to_abs(600)
    await t.write("pointer", reports.mouse(0, x, y, wheel=-3))
    one_row = t.state()["scroll_px"] // 3
    assert one_row > 0
    await t.write("pointer", reports.mouse(0, x, y, wheel=1))
    assert t.state()["scroll_px"] == 2 * one_row
    await hand.swipe(500, 700, 500, 500)
    assert t.state()["scroll_px"] > 2 * one_row


async def test_edge_swipes_go_back_and_home_on_phones_only() -> None:
    t = SimTarget("android")
    hand = Hand(t)
    await hand.tap_tile("Photos")
    await hand.swipe(1, 500, 400, 500)
    assert t.state()["screen"] == "home" and "edge swipe back" in t.state()["events"]
    await hand.tap_tile("Photos")
    await hand.swipe(500, 999, 500, 600)
    assert t.state()["screen"] == "home" and "edge swipe home" in t.state()["events"]
    desk = SimTarget("windows")
    await Hand(desk).tap_tile("Photos")
    await Hand(desk).swipe(1, 500, 400, 500)
    assert desk.state()["app"] == "Photos"


async def test_tap_on_home_button_returns_home() -> None:
    t = SimTarget("linux")
    hand = Hand(t)
    await hand.tap_tile("Files")
    await hand.tap(60, 65)
    assert t.state()["screen"] == "home"


async def test_touch_contacts_are_drawn_while_down() -> None:
    t = SimTarget("android")
    idle = await fresh_frame(t)
    ax, ay = reports.norm_to_abs(500), reports.norm_to_abs(900)
    await t.write("pointer", reports.touch([reports.Contact(2, ax, ay)]))
    s = t.state()
    assert [(c["id"], round(c["x"]), round(c["y"])) for c in s["contacts_down"]] == [(2, 500, 900)]
    assert not np.array_equal(idle.image, (await fresh_frame(t)).image)
    await t.write("pointer", reports.touch_release())
    assert t.state()["contacts_down"] == []
    assert np.array_equal(idle.image, (await fresh_frame(t)).image)


async def test_mouse_cursor_is_drawn_in_full_and_absent_while_isolated() -> None:
    t = SimTarget("ios", reenumerate_s=0)
    hand = Hand(t)
    await hand.move(500, 900)  # an empty part of the home screen
    x, y = 540, round(0.9 * 1920)
    near_cursor = np.s_[y : y + 40, x : x + 30]
    full = await fresh_frame(t)
    assert len(np.unique(full.image[near_cursor].reshape(-1, 3), axis=0)) > 1
    await t.switch_profile("keyboard-isolated")
    isolated = await fresh_frame(t)
    assert len(np.unique(isolated.image[near_cursor].reshape(-1, 3), axis=0)) == 1


# ---- keyboard -------------------------------------------------------------------------------


@pytest.mark.parametrize("platform", ["ios", "android", "windows"])
async def test_every_printable_ascii_character_round_trips_into_the_field(platform: str) -> None:
    t = SimTarget(platform)
    hand = Hand(t)
    await hand.tap_tile("Notes")
    await hand.focus_field()
    empty = await fresh_frame(t)
    await hand.type(PRINTABLE)
    s = t.state()
    assert (s["focused"], s["field_text"]) == ("text", PRINTABLE)
    assert s["texts"]["Notes"] == PRINTABLE
    assert not np.array_equal(empty.image, (await fresh_frame(t)).image)
    assert_nothing_held(t)


async def test_caps_lock_inverts_letters_only_and_backspace_deletes() -> None:
    t = SimTarget("linux")
    hand = Hand(t)
    await hand.tap_tile("Notes")
    await hand.focus_field()
    await hand.chord("capslock")
    await hand.type("ab1A!")
    assert t.state()["field_text"] == "AB1a!" and t.state()["caps_lock"]
    await hand.chord("backspace")
    await hand.chord("backspace")
    assert t.state()["field_text"] == "AB1"


async def test_typing_without_focus_goes_nowhere() -> None:
    t = SimTarget("android")
    hand = Hand(t)
    await hand.tap_tile("Notes")
    await hand.type("hi")
    s = t.state()
    assert s["focused"] is None and s["texts"]["Notes"] == ""


async def test_keys_held_are_tracked_and_unplug_releases_them() -> None:
    t = SimTarget("ios")
    await t.write("keyboard", reports.keyboard(reports.MOD_LSHIFT, [keymap.key("a").usage]))
    s = t.state()
    assert (s["keys_down"], s["modifiers_down"]) == (["a"], ["shift"])
    t.unplug()
    s = t.state()
    assert (s["keys_down"], s["released_on_reenumeration"]) == ([], 1)


# ---- iOS isolation --------------------------------------------------------------------------


async def test_ios_cmd_a_is_swallowed_in_full_and_honoured_when_isolated() -> None:
    t = SimTarget("ios", reenumerate_s=0.01)
    hand = Hand(t)
    await hand.tap_tile("Notes")
    await hand.focus_field()
    await hand.type("hello")
    await hand.chord("cmd", "a")
    await hand.type("X")
    s = t.state()
    assert s["field_text"] == "helloX"
    assert s["swallowed"] == ["cmd+a"] and s["chords"] == ["cmd+a"]

    assert await t.switch_profile("keyboard-isolated")
    await hand.chord("cmd", "a")
    assert t.state()["selected"]
    await hand.type("new")
    s = t.state()
    assert s["field_text"] == "new" and s["swallowed"] == ["cmd+a"]
    await hand.chord("cmd", "h")
    assert t.state()["screen"] == "home"
    assert await t.switch_profile("full")
    assert t.state()["switches"] == ["keyboard-isolated", "full"]


async def test_ios_spotlight_needs_isolation_then_opens_the_typed_app() -> None:
    t = SimTarget("ios", reenumerate_s=0)
    hand = Hand(t)
    await hand.chord("cmd", "space")
    assert t.state()["screen"] == "home" and t.state()["swallowed"] == ["cmd+space"]
    await t.switch_profile("keyboard-isolated")
    await hand.chord("cmd", "space")
    assert (t.state()["screen"], t.state()["focused"]) == ("search", "search")
    await hand.type("calc\n")
    assert t.state()["app"] == "Calculator"


async def test_cut_and_paste_when_isolated() -> None:
    t = SimTarget("ios", reenumerate_s=0)
    hand = Hand(t)
    await hand.tap_tile("Notes")
    await hand.focus_field()
    await hand.type("moved")
    await t.switch_profile("keyboard-isolated")
    for keys in (("cmd", "a"), ("cmd", "x"), ("cmd", "v"), ("cmd", "v")):
        await hand.chord(*keys)
    assert t.state()["field_text"] == "movedmoved"


async def test_pointer_writes_fail_while_isolated_and_work_after_restore() -> None:
    t = SimTarget("ios", reenumerate_s=0.01)
    hand = Hand(t)
    assert await t.switch_profile("keyboard-isolated")
    assert not await t.switch_profile("keyboard-isolated")
    with pytest.raises(TargetNotAttached):
        await hand.move(100, 100)
    await hand.type("a")  # the keyboard is still there
    await t.switch_profile("full")
    await hand.move(100, 100)
    s = t.state()
    assert s["switches"] == ["keyboard-isolated", "full"]
    assert s["reports"] == {"keyboard": 2, "consumer": 0, "pointer": 1}


async def test_profile_switch_releases_what_the_host_held() -> None:
    t = SimTarget("ios", reenumerate_s=0)
    await t.write("keyboard", reports.keyboard(reports.MOD_LMETA))
    await t.switch_profile("keyboard-isolated")
    assert t.state()["modifiers_down"] == []
    assert t.state()["released_on_reenumeration"] == 1


# ---- other platforms' ways home, back, search, urls -----------------------------------------


async def test_consumer_home_back_search_and_app_switch() -> None:
    t = SimTarget("android")
    hand = Hand(t)
    await hand.tap_tile("Mail")
    await hand.consumer("ac_home")
    assert t.state()["screen"] == "home"
    await hand.tap_tile("Maps")
    await hand.consumer("app_switch")
    assert t.state()["app"] == "Mail"
    await hand.consumer("back")
    assert t.state()["screen"] == "home"
    await hand.consumer("search")
    await hand.type("Weather")
    await hand.chord("enter")
    assert t.state()["app"] == "Weather"
    assert t.state()["consumer_down"] is None


async def test_search_for_a_url_opens_the_browser_there() -> None:
    t = SimTarget("android")
    hand = Hand(t)
    await hand.consumer("search")
    await hand.type("example.com/a?b=1\n")
    s = t.state()
    assert (s["app"], s["url"]) == ("Chrome", "example.com/a?b=1")


async def test_browser_url_field_loads_what_is_typed() -> None:
    t = SimTarget("macos")
    hand = Hand(t)
    await hand.tap_tile("Safari")
    await hand.chord("cmd", "l")  # macOS does not swallow: only iOS has AssistiveTouch
    await hand.type("https://fingertip.example/\n")
    s = t.state()
    assert (s["url"], s["focused"]) == ("https://fingertip.example/", None)


async def test_bare_windows_key_opens_search_and_escape_closes_it() -> None:
    t = SimTarget("windows")
    hand = Hand(t)
    await hand.chord("win")
    assert t.state()["screen"] == "search" and t.state()["chords"] == ["win"]
    await hand.chord("escape")
    assert t.state()["screen"] == "home"


# ---- attachment and frames ------------------------------------------------------------------


@pytest.mark.parametrize("role", ["keyboard", "consumer", "pointer"])
async def test_unplugged_writes_fail(role: str) -> None:
    t = SimTarget("ios", reenumerate_s=0)
    report = {
        "keyboard": reports.KEYBOARD_RELEASE,
        "consumer": reports.CONSUMER_RELEASE,
        "pointer": reports.mouse_release(0, 0),
    }[role]
    t.unplug()
    with pytest.raises(TargetNotAttached) as err:
        await t.write(role, report)
    assert err.value.retryable
    t.plug()
    await t.write(role, report)
    assert t.state()["reports"][role] == 1


async def test_writes_fail_while_re_enumerating() -> None:
    t = SimTarget("android", reenumerate_s=3600)
    t.unplug()
    t.plug()
    with pytest.raises(TargetNotAttached, match="re-enumerating"):
        await t.write("keyboard", reports.KEYBOARD_RELEASE)


async def test_capture_off_makes_frames_unavailable() -> None:
    t = SimTarget("android")
    t.capture_off()
    assert t.available()[0] is False
    with pytest.raises(ToolError) as err:
        await t.frame()
    assert (err.value.code, err.value.retryable) == ("capture_unavailable", True)
    t.capture_on()
    assert t.available() == (True, "")
    assert (await t.frame()).width == 1080


async def test_frame_newer_than_is_captured_after_that_time() -> None:
    t = SimTarget("macos", fps=50)
    first = await t.frame()
    assert (first.width, first.height) == (1920, 1080)
    second = await t.frame(newer_than=first.captured_at)
    assert second.captured_at > first.captured_at and second.seq == first.seq + 1
    ahead = time.monotonic() + 0.05
    third = await t.frame(newer_than=ahead)
    assert third.captured_at > ahead


async def test_frame_newer_than_beyond_the_timeout_is_unavailable() -> None:
    t = SimTarget("linux")
    with pytest.raises(ToolError) as err:
        await t.frame(newer_than=time.monotonic() + 60, timeout=0.01)
    assert err.value.code == "capture_unavailable"


async def test_static_frames_are_identical_and_animating_frames_differ() -> None:
    t = SimTarget("ios", fps=100)
    a = await fresh_frame(t)
    b = await fresh_frame(t)
    assert b.seq > a.seq and np.array_equal(a.image, b.image)
    t.set_animating(True)
    c = await fresh_frame(t)
    d = await fresh_frame(t)
    assert not np.array_equal(c.image, d.image)
    t.set_animating(False)
    assert np.array_equal(a.image, (await fresh_frame(t)).image)


async def test_frames_are_rendered_only_when_asked() -> None:
    t = SimTarget("android", fps=1000)
    await t.frame()
    await asyncio.sleep(0.02)  # a camera at this rate would have produced ~20 frames
    assert (await t.frame()).seq == 2


async def test_frames_are_paced_like_a_camera() -> None:
    t = SimTarget("ios", fps=0.001)  # one frame per 1000 s: the next one is never due in a test
    first = await t.frame()
    await Hand(t).tap_tile("Clock")
    assert (await t.frame()) is first  # the camera has not delivered the change yet
    with pytest.raises(ToolError) as err:
        await t.frame(newer_than=first.captured_at, timeout=0.05)
    assert err.value.code == "capture_unavailable"


async def test_control_helper_applies_faults_and_rejects_unknown_actions() -> None:
    t = SimTarget("ios", reenumerate_s=0)
    assert (await control(t, "unplug"))["attached"] is False
    assert (await control(t, "plug"))["attached"] is True
    assert (await control(t, "animate_on"))["animating"] is True
    assert (await control(t, "animate_off"))["animating"] is False
    assert (await control(t, "profile", {"name": "keyboard-isolated"}))["profile"] == (
        "keyboard-isolated"
    )
    assert (await control(t, "capture_off"))["capture"] is False
    with pytest.raises(ToolError):
        await control(t, "explode")
    with pytest.raises(ToolError):
        await control(t, "profile", {"name": "pointer-only"})
