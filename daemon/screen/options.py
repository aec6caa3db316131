"""How a screenshot is encoded and how a stability wait runs: the one place their defaults live.

The screen tools' schemas cite these defaults (so clients see them), the catalog fills them in,
and `Screen` takes these objects only. Light on purpose (no OpenCV): the config imports it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

Format = Literal["jpeg", "png"]
Area = Literal["screen", "frame"]  # the target's screen (bars cut off), or the whole frame


@dataclass(frozen=True)
class ShotOptions:
    """How a screenshot is encoded (the screenshot tool's arguments)."""

    quality: int = 80
    max_width: int | None = None
    scale: float | None = None
    fmt: Format = "jpeg"
    area: Area = "screen"

    @classmethod
    def from_args(cls, format: Format, **rest: Any) -> ShotOptions:
        """From the screenshot tool's arguments (their `format` is `fmt` here)."""
        return cls(fmt=format, **rest)


@dataclass(frozen=True)
class StableOptions:
    """How a stability wait runs (the wait_for_stable_screen tool's arguments)."""

    timeout_ms: int = 3500
    stable_ms: int = 500
    diff_threshold: float = 2  # an int, so the schema's default and example stay `2`


SHOT = ShotOptions()
STABLE = StableOptions()
