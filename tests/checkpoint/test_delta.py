"""plait.checkpoint.delta: structural deltas, the chain policy, and replay."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from plait._codec import freeze
from plait._frozen import FrozenDict, FrozenList
from plait.checkpoint import delta

json_scalars = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=8)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4),
    max_leaves=12,
)


def test_an_append_is_stored_as_the_appended_items() -> None:
    prev = freeze([{"id": "1"}, {"id": "2"}], "m")
    new = FrozenList([*prev, freeze({"id": "3"}, "m")])
    assert delta.diff(prev, new) == {"n": 2, "a": [{"id": "3"}]}


def test_a_list_whose_prefix_is_not_the_same_items_has_no_delta() -> None:
    prev = freeze([1, 2], "m")
    assert delta.diff(prev, freeze([2, 1, 3], "m")) is None
    assert delta.diff(prev, freeze([1], "m")) is None


def test_equal_but_different_json_is_not_mistaken_for_the_same_item() -> None:
    # 1 == 1.0 == True in Python; in JSON they are different values.
    prev = freeze([1], "m")
    new = freeze([True, 2], "m")
    assert delta.diff(prev, new) is None


def test_a_dict_delta_names_set_and_deleted_keys() -> None:
    prev = freeze({"a": 1, "b": [1], "c": 3}, "m")
    new = FrozenDict({"a": prev["a"], "b": prev["b"], "d": 4})
    assert delta.diff(prev, new) == {"s": {"d": 4}, "d": ["c"]}


def test_scalars_are_stored_in_full() -> None:
    data, is_delta, chain = delta.encode("hello", "hell", delta.Chain(0, 0, 6, 6))
    assert not is_delta and orjson.loads(data) == "hello" and chain.depth == 0


def test_a_small_append_to_a_large_list_becomes_a_delta() -> None:
    prev = freeze(["x" * 100] * 20, "m")
    data0, _, chain0 = delta.encode(prev)
    new = FrozenList([*prev, "y"])
    data, is_delta, chain = delta.encode(new, prev, chain0)
    assert is_delta and orjson.loads(data) == {"n": 20, "a": ["y"]}
    assert chain.depth == 1 and chain.full_bytes == len(data0)


def test_a_delta_larger_than_half_the_value_is_stored_in_full() -> None:
    prev = freeze(["a"], "m")
    _, _, chain = delta.encode(prev)
    new = FrozenList([*prev, "b" * 50])
    _, is_delta, _ = delta.encode(new, prev, chain)
    assert not is_delta


def test_the_chain_restarts_when_deltas_outgrow_the_full_value() -> None:
    value: Any = freeze(["m" * 100] * 10, "m")
    data, is_delta, chain = delta.encode(value)
    full_sizes = [len(data)]
    deltas_since_full = 0
    for i in range(300):
        new = FrozenList([*value, f"{i:04d}" + "m" * 96])
        data, is_delta, chain = delta.encode(new, value, chain)
        if is_delta:
            deltas_since_full += len(data)
            assert deltas_since_full <= full_sizes[-1]
        else:
            full_sizes.append(len(data))
            deltas_since_full = 0
        assert chain.depth <= delta.K_MAX
        value = new
    assert len(full_sizes) > 2  # it did restart, more than once


def test_the_chain_never_exceeds_k_max_deltas() -> None:
    value: Any = freeze(["x" * 10_000], "m")
    _, _, chain = delta.encode(value)
    depths = []
    for i in range(delta.K_MAX + 5):
        new = FrozenList([*value, i])
        _, _, chain = delta.encode(new, value, chain)
        depths.append(chain.depth)
        value = new
    assert max(depths) == delta.K_MAX and depths[delta.K_MAX] == 0


@given(json_values, json_values)
def test_a_delta_replays_to_exactly_the_new_value(a: Any, b: Any) -> None:
    prev, new = freeze(a, "c"), freeze(b, "c")
    if isinstance(prev, list) and isinstance(new, list):
        new = FrozenList([*prev, *new])  # make appends likely
    change = delta.diff(prev, new)
    if change is None:
        return
    got = delta.apply(prev, orjson.loads(orjson.dumps(change)))
    assert orjson.dumps(got) == orjson.dumps(new)
    assert type(got) in (FrozenList, FrozenDict)


def test_replay_rebuilds_a_chain_and_shares_work() -> None:
    values = [freeze([f"m{j}" for j in range(i + 1)], "c") for i in range(6)]
    rows: dict[Any, tuple[Any, bytes]] = {("c", "0"): (None, orjson.dumps(values[0]))}
    for i in range(1, 6):
        rows[("c", str(i))] = (("c", str(i - 1)), orjson.dumps({"n": i, "a": [f"m{i}"]}))
    got = delta.replay(rows, [("c", str(i)) for i in range(6)])
    for i in range(6):
        assert got[("c", str(i))] == values[i]
        assert isinstance(got[("c", str(i))], FrozenList)


def test_replay_of_a_dict_chain() -> None:
    rows: dict[Any, tuple[Any, bytes]] = {
        "a": (None, orjson.dumps({"x": 1, "y": 2})),
        "b": ("a", orjson.dumps({"s": {"z": 3}, "d": ["x"]})),
    }
    assert delta.replay(rows, ["b"])["b"] == {"y": 2, "z": 3}


@pytest.mark.parametrize(
    ("rows", "reason"),
    [
        ({"a": ("gone", b'{"n": 0, "a": []}')}, "is not stored"),
        ({"a": (None, b"not json")}, "not JSON"),
        ({"b": (None, b"[1]"), "a": ("b", b'{"s": {}, "d": []}')}, "cannot apply"),
        ({"b": (None, b"[1]"), "a": ("b", b'{"n": 5, "a": []}')}, "malformed"),
        ({"a": ("b", b'{"n": 0, "a": []}'), "b": ("a", b'{"n": 0, "a": []}')}, "loops"),
    ],
)
def test_replay_refuses_damaged_chains(rows: dict[Any, tuple[Any, bytes]], reason: str) -> None:
    with pytest.raises(delta.DeltaError, match=reason):
        delta.replay(rows, ["a"])
