"""The daemon's orjson-first parser (wire.use_orjson) accepts, reads and refuses exactly what
the json path does, with the same messages: no request byte is read differently."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from daemon import wire

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)
# Texts no encoder writes: stray bytes, escapes, literals, BOMs, deep nesting.
hostile = st.one_of(
    st.text(alphabet='{}[]",:0123456789.eE+-\\u dnNaItrflsI\ufeff\ud800\x00 \t\n', max_size=40),
    st.binary(max_size=40),
)


def outcome(data: Any) -> tuple[str, Any]:
    try:
        return "ok", wire.loads(data)
    except wire.WireError as exc:
        return "refused", str(exc)


@pytest.fixture
def fast() -> Iterator[None]:
    before = wire._orjson_loads
    wire.use_orjson()
    yield
    wire._orjson_loads = before


def both(data: Any) -> tuple[tuple[str, Any], tuple[str, Any]]:
    """(orjson first, json alone) for `data`; wire is left as it was."""
    saved = wire._orjson_loads
    try:
        wire.use_orjson()
        with_orjson = outcome(data)
        wire._orjson_loads = None
        return with_orjson, outcome(data)
    finally:
        wire._orjson_loads = saved


def same(a: tuple[str, Any], b: tuple[str, Any]) -> bool:
    # json.dumps tells 1 from 1.0 and -0.0 from 0.0 where == does not.
    return a[0] == b[0] and json.dumps(a[1]) == json.dumps(b[1])


@given(json_values)
def test_every_value_reads_the_same(value: Any) -> None:
    for text in (json.dumps(value), json.dumps(value, ensure_ascii=False)):
        for data in (text, text.encode("utf-8", "surrogatepass")):
            a, b = both(data)
            assert same(a, b), (data, a, b)


@given(hostile)
@example("1e400")
@example("12345678901234567890")
@example('"\\ud800"')
@example("\ufeff{}")
@example(b"\xef\xbb\xbf{}")
@example("[" * 40 + "]" * 40)
@example("[" * 100_000 + "]" * 100_000)
@example('{"a":NaN}')
def test_hostile_text_is_refused_or_read_the_same(data: Any) -> None:
    a, b = both(data)
    assert same(a, b), (data, a, b)


def test_the_fast_path_is_taken(fast: None, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[bytes] = []

    def spy(raw: bytes) -> Any:
        calls.append(raw)
        return orjson.loads(raw)

    monkeypatch.setattr(wire, "_orjson_loads", spy)
    assert wire.loads('{"input":{}}') == {"input": {}}
    assert calls == [b'{"input":{}}']
