"""The edge rule (daemon.wire): what it refuses, and that valid data passes it unchanged."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from daemon import wire

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@given(json_values)
def test_valid_json_reads_and_writes_exactly_as_before(value: Any) -> None:
    for options in ({}, {"ensure_ascii": False, "separators": (",", ":")}):
        text = json.dumps(value, **options)  # type: ignore[arg-type]
        assert wire.loads(text) == json.loads(text)
        assert wire.loads(text.encode()) == json.loads(text)
        assert wire.encoder(**options)(value) == text


def nested(depth: int) -> Any:
    value: Any = 1
    for i in range(depth):
        value = [value] if i % 2 else {"k": value}
    return value


def test_nesting_is_bounded_at_max_depth() -> None:
    wire.check(nested(wire.MAX_DEPTH))
    wire.loads(json.dumps(nested(wire.MAX_DEPTH)))
    with pytest.raises(wire.WireError, match="nesting deeper than 32"):
        wire.check(nested(wire.MAX_DEPTH + 1))
    with pytest.raises(wire.WireError, match="nesting deeper than 32"):
        wire.loads("[" * 100_000 + "]" * 100_000)  # past the parser's own recursion


@pytest.mark.parametrize("text", ["NaN", "[Infinity]", '{"a":-Infinity}', "1e400", "[-1e999]"])
def test_non_finite_numbers_are_refused(text: str) -> None:
    with pytest.raises(wire.WireError, match="finite"):
        wire.loads(text)


# 1 and 400 zeros is the number 1e400: as an integer it passed, and a coordinate without a
# maximum took it to float() and an OverflowError (a 500).
@pytest.mark.parametrize("text", ["1" + "0" * 400, '{"x":-1' + "0" * 309 + "}", "[[2e308]]"])
def test_integers_past_every_double_are_refused_like_1e400(text: str) -> None:
    with pytest.raises(wire.WireError, match="finite"):
        wire.loads(text)
    with pytest.raises(wire.WireError, match="finite"):
        wire.loads(text.encode())


def test_the_largest_integers_a_double_holds_pass() -> None:
    for value in (wire.MAX_INT, -wire.MAX_INT, 2**64, 10**30, -(2**63)):
        assert wire.loads(str(value)) == value
        wire.check({"x": [value]})
    with pytest.raises(wire.WireError) as err:
        wire.check({"x": [wire.MAX_INT + 1]})
    assert err.value.path == "$.x[0]"


@pytest.mark.parametrize("value", [math.nan, [1, math.inf], {"a": {"b": -math.inf}}])
def test_non_finite_floats_are_refused_with_their_path(value: Any) -> None:
    with pytest.raises(wire.WireError) as err:
        wire.check(value)
    assert err.value.path in ("$", "$[1]", "$.a.b")


@pytest.mark.parametrize("text", ['"\\ud800"', '["a\\udc00b"]', '{"\\ud83d":1}'])
def test_lone_surrogates_are_refused(text: str) -> None:
    with pytest.raises(wire.WireError, match="Unicode"):
        wire.loads(text)
    assert wire.loads('"\\ud83d\\ude00"') == "\U0001f600"  # a pair is one character


@pytest.mark.parametrize("value", [b"bytes", {1: "int key"}, {"a": object()}, {1.5}])
def test_only_json_data_passes(value: Any) -> None:
    with pytest.raises(wire.WireError):
        wire.check(value)


def test_replies_refuse_nan_and_scrub_lone_surrogates() -> None:
    encode = wire.encoder(ensure_ascii=False)
    with pytest.raises(ValueError):
        encode({"t": math.nan})
    assert encode({"out": "a\ud800b"}) == '{"out": "a\ufffdb"}'
    assert encode(["\U0001f600"]) == '["\U0001f600"]'


def _datetime_form(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds")[:-6] + "Z"


@pytest.mark.parametrize(
    "ts",
    [
        math.nan,
        math.inf,
        -math.inf,
        1e300,
        -0.0,
        -0.5,
        -1.0000005,
        253402300799.9999,
        253402300800.0,
        -62135596800.0,
        -62135596801.0,
        2.0**63,
    ],
)
def test_iso_utc_agrees_with_datetime_at_the_edges(ts: float) -> None:
    """Same text, or the same exception type, as datetime gives (years below 1000 included,
    which strftime would not zero-pad)."""
    try:
        expected: object = _datetime_form(ts)
    except (ValueError, OverflowError, OSError) as exc:
        expected = type(exc)
    try:
        got: object = wire.iso_utc(ts)
    except (ValueError, OverflowError, OSError) as exc:
        got = type(exc)
    assert got == expected
