"""plait._frozen: read-only containers, and thaw() for a mutable copy."""

from __future__ import annotations

import copy
import json
import pickle
from collections.abc import Callable
from typing import Any

import orjson
import pytest

import plait
from plait import END, START, AppendList, Graph, ReadOnlyStateError, StateError, StateSchema
from plait._codec import freeze
from plait._frozen import FrozenDict, FrozenList, FrozenView, thaw


def _list() -> FrozenList:
    return freeze([3, 1, [2]], "ch")  # type: ignore[no-any-return]


def _dict() -> FrozenDict:
    return freeze({"a": 1, "b": {"c": [1]}}, "ch")  # type: ignore[no-any-return]


def _iadd(x: Any) -> None:
    x += [1]


def _imul(x: Any) -> None:
    x *= 2


def _ior(x: Any) -> None:
    x |= {"z": 1}


def _setitem(x: Any) -> None:
    x[0] = 9


def _setslice(x: Any) -> None:
    x[0:1] = [9]


def _delitem(x: Any) -> None:
    del x[0]


def _delslice(x: Any) -> None:
    del x[:]


LIST_MUTATIONS: dict[str, Callable[[Any], Any]] = {
    "append": lambda x: x.append(1),
    "extend": lambda x: x.extend([1]),
    "insert": lambda x: x.insert(0, 1),
    "pop": lambda x: x.pop(),
    "remove": lambda x: x.remove(3),
    "clear": lambda x: x.clear(),
    "sort": lambda x: x.sort(key=str),
    "reverse": lambda x: x.reverse(),
    "setitem": _setitem,
    "setslice": _setslice,
    "delitem": _delitem,
    "delslice": _delslice,
    "iadd": _iadd,
    "imul": _imul,
}

DICT_MUTATIONS: dict[str, Callable[[Any], Any]] = {
    "setitem": lambda x: x.__setitem__("z", 1),
    "delitem": lambda x: x.__delitem__("a"),
    "pop": lambda x: x.pop("a"),
    "popitem": lambda x: x.popitem(),
    "setdefault": lambda x: x.setdefault("z", 1),
    "update": lambda x: x.update(z=1),
    "clear": lambda x: x.clear(),
    "ior": _ior,
}


@pytest.mark.parametrize("name", sorted(LIST_MUTATIONS))
def test_every_list_mutation_raises_and_changes_nothing(name: str) -> None:
    value = _list()
    with pytest.raises(ReadOnlyStateError) as info:
        LIST_MUTATIONS[name](value)
    assert value == [3, 1, [2]]
    err = info.value
    assert isinstance(err, StateError) and isinstance(err, TypeError)
    assert err.type_name == "list"
    assert "plait.thaw" in str(err)


@pytest.mark.parametrize("name", sorted(DICT_MUTATIONS))
def test_every_dict_mutation_raises_and_changes_nothing(name: str) -> None:
    value = _dict()
    with pytest.raises(ReadOnlyStateError) as info:
        DICT_MUTATIONS[name](value)
    assert value == {"a": 1, "b": {"c": [1]}}
    assert info.value.type_name == "dict"


def test_nested_values_are_read_only_too() -> None:
    value = _dict()
    with pytest.raises(ReadOnlyStateError):
        value["b"]["c"].append(2)
    with pytest.raises(ReadOnlyStateError):
        value["b"]["new"] = 1
    assert value == {"a": 1, "b": {"c": [1]}}


def test_frozen_containers_read_like_lists_and_dicts() -> None:
    lst, dct = _list(), _dict()
    assert isinstance(lst, list) and isinstance(dct, dict)
    assert lst[0] == 3 and lst[-1] == [2] and lst[1:] == [1, [2]]
    assert list(iter(lst)) == [3, 1, [2]] and len(lst) == 3 and 1 in lst
    assert lst.index(1) == 1 and lst.count(3) == 1
    assert sorted(lst[:2]) == [1, 3]
    assert dct["a"] == 1 and dct.get("zz", 0) == 0 and "b" in dct
    assert list(dct.keys()) == ["a", "b"] and list(dct.items())[0] == ("a", 1)
    assert repr(lst) == "[3, 1, [2]]" and repr(dct) == "{'a': 1, 'b': {'c': [1]}}"


