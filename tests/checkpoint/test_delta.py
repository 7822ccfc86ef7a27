"""plait.checkpoint.delta: structural deltas, the chain policy, and replay."""

from __future__ import annotations

from collections.abc import Callable
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


def _tree_of_values(
    draw: Callable[[st.SearchStrategy[Any]], Any],
) -> tuple[dict[Any, tuple[Any, bytes]], dict[Any, Any]]:
    """Rows of a random tree of list or dict values (branches included), stored as a backend
    does (each value encoded against its parent's), and the value each key must replay to."""
    as_dict = draw(st.booleans())
    first = freeze({"k0": 0} if as_dict else [0], "c")
    chains: dict[Any, delta.Chain] = {}
    data, _, chains[0] = delta.encode(first)
    rows: dict[Any, tuple[Any, bytes]] = {0: (None, data)}
    values: dict[Any, Any] = {0: first}
    for key in range(1, draw(st.integers(1, 24))):
        parent = draw(st.integers(0, key - 1))
        prev = values[parent]
        item = freeze(draw(json_values), "c")
        new: Any
        if as_dict:
            kept = dict(prev)
            if kept and draw(st.booleans()):
                kept.pop(next(iter(kept)))
            new = FrozenDict({**kept, f"k{key}": item})
        else:
            cut = draw(st.integers(0, len(prev))) if draw(st.integers(0, 5)) == 0 else len(prev)
            new = FrozenList([*prev[:cut], item])
        data, is_delta, chains[key] = delta.encode(new, prev, chains[parent])
        rows[key] = (parent if is_delta else None, data)
        values[key] = new
    return rows, values


@given(st.data())
def test_replay_of_any_subset_of_a_tree_equals_the_values_written(data: st.DataObject) -> None:
    rows, values = _tree_of_values(data.draw)
    wanted = data.draw(st.sets(st.sampled_from(sorted(values)), min_size=1))
    got = delta.replay(rows, wanted)
    for key in wanted:
        assert orjson.dumps(got[key]) == orjson.dumps(values[key])
        assert isinstance(got[key], FrozenList | FrozenDict)
        stack = [got[key]]
        while stack:  # frozen all the way down, never a plain list or dict
            value = stack.pop()
            assert type(value) not in (list, dict)
            stack.extend(value.values() if isinstance(value, dict) else value if isinstance(value, list) else ())


def test_replay_shares_the_items_of_one_chain_between_its_values() -> None:
    rows: dict[Any, tuple[Any, bytes]] = {("c", "0"): (None, orjson.dumps([{"id": "m0"}]))}
    for i in range(1, 5):
        rows[("c", str(i))] = (("c", str(i - 1)), orjson.dumps({"n": i, "a": [{"id": f"m{i}"}]}))
    got = delta.replay(rows, [("c", str(i)) for i in range(5)])
    for i in range(1, 5):
        older, newer = got[("c", str(i - 1))], got[("c", str(i))]
        assert all(a is b for a, b in zip(older, newer, strict=False))  # decoded and frozen once
        assert newer is not older and len(newer) == len(older) + 1


def test_unresolved_names_the_first_missing_link_of_each_chain() -> None:
    rows: dict[Any, tuple[Any, bytes]] = {
        "full": (None, b"[1]"),
        "a": ("full", b'{"n": 1, "a": [2]}'),
        "b": ("gone", b'{"n": 1, "a": [3]}'),
        "loop1": ("loop2", b"{}"),
        "loop2": ("loop1", b"{}"),
    }
    assert delta.unresolved(rows, ["a", "full"]) == set()
    assert delta.unresolved(rows, ["a", "b", "c"]) == {"gone", "c"}
    assert delta.unresolved(rows, ["loop1"]) == set()  # a loop is replay's to report
