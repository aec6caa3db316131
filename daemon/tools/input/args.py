"""The HID tools' typed arguments: one frozen dataclass per tool, built by the catalog from the
validated arguments with the schema's defaults filled in (daemon.tools.input.schemas states
each default once). A field the schema defaults has no default here: it is always given. A
field the schema leaves optional is None when absent."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

XY = dict[str, float]  # {"x": .., "y": ..}, normalized or pixels per coord_space


@dataclass(frozen=True, kw_only=True)
class TouchGestureArgs:
    distance: float
    speed: float
    hold_before_ms: int
    hold_after_ms: int
    steps: int
    coord_space: str
    type: str | None = None  # absent: an `actions` program
    point: XY | None = None
    start: XY | None = None
    end: XY | None = None
    direction: str | None = None
    duration_ms: int | None = None
    actions: list[dict[str, Any]] | None = None
    button: str | None = None  # left unless a computer's other button; None: left


@dataclass(frozen=True, kw_only=True)
class DragStartArgs:
    point: XY
    coord_space: str
    direction: str | None = None
    button: str | None = None  # as touch_gesture's


@dataclass(frozen=True, kw_only=True)
class DragReleaseArgs:
    point: XY
    coord_space: str


@dataclass(frozen=True, kw_only=True)
class KeyboardTapArgs:
    keys: str | list[str]
    repeat: int

    @property
    def names(self) -> list[str]:
        return [self.keys] if isinstance(self.keys, str) else list(self.keys)


@dataclass(frozen=True, kw_only=True)
class KeyboardTextArgs:
    text: str


@dataclass(frozen=True, kw_only=True)
class EnterTextArgs:
    point: XY
    text: str
    clear: bool
    submit: bool
    coord_space: str
    text_changes: bool


@dataclass(frozen=True, kw_only=True)
class MouseMoveArgs:
    x: float
    y: float
    coord_space: str


@dataclass(frozen=True, kw_only=True)
class MouseScrollArgs:
    delta: int
    horizontal: bool


@dataclass(frozen=True, kw_only=True)
class QuickActionArgs:
    action: str | None = None
    list: bool | None = None  # true: list the actions instead of running one


@dataclass(frozen=True, kw_only=True)
class OpenAppArgs:
    name: str


@dataclass(frozen=True, kw_only=True)
class OpenUrlArgs:
    url: str
