"""The virtual device: what a phone or computer does with the HID input it receives.

Pure state machine, no I/O and no clock of its own (callers pass `now`), so it is deterministic
and easy to test. Input arrives already decoded (gadget.reports unpackers); positions are
normalized 0..1000. See daemon/sim/target.py for the behaviour this models.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from daemon.sim import keys
from daemon.sim.layout import (
    EDGE,
    EDGE_TRAVEL,
    PHONES,
    ROWS_PER_APP,
    TAP_SLOP,
    TOGGLED_ON,
    TOGGLES,
    ScreenLayout,
    browser_for,
    make_layout,
)
from daemon.sim.xkbtext import XkbText

LONG_PRESS_S = 0.5  # held this long without moving: a long press, which opens nothing
EVENT_HISTORY = 50
APPLE = ("ios", "macos")

# Keyboard shortcuts per platform: (modifier names, key label) -> action.
_EDIT = {"a": "select_all", "c": "copy", "x": "cut", "v": "paste", "l": "focus_url"}
_SHORTCUTS: dict[str, dict[tuple[frozenset[str], str], str]] = {
    "ios": {
        **{(frozenset({"gui"}), k): a for k, a in _EDIT.items()},
        (frozenset({"gui"}), "h"): "home",
        (frozenset({"gui"}), "space"): "search",
        (frozenset({"gui"}), "tab"): "app_switch",
    },
    "macos": {
        **{(frozenset({"gui"}), k): a for k, a in _EDIT.items()},
        (frozenset({"gui"}), "space"): "search",
        (frozenset({"gui"}), "q"): "home",
        (frozenset({"gui"}), "tab"): "app_switch",
    },
    "android": {
        **{(frozenset({"ctrl"}), k): a for k, a in _EDIT.items()},
        (frozenset({"alt"}), "tab"): "app_switch",
    },
    "windows": {
        **{(frozenset({"ctrl"}), k): a for k, a in _EDIT.items()},
        (frozenset({"alt"}), "f4"): "home",
        (frozenset({"alt"}), "tab"): "app_switch",
    },
    "linux": {
        **{(frozenset({"ctrl"}), k): a for k, a in _EDIT.items()},
        (frozenset({"alt"}), "f4"): "home",
        (frozenset({"alt"}), "tab"): "app_switch",
    },
}
_BARE_GUI_SEARCH = ("windows", "linux")  # tapping the Windows/Super key alone opens search
# Modifiers that make a key a shortcut; right Alt is AltGr (PC) or Option (Apple): characters.
_SHORTCUT_BITS = 0x01 | 0x10 | 0x04 | 0x08 | 0x80  # both Ctrl, left Alt, both GUI
US_PC_XKB = {"rules": "evdev", "model": "pc105", "layout": "us", "variant": "", "options": ""}


@dataclass
class AppState:
    """What an app remembers while in the background."""

    text: str = ""
    scroll_px: int = 0
    url: str = ""  # the loaded page, browser only
    switched_on: set[str] = field(default_factory=lambda: set(TOGGLED_ON))  # Settings only


@dataclass
class Field:
    """The focused text field: which one, whether all of it is selected, and whether the caret
    is at its start (Home; typing always appends: the caret matters only for Shift+End)."""

    name: str  # "text" | "url" | "search"
    selected: bool = False
    caret_at_start: bool = False


@dataclass
class PrimaryContact:
    """The primary contact (a finger, or the left mouse button) from press to release."""

    x0: float
    y0: float
    t0: float
    x: float
    y: float
    scroll0: int
    moved: bool = False


@dataclass(frozen=True)
class Scene:
    """Everything the screen shows except the pointer, touches and animation (cached per value)."""

    platform: str
    width: int
    height: int
    profile: str
    screen: str
    title: str
    field_label: str
    field_text: str
    focused: bool
    selected: bool
    rows: tuple[str, ...]
    scroll_px: int
    caps_lock: bool
    values: tuple[str, ...] = ()  # shown at a row's right end (a switch's On/Off), by index
    keyboard: bool = False  # the on-screen keyboard is up


@dataclass(frozen=True)
class View:
    """One frame's worth of device state, safe to hand to a render thread."""

    scene: Scene
    pointer: tuple[float, float] | None  # normalized cursor position, None when not drawn
    pressed: bool
    contacts: tuple[tuple[float, float], ...]
    tick: int | None  # animation phase, None when the screen is static


