"""Frames with known text for the OCR tests and benchmarks: every simulated-target screen (the
sim's renderer records each word it draws) and frames drawn here with varied fonts, sizes and
dark and light backgrounds."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import cv2
import numpy as np

from daemon.sim.device import VirtualDevice
from daemon.sim.render import DrawnWord, Renderer

if TYPE_CHECKING:
    from daemon.frames import Image


@dataclass(frozen=True)
class Screen:
    name: str
    image: Image
    words: tuple[DrawnWord, ...]


def _sim(name: str, dev: VirtualDevice) -> Screen:
    r = Renderer()
    image = r.render(dev.view(None))
    return Screen(name, image, tuple(w for w in r.drawn if w.whole))  # clipped: unreadable


def sim_screens() -> Iterator[Screen]:
    """Home, an app with typed field text, the browser, and search, per platform shape."""
    for platform, w, h in (("ios", 1080, 1920), ("android", 1080, 1920), ("macos", 1920, 1080)):
        dev = VirtualDevice(platform, w, h)
        yield _sim(f"{platform} home", dev)
        dev._open("Notes")
        dev.apps["Notes"].text = "Meet Anna at 10:30 tomorrow"
        yield _sim(f"{platform} Notes with text", dev)
        dev.apps["Notes"].scroll_px = 350
        yield _sim(f"{platform} Notes scrolled", dev)
        dev._open("Settings")
        yield _sim(f"{platform} Settings", dev)


@dataclass(frozen=True)
class Edit:
    """A screen before and after one small action, as the simulated target draws them."""

    name: str
    before: Image
    after: Image


def edits(platform: str = "ios") -> Iterator[Edit]:
    """What an agent's actions do to a phone's screen, from small to whole: typing into a
    field, a switch flipped, a list scrolled by one row, the on-screen keyboard appearing, and
    another app opened."""
    from daemon.sim.device import Field

    dev = VirtualDevice(platform, 1080, 1920)
    renderer = Renderer()

    def shot() -> Image:
        return renderer.render(dev.view(None))

    dev._open("Notes")
    dev.focus = Field("text")
    dev.apps["Notes"].text = "Meet Anna"
    before = shot()
    dev.apps["Notes"].text = "Meet Anna at"
    yield Edit("typing into a field", before, shot())
    dev.apps["Notes"].scroll_px = 0
    before = shot()
    dev.apps["Notes"].scroll_px = dev.layout.row_px
    yield Edit("a one-row scroll", before, shot())
    dev.show_keyboard = False
    before = shot()
    dev.show_keyboard = True
    yield Edit("a keyboard appearing", before, shot())
    dev.show_keyboard = False
    dev._open("Settings")
    before = shot()
    dev.apps["Settings"].switched_on ^= {"Wi-Fi"}
    yield Edit("a switch flipped", before, shot())
    before = shot()
    dev._open("Clock")
    yield Edit("another app", before, shot())


FONTS = (
    cv2.FONT_HERSHEY_SIMPLEX,
    cv2.FONT_HERSHEY_DUPLEX,
    cv2.FONT_HERSHEY_COMPLEX,
    cv2.FONT_HERSHEY_TRIPLEX,
)
PHRASES = (
    "Sign in",
    "Forgot password?",
    "Continue with email",
    "Wi-Fi Bluetooth Airplane",
    "Cancel  OK",
    "Battery 87%",
    "Download update",
    "Privacy Policy",
    "Turn on notifications",
    "Open in app",
)


def varied_screens() -> Iterator[Screen]:
    """1080x1920 frames: each font at small to large sizes, dark-on-light and light-on-dark."""
    for fi, font in enumerate(FONTS):
        for dark in (False, True):
            bg, ink = ((25, 25, 30), (235, 235, 235)) if dark else ((250, 250, 250), (40, 40, 40))
            img = np.full((1920, 1080, 3), bg, np.uint8)
            words: list[DrawnWord] = []
            y = 140
            for pi, phrase in enumerate(PHRASES):
                scale = (0.9, 1.2, 1.6, 2.0)[(pi + fi) % 4]
                thick = max(1, round(scale * 2))
                cv2.putText(img, phrase, (60, y), font, scale, ink, thick, cv2.LINE_AA)
                (_, above), below = cv2.getTextSize(phrase, font, scale, thick)
                pos = 0
                for word in phrase.split():
                    start = phrase.index(word, pos)
                    pos = start + len(word)
                    x0 = 60 + cv2.getTextSize(phrase[:start], font, scale, thick)[0][0]
                    x1 = x0 + cv2.getTextSize(word, font, scale, thick)[0][0]
                    words.append(DrawnWord(word, (x0, y - above, x1, y + below)))
                y += 170
            tone = "dark" if dark else "light"
            yield Screen(f"font {fi} {tone}", img, tuple(words))


def score(screen: Screen, found: list[tuple[str, tuple[int, int, int, int]]]) -> tuple[int, int]:
    """(recalled, placed): drawn words the OCR read, and of those, how many it placed with
    their center inside the drawn box (each OCR word is used once)."""
    pool = list(found)
    recalled = placed = 0
    for word in screen.words:
        hits = [f for f in pool if f[0].strip(".,:;!?") == word.text.strip(".,:;!?")]
        if not hits:
            continue
        x0, y0, x1, y1 = word.box
        wc = ((x0 + x1) / 2, (y0 + y1) / 2)

        best = min(
            hits,
            key=lambda f: (
                abs((f[1][0] + f[1][2]) / 2 - wc[0]) + abs((f[1][1] + f[1][3]) / 2 - wc[1])
            ),
        )
        pool.remove(best)
        recalled += 1
        if centered_in(best[1], word.box):
            placed += 1
    return recalled, placed


def centered_in(box: tuple[int, int, int, int], drawn: tuple[int, int, int, int]) -> bool:
    """Whether `box`'s center lies inside the `drawn` box (both x0, y0, x1, y1 pixels)."""
    cx, cy = (box[0] + box[2]) / 2, (box[1] + box[3]) / 2
    return drawn[0] <= cx <= drawn[2] and drawn[1] <= cy <= drawn[3]


