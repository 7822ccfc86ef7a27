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
    draw: Callable[[st.SearchStrategy[Any]], Any], linked: bool = False
) -> tuple[dict[Any, tuple[Any, bytes]], dict[Any, Any]]:
    """Rows of a random tree of list or dict values (branches included), stored as a backend
    does (each value encoded against its parent's; ``linked``: by encode_linked, keyed as the
    SQL backends key blobs), and the value each key must replay to."""
    as_dict = draw(st.booleans())
    first = freeze({"k0": 0} if as_dict else [0], "c")
    chains: dict[Any, delta.Chain] = {}
    if linked:
        return _linked_tree(draw, first, as_dict)
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


def _linked_tree(
    draw: Callable[[st.SearchStrategy[Any]], Any], first: Any, as_dict: bool
) -> tuple[dict[Any, tuple[Any, bytes]], dict[Any, Any]]:
    """A tree as :func:`_tree_of_values` draws it, written by encode_linked: long runs of
    appends (so that anchors are written), some branches, some cuts."""
    chains: dict[str, delta.Chain] = {}
    data, _, chains["000"] = delta.encode_linked(first, "000")
    rows: dict[Any, tuple[Any, bytes]] = {"000": (None, data)}
    values: dict[Any, Any] = {"000": first}
    for i in range(1, draw(st.integers(1, 90))):
        key = f"{i:03d}"
        parent = f"{i - 1:03d}" if draw(st.integers(0, 7)) else f"{draw(st.integers(0, i - 1)):03d}"
        prev = values[parent]
        item = freeze(draw(json_values), "c")
        new: Any
        if as_dict:
            new = FrozenDict({**prev, f"k{i}": item})
        else:
            cut = draw(st.integers(0, len(prev))) if draw(st.integers(0, 30)) == 0 else len(prev)
            new = FrozenList([*prev[:cut], item, *([item] * draw(st.integers(0, 2)))])
        data, base, chains[key] = delta.encode_linked(new, key, prev, parent, chains[parent])
        rows[key] = (base, data)
        values[key] = new
    return rows, values


@pytest.mark.parametrize("linked", [False, True], ids=["plain", "linked"])
@given(data=st.data())
def test_replay_of_any_subset_of_a_tree_equals_the_values_written(data: st.DataObject, linked: bool) -> None:
    rows, values = _tree_of_values(data.draw, linked)
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


def _path(rows: dict[str, tuple[str | None, bytes]], key: str) -> int:
    """Rows read to replay ``key``: it, its bases, down to a full value."""
    n = 0
    cursor: str | None = key
    while cursor is not None:
        n, cursor = n + 1, rows[cursor][0]
    return n


def _linked_appends(first: Any, items: list[Any]) -> tuple[dict[str, tuple[str | None, bytes]], list[Any]]:
    """``first``, then one item appended per write, stored by encode_linked."""
    data, base, chain = delta.encode_linked(first, "0000")
    rows: dict[str, tuple[str | None, bytes]] = {"0000": (base, data)}
    values, prev, prev_key = [first], first, "0000"
    for i, item in enumerate(items, 1):
        key = f"{i:04d}"
        new = FrozenList([*prev, item])
        data, base, chain = delta.encode_linked(new, key, prev, prev_key, chain)
        rows[key] = (base, data)
        values.append(new)
        prev, prev_key = new, key
    return rows, values


def test_a_linked_chat_is_read_in_few_rows_and_stored_in_about_twice_its_bytes() -> None:
    """500 appends of ~1 KB: every value is at most K_STEP appends plus its anchors from a
    full value (the plain chain's middle value is ~125 rows), each item is stored about
    twice (its delta, one anchor), and every value replays exactly."""
    msgs = [freeze({"id": str(i), "text": f"{i:04d}" + "m" * 1000}, "m") for i in range(500)]
    rows, values = _linked_appends(FrozenList([msgs[0]]), msgs[1:])
    paths = [_path(rows, key) for key in rows]
    assert max(paths) <= delta.K_STEP + 500 // delta.K_STEP + 2
    assert paths[250] < 30
    anchors = [key for key, (base, _) in rows.items() if base is not None and int(base) != int(key) - 1]
    assert len(anchors) > 20
    written = sum(len(orjson.dumps(m)) for m in msgs)
    stored = sum(len(data) for _, data in rows.values())
    assert stored < 2.2 * written
    got = delta.replay(rows, list(rows))
    assert [orjson.dumps(got[key]) for key in rows] == [orjson.dumps(v) for v in values]


def test_a_linked_chain_never_puts_more_than_k_max_rows_on_a_path() -> None:
    """Small appends to a large value: anchors until K_MAX rows would be on the path, then
    a full value, and the chain goes on from it."""
    steps = delta.K_MAX * delta.K_STEP + 100
    rows, values = _linked_appends(FrozenList(["x" * 100_000]), list(range(steps)))
    paths = [_path(rows, key) for key in rows]
    assert max(paths) <= delta.K_MAX
    fulls = [key for key, (base, _) in rows.items() if base is None]
    assert len(fulls) == 2, "the first value, and one when the path would have grown past K_MAX"
    assert paths[-1] <= (len(rows) - 1 - int(fulls[1])) // delta.K_STEP + delta.K_STEP + 1  # short again
    last = list(rows)[-1]
    assert orjson.dumps(delta.replay(rows, [last])[last]) == orjson.dumps(values[-1])


