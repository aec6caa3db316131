"""Figures a guest test measures: printed and kept in the junit xml, which the VM tiers' runner
lists after the run (tests/kernel/run.py). Shared by the kernel and desktop guest sessions."""

from __future__ import annotations

from collections.abc import Callable

import pytest

Record = Callable[[str, object], None]


@pytest.fixture
def record(record_property: Record) -> Record:
    """record_property that also prints (the runner shows both)."""

    def both(name: str, value: object) -> None:
        print(f"measured {name} = {value}")
        record_property(name, value)

    return both
