"""The metadata search's rule (plait.checkpoint._match), and every backend answering by it:
the SQL backends write it as conditions in the database, so a law (same answer as the rule
in Python, for any filter) is what holds them to it."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plait.checkpoint._match import check_metadata, leaves, matches
from plait.checkpoint.base import Checkpointer
from plait.checkpoint.sql._search import needles
from plait.testing._harness import ThreadBuilder

KEYS = ["a", "b", 'q"k', ""]
SCALARS: list[Any] = [0, 1, 1.0, 2.5, True, False, None, "x", "1", "", "ü"]


def _value(rng: random.Random, depth: int) -> Any:
    roll = rng.random()
    if depth < 3 and roll < 0.25:
        return {k: _value(rng, depth + 1) for k in rng.sample(KEYS, rng.randint(0, 3))}
    if depth < 3 and roll < 0.4:
        return [_value(rng, depth + 1) for _ in range(rng.randint(0, 2))]
    return rng.choice(SCALARS)


_RNG = random.Random(20260312)
HEADS: dict[str, dict[str, Any]] = {
    f"t{i:02d}": {k: _value(_RNG, 1) for k in _RNG.sample(KEYS, _RNG.randint(1, 4))} for i in range(40)
}
"""The heads' metadata of the store every law runs on: small domains, so filters often match."""


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


values = st.recursive(
    st.sampled_from(SCALARS),
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.sampled_from(KEYS), inner, max_size=2),
    max_leaves=6,
)
filters = st.dictionaries(st.sampled_from(KEYS), values, max_size=3) | st.sampled_from(list(HEADS.values())).map(
    lambda m: {k: m[k] for k in list(m)[:2]}
)


def test_objects_contain_lists_equal_scalars_never_coerce() -> None:
    meta = {"user": "ada", "n": 1, "run": {"attempt": 2, "tags": ["x", "y"]}, "ok": True, "none": None}
    assert matches(meta, {})
    assert matches(meta, {"user": "ada", "run": {"attempt": 2}})
    assert matches(meta, {"n": 1.0}) and not matches(meta, {"n": "1"}) and not matches(meta, {"n": True})
    assert matches(meta, {"ok": True}) and not matches(meta, {"ok": 1})
    assert matches(meta, {"none": None}) and not matches(meta, {"missing": None})
    assert matches(meta, {"run": {}}) and not matches(meta, {"user": {}})
    assert matches(meta, {"run": {"tags": ["x", "y"]}})
    assert not matches(meta, {"run": {"tags": ["x"]}}) and not matches(meta, {"run": {"tags": ["y", "x"]}})


def test_leaves_name_every_condition_and_each_object_on_the_way() -> None:
    got = [(leaf.path, leaf.kind, leaf.value) for leaf in leaves({"a": {"b": [1, None]}, "c": "x"})]
    assert got == [
        (("a",), "object", None),
        (("a", "b"), "array", 2),
        (("a", "b", 0), "number", 1),
        (("a", "b", 1), "null", None),
        (("c",), "string", "x"),
    ]


@pytest.mark.parametrize(
    ("bad", "needle"),
    [
        ("user=ada", "give a JSON object"),
        ({1: "a"}, "the key 1 is not text"),
        ({"a": {1, 2}}, "is not JSON data"),
        ({"a": float("inf")}, "is not a JSON number"),
        ({"a\x00": 1}, "NUL"),
        ({"a": _nested(40)}, "nested deeper"),
    ],
)
def test_a_filter_that_is_not_json_is_refused_saying_why(bad: Any, needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        check_metadata(bad)


async def _fill(cp: Checkpointer) -> None:
    await cp.asetup()
    for tid, meta in HEADS.items():
        th = ThreadBuilder(tid)
        await cp.acommit(checkpoints=[th.step({"n": 0}, root=True, metadata={"a": "older"})])
        await cp.acommit(checkpoints=[th.step({"n": 1}, metadata=meta)])


def test_every_backend_answers_as_the_rule(make_saver: Callable[..., Checkpointer]) -> None:
    cp = make_saver()
    asyncio.run(_fill(cp))
    heads = {tid: {"source": "loop", "step": 1, **meta} for tid, meta in HEADS.items()}

    @settings(max_examples=120, deadline=None)
    @given(filters)
    def law(pattern: dict[str, Any]) -> None:
        expected = sorted(tid for tid, meta in heads.items() if matches(meta, pattern))
        assert sorted(t.thread_id for t in cp.list_threads(metadata=pattern)) == expected, pattern

    law()


def test_only_plain_keys_and_strings_are_searched_for_as_bytes() -> None:
    # text an encoder may escape one way or another (non-ASCII, a slash, a quote) is left to the JSON test
    got = needles(leaves({"user": "ada", "n": 1, "é": "x", "run": {"url": "a/b", "tag": "ünï", 'q"': "y"}}))
    assert got == [b'"user"', b'"ada"', b'"n"', b'"x"', b'"run"', b'"url"', b'"tag"', b'"y"']
