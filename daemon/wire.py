"""The one rule for data crossing the daemon's edge, in both directions, for every transport.

In (HTTP, MCP, WebSocket, /api/sim, IPC, the CLI's stdin, the config file), a value is
accepted only as plain JSON data:
- numbers are finite: NaN and ±Infinity (and literals like 1e400 that overflow to it) are
  refused, because every comparison with NaN is false, so NaN passes any schema bound and then
  poisons timers, geometry and encoders; so is an integer beyond the largest double (1 and 400
  zeros is the number 1e400 is), which a coordinate without a maximum let through to float()
  and its OverflowError;
- strings are valid Unicode: a lone surrogate ("\\ud800") cannot be encoded as UTF-8, so a reply
  echoing it could not be sent;
- containers nest at most MAX_DEPTH deep (no tool argument or envelope comes close to it), so
  no validator, encoder or log line recurses without bound;
- only null, booleans, numbers, strings, arrays and objects with string keys (msgpack could
  carry more).

Out, `encoder` builds the replies' JSON encoders: NaN is refused (ValueError, which each
transport turns into its stable error) and a lone surrogate that reached a reply anyway (a
tool's text) becomes U+FFFD instead of an unencodable reply.

Pure and stdlib-only (orjson only once the daemon asks, use_orjson): the one-shot CLI imports
this module and must stay light.
"""

from __future__ import annotations

import functools
import json
import math
import re
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the CLI imports this module: no other daemon module at run time
    from daemon.errors import ToolError

MAX_DEPTH = 32  # nested arrays/objects; the deepest real request (a WS batch call) is about 8
MAX_INT = int(sys.float_info.max)  # past it an integer is no finite double


class WireError(ValueError):
    """A value that breaks the edge rule; `path` points at it ($ is the whole value)."""

    def __init__(self, path: str, message: str):
        super().__init__(f"{path}: {message}" if path != "$" else message)
        self.path = path
        self.reason = message


def _no_constant(name: str) -> Any:
    raise WireError("$", f"{name} is not JSON: only finite numbers are")


# Built once: json.loads with options builds a new decoder on every call.
_DECODER = json.JSONDecoder(parse_constant=_no_constant)


# orjson reads a number of 19 or more digits as a float where json keeps an int: such text (rare)
# takes the json path, so every accepted value stays exactly what json.loads gives.
_LONG_NUMBER = re.compile(rb"\d{19}")
_orjson_loads: Callable[[bytes], Any] | None = None
_orjson_dumps: Callable[[Any], bytes] | None = None


def use_orjson() -> None:
    """Parse and write compact replies with orjson first from now on (the daemon, at start:
    several times faster on every request and reply). The one-shot CLI never calls it and stays
    stdlib-only."""
    global _orjson_loads, _orjson_dumps
    import orjson

    _orjson_loads = orjson.loads
    _orjson_dumps = orjson.dumps


def loads(data: str | bytes | bytearray) -> Any:
    """Strict JSON text to a value that passes `check`. Bytes are decoded as json.loads does
    (UTF-8, or UTF-16/32 detected); a str must not start with a BOM.

    After use_orjson(), orjson parses first; whatever it refuses (or could read differently)
    goes through json, which accepts or refuses it, with its own message, exactly as before."""
    fast = _orjson_loads
    if fast is not None:
        raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else bytes(data)
        if not raw.startswith((b"\xef\xbb\xbf", b"\xfe", b"\xff")) and not _LONG_NUMBER.search(raw):
            try:
                value = fast(raw)
            except ValueError:  # orjson.JSONDecodeError
                pass
            else:
                check(value)
                return value
    return _json_loads(data)


def _json_loads(data: str | bytes | bytearray) -> Any:
    try:
        if isinstance(data, bytes | bytearray):
            data = bytes(data).decode(json.detect_encoding(data))
        if data.startswith("\ufeff"):
            raise WireError("$", "a BOM (byte order mark) is not JSON")
        value = _DECODER.decode(data)
    except WireError:
        raise
    except RecursionError as exc:
        raise WireError("$", f"nesting deeper than {MAX_DEPTH} levels ({exc})") from None
    except UnicodeDecodeError as exc:
        raise WireError("$", f"not UTF-8: {exc}") from None
    except ValueError as exc:  # json.JSONDecodeError
        raise WireError("$", f"not valid JSON: {exc}") from None
    check(value)
    return value


def is_text(s: str) -> bool:
    """Whether `s` is valid Unicode: no lone surrogate (as a JSON escape, or as argv and
    os.environ carry bytes that are not UTF-8) keeps it from being encoded."""
    if s.isascii():
        return True
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


