"""structlog set-up shared by fingertip-gadget and the daemon."""

from __future__ import annotations

import logging
import sys
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
        processors += [structlog.processors.format_exc_info, structlog.processors.JSONRenderer()]
    else:
        processors.append(structlog.dev.ConsoleRenderer())
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level.upper())),
        logger_factory=structlog.PrintLoggerFactory(out),
        # Loggers are bound once configured: the per-call cost matters on every tool call.
        cache_logger_on_first_use=True,
    )
