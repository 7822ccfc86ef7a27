"""The node cache's backends and its one way in and out (plait.checkpoint.cache): entries by
namespace and key, expiry by the store's clock, clearing, entries that outlive the
checkpointer (SQLite, PostgreSQL, file), and JSON only, never a pickle."""

from __future__ import annotations

import asyncio
import pickle
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from plait import (
    Cache,
    CacheKeyError,
    CachePolicy,
    CacheUnsupportedError,
    CacheValueError,
    Checkpointer,
    FileCheckpointer,
    MemoryCache,
    MemoryCheckpointer,
    PostgresCheckpointer,
    SqliteCheckpointer,
)
from plait.checkpoint.cache import MISS, NodeCache, cache_key, lookup, store


class Clock:
    """A store clock tests move by hand."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


Maker = Callable[[], tuple[NodeCache, Checkpointer | None]]


@pytest.fixture(
    params=["memory-cache", "memory", "file", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def caches(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, Clock, Maker]]:
    """Caches of one backend sharing one clock: each call opens a new checkpointer on the
    same store (a new connection), as another process would."""
    clock = Clock()
    made: list[Checkpointer] = []
    memory_cp = MemoryCheckpointer(clock=clock)

    def make() -> tuple[NodeCache, Checkpointer | None]:
        kind = request.param
        cp: Checkpointer
        if kind == "memory-cache":
            return MemoryCache(clock=clock), None
        if kind == "memory":
            return Cache(memory_cp), memory_cp
        if kind == "file":
            cp = FileCheckpointer(tmp_path / "threads", clock=clock)
        elif kind == "sqlite":
            cp = SqliteCheckpointer(tmp_path / "plait.db", clock=clock)
        else:
            dsn = request.getfixturevalue("postgres_dsn")
            cp = PostgresCheckpointer(dsn, schema=request.getfixturevalue("postgres_schema"), clock=clock)
        made.append(cp)
        cp.setup()  # (PostgreSQL: plait db migrate)
        return cp.cache, cp

    yield request.param, clock, make
    for cp in made:
        asyncio.run(cp.aclose())


def test_an_entry_is_read_back_until_cleared(caches: tuple[str, Clock, Maker]) -> None:
    _, _, make = caches
    cache, _ = make()
    assert cache.get("node:a", "k1") is None
    cache.set("node:a", "k1", '{"x": 1}', None)
    cache.set("node:a", "k2", '{"x": 2}', None)
    cache.set("node:b", "k1", '{"x": 3}', None)
    assert cache.get("node:a", "k1") == '{"x": 1}'
    cache.set("node:a", "k1", '{"x": 9}', None)  # a new result replaces the old one
    assert cache.get("node:a", "k1") == '{"x": 9}'
    assert cache.clear(["node:a"]) == 2
    assert cache.get("node:a", "k1") is None and cache.get("node:a", "k2") is None
    assert cache.get("node:b", "k1") == '{"x": 3}', "clearing one namespace leaves the others"
    assert cache.clear() == 1
    assert cache.get("node:b", "k1") is None
    assert cache.clear() == 0 and cache.sweep() == 0


def test_an_entry_expires_by_the_stores_clock(caches: tuple[str, Clock, Maker]) -> None:
    _, clock, make = caches
    cache, _ = make()
    cache.set("ns", "short", '"s"', 10)
    cache.set("ns", "long", '"l"', 100)
    cache.set("ns", "ever", '"e"', None)
    clock.now += 9.5
    assert cache.get("ns", "short") == '"s"'
    clock.now += 1
    assert cache.get("ns", "short") is None, "expired after its ttl"
    assert cache.get("ns", "long") == '"l"'
    clock.now += 100
    assert cache.sweep() >= 1  # the long one (the short one may be gone on read already)
    assert cache.get("ns", "long") is None
    assert cache.get("ns", "ever") == '"e"', "no ttl: never expires"
    cache.set("ns", "short", '"again"', 10)  # an expired key is stored again
    assert cache.get("ns", "short") == '"again"'


def test_entries_outlive_the_checkpointer_that_wrote_them(caches: tuple[str, Clock, Maker]) -> None:
    kind, _, make = caches
    if kind.startswith("memory"):
        pytest.skip("the memory caches live as long as their process")
    first, _ = make()
    first.set("node:a", "k", '{"kept": true}', None)
    second, cp = make()  # a new checkpointer: a new connection to the same store
    assert second is not first
    assert second.get("node:a", "k") == '{"kept": true}'
    second.clear(["node:a"])
    assert first.get("node:a", "k") is None


def test_the_checkpointers_cache_is_one_cache(caches: tuple[str, Clock, Maker]) -> None:
    kind, _, make = caches
    cache, cp = make()
    if cp is None:
        pytest.skip("a MemoryCache belongs to no checkpointer")
    assert Cache(cp) == cp.cache and hash(Cache(cp)) == hash(cp.cache)
    cp.cache.set("n", "k", "1", None)
    assert Cache(cp).get("n", "k") == "1"
    assert kind in repr(cp.cache).lower() or "cache" in repr(cp.cache).lower()


def test_a_sql_cache_is_a_table_of_its_own_made_on_first_use(tmp_path: Path) -> None:
    cp = SqliteCheckpointer(tmp_path / "plait.db")
    try:
        cp.setup()
        assert cp.cache.get("n", "k") is None  # reading makes nothing

        def tables() -> set[str]:
            with closing(sqlite3.connect(tmp_path / "plait.db")) as conn:
                return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}

        assert "plait_node_cache" not in tables()
        version = _store_version(tmp_path / "plait.db")
        cp.cache.set("n", "k", "1", None)
        assert {"plait_node_cache", "plait_cache_migrations"} <= tables()
        assert _store_version(tmp_path / "plait.db") == version, "the checkpoint store's version is not bumped"
    finally:
        cp.close()


def _store_version(path: Path) -> int:
    with closing(sqlite3.connect(path)) as conn:
        return int(conn.execute("SELECT max(version) FROM plait_migrations").fetchone()[0])


def test_an_entry_that_is_not_json_is_a_miss_and_never_unpickled(tmp_path: Path) -> None:
    """LangGraph's cache unpickled what it read (CVE-2026-27794): an entry planted in the
    table is decoded as JSON or ignored, never run."""
    cp = SqliteCheckpointer(tmp_path / "plait.db")
    try:
        cp.cache.set("n", "k", "1", None)  # makes the table
        ran: list[str] = []

        class Boom:
            def __reduce__(self) -> Any:
                return (ran.append, ("pwned",))

        with closing(sqlite3.connect(tmp_path / "plait.db")) as conn:
            conn.execute("UPDATE plait_node_cache SET value = ? WHERE ns = 'n'", (pickle.dumps(Boom()),))
            conn.commit()
        assert asyncio.run(lookup(cp.cache, "n", "k")) is MISS
        assert ran == []
    finally:
        cp.close()


def test_lookup_and_store_keep_json_data() -> None:
    cache = MemoryCache()
    policy = CachePolicy(ttl=5)

    async def go() -> Any:
        assert await lookup(cache, "task:t", "k") is MISS
        await store(cache, policy, "task:t", "k", {"a": [1, 2.5, None, True, "x"]}, "task 't'")
        return await lookup(cache, "task:t", "k")

    assert asyncio.run(go()) == {"a": [1, 2.5, None, True, "x"]}


def test_a_result_that_is_not_json_is_refused_and_nothing_is_stored() -> None:
    import datetime

    cache = MemoryCache()
    value = {"when": datetime.datetime(2026, 1, 1)}
    with pytest.raises(CacheValueError, match=r"task 't'.*result\.when: datetime is not JSON data") as err:
        asyncio.run(store(cache, CachePolicy(), "task:t", "k", value, "task 't'"))
    assert "never pickled" not in str(err.value) or True
    assert cache.get("task:t", "k") is None


def test_the_default_key_is_the_inputs_canonical_json() -> None:
    policy = CachePolicy()
    a = cache_key(policy, {"b": [1, 2], "a": "x"}, "node 'n'")
    assert a == cache_key(policy, {"a": "x", "b": (1, 2)}, "node 'n'"), "key order and tuples do not matter"
    assert a != cache_key(policy, {"a": "y", "b": [1, 2]}, "node 'n'")
    assert len(a) == 32 and int(a, 16) >= 0


def test_a_key_func_names_what_the_result_depends_on() -> None:
    policy = CachePolicy(key_func=lambda s: s["user"])
    assert cache_key(policy, {"user": "u1", "noise": 1}, "n") == cache_key(policy, {"user": "u1", "noise": 2}, "n")
    as_bytes = CachePolicy(key_func=lambda s: s["user"].encode())
    assert cache_key(as_bytes, {"user": "u1"}, "n") == cache_key(policy, {"user": "u1"}, "n")


def test_a_tasks_key_is_made_from_its_call() -> None:
    """For the functional API's tasks: ``(args, kwargs)``, spread into ``key_func``."""
    default = CachePolicy()
    call = ((1, "a"), {"k": [2]})
    assert cache_key(default, call, "task 't'", spread=True) == cache_key(default, [[1, "a"], {"k": [2]}], "t")
    by_first = CachePolicy(key_func=lambda x, *rest, **kw: str(x))
    assert cache_key(by_first, ((1, "a"), {}), "t", spread=True) == cache_key(
        by_first, ((1, "b"), {"k": 3}), "t", spread=True
    )


def test_a_key_that_cannot_be_made_says_what_to_do() -> None:
    with pytest.raises(CacheKeyError, match=r"node 'n'.*not JSON data.*key_func"):
        cache_key(CachePolicy(), {"f": object()}, "node 'n'")
    with pytest.raises(CacheKeyError, match=r"returned int, not str or bytes"):
        cache_key(CachePolicy(key_func=lambda s: 42), {}, "node 'n'")  # type: ignore[arg-type,return-value]
    with pytest.raises(CacheKeyError, match=r"key_func raised KeyError"):
        cache_key(CachePolicy(key_func=lambda s: s["missing"]), {}, "node 'n'")


def test_a_policy_is_checked_when_made() -> None:
    with pytest.raises(ValueError, match="ttl"):
        CachePolicy(ttl=0)
    with pytest.raises(TypeError, match="key_func"):
        CachePolicy(key_func="user")  # type: ignore[arg-type]


def test_a_backend_that_keeps_no_cache_says_so() -> None:
    class Elsewhere(MemoryCheckpointer):
        def open_cache(self) -> NodeCache:
            return Checkpointer.open_cache(self)

    with pytest.raises(CacheUnsupportedError, match="keeps no node cache"):
        Cache(Elsewhere())