_SCALARS = (bool, type(None))


def check(value: Any) -> None:
    """Raise WireError unless `value` is plain JSON data within the rule (see the module).
    Iterative, so a deep value costs no recursion. It runs on every request and every result:
    a quick walk that builds no paths answers first; the walk that says where runs only when
    the quick one finds something (or meets a subclass, which it leaves to the exact rule)."""
    if not _plain(value):
        _check_with_paths(value)


def _plain(value: Any) -> bool:
    """True when `value` certainly passes `check`."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    pop, push = stack.pop, stack.append
    while stack:
        v, depth = pop()
        kind = type(v)
        if kind is dict:
            if depth >= MAX_DEPTH:
                return False
            for key, item in v.items():
                if type(key) is not str or not (key.isascii() or is_text(key)):
                    return False
                t = type(item)
                if t is str:
                    if not (item.isascii() or is_text(item)):
                        return False
                elif t in _SCALARS:
                    continue
                elif t is int:
                    if not -MAX_INT <= item <= MAX_INT:
                        return False
                elif t is float:
                    if not math.isfinite(item):
                        return False
                else:
                    push((item, depth + 1))
        elif kind is list or kind is tuple:
            if depth >= MAX_DEPTH:
                return False
            for item in v:
                push((item, depth + 1))
        elif kind is str:
            if not (v.isascii() or is_text(v)):
                return False
        elif kind is float:
            if not math.isfinite(v):
                return False
        elif kind is int:
            if not -MAX_INT <= v <= MAX_INT:
                return False
        elif kind not in _SCALARS:
            return False
    return True


def _check_with_paths(value: Any) -> None:
    stack: list[tuple[Any, str, int]] = [(value, "$", 0)]
    while stack:
        v, path, depth = stack.pop()
        if v is None or isinstance(v, bool):
            continue
        if isinstance(v, int):
            if not -MAX_INT <= v <= MAX_INT:
                bits = v.bit_length()
                raise WireError(path, f"an integer of {bits} bits is past any finite number")
        elif isinstance(v, float):
            if not math.isfinite(v):
                raise WireError(path, f"{v} is not a finite number (JSON has no NaN or Infinity)")
        elif isinstance(v, str):
            if not is_text(v):
                raise WireError(path, "the string is not valid Unicode (a lone surrogate)")
        elif isinstance(v, dict | list | tuple):
            if depth >= MAX_DEPTH:
                raise WireError(path, f"nesting deeper than {MAX_DEPTH} levels")
            if isinstance(v, dict):
                for key, item in v.items():
                    if not isinstance(key, str):
                        raise WireError(path, f"object key {key!r} is not a string")
                    if not is_text(key):
                        raise WireError(path, "an object key is not valid Unicode")
                    stack.append((item, f"{path}.{key}", depth + 1))
            else:
                stack.extend((item, f"{path}[{i}]", depth + 1) for i, item in enumerate(v))
        else:
            raise WireError(path, f"a {type(v).__name__} is not JSON data")


_SURROGATE = re.compile("[\ud800-\udfff]")


def scrub(text: str) -> str:
    """`text` made encodable as UTF-8: each lone surrogate becomes U+FFFD."""
    return text if is_text(text) else _SURROGATE.sub("\ufffd", text)


# orjson writes a float below 1e-4 in magnitude as 0.0000999 or 1e-7 where json writes 9.99e-05
# and 1e-07; every other value comes out byte for byte the same (tests/unit/test_wire_orjson.py).
# Text that may hold such a number is written again by json (a string holding it only costs that).
# And orjson writes NaN and the infinities as null, where json refuses them (ValueError): text
# with a null goes the json way too, so a NaN is still refused, never written as null.
def _may_differ(text: str) -> bool:
    if "0.0000" in text or "null" in text:  # substring tests: a regex scan cost more
        return True
    at = text.find("e-")
    while at > 0:
        if text[at - 1].isdigit():
            return True
        at = text.find("e-", at + 2)
    return False


_COMPACT = {"ensure_ascii": False, "separators": (",", ":")}


def encoder(**options: Any) -> Callable[[Any], str]:
    """A reply encoder: json.JSONEncoder(**options) built once, NaN refused (ValueError), the
    text scrubbed. With the same options it gives the same text as before for any reply that
    was valid JSON.

    Compact encoders write with orjson first once the daemon asked (use_orjson), and fall back
    to json for whatever orjson refuses (a lone surrogate, a non-string key, an int past 64
    bits) or may write differently (a NaN, which orjson writes as null)."""
    enc = json.JSONEncoder(allow_nan=False, **options)
    compact = options == _COMPACT

    def encode(value: Any) -> str:
        fast = _orjson_dumps
        if compact and fast is not None:
            try:
                text = fast(value).decode()
            except TypeError:  # orjson.JSONEncodeError
                pass
            else:
                if not _may_differ(text):
                    return text
        return scrub(enc.encode(value))

    return encode


# -- helpers shared by the transports (one place; transports never import each other) ---------

# The HTTP port's status for each error code (the tools API, its OpenAPI description, the
# WebSocket upgrade's refusals and the connection cap all answer with it). Unlisted: 200 for a
# tool failure, 500 for an error outside any tool call.
STATUS = {
    "tool_call_payload_invalid": 400,
    "tool_arguments_invalid": 400,
    "auth_required": 401,
    "tool_execution_denied": 403,
    "host_not_allowed": 403,
    "origin_not_allowed": 403,
    "tool_not_found": 404,
    "request_too_large": 413,
    "tool_execution_exception": 500,
    "tool_result_schema_invalid": 500,
    "tool_unavailable": 503,
    "too_many_connections": 503,
}

# The port's data routes beside the tools (the live stream and snapshot, the flight recorder):
# their own codes, and a capture that is gone fails the route (503), where a tool call reports
# it in a 200.
DATA_STATUS = {
    **STATUS,
    "stream_params_invalid": 400,
    "trace_query_invalid": 400,
    "trace_not_found": 404,
    "capture_unavailable": 503,
    # An HDMI bridge's source states (daemon/screen/capture_dv.py): capture is there, the
    # target sends nothing usable yet.
    "no_cable": 503,
    "no_signal": 503,
    "no_sync": 503,
    "out_of_range": 503,
    "too_many_viewers": 503,
}

IMAGE_TYPES = {"jpeg": "image/jpeg", "png": "image/png"}

# Built once: json.dumps with options builds a new encoder on every call (hot on every reply).
dumps = encoder(ensure_ascii=False, separators=(",", ":"))


def iso_utc(ts: float) -> str:
    """2024-05-01T12:00:00.123Z (milliseconds truncated, like strftime's %f cut to three).

    Every reply and envelope carries one: the seconds part is formatted once per second and
    the microseconds rounded as datetime.fromtimestamp rounds them (half to even)."""
    frac, whole = math.modf(ts)
    micros = round(frac * 1e6)
    if micros >= 1_000_000:
        whole, micros = whole + 1, micros - 1_000_000
    elif micros < 0:
        whole, micros = whole - 1, micros + 1_000_000
    return f"{_second_text(int(whole))}.{micros // 1000:03d}Z"


# lru_cache, not a hand-kept "last second" (check it, then read it: two steps another thread
# can come between): screenshots are encoded in worker threads, beside the loop's replies.
@functools.lru_cache(maxsize=4)
def _second_text(second: int) -> str:
    return datetime.fromtimestamp(second, UTC).isoformat()[:-6]  # strftime drops %Y's zeros


def output_text(result: Any) -> str:
    """A result as the text a reply carries: a string as is, anything else compact JSON."""
    if isinstance(result, str):
        return result
    return dumps(result)


def error_body(error: ToolError) -> dict[str, Any]:
    """The HTTP tools API's body for an error raised before any tool is known."""
    return {
        "tool": None,
        "raw_input": "",
        "output": output_text(error.to_dict()),
        "is_error": True,
        "duration_ms": 0,
        "called_at": iso_utc(time.time()),
        "error": error.to_dict(),
    }


def is_artifact(result: Any) -> bool:
    """A screen-bearing result: base64 image data (a screenshot) that transports may carry
    apart from the rest (an ASFT transfer, an MCP image item)."""
    return (
        isinstance(result, dict)
        and isinstance(result.get("data"), str)
        and result.get("format") in IMAGE_TYPES
    )


# A number in a query string, as people write one: ASCII digits, an optional fraction for a
# real, nothing else (Python's int() and float() also take "1_0", "+5", " 5", "nan" and
# digits of every script). Twelve digits are more than any bound here allows.
_QUERY_INT = re.compile(r"[0-9]{1,12}")
_QUERY_REAL = re.compile(r"[0-9]{1,12}(\.[0-9]{1,12})?")


def query_number(text: str, kind: type[int] | type[float]) -> int | float:
    """`text` as an int or a float; ValueError for anything else."""
    if not (_QUERY_INT if kind is int else _QUERY_REAL).fullmatch(text):
        raise ValueError(f"not a plain {'integer' if kind is int else 'number'}: {text[:20]!r}")
    return kind(text)
