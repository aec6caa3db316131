"""Render cost of the simulated target per frame at 1080x1920 (not part of the test suite).

Prints milliseconds per frame and the ratio to a baseline measured in the same run: JPEG-encoding
the same frame, which the screenshot path does with every frame anyway.
Run: .venv/bin/python tests/bench/bench_sim_render.py
"""

from __future__ import annotations

import time
from collections.abc import Callable

import cv2

from daemon.sim.device import VirtualDevice
from daemon.sim.render import Renderer

W, H, N = 1080, 1920, 200


def per_frame_ms(fn: Callable[[int], object]) -> float:
    fn(0)  # warm-up (font and cache set-up)
    start = time.perf_counter()
    for i in range(N):
        fn(i)
    return (time.perf_counter() - start) * 1000 / N


def main() -> None:
    dev = VirtualDevice("ios", W, H)
    dev.mouse(0, 500.0, 500.0, 0, 0, 0.0)
    tile = next(t for t in dev.layout.tiles if t.name == "Notes")
    renderer = Renderer()

    def home_static(_: int) -> None:
        renderer.render(dev.view(None))

    def home_animating(i: int) -> None:
        renderer.render(dev.view(i))

    frame = renderer.render(dev.view(None))
    baseline = per_frame_ms(lambda _: cv2.imencode(".jpg", frame, [cv2.IMWRITE_JPEG_QUALITY, 80]))
    results = {"home, static": per_frame_ms(home_static)}
    results["home, animating"] = per_frame_ms(home_animating)
    x, y = (tile.icon.x0 + tile.icon.x1) / 2, (tile.icon.y0 + tile.icon.y1) / 2
    dev.mouse(1, x, y, 0, 0, 0.0)
    dev.mouse(0, x, y, 0, 0, 0.0)

    def app_scrolling(i: int) -> None:  # the scene changes every frame: no cache hit
        dev.mouse(0, 500.0, 500.0, -1 if i % 20 < 10 else 1, 0, 0.0)
        renderer.render(dev.view(None))

    results["app, scrolling (full redraw)"] = per_frame_ms(app_scrolling)
    print(f"baseline (JPEG-encode one {W}x{H} frame): {baseline:.2f} ms")
    for name, ms in results.items():
        print(f"{name:32s} {ms:6.2f} ms/frame  {ms / baseline:5.2f}x baseline")


if __name__ == "__main__":
    main()