DESKTOP_WORDS = (
    "Plain Bold Italic Underline",
    "Name Address Country",
    "Submit Cancel Apply",
    "Notes Settings Preferences",
    "Open Save Close",
    "Window Help Edit",
    "Fruit Apple Banana Cherry",
    "Volume Brightness Contrast",
    "Search Results Filter",
    "Account Profile Logout",
    "Update Download Install",
    "Keyboard Mouse Display",
)


def desktop_screens() -> Iterator[Screen]:
    """1024x768 desktop frames as a Tk form draws them: a grey window, labels and white
    fields, rows of text in one font size per frame (a UI's 12 px up to a large font's 40 px,
    tightly and loosely spaced), each line numbered."""
    sizes = (("small", 0.55, 26), ("medium", 0.8, 34), ("large", 1.3, 52), ("huge", 1.6, 60))
    for name, scale, pitch in sizes:
        img = np.full((768, 1024, 3), (217, 217, 217), np.uint8)  # Tk's default grey
        words: list[DrawnWord] = []
        thick = max(1, round(scale * 2))
        y, row = 40 + pitch, 0
        while y < 750:
            phrase = f"{DESKTOP_WORDS[row % len(DESKTOP_WORDS)]} {row + 1}"
            x = 24 + (row * 37) % 120
            field = row % 3 == 1  # a white entry behind every third row
            (tw, above), below = cv2.getTextSize(phrase, FONTS[0], scale, thick)
            if field:
                corner = (x + tw + 6, y + below + 4)
                cv2.rectangle(img, (x - 6, y - above - 6), corner, (255, 255, 255), -1)
            cv2.putText(img, phrase, (x, y), FONTS[0], scale, (20, 20, 20), thick, cv2.LINE_AA)
            pos = 0
            for word in phrase.split():
                start = phrase.index(word, pos)
                pos = start + len(word)
                x0 = x + cv2.getTextSize(phrase[:start], FONTS[0], scale, thick)[0][0]
                x1 = x0 + cv2.getTextSize(word, FONTS[0], scale, thick)[0][0]
                words.append(DrawnWord(word, (x0, y - above, x1, y + below)))
            y += pitch + (row % 2) * pitch // 3
            row += 1
        yield Screen(f"desktop {name}", img, tuple(words))
