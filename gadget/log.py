"""structlog set-up shared by fingertip-gadget and the daemon."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable
from typing import Any, TextIO

import structlog

LEVELS = ("debug", "info", "warning", "error")
FORMATS = ("auto", "json", "console")


def configure_logging(level: str = "info", fmt: str = "auto", stream: TextIO | None = None) -> None:
    """JSON lines when the stream is not a terminal (journald on a board), a readable console
    otherwise; `fmt` forces one or the other."""
    if level not in LEVELS:
        raise ValueError(f"log level {level!r}; expected one of {', '.join(LEVELS)}")
    if fmt not in FORMATS:
        raise ValueError(f"log format {fmt!r}; expected one of {', '.join(FORMATS)}")
    out = stream or sys.stderr
    as_json = fmt == "json" or (fmt == "auto" and not out.isatty())
    processors: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.StackInfoRenderer(),
    ]
    if as_json:
        processors += [
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(serializer=_OneEncoder()),
        ]
    else:
        processors.append(structlog.dev.ConsoleRenderer())
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level.upper())),
        # One write (and flush) per line: print() writes the newline separately, a second
        # system call per line when the stream is unbuffered (PYTHONUNBUFFERED, journald).
        logger_factory=structlog.WriteLoggerFactory(out),
        # Loggers are bound once configured: the per-call cost matters on every tool call.
        cache_logger_on_first_use=True,
    )


class _OneEncoder:
    """json.dumps as JSONRenderer calls it (always with the same options, its `default`
    fallback among them), but with the encoder built once: dumps builds a new one per call
    whenever it is given options, and a tool call logs one line."""

    def __init__(self) -> None:
        self._encode: Callable[[Any], str] | None = None

    def __call__(self, obj: Any, **options: Any) -> str:
        if self._encode is None:
            self._encode = json.JSONEncoder(**options).encode
        return self._encode(obj)