def test_a_change_that_is_not_an_append_restarts_a_linked_chain_and_dicts_link_as_before() -> None:
    prev = freeze([f"m{i}" for i in range(40)], "m")
    _, _, chain = delta.encode_linked(prev, "a")
    data, base, after = delta.encode_linked(FrozenList(prev[:-1]), "b", prev, "a", chain)
    assert base is None and after.anchor == "b" and after.depth == 0
    d0 = freeze({f"k{i}": "v" * 50 for i in range(20)}, "m")
    _, _, dchain = delta.encode_linked(d0, "a")
    assert dchain.anchor is None
    d1 = FrozenDict({**d0, "new": 1})
    data, base, dchain = delta.encode_linked(d1, "b", d0, "a", dchain)
    assert base == "a" and orjson.loads(data) == {"s": {"new": 1}, "d": []} and dchain.depth == 1
    data, base, _ = delta.encode_linked(d1, "c")  # no chain known: in full
    assert base is None and orjson.loads(data) == orjson.loads(orjson.dumps(d1))


def _restore_and_continue(rows: dict[str, tuple[str | None, bytes]], values: list[Any], at: int, more: int) -> None:
    """Restore the chain of write ``at`` from the rows alone (as a new process would), go on
    with ``more`` appends from it, and check that every value replays and paths stay short."""
    key = f"{at:04d}"
    chain = delta.chain_of(rows, key, values[at], str)
    assert chain is not None
    prev, prev_key = values[at], key
    for i in range(at + 1, at + 1 + more):
        k = f"r{i:04d}"
        new = FrozenList([*prev, freeze({"id": k, "text": "y" * 300}, "m")])
        data, base, chain = delta.encode_linked(new, k, prev, prev_key, chain)
        rows[k] = (base, data)
        values.append(new)
        got = delta.replay(rows, [k])[k]
        assert orjson.dumps(got) == orjson.dumps(new)
        assert _path(rows, k) <= delta.K_STEP + i // delta.K_STEP + 2
        prev, prev_key = new, k


def test_a_restored_list_chain_goes_on_linked_from_its_last_anchor() -> None:
    """A process that only read the head finds the chain's last anchor from the rows: its
    next appends link to that anchor as the writer's would have, wherever the head was."""
    msgs = [freeze({"id": str(i), "text": "x" * 300}, "m") for i in range(80)]
    rows, values = _linked_appends(FrozenList([msgs[0]]), msgs[1:])
    for at in (5, 17, 33, 40, 79):
        chain = delta.chain_of(rows, f"{at:04d}", values[at], str)
        assert chain is not None and chain.anchor is not None
        base = rows[chain.anchor][0]
        assert base is None or rows[chain.anchor][1].startswith(b'{"k":1,'), (
            "the anchor found is a full value or an anchor"
        )
        assert chain.since_anchor == _path(rows, f"{at:04d}") - _path(rows, chain.anchor)
        _restore_and_continue(dict(rows), list(values[: at + 1]), at, 40)


def test_a_chain_that_is_not_appends_all_the_way_restores_unlinked() -> None:
    """A delta above the anchor that is not an append of the very items below it (foreign
    data, or a truncation) leaves the restored chain unlinked: it goes on as encode() would,
    never with an anchor whose value might not be a prefix."""
    rows: dict[str, tuple[str | None, bytes]] = {
        "a": (None, orjson.dumps(["x" * 50] * 10)),
        "b": ("a", orjson.dumps({"n": 8, "a": ["y"]})),  # drops two items: not an append
    }
    value = FrozenList(["x" * 50] * 8 + ["y"])
    chain = delta.chain_of(rows, "b", value, str)
    assert chain is not None and chain.anchor is None and chain.depth == 1
    d = freeze({"k": "v" * 80}, "m")
    plain = delta.chain_of({"a": (None, orjson.dumps(d))}, "a", d, str)
    assert plain is not None and plain.anchor is None
    assert delta.chain_of({"b": ("gone", b'{"n":0,"a":[]}')}, "b", FrozenList(), str) is None


@pytest.mark.parametrize(
    "items",
    [
        [{"role": "user", "content": "hi", "id": "0"}, {"role": "ai", "content": "{[", "n": 1}],  # flat objects
        [{"a": 1}, {"b": {"c": [1, 2]}}],  # one object holds containers
        [{"a": 1}, [1, {"b": 2}], "x", 3, None],  # not all objects
        [],
    ],
)
def test_replayed_items_are_frozen_all_the_way_down(items: list[Any]) -> None:
    rows = {"a": (None, orjson.dumps([])), "b": ("a", orjson.dumps({"n": 0, "a": items}))}
    got = delta.replay(rows, ["b"])["b"]
    assert got == items and type(got) is FrozenList

    def frozen(v: Any) -> None:
        assert type(v) not in (dict, list), v
        for x in v.values() if isinstance(v, dict) else v if isinstance(v, list) else ():
            frozen(x)

    frozen(got)
