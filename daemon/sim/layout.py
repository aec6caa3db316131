"""Where things are on the simulated screen, in normalized units (0..1000 on both axes).

One geometry serves hit-testing (input arrives normalized) and drawing (the renderer maps it to
pixels), so a tap lands exactly where the tile is drawn.
"""

from __future__ import annotations

from dataclasses import dataclass

PHONES = ("ios", "android")
PLATFORMS = ("ios", "android", "macos", "windows", "linux")

_BROWSER = {"ios": "Safari", "macos": "Safari", "android": "Chrome", "windows": "Chrome"}
_APPS = (
    "Settings",
    "{browser}",
    "Messages",
    "Mail",
    "Maps",
    "Photos",
    "Camera",
    "Clock",
    "Notes",
    "Music",
    "Calendar",
    "Weather",
    "Files",
    "Contacts",
    "Calculator",
    "Reminders",
)

STATUS_BOTTOM = 30.0  # status bar (inside the top 8 % the change detector ignores)
EDGE = 10.0  # edge-swipe start zone: x <= 1 % (back) or y >= 99 % (home)
TAP_SLOP = 20.0  # a contact moving less than this is a tap, not a swipe
EDGE_TRAVEL = 100.0  # an edge swipe must travel this far to count
ROW_H = 70.0  # list row height
ROWS_PER_APP = 40
# The Settings app's first rows are switches (tap one to flip it), each showing ON or OFF.
TOGGLES = ("Wi-Fi", "Bluetooth", "Airplane Mode", "Notifications", "Dark Mode", "Location")
TOGGLED_ON = frozenset({"Wi-Fi", "Bluetooth", "Notifications"})  # how they start
# The on-screen keyboard: shown while a field has focus, when the target is set to keep it on
# screen beside a hardware keyboard (Android's "show virtual keyboard"; sim action
# keyboard_on). Its keys type their letter into the focused field.
KEY_ROWS = ("QWERTYUIOP", "ASDFGHJKL", "ZXCVBNM")
KEYBOARD = (650.0, 1000.0)  # its top and bottom, normalized


def browser_for(platform: str) -> str:
    return _BROWSER.get(platform, "Chrome")


def apps_for(platform: str) -> tuple[str, ...]:
    return tuple(a.format(browser=browser_for(platform)) for a in _APPS)


@dataclass(frozen=True)
class Rect:
    x0: float
    y0: float
    x1: float
    y1: float

    def contains(self, x: float, y: float) -> bool:
        return self.x0 <= x < self.x1 and self.y0 <= y < self.y1


@dataclass(frozen=True)
class Tile:
    name: str
    icon: Rect
    label: Rect
    # The gap under the label belongs to the app too, as on a phone's home screen, where the
    # whole cell answers a tap: the label's baseline sits on label.y1, its descenders below.
    gap_y: float = 0.0

    def hit(self, x: float, y: float) -> bool:
        lab = self.label
        return self.icon.contains(x, y) or Rect(
            lab.x0, lab.y0, lab.x1, lab.y1 + self.gap_y
        ).contains(x, y)


@dataclass(frozen=True)
class ScreenLayout:
    width: int
    height: int
    tiles: tuple[Tile, ...]
    header: Rect = Rect(0, STATUS_BOTTOM, 1000, 100)
    home_button: Rect = Rect(0, STATUS_BOTTOM, 160, 100)  # "< Home" in every app and in search
    field: Rect = Rect(40, 110, 960, 170)
    viewport: Rect = Rect(0, 190, 1000, 1000)

    @property
    def row_px(self) -> int:
        return round(ROW_H * self.height / 1000)

    @property
    def viewport_px(self) -> int:
        return round((self.viewport.y1 - self.viewport.y0) * self.height / 1000)

    def max_scroll(self, rows: int) -> int:
        return max(0, rows * self.row_px - self.viewport_px)

    def row_at(self, y: float, scroll_px: int, rows: int) -> int | None:
        """The index of the list row under normalized `y`, or None."""
        if not self.viewport.y0 <= y < self.viewport.y1:
            return None
        offset_px = (y - self.viewport.y0) * self.height / 1000 + scroll_px
        index = int(offset_px // self.row_px)
        return index if 0 <= index < rows else None

    def tile_at(self, x: float, y: float) -> Tile | None:
        return next((t for t in self.tiles if t.hit(x, y)), None)

    @property
    def keyboard(self) -> Rect:
        return Rect(0, KEYBOARD[0], 1000, KEYBOARD[1])

    def key_rects(self) -> tuple[tuple[str, Rect], ...]:
        """The on-screen keyboard's keys and where they are: the letter rows, then space."""
        top, bottom = KEYBOARD
        height = (bottom - top) / (len(KEY_ROWS) + 1)
        width = 1000 / len(KEY_ROWS[0])
        out = []
        for r, row in enumerate(KEY_ROWS):
            left = (1000 - width * len(row)) / 2
            y0 = top + r * height
            for i, letter in enumerate(row):
                x0 = left + i * width
                out.append((letter, Rect(x0, y0, x0 + width, y0 + height)))
        y0 = top + len(KEY_ROWS) * height
        out.append(("space", Rect(250, y0, 750, y0 + height)))
        return tuple(out)

    def key_at(self, x: float, y: float) -> str | None:
        return next((name for name, rect in self.key_rects() if rect.contains(x, y)), None)


def make_layout(platform: str, width: int, height: int) -> ScreenLayout:
    """A grid of square icons: 4 columns on a phone, 8 on a desktop."""
    cols = 4 if platform in PHONES else 8
    cell_w = 1000 / cols
    side_px = 0.6 * cell_w * width / 1000
    side_x = side_px * 1000 / width
    side_y = side_px * 1000 / height
    label_y = 0.35 * side_y
    row_y = side_y + label_y + 0.25 * side_y
    tiles = []
    for i, name in enumerate(apps_for(platform)):
        col, row = i % cols, i // cols
        cx = (col + 0.5) * cell_w
        top = 60 + row * row_y
        icon = Rect(cx - side_x / 2, top, cx + side_x / 2, top + side_y)
        label = Rect(col * cell_w, top + side_y, (col + 1) * cell_w, top + side_y + label_y)
        tiles.append(Tile(name, icon, label, row_y - side_y - label_y))
    return ScreenLayout(width, height, tuple(tiles))
