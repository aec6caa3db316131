"""The desktop tier's guest session (runs only inside the VM: make desktop-test).

One desktop for the whole session (udev, the loopback capture, X.Org, the screen feeder, the
Tk application); one Fingertip daemon at a time, restarted only when a test needs another
device_type or keyboard layout (tests are ordered so that happens as rarely as possible).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import desktop
import pytest
from desktop import App, Feeder, Fingertip, Xorg

from tests.kernel.guest.figures import Record, record  # noqa: F401 (a fixture)

IN_GUEST = os.environ.get("FINGERTIP_KERNEL_GUEST") == "1"

# Modules in the order that needs the fewest daemon restarts and re-enumerations: the linux
# pointer profile first (us, then de and fr for typing), the android touchscreen last.
ORDER = (
    "test_pointer",
    "test_screen",
    "test_timing",
    "test_reading",
    "test_clear",
    "test_chords",
    "test_typing",
    "test_touch",
)


@pytest.hookimpl(trylast=True)  # after pytest grouped each module's tests by their params
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if not IN_GUEST:
        skip = pytest.mark.skip(reason="runs only inside the desktop-test VM: make desktop-test")
        for item in items:
            item.add_marker(skip)
        return

    def rank(item: pytest.Item) -> int:
        name = item.module.__name__ if item.module else ""
        return ORDER.index(name) if name in ORDER else len(ORDER)

    items.sort(key=rank)  # stable: each module keeps its own order


class Desktop:
    """The running desktop and the daemon that drives it."""

    def __init__(self, xorg: Xorg, app: App, feeder: Feeder) -> None:
        self.xorg = xorg
        self.app = app
        self.feeder = feeder
        self.fingertip: Fingertip | None = None
        self.layout = "us"

    def target(self, device_type: str, layout: str = "us") -> Fingertip:
        """The daemon for this device type and layout (restarted only on a change), with the
        gadget's devices in X and the desktop's keyboards set to match (keyboards())."""
        ft = self.fingertip
        if ft is not None and (ft.device_type, ft.layout) == (device_type, layout):
            return ft
        if ft is not None:
            ft.stop()
            self.fingertip = None
        ft = Fingertip(device_type, layout)
        with desktop.phase(f"fingertipd for {device_type}, {layout}"):
            self.fingertip = ft
            ft.start()
        # X adds the gadget's devices through udev as they enumerate; keyboard settings made
        # before they exist would not reach them (a hot-added keyboard gets X's defaults).
        with desktop.phase(f"X adding the gadget's devices ({device_type}, {layout})"):
            desktop.until(self._x_has_gadget, "X.Org adding the gadget's input devices", 120)
        self.xorg.keyboards(layout)
        return ft

    def _x_has_gadget(self) -> bool:
        nodes = desktop.gadget_nodes()
        return bool(nodes) and nodes.items() <= self.xorg.devices("Fingertip").items()

    def close(self) -> None:
        if self.fingertip is not None:
            self.fingertip.stop()


@pytest.fixture(scope="session")
def session_desktop(record_testsuite_property: Record) -> Iterator[Desktop]:
    shutil.rmtree(desktop.SCRATCH, ignore_errors=True)
    desktop.SCRATCH.mkdir(parents=True)
    xorg = Xorg()
    d: Desktop | None = None
    app = App()
    feeder = Feeder()
    try:
        with desktop.phase("loopback network, v4l2loopback"):
            desktop.bring_up_loopback_net()
            desktop.load_v4l2loopback()
        with desktop.phase("udev"):
            desktop.start_udev()
        with desktop.phase("X.Org"):
            xorg.start()
        with desktop.phase("the Tk application"):
            app.start()
        with desktop.phase("the screen feeder"):
            feeder.start()
        d = Desktop(xorg, app, feeder)
        yield d
    finally:
        if d is not None:
            d.close()
        desktop.note_cpu()
        # Events the kernel dropped before X read them: 0 unless X's input thread fell behind
        # (then a typing or pointer check may fail for the rig's sake, not the product's).
        desktop.FIGURES["x_input_events_dropped"] = str(xorg.dropped_events())
        desktop.stop_all()
        for name, value in desktop.FIGURES.items():
            record_testsuite_property(name, value)
        for name in ("Xorg.log", "ffmpeg.out", "app.out", "xorg.out"):
            if (desktop.SCRATCH / name).exists():
                shutil.copy(desktop.SCRATCH / name, desktop.WORK / name)


@pytest.fixture
def desk(session_desktop: Desktop) -> Desktop:
    """The desktop with the application reset to its first page, empty texts."""
    session_desktop.app.reset()
    return session_desktop
