"""Fixtures of the guest session: the board (board.py, our gadget package on dummy_udc) and
the target (usbhost.py, this same kernel's USB host side). Runs only inside the kernel-test VM."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

import pytest
from board import Board
from figures import record  # noqa: F401 (a fixture, shared with the desktop tier)
from usbhost import SLOWNESS, UsbHost

from gadget.settings import GadgetSettings

IN_GUEST = os.environ.get("FINGERTIP_KERNEL_GUEST") == "1"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if not IN_GUEST:
        skip = pytest.mark.skip(reason="runs only inside the kernel-test VM: make kernel-test")
        for item in items:
            item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def vm_slowness(record_testsuite_property: Callable[[str, object], None]) -> None:
    """How much slower than an idle TCG guest this one runs (the runner prints it): every
    harness timeout is scaled by it."""
    record_testsuite_property("vm_slowness", f"{SLOWNESS:.2f}")


@pytest.fixture(scope="session")
def settings() -> GadgetSettings:
    # The VM has one UDC (dummy_udc.0) and the kernel's real configfs: the defaults fit.
    return GadgetSettings()


@pytest.fixture
def host() -> Iterator[UsbHost]:
    h = UsbHost()
    yield h
    h.close()


@pytest.fixture
def board(settings: GadgetSettings, host: UsbHost) -> Iterator[Board]:
    """Our gadget package driving the VM's UDC; torn down (and gone from the target) after."""
    b = Board(settings, host)
    b.gadget.teardown()  # a previous test that died mid-way must not leak into this one
    yield b
    b.down()