@dataclass
class VirtualDevice:
    platform: str
    width: int
    height: int
    profile: str = "full"
    screen: str = "home"  # home | app | search
    app: str | None = None
    focus: Field | None = None
    search_text: str = ""
    search_scroll_px: int = 0
    apps: dict[str, AppState] = field(default_factory=dict)
    clipboard: str = ""
    xkb_names: dict[str, str] = field(default_factory=lambda: dict(US_PC_XKB))
    pointer: tuple[float, float] = (500.0, 500.0)
    buttons: int = 0
    contacts: dict[int, tuple[float, float]] = field(default_factory=dict)
    keys_down: tuple[int, ...] = ()
    modifiers: int = 0
    consumer_down: int = 0
    primary: PrimaryContact | None = None
    primary_id: int | None = None
    previous_app: str | None = None
    gui_alone: bool = False
    events: deque[str] = field(default_factory=lambda: deque(maxlen=EVENT_HISTORY))
    chords: list[str] = field(default_factory=list)
    swallowed: list[str] = field(default_factory=list)
    released_on_reenumeration: int = 0
    show_keyboard: bool = False  # keep the on-screen keyboard up while a field has focus
    taps: list[tuple[float, float]] = field(default_factory=list)  # where taps landed (last 100)
    layout: ScreenLayout = field(init=False)
    xkb: XkbText = field(init=False)

    def __post_init__(self) -> None:
        self.layout = make_layout(self.platform, self.width, self.height)
        self.xkb = XkbText(self.xkb_names)

    @property
    def caps_lock(self) -> bool:
        """The host's Caps Lock (its keyboard state's Lock, what its LED shows)."""
        return self.xkb.caps_lock

    # ---- keyboard -------------------------------------------------------------------------

    def keyboard(self, modifiers: int, pressed: tuple[int, ...]) -> None:
        """One boot keyboard report: act on keys that went down in it (and bare GUI taps)."""
        new = [u for u in pressed if u not in self.keys_down and u > keys.LAST_ERROR_USAGE]
        gui_was, gui_now = self.modifiers & keys.GUI, modifiers & keys.GUI
        if pressed or modifiers & ~keys.GUI:
            self.gui_alone = False
        elif gui_now and not gui_was:
            self.gui_alone = True
        self.xkb.set_modifiers(modifiers)
        for usage in self.keys_down:
            if usage not in pressed:
                self.xkb.key_up(usage)
        self.keys_down, self.modifiers = tuple(pressed), modifiers
        for usage in new:
            self._key_down(usage, modifiers, self.xkb.key_down(usage))
        if gui_was and not gui_now and self.gui_alone:
            self.gui_alone = False
            self._chord(frozenset({"gui"}), "", bare=True)

    def _key_down(self, usage: int, modifiers: int, text: str) -> None:
        """A key went down; `text` is what the host's XKB state made of it (daemon.sim.xkbtext:
        the configured layout, its Caps Lock and dead keys)."""
        label = keys.label(usage)
        mods = keys.modifier_names(modifiers)
        if modifiers & _SHORTCUT_BITS:
            # Shortcuts go by the key's character on the layout (German ctrl+z is its z key).
            char = self.xkb.base_char(usage)
            label = char if char is not None and char != " " else label
            self._chord(mods, label)
        elif usage == keys.CAPS_LOCK:
            self._event(f"caps lock {'on' if self.caps_lock else 'off'}")
        elif usage == keys.ENTER:
            self._enter()
        elif usage == keys.BACKSPACE:
            self._backspace()
        elif usage == keys.ESCAPE:
            self._escape()
        elif usage in (keys.HOME, keys.END) and self.focus is not None:
            # Home, then Shift+End, selects a single-line field's text (enter_text's clear on a
            # PC desktop, where Ctrl+A is select-all only if the app binds it).
            self.focus.selected = (
                usage == keys.END and self.focus.caret_at_start and bool(modifiers & keys.SHIFT)
            )
            self.focus.caret_at_start = usage == keys.HOME
            self._event(f"key {'shift+' if modifiers & keys.SHIFT else ''}{label}")
        elif text.isprintable() and text:
            self._type(text)
        elif not self.xkb.composing:
            self._event(f"key {label}")

    def _chord(self, mods: frozenset[str], label: str, *, bare: bool = False) -> None:
        name = keys.chord_name(mods, label, self.platform)
        self.chords.append(name)
        if self.platform == "ios" and self.profile == "full":
            # AssistiveTouch owns modifier shortcuts while the pointer is in the composite.
            self.swallowed.append(name)
            self._event(f"swallowed {name}")
            return
        if bare:
            action = "search" if self.platform in _BARE_GUI_SEARCH else None
        else:
            action = _SHORTCUTS[self.platform].get((mods, label))
        self._event(f"chord {name}" + ("" if action else " (no effect)"))
        if action is not None:
            self._action(action)

    def _type(self, char: str) -> None:
        if self.focus is None:
            self._event(f"type {char!r} (no focus)")
            return
        text = "" if self.focus.selected else self._field_text()
        self.focus.selected = False
        self._set_field_text(text + char)
        last = self.events[-1] if self.events else ""
        prefix = f"type into {self.focus.name}: "
        if last.startswith(prefix):  # one event per burst of typing, not per character
            self.events[-1] = last + char
        else:
            self._event(prefix + char)

    def _backspace(self) -> None:
        if self.focus is None:
            self._event("key backspace (no focus)")
            return
        text = "" if self.focus.selected else self._field_text()[:-1]
        self.focus.selected = False
        self._set_field_text(text)

    def _enter(self) -> None:
        if self.screen == "search":
            self._submit_search()
        elif self.focus is not None and self.focus.name == "url" and self.app is not None:
            state = self.apps[self.app]
            state.url = state.text
            self.focus = None
            self._event(f"load {state.url}")
        else:
            self._event("key enter")

    def _escape(self) -> None:
        if self.screen == "search":
            self._action("home")
        elif self.platform == "android":  # Android's generic keymap falls back from ESC to BACK
            self._action("back")
        else:
            self.focus = None
            self._event("key escape")

    def _submit_search(self) -> None:
        query = self.search_text.strip()
        matches = self._search_results()
        if matches:
            self._open(matches[0])
        elif "://" in query or ("." in query and " " not in query):
            browser = browser_for(self.platform)
            self._open(browser)
            state = self.apps[browser]
            state.text = state.url = query
            self._event(f"load {query}")
        else:
            self._event(f"search {query!r}: no match")

    def _search_results(self) -> tuple[str, ...]:
        q = self.search_text.strip().lower()
        if not q:
            return ()
        names = [t.name for t in self.layout.tiles]
        first = [n for n in names if n.lower().startswith(q)]
        return tuple(first + [n for n in names if q in n.lower() and n not in first])

    # ---- consumer control -----------------------------------------------------------------

    def consumer(self, usage: int) -> None:
        if usage and usage != self.consumer_down:
            action = keys.CONSUMER_ACTIONS.get(usage)
            self._event(f"consumer {action or hex(usage)}")
            if action is not None:
                self._action(action)
        self.consumer_down = usage

    # ---- pointer --------------------------------------------------------------------------

    def mouse(self, buttons: int, x: float, y: float, wheel: int, pan: int, now: float) -> None:
        """An absolute mouse report; the left button is the contact (AssistiveTouch style)."""
        was_down = bool(self.buttons & keys.BUTTON_LEFT)
        is_down = bool(buttons & keys.BUTTON_LEFT)
        pressed = buttons & ~self.buttons
        self.pointer, self.buttons = (x, y), buttons
        if is_down and not was_down:
            self._contact_down(x, y, now)
        elif is_down:
            self._contact_move(x, y)
        elif was_down:
            self._contact_up(x, y, now)
        if pressed & ~keys.BUTTON_LEFT:
            self._event(
                f"click {keys.button_names(pressed & ~keys.BUTTON_LEFT)} at {x:.0f},{y:.0f}"
            )
        if wheel:
            self._scroll_by(-wheel * self.layout.row_px, "wheel")
        if pan:
            self._event(f"pan {pan}")

    def touch(self, contacts: list[tuple[int, float, float, bool]], now: float) -> None:
        """A touchscreen report: (id, x, y, tip) per contact; the first finger down drives.

        A lifted contact ends where it last touched: hosts ignore the position that comes with
        tip switch off (the writers' release report lists every id at 0,0).
        """
        for cid, x, y, tip in contacts:
            if tip:
                self.contacts[cid] = self.pointer = (x, y)
                if self.primary_id is None:
                    self.primary_id = cid
                    self._contact_down(x, y, now)
                elif cid == self.primary_id:
                    self._contact_move(x, y)
                continue
            last = self.contacts.pop(cid, None)
            if last is not None and cid == self.primary_id:
                self.primary_id = None
                self._contact_up(*last, now)

    def _contact_down(self, x: float, y: float, now: float) -> None:
        self.primary = PrimaryContact(x, y, now, x, y, self._scroll_px())

    def _contact_move(self, x: float, y: float) -> None:
        c = self.primary
        if c is None:
            return
        c.x, c.y = x, y
        if not c.moved and max(abs(x - c.x0), abs(y - c.y0)) >= TAP_SLOP:
            c.moved = True
        if c.moved and self._edge(c) is None and self.screen != "home":
            # Content follows the contact, no momentum: deterministic.
            self._set_scroll(c.scroll0 - round((y - c.y0) * self.height / 1000))

    def _contact_up(self, x: float, y: float, now: float) -> None:
        c = self.primary
        if c is None:
            return
        self._contact_move(x, y)
        self.primary = None
        if not c.moved:
            self._tap(c.x0, c.y0, long=now - c.t0 >= LONG_PRESS_S)
            return
        dx, dy = x - c.x0, y - c.y0
        edge = self._edge(c)
        if edge == "left" and dx >= EDGE_TRAVEL:
            self._event("edge swipe back")
            self._action("back")
        elif edge == "bottom" and -dy >= EDGE_TRAVEL:
            self._event("edge swipe home")
            self._action("home")
        elif edge == "top" and dy >= EDGE_TRAVEL:
            self._event("edge swipe down from top (notifications)")
        else:
            way = (
                ("right" if dx > 0 else "left") if abs(dx) > abs(dy) else "down" if dy > 0 else "up"
            )
            self._event(f"swipe {way} from {c.x0:.0f},{c.y0:.0f} to {x:.0f},{y:.0f}")

    def _edge(self, c: PrimaryContact) -> str | None:
        if self.platform not in PHONES:
            return None
        if c.x0 <= EDGE:
            return "left"
        if c.y0 >= 1000 - EDGE:
            return "bottom"
        if c.y0 <= EDGE:
            return "top"
        return None

    def _tap(self, x: float, y: float, *, long: bool) -> None:
        self.taps = [*self.taps[-99:], (x, y)]
        kind = "long press" if long else "tap"
        lay = self.layout
        if self.screen == "home":
            tile = lay.tile_at(x, y)
            self._event(f"{kind} {tile.name if tile else f'home at {x:.0f},{y:.0f}'}")
            if tile is not None and not long:
                self._open(tile.name)
            return
        if lay.home_button.contains(x, y):
            self._event(f"{kind} Home button")
            if not long:
                self._action("home")
            return
        if self._keyboard_up() and lay.keyboard.contains(x, y):
            key = lay.key_at(x, y)
            self._event(f"{kind} on-screen key {key or 'gap'}")
            if key is not None and not long:
                self._type(" " if key == "space" else key.lower())
            return
        if lay.field.contains(x, y):
            name = "search" if self.screen == "search" else self._field_kind()
            self._event(f"{kind} {name} field")
            self.focus = Field(name)
            return
        rows = self._rows()
        index = lay.row_at(y, self._scroll_px(), len(rows))
        if index is not None:
            self._event(f"{kind} {rows[index]}")
            if self.screen == "search" and not long:
                self._open(rows[index])
            elif rows[index] in TOGGLES and self.app == "Settings" and not long:
                self.apps["Settings"].switched_on ^= {rows[index]}
            return
        self._event(f"{kind} at {x:.0f},{y:.0f}")

    def _scroll_by(self, px: int, how: str) -> None:
        if self.screen == "home":
            self._event(f"{how} on home (nothing scrolls)")
            return
        self._set_scroll(self._scroll_px() + px)
        self._event(f"{how} scroll to {self._scroll_px()}")

    # ---- actions --------------------------------------------------------------------------

    def _action(self, action: str) -> None:
        if action == "home":
            self._go_home()
        elif action == "back":
            if self.screen == "home":
                self._event("back (already home)")
            else:
                self._go_home()
        elif action == "search":
            self.screen, self.search_text, self.search_scroll_px = "search", "", 0
            self.focus = Field("search")
            self._event("open search")
        elif action == "app_switch":
            if self.previous_app is not None and self.previous_app != self.app:
                self._open(self.previous_app)
            else:
                self._event("app switch (no other app)")
        elif action == "focus_url":
            if self.screen == "app" and self._field_kind() == "url":
                self.focus = Field("url", selected=True)
            else:
                self._event("focus url (no url field)")
        else:
            self._edit(action)

    def _edit(self, action: str) -> None:
        f = self.focus
        if f is None:
            self._event(f"{action} (no focus)")
            return
        text = self._field_text()
        if action == "select_all":
            f.selected = True
        elif action in ("copy", "cut") and f.selected:
            self.clipboard = text
            if action == "cut":
                self._set_field_text("")
                f.selected = False
        elif action == "paste":
            self._set_field_text(("" if f.selected else text) + self.clipboard)
            f.selected = False
        self._event(f"{action} in {f.name}")

    def _open(self, app: str) -> None:
        if self.app is not None and self.app != app:
            self.previous_app = self.app
        self.screen, self.app, self.focus = "app", app, None
        self.apps.setdefault(app, AppState())
        self._event(f"open {app}")

    def _go_home(self) -> None:
        if self.app is not None:
            self.previous_app = self.app
        self.screen, self.app, self.focus = "home", None, None
        self._event("home")

    # ---- host side ------------------------------------------------------------------------

    def release_all(self, why: str) -> None:
        """The host lost the device (unplug, re-enumeration): everything held comes up."""
        held = self.held()
        if any(held.values()):
            self.released_on_reenumeration += 1
            self._event(f"{why} released {held}")
        for usage in self.keys_down:
            self.xkb.key_up(usage)
        self.xkb.set_modifiers(0)  # the host keeps its Caps Lock: it is the host's state
        self.keys_down, self.modifiers, self.consumer_down, self.buttons = (), 0, 0, 0
        self.contacts.clear()
        self.primary = None
        self.primary_id = None
        self.gui_alone = False

    def held(self) -> dict[str, list[str]]:
        return {
            "keys": [keys.label(u) for u in self.keys_down],
            "modifiers": sorted(keys.modifier_names(self.modifiers)),
            "buttons": keys.button_names(self.buttons).split("+") if self.buttons else [],
            "contacts": [str(c) for c in sorted(self.contacts)],
            "consumer": [hex(self.consumer_down)] if self.consumer_down else [],
        }

    # ---- views ----------------------------------------------------------------------------

    def _field_kind(self) -> str:
        return "url" if self.app == browser_for(self.platform) else "text"

    def _field_text(self) -> str:
        if self.screen == "search":
            return self.search_text
        return self.apps[self.app].text if self.app is not None else ""

    def _set_field_text(self, text: str) -> None:
        if self.screen == "search":
            self.search_text, self.search_scroll_px = text, 0
        elif self.app is not None:
            self.apps[self.app].text = text

    def _rows(self) -> tuple[str, ...]:
        if self.screen == "search":
            return self._search_results()
        if self.app is None:
            return ()
        if self._field_kind() == "url":
            page = self.apps[self.app].url or "Start page"
            return tuple(f"line {i + 1}: {page}" for i in range(ROWS_PER_APP))
        if self.app == "Settings":
            return TOGGLES + tuple(f"Settings row {i + 1}" for i in range(ROWS_PER_APP))
        return tuple(f"{self.app} row {i + 1}" for i in range(ROWS_PER_APP))

    def _values(self) -> tuple[str, ...]:
        if self.screen != "app" or self.app != "Settings":
            return ()
        on = self.apps["Settings"].switched_on
        return tuple("ON" if name in on else "OFF" for name in TOGGLES)

    def _keyboard_up(self) -> bool:
        return self.show_keyboard and self.focus is not None and self.screen != "home"

    def _scroll_px(self) -> int:
        if self.screen == "search":
            return self.search_scroll_px
        return self.apps[self.app].scroll_px if self.app is not None else 0

    def _set_scroll(self, px: int) -> None:
        px = min(max(px, 0), self.layout.max_scroll(len(self._rows())))
        if self.screen == "search":
            self.search_scroll_px = px
        elif self.app is not None:
            self.apps[self.app].scroll_px = px

    def _event(self, text: str) -> None:
        self.events.append(text)

    def scene(self) -> Scene:
        if self.screen == "home":
            title, label = "", ""
        elif self.screen == "search":
            title, label = "Search", "Search"
        else:
            title, label = self.app or "", "URL" if self._field_kind() == "url" else "Text"
        return Scene(
            platform=self.platform,
            width=self.width,
            height=self.height,
            profile=self.profile,
            screen=self.screen,
            title=title,
            field_label=label,
            field_text=self._field_text(),
            focused=self.focus is not None,
            selected=self.focus is not None and self.focus.selected,
            rows=self._rows(),
            scroll_px=self._scroll_px(),
            caps_lock=self.caps_lock,
            values=self._values(),
            keyboard=self._keyboard_up(),
        )

    def view(self, tick: int | None) -> View:
        mouse = self.platform != "android"
        visible = mouse and self.profile == "full"
        return View(
            scene=self.scene(),
            pointer=self.pointer if visible else None,
            pressed=bool(self.buttons & keys.BUTTON_LEFT),
            contacts=tuple(self.contacts.values()),
            tick=tick,
        )

    def state(self) -> dict[str, Any]:
        """JSON-able observation for tests and the dev server."""
        f = self.focus
        return {
            "platform": self.platform,
            "screen": self.screen,
            "app": self.app,
            "focused": f.name if f else None,
            "field_text": self._field_text() if f else None,
            "selected": bool(f and f.selected),
            "texts": {name: s.text for name, s in self.apps.items()},
            "toggles": {
                name: name in self.apps.get("Settings", AppState()).switched_on for name in TOGGLES
            },
            "url": self.apps[self.app].url if self.app and self._field_kind() == "url" else None,
            "search_text": self.search_text if self.screen == "search" else None,
            "scroll_px": self._scroll_px(),
            "max_scroll_px": self.layout.max_scroll(len(self._rows())),
            "pointer": {
                "kind": "touch" if self.platform == "android" else "mouse",
                "x": round(self.pointer[0], 1),
                "y": round(self.pointer[1], 1),
            },
            "contacts_down": [
                {"id": cid, "x": round(x, 1), "y": round(y, 1)}
                for cid, (x, y) in sorted(self.contacts.items())
            ],
            "keys_down": [keys.label(u) for u in self.keys_down],
            "modifiers_down": sorted(keys.modifier_names(self.modifiers)),
            "buttons_down": keys.button_names(self.buttons).split("+") if self.buttons else [],
            "consumer_down": hex(self.consumer_down) if self.consumer_down else None,
            "caps_lock": self.caps_lock,
            "clipboard": self.clipboard,
            "chords": list(self.chords),
            "swallowed": list(self.swallowed),
            "released_on_reenumeration": self.released_on_reenumeration,
            "events": list(self.events),
        }
