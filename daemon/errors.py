"""Errors are values: a stable code, a human message, whether a retry can help, and details."""

from __future__ import annotations

from typing import Any


class ToolError(Exception):
    """Raised by tools and the catalog; every transport maps it the same way."""

    def __init__(
        self,
        code: str,
        message: str,
        *,
        retryable: bool = False,
        details: dict[str, Any] | None = None,
    ):
        super().__init__(message)
        self.code = code
        self.message = message
        self.retryable = retryable
        self.details = details

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "code": self.code,
            "message": self.message,
            "retryable": self.retryable,
        }
        if self.details is not None:
            out["details"] = self.details
        return out
