"""structlog set-up shared by fingertip-gadget and the daemon."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable
from typing import Any, TextIO

import orjson
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
    """The JSONRenderer's serializer: orjson (a tool call logs one line, and json's encoder is
    a measurable share of its cost), with json.dumps's options as JSONRenderer gives them (its
    `default` fallback among them) for what orjson refuses (a lone surrogate, a huge int, a
    non-str key), the encoder built once: dumps builds a new one per call given options."""

    def __init__(self) -> None:
        self._encode: Callable[[Any], str] | None = None

    def __call__(self, obj: Any, **options: Any) -> str:
        try:
            return orjson.dumps(obj, default=options.get("default")).decode()
        except TypeError:  # orjson.JSONEncodeError
            pass
        if self._encode is None:
            self._encode = json.JSONEncoder(**options).encode
        return self._encode(obj)
