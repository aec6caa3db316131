"""OCR accuracy with the real engine on frames whose text is known: every simulated-target
screen (the renderer records the words it draws) and frames drawn with varied fonts, sizes and
dark and light backgrounds. Each screen must recall >= 95 % of its visible words, each recalled
word centered inside its drawn box. The table is printed at the end of the module (and written
to test-artifacts/ocr-accuracy.txt)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from daemon.screen.ocr import engine_installed
from daemon.screen.ocr_engine import RapidEngine
from tests.ocr_screens import Screen, score, sim_screens, varied_screens

pytestmark = pytest.mark.skipif(not engine_installed(), reason="OCR engine not installed")

REQUIRED_RECALL = 0.95
SCREENS = {s.name: s for s in (*sim_screens(), *varied_screens())}
ROWS: list[str] = []
ARTIFACT = Path(__file__).resolve().parents[2] / "test-artifacts" / "ocr-accuracy.txt"


@pytest.fixture(scope="module")
def engine(request: pytest.FixtureRequest) -> Iterator[RapidEngine]:
    yield RapidEngine()
    header = f"{'screen':28s} {'words':>5s} {'recall':>7s} {'centered':>8s} {'ms':>6s}"
    title = "OCR accuracy (rapidocr, PP-OCRv6 small, detection on the frame's ink)"
    table = "\n".join([title, header, *ROWS])
    ARTIFACT.parent.mkdir(exist_ok=True)
    ARTIFACT.write_text(table + "\n")
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line("\n" + table)


@pytest.mark.parametrize("name", list(SCREENS))
def test_ocr_reads_the_screen(engine: RapidEngine, name: str) -> None:
    screen: Screen = SCREENS[name]
    started = time.monotonic()
    lines = engine.read(screen.image)
    ms = (time.monotonic() - started) * 1000
    found = [(w.text, w.box) for line in lines for w in line.words]
    recalled, centered = score(screen, found)
    total = len(screen.words)
    ROWS.append(
        f"{name:28s} {total:5d} {recalled / total:7.1%} {centered / max(1, recalled):8.1%} "
        f"{ms:6.0f}"
    )
    missing = sorted({w.text for w in screen.words} - {f[0] for f in found})
    assert recalled >= REQUIRED_RECALL * total, (name, recalled, total, missing)
    assert centered == recalled, (name, "words read outside their drawn box")
