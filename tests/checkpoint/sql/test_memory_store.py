"""The memory store kept in a SQL checkpointer's database (SQLite's file, PostgreSQL's schema)
answers exactly as the in-memory reference (``plait.Store()``) does, for random sequences of
puts, deletes, reads, searches (every filter operator, nested paths, every JSON type, vectors),
listings, sweeps and a moving clock; its writes commit atomically with checkpoints; a store
of the previous schema version migrates forward."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from plait import NOT_GIVEN, Checkpointer, Item, PutOp, SqliteCheckpointer, Store
from plait.checkpoint.model import Fence
from plait.checkpoint.sql._memory import BIG_NAMESPACE
from plait.checkpoint.sql._schema import SCHEMA_VERSION
from plait.errors import ConcurrentUpdateError, ThreadBusyError
from plait.store import MemoryWrite

from .._backend_helpers import Backend, make

START = 1_750_000_000.0


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> float:
        return self.now


_VECTORS = [
    (1.0, 0.0, 0.0, 0.0),
    (0.0, 1.0, 0.0, 0.0),
    (0.0, 0.0, 1.0, 0.0),
    (1.0, 1.0, 0.0, 0.0),
    (1.0, 0.0, 1.0, 1.0),
]


def embed(texts: list[str]) -> list[list[float]]:
    """Deterministic: one of a few vectors per text (scores far apart, ties exact)."""
    return [list(_VECTORS[sum(map(ord, t)) % len(_VECTORS)]) for t in texts]


INDEX = {"dims": 4, "embed": embed, "fields": ["s", "x"]}


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    yield Backend(request.param, tmp_path, request)


@pytest.fixture
def saver(backend: Backend) -> Iterator[Checkpointer]:
    cp = backend.open()
    cp.setup()
    try:
        yield cp
    finally:
        asyncio.run(cp.aclose())


# -- random sequences against the reference ------------------------------------------------------

labels = st.sampled_from(["a", "b", "a-", "a b", "\x01", "é", 'q"', "Z"])
namespaces = st.lists(labels, min_size=1, max_size=3).map(tuple)
keys = st.sampled_from(["k1", "k2", "k3", "K"])
fields = st.sampled_from(["x", "y", "n", "s", 'q"k', "a-b"])
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.sampled_from([0, 1, -1, 2, 10, 2**53 + 1, -(2**40)]),
    st.sampled_from([0.0, -0.0, 1.0, 0.5, 2.5, -1.5, 1e20, 9007199254740992.0]),
    st.sampled_from(["", "a", "b", "A", "é", "a b", "1", "true", "null", 'q"']),
)
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(fields, inner, max_size=3)),
    max_leaves=6,
)
values = st.dictionaries(fields, json_values, max_size=4)
paths = st.sampled_from(["x", "y", "n", "s", "x.y", "x.n", 'q"k', 'x.q"k', "a-b.n", "y.x.y"])
operators = st.sampled_from(["$eq", "$ne", "$gt", "$gte", "$lt", "$lte"])
conditions = st.one_of(
    json_values,  # plain equality (a dict operand without "$" keys: whole-object equality)
    st.dictionaries(operators, json_values, min_size=1, max_size=2),
)
filters = st.one_of(st.none(), st.dictionaries(paths, conditions, max_size=2))
prefixes = st.lists(labels, max_size=2).map(tuple)
refresh = st.sampled_from([None, True, False])

ops = st.one_of(
    st.tuples(
        st.just("put"),
        namespaces,
        keys,
        values,
        st.sampled_from([NOT_GIVEN, None, 1, 0.5, 0.001]),
        st.sampled_from([None, False]),
    ),
    st.tuples(st.just("delete"), namespaces, keys),
    st.tuples(st.just("get"), namespaces, keys, refresh),
    st.tuples(
        st.just("search"),
        prefixes,
        filters,
        st.integers(0, 4),
        st.integers(0, 2),
        st.sampled_from([None, None, "a", "hello", "xyz"]),
        refresh,
    ),
    st.tuples(
        st.just("list"),
        st.one_of(st.none(), st.lists(st.one_of(labels, st.just("*")), max_size=2).map(tuple)),
        st.one_of(st.none(), st.lists(st.one_of(labels, st.just("*")), min_size=1, max_size=2).map(tuple)),
        st.one_of(st.none(), st.integers(1, 3)),
        st.integers(0, 5),
        st.integers(0, 2),
    ),
    st.tuples(st.just("tick"), st.sampled_from([0.0, 0.000001, 0.03, 30.0, 59.9999, 60.0, 3600.0])),
    st.tuples(st.just("sweep")),
)


def _item(item: Item | None) -> Any:
    """An item in JSON terms (1 and 1.0, True and 1 differ), its score to float32 precision
    (SQLite keeps vectors as float32)."""
    if item is None:
        return None
    score = getattr(item, "score", None)
    return (
        item.namespace,
        item.key,
        orjson.dumps(item.value, option=orjson.OPT_SORT_KEYS),
        item.created_at,
        item.updated_at,
        None if score is None else round(score, 5),
    )


def _run(store: Store, op: tuple[Any, ...]) -> Any:
    kind = op[0]
    if kind == "put":
        _, ns, key, value, ttl, index = op
        store.put(ns, key, value, ttl=ttl, index=index)
        return None
    if kind == "delete":
        store.delete(op[1], op[2])
        return None
    if kind == "get":
        return _item(store.get(op[1], op[2], refresh_ttl=op[3]))
    if kind == "search":
        _, prefix, flt, limit, offset, query, refresh_ttl = op
        found = store.search(prefix, filter=flt, limit=limit, offset=offset, query=query, refresh_ttl=refresh_ttl)
        return [_item(i) for i in found]
    if kind == "list":
        _, prefix, suffix, depth, limit, offset = op
        return store.list_namespaces(prefix=prefix, suffix=suffix, max_depth=depth, limit=limit, offset=offset)
    if kind == "sweep":
        return store.sweep()
    raise AssertionError(kind)


def _clear(backend: Backend) -> None:
    backend.sql("DELETE FROM {P}memory_items")
    backend.sql("DELETE FROM {P}memory_vectors")


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sequence=st.lists(ops, min_size=1, max_size=30))
def test_random_sequences_answer_as_the_reference(
    backend: Backend, saver: Checkpointer, sequence: list[tuple[Any, ...]]
) -> None:
    _clear(backend)
    clock = Clock()
    reference = Store(index=INDEX, clock=clock)
    store = Store(saver, index=INDEX, clock=clock)
    for step, op in enumerate(sequence):
        if op[0] == "tick":
            clock.now += op[1]
            continue
        expected = _run(reference, op)
        assert _run(store, op) == expected, (step, op)
    for prefix in [(), ("a",)]:  # and the end state, whole
        got = store.search(prefix, limit=1000, refresh_ttl=False)
        assert [_item(i) for i in got] == [_item(i) for i in reference.search(prefix, limit=1000, refresh_ttl=False)]


@pytest.mark.parametrize(
    ("flt", "wanted"),
    [
        ({"n": 1}, ["int", "float"]),
        ({"n": True}, ["bool"]),
        ({"n": None}, ["null"]),
        ({"n": {"$ne": 1}}, ["bool", "null", "text", "obj", "arr", "none"]),
        ({"n": {"$gt": 0}}, ["int", "float"]),
        ({"n": {"$lt": "b"}}, ["text"]),
        ({"n": {"$gte": True}}, []),
        ({"n": {"a": [1, 2.0]}}, ["obj"]),
        ({"n": [1, {"b": None}]}, ["arr"]),
        ({"n.a": [1.0, 2]}, ["obj"]),
        ({"n.0": 1}, []),  # a path never descends into an array
        ({"n.a.0": 1}, []),
        ({"m": {"$ne": None}}, ["int", "float", "bool", "null", "text", "obj", "arr", "none"]),
    ],
)
def test_filters_give_the_reference_answers(saver: Checkpointer, flt: dict[str, Any], wanted: list[str]) -> None:
    rows: dict[str, dict[str, Any]] = {
        "int": {"n": 1},
        "float": {"n": 1.0},
        "bool": {"n": True},
        "null": {"n": None},
        "text": {"n": "a"},
        "obj": {"n": {"a": [1.0, 2]}},
        "arr": {"n": [1.0, {"b": None}]},
        "none": {},
    }
    reference, store = Store(), Store(saver)
    for s in (reference, store):
        for key, value in rows.items():
            s.put(("t",), key, value)
    assert sorted(i.key for i in reference.search(("t",), filter=flt, limit=100)) == sorted(wanted)
    assert sorted(i.key for i in store.search(("t",), filter=flt, limit=100)) == sorted(wanted)


# -- atomic with checkpoints -------------------------------------------------------------------


def _put(ns: tuple[str, ...], key: str, value: dict[str, Any], at: int = 1_000_000) -> MemoryWrite:
    return MemoryWrite(ns, key, value, at)


def test_memory_writes_commit_with_a_checkpoint_or_not_at_all(saver: Checkpointer) -> None:
    first = make("t", None, {"x": 1})
    saver.commit(checkpoints=[first], fence=Fence(owner="w", expect_head=None), memory=[_put(("m",), "a", {"v": 1})])
    assert saver.get("t") is not None and saver.store.get(("m",), "a") is not None
    late = make("t", None, {"x": 2})
    with pytest.raises(ConcurrentUpdateError):
        saver.commit(
            checkpoints=[late], fence=Fence(owner="w", expect_head="nope"), memory=[_put(("m",), "b", {"v": 2})]
        )
    assert saver.store.get(("m",), "b") is None
    head = saver.get("t")
    assert head is not None and head.id == first.checkpoint.id
    # a live lease refuses a one-off write: its memory writes go nowhere either
    saver.take_lease("t", "runner")
    nxt = make("t", first.checkpoint, {"x": 3})
    with pytest.raises(ThreadBusyError):
        saver.commit(checkpoints=[nxt], fence=Fence(owner="other"), memory=[_put(("m",), "c", {"v": 3})])
    assert saver.store.get(("m",), "c") is None
    # the run's own commit (a fence with its lease) writes both
    lease = saver.take_lease("u", "runner")
    run = make("u", None, {"x": 4})
    saver.commit(
        checkpoints=[run], fence=Fence(owner="runner", token=lease.token), memory=[_put(("m",), "d", {"v": 4})]
    )
    assert saver.get("u") is not None and saver.store.get(("m",), "d") is not None


def test_a_write_applied_twice_gives_the_same_row(saver: Checkpointer) -> None:
    reference = Store()
    w = MemoryWrite(("m",), "k", {"v": 1}, 5_000_000, ttl=1.0, vectors=(("$", (1.0, 0.0)),))
    older = MemoryWrite(("m",), "k", {"v": 0}, 1_000_000, ttl=1.0)
    for backend in (reference.backend, saver):
        asyncio.run(backend.acommit(memory=[older, w]))
        asyncio.run(backend.acommit(memory=[w]))
    got = asyncio.run(saver.aget_memory(("m",), "k", now=5_000_001, refresh=False))
    want = asyncio.run(reference.backend.aget_memory(("m",), "k", now=5_000_001, refresh=False))
    assert got == want and got is not None and got.created_at == 1_000_000


def test_expired_items_are_invisible_before_the_sweep_which_counts_them(saver: Checkpointer) -> None:
    clock = Clock()
    store = Store(saver, clock=clock, ttl={"refresh_on_read": False})
    store.put(("e",), "short", {"v": 1}, ttl=1)
    store.put(("e",), "long", {"v": 2}, ttl=10)
    store.put(("e", "x"), "never", {"v": 3})
    clock.now += 60
    assert store.get(("e",), "short") is None
    assert [i.key for i in store.search(("e",))] == ["long", "never"]  # same time: namespace order
    assert store.list_namespaces() == [("e",), ("e", "x")]
    clock.now += 600
    assert store.list_namespaces() == [("e", "x")]
    assert store.sweep() == 2
    assert store.sweep() == 0
    assert [i.key for i in store.search(())] == ["never"]


def test_a_put_over_an_expired_item_starts_it_afresh(saver: Checkpointer) -> None:
    clock = Clock()
    store = Store(saver, clock=clock)
    store.put(("e",), "k", {"v": 1}, ttl=1)
    clock.now += 30
    store.put(("e",), "k", {"v": 2}, ttl=1)  # live: created_at kept
    item = store.get(("e",), "k")
    assert item is not None and item.created_at.timestamp() == START
    clock.now += 120
    store.put(("e",), "k", {"v": 3}, ttl=1)  # expired: a new item
    item = store.get(("e",), "k")
    assert item is not None and item.created_at.timestamp() == START + 150


# -- migrations ----------------------------------------------------------------------------------


def test_a_store_of_the_version_before_memory_migrates_to_keep_memory(backend: Backend) -> None:
    assert SCHEMA_VERSION >= 10  # the memory store's tables came with version 10
    backend.build(9)
    old = make("t", None, {"x": 1})
    cp = backend.open()  # SQLite migrates on open; PostgreSQL by migrate() (Backend.open)
    try:
        cp.commit(checkpoints=[old])
        cp.store.put(("m",), "k", {"v": 1})
        item = cp.store.get(("m",), "k")
        assert item is not None and item.value == {"v": 1}
        assert backend.sql("SELECT max(version) FROM {P}migrations") == [(SCHEMA_VERSION,)]
    finally:
        asyncio.run(cp.aclose())


def test_sql_checkpointers_keep_a_memory_store(saver: Checkpointer) -> None:
    assert saver.capabilities.memory
    assert saver.store is saver.store


def test_vectors_go_with_their_item(backend: Backend, saver: Checkpointer) -> None:
    clock = Clock()
    store = Store(saver, index=INDEX, clock=clock)
    store.put(("v",), "a", {"s": "hello"}, ttl=1)
    store.put(("v",), "b", {"s": "world"})
    assert len(backend.sql("SELECT key FROM {P}memory_vectors")) == 2
    store.put(("v",), "b", {"s": "again"}, index=False)
    store.delete(("v",), "zzz")
    assert [r[0] for r in backend.sql("SELECT key FROM {P}memory_vectors")] == ["a"]
    clock.now += 61
    assert store.sweep() == 1
    assert backend.sql("SELECT key FROM {P}memory_vectors") == []
    store.put(("v",), "c", {"s": "x"})
    store.delete(("v",), "c")
    assert backend.sql("SELECT key FROM {P}memory_vectors") == []


def _plan(cp: SqliteCheckpointer, prefix: tuple[str, ...]) -> list[str]:
    """SQLite's plan of a filtered search of ``prefix``, newest first."""
    from plait.store.records import MemorySearch
    from plait.store.rules import parse_filter

    memory = cp._core.memory
    plan: list[str] = []
    search = MemorySearch(prefix=prefix, conditions=parse_filter({"c": "x"}), now=0)

    def explain(cur: Any) -> None:
        class Spy:
            @staticmethod
            def execute(sql: str, params: Any = ()) -> Any:
                if sql.startswith("SELECT i.prefix"):
                    plan.extend(r[-1] for r in cur.execute("EXPLAIN QUERY PLAN " + sql, params).fetchall())
                return cur.execute(sql, params)

        memory.search(Spy(), search)  # type: ignore[arg-type]

    asyncio.run(cp._reading(explain))
    return plan


def test_sqlite_search_reads_in_index_order(tmp_path: Path) -> None:
    """A filtered search of a big namespace reads the newest items first and stops at its
    page (no sort of every item); a small namespace's items are found by prefix."""
    with SqliteCheckpointer(tmp_path / "s.db", synchronous="normal") as cp:
        cp.store.batch([PutOp(("big",), f"k{i}", {"c": "x"}) for i in range(BIG_NAMESPACE)])
        cp.store.put(("small",), "k", {"c": "x"})
        big = _plan(cp, ("big",))
        assert any("memory_recent" in p for p in big) and not any("TEMP B-TREE" in p for p in big), big
        small = _plan(cp, ("small",))
        assert any("prefix>? AND prefix<?" in p for p in small), small
        everything = _plan(cp, ())
        assert any("memory_recent" in p for p in everything), everything
