"""same_screen, the check that keeps a snapshot_id valid: capture noise keeps it, one changed
word ends it, whichever of its two paths (the max-difference shortcut or the count) answers."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Any, cast

import numpy as np
import pytest

from daemon.frames import Frame
from daemon.screen.ocr import Reading
from daemon.tools import text
from daemon.tools.text import CHANGED_SHARE, PIXEL_DELTA, same_screen

H, W = 1920, 1080


def frame(image: np.ndarray, seq: int) -> Frame:
    return Frame(image, seq, time.monotonic(), time.time())


def screen() -> np.ndarray:
    return np.random.default_rng(7).integers(60, 190, (H, W, 3), dtype=np.uint8)


def test_the_same_frame_and_noise_under_the_delta_are_the_same_screen() -> None:
    a = screen()
    assert same_screen(frame(a, 1), frame(a, 1))
    noise = np.random.default_rng(8).integers(-PIXEL_DELTA, PIXEL_DELTA + 1, a.shape)
    assert same_screen(frame(a, 1), frame((a + noise).astype(np.uint8), 2))


def test_a_changed_word_is_another_screen() -> None:
    a = screen()
    b = a.copy()
    b[100:130, 100:220] = 255 - b[100:130, 100:220]  # a word's box, ~3600 px, inverted
    assert CHANGED_SHARE * H * W < 30 * 120
    assert not same_screen(frame(a, 1), frame(b, 2))


def test_a_few_hot_pixels_past_the_delta_are_still_the_same_screen() -> None:
    a = screen()
    b = a.copy()
    b[5, 5:25] = 255 - b[5, 5:25]  # 20 px, far under the share: the shortcut says no, the count yes
    assert same_screen(frame(a, 1), frame(b, 2))


def test_another_size_is_another_screen() -> None:
    a = screen()
    assert not same_screen(frame(a, 1), frame(np.ascontiguousarray(a[:, : W // 2]), 2))


def test_text_tools_compare_a_pair_of_frames_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[int, int]] = []

    def counting(a: Frame, b: Frame) -> bool:
        calls.append((a.seq, b.seq))
        return b.seq < 3

    monkeypatch.setattr(text, "same_screen", counting)
    tools = text.TextTools(cast(Any, SimpleNamespace(screen=None)))
    image = screen()
    snap = Reading(frame(image, 1), (), 0)
    two, three = frame(image, 2), frame(image, 3)

    async def check(f: Frame) -> bool:
        return await tools.still_shows(snap, f)

    assert asyncio.run(check(two)) and asyncio.run(check(two))
    assert not asyncio.run(check(three))  # a newer frame is compared, not answered from memory
    assert calls == [(1, 2), (1, 3)]
