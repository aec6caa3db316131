"""The daemon's orjson-first parser (wire.use_orjson) accepts, reads and refuses exactly what
the json path does, with the same messages: no request byte is read differently."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import orjson
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from daemon import wire

T = TypeVar("T")

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


def with_and_without_orjson(run: Callable[[], T]) -> tuple[T, T]:
    """(`run` with orjson first, `run` with json alone); wire is left as it was."""
    saved = wire._orjson_loads, wire._orjson_dumps
    try:
        wire.use_orjson()
        fast = run()
        wire._orjson_loads = wire._orjson_dumps = None
        return fast, run()
    finally:
        wire._orjson_loads, wire._orjson_dumps = saved


def both(data: Any) -> tuple[tuple[str, Any], tuple[str, Any]]:
    """(orjson first, json alone) reading `data`."""
    return with_and_without_orjson(lambda: outcome(data))


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


# What a reply may carry, and more: big ints, every float (tiny ones too), lone surrogates.
reply_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.floats(min_value=-1e-3, max_value=1e-3)
    | st.text(st.characters(exclude_categories=())),  # lone surrogates too
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text(st.characters(exclude_categories=())), inner, max_size=4)
    ),
    max_leaves=20,
)


_compact = wire.encoder(ensure_ascii=False, separators=(",", ":"))


def written(value: Any) -> tuple[str, str]:
    """(orjson first, json alone) writing `value` with a compact encoder."""
    return with_and_without_orjson(lambda: _compact(value))


@given(reply_values)
@example(9.99e-05)
@example(1e-07)
@example([1e-07, -1e-05, 0.0001, 1e16, 5e-324, 1.7976931348623157e308, -0.0])
@example({"\ud800": "\udfff x"})
@example([2**70, {"a": "0.00001 in a string"}])
def test_every_reply_is_written_byte_for_byte_as_json_writes_it(value: Any) -> None:
    fast, slow = written(value)
    assert fast == slow


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_nan_and_infinity_are_refused_as_json_refuses_them(bad: float) -> None:
    def attempt() -> str:
        try:
            return _compact({"a": [1, {"b": bad}]})
        except ValueError as exc:
            return f"refused: {exc}"

    fast, slow = with_and_without_orjson(attempt)
    assert fast == slow and fast.startswith("refused")


def test_a_non_string_key_is_written_as_json_writes_it() -> None:
    assert written({1: 2, "b": [True]}) == ('{"1":2,"b":[true]}', '{"1":2,"b":[true]}')


def test_replies_are_written_by_orjson(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[Any] = []

    def spy(value: Any) -> bytes:
        calls.append(value)
        return orjson.dumps(value)

    saved = wire._orjson_loads, wire._orjson_dumps
    try:
        wire.use_orjson()
        monkeypatch.setattr(wire, "_orjson_dumps", spy)
        assert wire.dumps({"ok": 0.5, "n": None}) == '{"ok":0.5,"n":null}'
        assert calls == [{"ok": 0.5, "n": None}]
        # Other layouts (MCP's indented-free default separators) stay json's.
        assert wire.encoder(ensure_ascii=False)({"a": 1}) == '{"a": 1}' and len(calls) == 1
    finally:
        wire._orjson_loads, wire._orjson_dumps = saved
