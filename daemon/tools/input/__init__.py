"""The HID tools, split by concern: platforms (what differs per target), schemas (what clients
see), args (what handlers get), handlers (arguments to report programs in the HID flow) and
specs (the ToolSpecs the catalog registers)."""

from daemon.tools.input.specs import tools

__all__ = ["tools"]
