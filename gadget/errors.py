"""Errors of the device side. Each carries a stable code and whether a retry can help."""

from __future__ import annotations


class GadgetError(Exception):
    """A failure on the USB device side, with a stable machine-readable code."""

    code = "gadget_error"
    retryable = False

    def __init__(self, message: str, *, code: str | None = None, retryable: bool | None = None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        if retryable is not None:
            self.retryable = retryable


class TargetNotAttached(GadgetError):
    """The host is not attached or not reading reports (EAGAIN past deadline, ESHUTDOWN, ...)."""

    code = "target_not_attached"
    retryable = True


class ConfigfsError(GadgetError):
    """configfs or the UDC refused what we asked, or the gadget never reached `configured`."""

    code = "gadget_configfs_failed"
    retryable = True


class EndpointBudgetExceeded(ConfigfsError):
    """The composite needs more endpoints than the UDC has: refused before anything changes."""

    code = "gadget_endpoint_budget"
    retryable = False


class UnknownKey(GadgetError):
    """A key, consumer or KEYCODE_* name we do not know; the message lists the closest names."""

    code = "unknown_key"

    def __init__(self, name: str, suggestions: list[str]):
        hint = f"; did you mean {', '.join(suggestions)}?" if suggestions else ""
        super().__init__(f"unknown key name {name!r}{hint}")
        self.name = name
        self.suggestions = suggestions


class UntypableCharacter(GadgetError):
    """A character the target's keyboard layout cannot type."""

    code = "untypable_character"

    def __init__(self, char: str, index: int, layout: str = "English US (PC, us)"):
        super().__init__(
            f"character {char!r} (U+{ord(char):04X}) at index {index} cannot be typed on the "
            f"target's {layout} layout"
        )
        self.char = char
        self.index = index
        self.layout = layout