def test_operators_that_build_new_values_give_plain_mutable_ones() -> None:
    lst, dct = _list(), _dict()
    longer = lst + [4]
    assert longer == [3, 1, [2], 4] and type(longer) is list
    longer.append(5)  # a new list, the caller's to change
    merged = dct | {"z": 0}
    assert merged == {"a": 1, "b": {"c": [1]}, "z": 0} and type(merged) is dict
    merged["y"] = 1
    assert lst == [3, 1, [2]] and dct == {"a": 1, "b": {"c": [1]}}


@pytest.mark.parametrize("make", [list, copy.copy, lambda v: v.copy()])
def test_shallow_copies_are_mutable_and_independent(make: Callable[[Any], Any]) -> None:
    lst = _list()
    other = make(lst)
    assert type(other) is list
    other.append(4)
    assert lst == [3, 1, [2]]


@pytest.mark.parametrize("make", [dict, copy.copy, lambda v: v.copy()])
def test_shallow_dict_copies_are_mutable_and_independent(make: Callable[[Any], Any]) -> None:
    dct = _dict()
    other = make(dct)
    assert type(other) is dict
    other["z"] = 1
    assert "z" not in dct


def test_deepcopy_and_thaw_give_plain_mutable_data_all_the_way_down() -> None:
    for copier in (copy.deepcopy, thaw, plait.thaw):
        dct = _dict()
        mutable = copier(dct)
        assert type(mutable) is dict and type(mutable["b"]) is dict and type(mutable["b"]["c"]) is list
        mutable["b"]["c"].append(2)
        mutable["a"] = 2
        assert dct == {"a": 1, "b": {"c": [1]}}


def test_thaw_turns_tuples_into_lists_and_leaves_scalars_alone() -> None:
    assert thaw((1, (2, {"a": (3,)}))) == [1, [2, {"a": [3]}]]
    assert thaw("s") == "s" and thaw(None) is None and thaw(1.5) == 1.5


def test_thaw_and_deepcopy_of_a_view_give_a_plain_dict_all_the_way_down() -> None:
    view = FrozenView({"a": _dict(), "b": _list()})
    for copier in (copy.deepcopy, thaw):
        mutable = copier(view)
        assert type(mutable) is dict and type(mutable["a"]) is dict and type(mutable["a"]["b"]["c"]) is list
        assert type(mutable["b"]) is list and type(mutable["b"][2]) is list
        assert mutable == {"a": {"a": 1, "b": {"c": [1]}}, "b": [3, 1, [2]]}


def test_thaw_of_the_state_inside_a_node_is_a_mutable_copy() -> None:
    schema = StateSchema.builder().add("log", AppendList()).add_lww("meta").add_lww("copy").build()
    seen: list[Any] = []

    def node(state: Any) -> Any:
        mine = thaw(state)
        seen.append((type(mine), type(mine["log"]), type(mine["meta"]), type(mine["meta"]["tags"])))
        mine["log"].append("changed")  # the copy is the node's own...
        mine["meta"]["tags"].append("new")
        return {"copy": mine}

    g = Graph(schema).add_node("n", node).add_edge(START, "n").add_edge("n", END)
    out = g.compile().invoke({"log": ["start"], "meta": {"tags": ["t"]}})
    assert seen == [(dict, list, dict, list)]
    assert out["copy"] == {"log": ["start", "changed"], "meta": {"tags": ["t", "new"]}}
    assert out["log"] == ["start"] and out["meta"] == {"tags": ["t"]}, "...and the state is not"


def test_pickle_round_trips_to_plain_containers() -> None:
    value = _dict()
    back = pickle.loads(pickle.dumps(value))
    assert back == value
    assert type(back) is dict
    back["z"] = 1


def test_encoders_see_plain_json() -> None:
    value = _dict()
    assert orjson.loads(orjson.dumps(value)) == {"a": 1, "b": {"c": [1]}}
    assert json.loads(json.dumps(value)) == {"a": 1, "b": {"c": [1]}}


def test_frozen_equals_plain_both_ways() -> None:
    assert _list() == [3, 1, [2]] and [3, 1, [2]] == _list()
    assert _dict() == {"a": 1, "b": {"c": [1]}} and {"b": {"c": [1]}, "a": 1} == _dict()
