"""LangGraph's own memory-store test cases, ported to :class:`plait.Store`.

Ported from https://github.com/langchain-ai/langgraph (MIT; the cases, rewritten for plait's
API, not copied):

- ``libs/checkpoint/tests/test_store.py`` (InMemoryStore: list_namespaces, empty namespace,
  vector search, embedding paths, non-ASCII text)
- ``libs/checkpoint-postgres/tests/test_store.py`` and ``test_async_store.py`` (batches,
  basic operations, search, namespace boundaries, vectors, scores, TTL, expired rows)
- ``libs/checkpoint-sqlite/tests/test_store.py`` and ``test_async_store.py`` (the same, plus
  filter safety, metacharacters in labels, case sensitivity)

Every case runs on every backend (``Store()``, and the memory, SQLite and PostgreSQL
checkpointers' stores). Where plait's specification differs from LangGraph, the test follows
plait and says so in a comment ("LangGraph: ..."). TTL is driven by a fake ``clock`` instead
of sleeping; vectors come from a deterministic character-count embedding.

Left out, with the reason:

- tests of LangGraph internals: ``get_text_at_path``, the SQL/regex pattern helpers
  (``_escape_like_literal``, ``_namespace_match_pattern``, ``_escape_glob_literal``, the
  prefix-uses-GLOB planner test), migration lists (``test_nonnull_migrations``), the pool
  checkout count, and ``AsyncBatchedBaseStore`` (its background task, cancellation,
  deduplication of concurrent calls): plait has none of these;
- ``test_vector_store_initialization``: plait exposes no ``index_config`` attribute;
- the vector-type/distance parametrizations (pgvector ``vector``/``halfvec``/``bit``, l2,
  inner product): plait ranks by cosine similarity only;
- ``test_no_running_loop``: LangGraph's async stores refuse sync calls on the loop; plait's
  sync calls run on a helper thread there, so the case became "sync calls work from a
  running loop and from threads";
- ``omit_expired=False`` (LangGraph keeps returning expired, unswept rows): plait always
  hides an expired item at once;
- LangGraph's reserved ``("langgraph", ...)`` namespace root: plait reserves none;
- in ``test_async_batched_vector_search_concurrent``, the concurrent put/delete/put of the
  same keys: without LangGraph's batching, concurrent calls have no defined order; the port
  writes concurrently, then searches concurrently.
"""

from __future__ import annotations

import asyncio
import json
import math
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol, cast

import pytest

from plait import (
    Checkpointer,
    GetOp,
    Item,
    ListNamespacesOp,
    MatchCondition,
    MemoryCheckpointer,
    PostgresCheckpointer,
    PutOp,
    SearchItem,
    SearchOp,
    SqliteCheckpointer,
    Store,
)
from plait.errors import InvalidMemoryError, InvalidNamespaceError, MemoryFilterError, MemoryStoreError

# ---------------------------------------------------------------------------------------------
# Fixtures and helpers
# ---------------------------------------------------------------------------------------------

START = 1_750_000_000.0
"""The fake clock's first reading (unix seconds, mid 2025)."""


class FakeClock:
    """A clock the test moves by hand."""

    def __init__(self, start: float = START) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class MakeStore(Protocol):
    def __call__(
        self,
        *,
        index: Mapping[str, Any] | None = None,
        ttl: Mapping[str, Any] | None = None,
        clock: Callable[[], float] | None = None,
    ) -> Store: ...


@pytest.fixture(params=["store", "memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MakeStore]:
    """Stores with options (index, ttl, clock) on one backend: ``Store(...)`` over nothing, or
    ``Store(checkpointer, ...)``. Each call opens a new checkpointer (a new SQLite file; on
    PostgreSQL the test's one schema, so tests that make two stores use distinct namespaces)."""
    stores: list[Store] = []
    savers: list[Checkpointer] = []

    def make(
        *,
        index: Mapping[str, Any] | None = None,
        ttl: Mapping[str, Any] | None = None,
        clock: Callable[[], float] | None = None,
    ) -> Store:
        options: dict[str, Any] = {}
        if index is not None:
            options["index"] = index
        if ttl is not None:
            options["ttl"] = ttl
        if clock is not None:
            options["clock"] = clock
        if request.param == "store":
            made = Store(**options)
        else:
            cp: Checkpointer
            if request.param == "memory":
                cp = MemoryCheckpointer()
            elif request.param == "sqlite":
                cp = SqliteCheckpointer(tmp_path / f"s{len(savers)}.db")
            else:
                pg = PostgresCheckpointer(
                    request.getfixturevalue("postgres_dsn"), schema=request.getfixturevalue("postgres_schema")
                )
                pg.migrate()
                cp = pg
            savers.append(cp)
            made = Store(cp, **options)
        stores.append(made)
        return made

    yield make
    for made in stores:
        made.close()
    for cp in savers:
        asyncio.run(cp.aclose())


DIMS = 128


def embed_text(text: str) -> list[float]:
    """A unit vector of character counts: bucket ``1 + ord(c) % 127`` (every ASCII character
    has its own), plus a constant first component so that no text (not even "") gives the
    zero vector. Identical texts score 1.0; texts sharing no character score low."""
    vector = [0.0] * DIMS
    vector[0] = 1.0
    for char in text:
        vector[1 + ord(char) % (DIMS - 1)] += 1.0
    norm = math.sqrt(sum(x * x for x in vector))
    return [x / norm for x in vector]


def fake_embed(texts: list[str]) -> list[list[float]]:
    return [embed_text(text) for text in texts]


async def afake_embed(texts: list[str]) -> list[list[float]]:
    await asyncio.sleep(0)
    return fake_embed(texts)


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def index_config(fields: list[str] | None = None, embed: Any = fake_embed) -> dict[str, Any]:
    config: dict[str, Any] = {"dims": DIMS, "embed": embed}
    if fields is not None:
        config["fields"] = fields
    return config


def keys(items: Sequence[Item]) -> list[str]:
    return [item.key for item in items]


def namespaces_of(items: Sequence[Item]) -> set[tuple[str, ...]]:
    return {item.namespace for item in items}


def score(item: SearchItem) -> float:
    assert item.score is not None, item
    return item.score


# ---------------------------------------------------------------------------------------------
# put / get / delete
# ---------------------------------------------------------------------------------------------


def test_basic_store_ops(store: Store) -> None:
    # test_basic_store_ops (postgres, sqlite)
    namespace = ("test", "documents")
    value = {"title": "Test Document", "content": "Hello, World!"}
    store.put(namespace, "doc1", value)
    item = store.get(namespace, "doc1")
    assert item is not None
    assert item.namespace == namespace
    assert item.key == "doc1"
    assert item.value == value

    updated = {"title": "Updated Document", "content": "Hello, Updated!"}
    store.put(namespace, "doc1", updated)
    again = store.get(namespace, "doc1")
    assert again is not None
    assert again.value == updated
    assert again.updated_at >= item.updated_at  # a real clock: may tie at microseconds
    assert again.created_at == item.created_at

    assert store.get(("test", "other_documents"), "doc1") is None

    store.delete(namespace, "doc1")
    assert store.get(namespace, "doc1") is None
    store.delete(namespace, "doc1")  # deleting what is gone is fine
    store.delete(("never", "written"), "nothing")


def test_overwrite_keeps_created_at(make_store: MakeStore) -> None:
    # LangGraph's postgres test_basic_store_ops checks updated_at grows; with a fake clock the
    # times are exact here.
    clock = FakeClock()
    store = make_store(clock=clock)
    store.put(("t",), "k", {"v": 1})
    first = store.get(("t",), "k")
    assert first is not None
    assert first.created_at == first.updated_at == datetime.fromtimestamp(START, UTC)
    assert first.created_at.utcoffset() == timedelta(0)

    clock.advance(2.5)
    store.put(("t",), "k", {"v": 2})
    second = store.get(("t",), "k")
    assert second is not None
    assert second.value == {"v": 2}
    assert second.created_at == first.created_at
    assert second.updated_at == datetime.fromtimestamp(START + 2.5, UTC)
    assert second.updated_at > first.updated_at

    # delete, then put again: a new item, created now
    clock.advance(1)
    store.delete(("t",), "k")
    store.put(("t",), "k", {"v": 3})
    third = store.get(("t",), "k")
    assert third is not None
    assert third.created_at == third.updated_at == datetime.fromtimestamp(START + 3.5, UTC)

    # Item.dict(): JSON-ready; equality by every field
    assert third.dict() == {
        "namespace": ["t"],
        "key": "k",
        "value": {"v": 3},
        "created_at": third.created_at.isoformat(),
        "updated_at": third.updated_at.isoformat(),
    }
    json.dumps(third.dict())
    assert store.get(("t",), "k") == third
    assert store.get(("t",), "k") != second


def test_basic_store_operations(store: Store) -> None:
    # test_basic_store_operations (sqlite): a fresh uid prefix starts empty, fills, empties
    uid = uuid.uuid4().hex
    namespace = (uid, "test", "documents")
    assert store.search((uid,)) == []

    store.put(namespace, "doc1", {"title": "Test Document", "content": "Hello, World!"})
    item = store.get(namespace, "doc1")
    assert item is not None
    assert item.value == {"title": "Test Document", "content": "Hello, World!"}
    assert item.created_at is not None and item.updated_at is not None

    store.put(namespace, "doc1", {"title": "Updated Test Document", "content": "Hello, plait!"})
    updated = store.get(namespace, "doc1")
    assert updated is not None
    assert updated.value == {"title": "Updated Test Document", "content": "Hello, plait!"}
    assert updated.updated_at >= item.updated_at
    assert store.get((uid, "test", "other_documents"), "doc1") is None

    store.put(namespace, "doc2", {"title": "Another Document", "content": "Greetings!"})
    found = store.search((uid, "test"), limit=10)
    assert sorted(keys(found)) == ["doc1", "doc2"]
    assert (uid, "test", "documents") in store.list_namespaces(prefix=(uid, "test"))

    store.delete(namespace, "doc1")
    store.delete(namespace, "doc2")
    assert store.get(namespace, "doc1") is None
    assert store.get(namespace, "doc2") is None
    assert store.search((uid, "test"), limit=10) == []
    assert store.list_namespaces(prefix=(uid,)) == []


def test_async_basic_store_ops(store: Store) -> None:
    # test_basic_store_ops (sqlite async)
    async def main() -> None:
        namespace = ("test", "documents")
        await store.aput(namespace, "doc1", {"title": "Test Document"})
        item = await store.aget(namespace, "doc1")
        assert item is not None
        assert item.namespace == namespace and item.value == {"title": "Test Document"}

        await store.aput(namespace, "doc1", {"title": "Updated"})
        again = await store.aget(namespace, "doc1")
        assert again is not None and again.value == {"title": "Updated"}
        assert again.created_at == item.created_at

        assert await store.aget(("test", "other"), "doc1") is None
        assert keys(await store.asearch(("test",))) == ["doc1"]
        assert await store.alist_namespaces(prefix=("test",)) == [namespace]

        await store.adelete(namespace, "doc1")
        assert await store.aget(namespace, "doc1") is None
        assert await store.asearch(("test",)) == []
        assert await store.alist_namespaces() == []

    asyncio.run(main())


def test_lists_are_taken_as_namespaces(store: Store) -> None:
    # LangGraph's tests pass lists (search(["test"]), list_namespaces(prefix=["test"]))
    store.put(["users", "u1"], "k", {"v": 1})
    item = store.get(["users", "u1"], "k")
    assert item is not None
    assert item.namespace == ("users", "u1")
    assert type(item.namespace) is tuple
    assert [i.namespace for i in store.search(["users"])] == [("users", "u1")]
    assert store.list_namespaces(prefix=["users"]) == [("users", "u1")]
    store.delete(["users", "u1"], "k")
    assert store.get(("users", "u1"), "k") is None


def test_non_ascii_round_trip(store: Store) -> None:
    # test_non_ascii's texts, without vectors: values, keys and labels keep their characters
    texts = {"1": "这是中文", "2": "これは日本語です", "3": "이건 한국어야", "4": "Это русский", "5": "यह रूसी है"}
    for key, text in texts.items():
        store.put(("user_123", "памяти"), key, {"text": text, "emoji": "🦜"})
    store.put(("user_123", "памяти"), "ключ", {"text": "ключ"})
    for key, text in texts.items():
        item = store.get(("user_123", "памяти"), key)
        assert item is not None and item.value == {"text": text, "emoji": "🦜"}
    got = store.get(("user_123", "памяти"), "ключ")
    assert got is not None and got.value == {"text": "ключ"}
    assert [i.key for i in store.search(("user_123",), filter={"text": "이건 한국어야"})] == ["3"]
    assert store.list_namespaces(suffix=("памяти",)) == [("user_123", "памяти")]


# ---------------------------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------------------------

BAD_NAMESPACES: list[Any] = [(), ("the", "thing.about"), ("some", "fun", ""), ("nul", "a\x00b"), ("a", 1), "a.b"]


@pytest.mark.parametrize("namespace", BAD_NAMESPACES, ids=["empty", "dot", "empty-label", "nul", "int", "str"])
def test_cannot_put_invalid_namespace(store: Store, namespace: Any) -> None:
    # test_cannot_put_empty_namespace (checkpoint), plus NUL and non-text labels (plait's spec)
    doc = {"foo": "bar"}
    with pytest.raises(InvalidNamespaceError):
        store.put(namespace, "foo", doc)
    with pytest.raises(InvalidNamespaceError):
        asyncio.run(store.aput(namespace, "foo", doc))
    with pytest.raises(InvalidNamespaceError):
        store.batch([PutOp(namespace, "foo", doc)])
    with pytest.raises(InvalidNamespaceError):
        store.get(namespace, "foo")
    with pytest.raises(InvalidNamespaceError):
        store.delete(namespace, "foo")
    assert issubclass(InvalidNamespaceError, ValueError)
    assert issubclass(InvalidNamespaceError, MemoryStoreError)
    assert store.list_namespaces() == []


def test_valid_namespaces_round_trip(store: Store) -> None:
    # The valid half of test_cannot_put_empty_namespace. LangGraph refuses a namespace whose
    # first label is "langgraph" (reserved); plait reserves none, so it is stored like any.
    doc = {"foo": "bar"}
    for namespace in [("foo", "langgraph", "foo"), ("langgraph", "foo")]:
        store.put(namespace, "bar", doc)
        got = store.get(namespace, "bar")
        assert got is not None and got.value == doc
        assert store.search(namespace)[0].value == doc
        store.delete(namespace, "bar")
        assert store.get(namespace, "bar") is None

    async def main() -> None:
        await store.abatch([PutOp(("valid", "namespace"), "key", doc)])
        got = await store.aget(("valid", "namespace"), "key")
        assert got is not None and got.value == doc
        assert (await store.asearch(("valid", "namespace")))[0].value == doc
        await store.adelete(("valid", "namespace"), "key")
        assert await store.aget(("valid", "namespace"), "key") is None

    asyncio.run(main())
    # search's prefix may be empty: everything
    assert store.search(()) == []


@pytest.mark.parametrize(
    "value", ["text", [1, 2], 3, {1: "a"}, {"a": object()}], ids=["str", "list", "int", "int-key", "object"]
)
def test_put_refuses_what_is_not_a_json_object(store: Store, value: Any) -> None:
    # plait's spec (LangGraph types the value but checks little): a value is a JSON object.
    with pytest.raises(InvalidMemoryError):
        store.put(("t",), "k", value)
    assert issubclass(InvalidMemoryError, ValueError)
    assert store.get(("t",), "k") is None


# ---------------------------------------------------------------------------------------------
# search: prefix, paging, order
# ---------------------------------------------------------------------------------------------


def test_search(store: Store) -> None:
    # test_search (postgres, sqlite)
    data = [
        (("test", "docs"), "doc1", {"title": "First Doc", "author": "Alice", "tags": ["important"]}),
        (("test", "docs"), "doc2", {"title": "Second Doc", "author": "Bob", "tags": ["draft"]}),
        (("test", "images"), "img1", {"title": "Image 1", "author": "Alice", "tags": ["final"]}),
    ]
    for namespace, key, value in data:
        store.put(namespace, key, value)

    assert len(store.search(("test",))) == 3
    docs = store.search(("test", "docs"))
    assert sorted(keys(docs)) == ["doc1", "doc2"]
    assert all(item.namespace == ("test", "docs") for item in docs)
    alice = store.search(("test",), filter={"author": "Alice"})
    assert sorted(keys(alice)) == ["doc1", "img1"]
    assert all(item.value["author"] == "Alice" for item in alice)
    assert len(store.search(("test",), limit=2)) == 2
    assert len(store.search(("test",), offset=2)) == 1
    assert store.search(("test",), offset=3) == []
    assert all(item.score is None for item in store.search(("test",)))

    for namespace, key, _ in data:
        store.delete(namespace, key)
    assert store.search(("test",)) == []


def test_search_items(store: Store) -> None:
    # test_search_items (sqlite, sync and async)
    base = "test_search_items"
    data = [
        ((base, "documents", "user1"), {"title": "Doc 1", "author": "John Doe", "tags": ["important"]}),
        ((base, "documents", "user2"), {"title": "Doc 2", "author": "Jane Smith", "tags": ["draft"]}),
        ((base, "reports", "department1"), {"title": "Report A", "author": "John Doe", "tags": ["final"]}),
        ((base, "reports", "department2"), {"title": "Report B", "author": "Alice Johnson", "tags": ["draft"]}),
    ]
    for namespace, value in data:
        store.put(namespace, f"item_{namespace[-1]}", value)

    docs = store.search((base, "documents"))
    assert len(docs) == 2 and all(item.namespace[1] == "documents" for item in docs)
    reports = store.search((base, "reports"))
    assert len(reports) == 2 and all(item.namespace[1] == "reports" for item in reports)

    first = store.search((base,), limit=2, offset=0)
    second = store.search((base,), limit=2, offset=2)
    assert len(first) == 2 and len(second) == 2
    assert set(keys(first)).isdisjoint(keys(second))
    assert len(store.search((base,))) == 4

    john = store.search((base,), filter={"author": "John Doe"})
    assert len(john) == 2 and all(item.value["author"] == "John Doe" for item in john)
    # a list compares whole
    drafts = store.search((base,), filter={"tags": ["draft"]})
    assert sorted(keys(drafts)) == ["item_department2", "item_user2"]

    async def main() -> None:
        assert len(await store.asearch((base, "documents"))) == 2
        assert len(await store.asearch((base,), filter={"author": "John Doe"})) == 2
        page = await store.asearch((base,), limit=3, offset=1)
        assert len(page) == 3

    asyncio.run(main())


def test_search_namespace_segment_boundary(store: Store) -> None:
    # test_search_namespace_segment_boundary (postgres, sqlite)
    for namespace in [("foo",), ("foo", "child"), ("foo", "child", "deep"), ("foobar",), ("foobar", "baz"), ("foo2",)]:
        store.put(namespace, "k", {"v": 1})

    def found(prefix: tuple[str, ...]) -> set[tuple[str, ...]]:
        return namespaces_of(store.search(prefix, limit=100))

    assert found(("foo",)) == {("foo",), ("foo", "child"), ("foo", "child", "deep")}
    assert found(("foobar",)) == {("foobar",), ("foobar", "baz")}
    assert found(("foo", "child")) == {("foo", "child"), ("foo", "child", "deep")}
    assert found(("foo2",)) == {("foo2",)}
    assert found(("fo",)) == set()


def test_search_empty_prefix_is_unconstrained(store: Store) -> None:
    # test_search_empty_prefix_is_unconstrained (postgres, sqlite)
    for namespace in [("a",), ("b", "c"), ("d", "e", "f")]:
        store.put(namespace, "k", {"v": 1})
    assert namespaces_of(store.search((), limit=100)) == {("a",), ("b", "c"), ("d", "e", "f")}


def test_search_namespace_metacharacters_are_literal(store: Store) -> None:
    # test_search_namespace_like_metacharacters (postgres) and
    # test_search_namespace_wildcard_chars_are_literal (sqlite)
    for namespace in [("user_1",), ("user_1", "child"), ("userX1",), ("a%b",), ("axxb",), ("star*",), ("starX",)]:
        store.put(namespace, "k", {"v": 1})

    def found(prefix: tuple[str, ...]) -> set[tuple[str, ...]]:
        return namespaces_of(store.search(prefix, limit=100))

    assert found(("user_1",)) == {("user_1",), ("user_1", "child")}
    assert found(("a%b",)) == {("a%b",)}
    assert found(("star*",)) == {("star*",)}


def test_search_namespace_is_case_sensitive(store: Store) -> None:
    # test_search_namespace_is_case_sensitive (sqlite)
    store.put(("Foo",), "k", {"v": "upper"})
    store.put(("foo",), "k", {"v": "lower"})
    assert namespaces_of(store.search(("foo",), limit=100)) == {("foo",)}
    assert namespaces_of(store.search(("Foo",), limit=100)) == {("Foo",)}
    assert store.search(("FOO",)) == []


def test_search_order_newest_first(make_store: MakeStore) -> None:
    # plait's spec: without a query, newest updated_at first, ties by namespace then key.
    # (LangGraph's InMemoryStore returns insertion order, its SQL stores newest first; its
    # tests assert no order.) Also the paging of LangGraph's omit_expired_search_pagination.
    clock = FakeClock()
    store = make_store(clock=clock)
    for key in ["c", "a", "b"]:  # one instant: order by namespace, then key
        store.put(("o", "y"), key, {"k": key})
        store.put(("o", "x"), key, {"k": key})
    assert [(i.namespace[1], i.key) for i in store.search(("o",), limit=100)] == [
        ("x", "a"),
        ("x", "b"),
        ("x", "c"),
        ("y", "a"),
        ("y", "b"),
        ("y", "c"),
    ]
    clock.advance(1)
    store.put(("o", "y"), "b", {"k": "b2"})  # an overwrite moves to the front
    clock.advance(1)
    store.put(("o", "z"), "new", {"k": "new"})
    assert [(i.namespace[1], i.key) for i in store.search(("o",), limit=3)] == [("z", "new"), ("y", "b"), ("x", "a")]
    assert [(i.namespace[1], i.key) for i in store.search(("o",), limit=3, offset=3)] == [
        ("x", "b"),
        ("x", "c"),
        ("y", "a"),
    ]
    assert [(i.namespace[1], i.key) for i in store.search(("o",), limit=3, offset=6)] == [("y", "c")]
    assert store.search(("o",), offset=7) == []


def test_search_empty_store(store: Store) -> None:
    assert store.search(()) == []
    assert store.search(("nothing",), filter={"a": 1}) == []
    assert store.list_namespaces() == []
    assert store.batch([]) == []


# ---------------------------------------------------------------------------------------------
# search filters
# ---------------------------------------------------------------------------------------------


def _scores_store(store: Store) -> None:
    docs = [
        ("doc1", {"text": "red apple", "color": "red", "score": 4.5, "name": "apple"}),
        ("doc2", {"text": "red car", "color": "red", "score": 3.0, "name": "car"}),
        ("doc3", {"text": "green apple", "color": "green", "score": 4.0, "name": "Apple"}),
        ("doc4", {"text": "blue car", "color": "blue", "score": 3.5, "name": "bus"}),
    ]
    for key, value in docs:
        store.put(("test",), key, value)


@pytest.mark.parametrize(
    ("flt", "expected"),
    [
        ({"color": "red"}, ["doc1", "doc2"]),
        ({"color": {"$eq": "red"}}, ["doc1", "doc2"]),
        ({"color": {"$ne": "red"}}, ["doc3", "doc4"]),
        ({"score": {"$gt": 3.5}}, ["doc1", "doc3"]),
        ({"score": {"$gte": 3.5}}, ["doc1", "doc3", "doc4"]),
        ({"score": {"$lt": 3.5}}, ["doc2"]),
        ({"score": {"$lte": 3.5}}, ["doc2", "doc4"]),
        ({"score": {"$gt": 3.2}}, ["doc1", "doc3", "doc4"]),
        ({"score": {"$gt": 3, "$lt": 4.5}}, ["doc3", "doc4"]),  # several operators AND
        ({"score": {"$gte": 4.0}, "color": "green"}, ["doc3"]),  # several keys AND
        ({"color": "red", "score": 4.5}, ["doc1"]),
        ({"color": "purple"}, []),
        ({"name": {"$gt": "B"}}, ["doc1", "doc2", "doc4"]),  # code-point order: "Apple" < "B"
        ({"name": {"$lt": "apple"}}, ["doc3"]),
        ({"name": {"$gte": "bus"}}, ["doc2", "doc4"]),
        ({}, ["doc1", "doc2", "doc3", "doc4"]),
    ],
    ids=repr,
)
def test_filter_operators(store: Store, flt: dict[str, Any], expected: list[str]) -> None:
    # the filters of test_vector_search_with_filters and test_async_batched_vector_search_concurrent
    _scores_store(store)
    assert sorted(keys(store.search(("test",), filter=flt))) == expected
    assert sorted(keys(store.batch([SearchOp(("test",), filter=flt)])[0])) == expected


def test_filter_nested_dotted_keys(store: Store) -> None:
    # plait's spec: dotted keys reach into nested objects (LangGraph's SQL stores do too:
    # test_filter_keys_with_hyphens_and_digits uses "user.access-level")
    store.put(("p",), "ann", {"profile": {"city": "Oslo", "age": 31, "address": {"zip": "0150"}}})
    store.put(("p",), "bob", {"profile": {"city": "Bergen", "age": 45, "address": {"zip": "5003"}}})
    store.put(("p",), "cat", {"profile": "none"})
    assert keys(store.search(("p",), filter={"profile.city": "Oslo"})) == ["ann"]
    assert keys(store.search(("p",), filter={"profile.age": {"$gt": 40}})) == ["bob"]
    assert keys(store.search(("p",), filter={"profile.address.zip": {"$lt": "1000"}})) == ["ann"]
    assert sorted(keys(store.search(("p",), filter={"profile.city": {"$ne": "Oslo"}}))) == ["bob", "cat"]
    assert store.search(("p",), filter={"profile.city.name": "Oslo"}) == []


def test_filter_keys_with_hyphens_and_digits(store: Store) -> None:
    # test_filter_keys_with_hyphens_and_digits (sqlite)
    store.put(("docs",), "hyphen", {"access-level": "public", "user": {"access-level": "nested"}})
    store.put(("docs",), "digit", {"123abc": "ok", "user": {"123abc": "ok2"}})
    store.put(("docs",), "odd", {'it\'s "quoted" $[0]': "x", "0": "zero"})
    assert keys(store.search(("docs",), filter={"access-level": "public"})) == ["hyphen"]
    assert keys(store.search(("docs",), filter={"user.access-level": "nested"})) == ["hyphen"]
    assert keys(store.search(("docs",), filter={"123abc": "ok"})) == ["digit"]
    assert keys(store.search(("docs",), filter={"user.123abc": "ok2"})) == ["digit"]
    assert keys(store.search(("docs",), filter={'it\'s "quoted" $[0]': "x"})) == ["odd"]
    assert keys(store.search(("docs",), filter={"0": "zero"})) == ["odd"]


def test_filter_missing_key(store: Store) -> None:
    # plait's spec: a missing key matches only $ne. (LangGraph's InMemoryStore raises on $gt
    # against a missing key; its SQLite store leaves the item out of $ne.)
    store.put(("f",), "a", {"n": 1})
    store.put(("f",), "b", {"m": 1})
    store.put(("f",), "c", {"n": None})
    assert keys(store.search(("f",), filter={"n": 1})) == ["a"]
    assert sorted(keys(store.search(("f",), filter={"n": {"$ne": 1}}))) == ["b", "c"]
    assert keys(store.search(("f",), filter={"n": {"$gt": 0}})) == ["a"]
    assert keys(store.search(("f",), filter={"n": {"$lte": 5}})) == ["a"]
    assert keys(store.search(("f",), filter={"n": None})) == ["c"]  # JSON null is a value
    assert sorted(keys(store.search(("f",), filter={"n": {"$ne": None}}))) == ["a", "b"]
    assert store.search(("f",), filter={"x": {"$lt": 10}}) == []
    assert sorted(keys(store.search(("f",), filter={"x": {"$ne": 10}}))) == ["a", "b", "c"]


def test_filter_json_equality(store: Store) -> None:
    # plait's spec: JSON equality: 1 == 1.0, True is not 1, lists and objects compare whole.
    # (LangGraph's stores match {"n": True} against 1.)
    store.put(("j",), "int", {"n": 1, "l": [1, 2], "o": {"a": 1, "b": [True]}})
    store.put(("j",), "float", {"n": 1.0, "l": [2, 1], "o": {"a": 1}})
    store.put(("j",), "bool", {"n": True, "l": [1, 2, 3], "o": {"b": [True], "a": 1.0}})
    store.put(("j",), "str", {"n": "1", "l": [], "o": {}})
    assert sorted(keys(store.search(("j",), filter={"n": 1}))) == ["float", "int"]
    assert sorted(keys(store.search(("j",), filter={"n": 1.0}))) == ["float", "int"]
    assert keys(store.search(("j",), filter={"n": True})) == ["bool"]
    assert keys(store.search(("j",), filter={"n": "1"})) == ["str"]
    assert sorted(keys(store.search(("j",), filter={"n": {"$ne": 1}}))) == ["bool", "str"]
    assert keys(store.search(("j",), filter={"l": [1, 2]})) == ["int"]
    assert keys(store.search(("j",), filter={"l": []})) == ["str"]
    assert sorted(keys(store.search(("j",), filter={"o": {"$eq": {"a": 1, "b": [True]}}}))) == ["bool", "int"]
    assert keys(store.search(("j",), filter={"o": {"$eq": {}}})) == ["str"]
    assert sorted(keys(store.search(("j",), filter={"o": {"$ne": {"a": 1}}}))) == ["bool", "int", "str"]


def test_filter_compares_like_with_like(store: Store) -> None:
    # plait's spec: $gt and friends compare numbers with numbers and text with text (code
    # points, no locale); any other pair does not match.
    store.put(("c",), "num", {"v": 10})
    store.put(("c",), "text", {"v": "10"})
    store.put(("c",), "bool", {"v": True})
    store.put(("c",), "list", {"v": [10]})
    store.put(("c",), "acute", {"v": "é"})
    store.put(("c",), "upper", {"v": "Z"})
    store.put(("c",), "lower", {"v": "a"})
    assert keys(store.search(("c",), filter={"v": {"$gt": 5}})) == ["num"]
    assert keys(store.search(("c",), filter={"v": {"$lte": 10.0}})) == ["num"]
    assert sorted(keys(store.search(("c",), filter={"v": {"$gt": "1"}}))) == ["acute", "lower", "text", "upper"]
    assert sorted(keys(store.search(("c",), filter={"v": {"$gt": "z"}}))) == ["acute"]  # "é" (U+E9) > "z"
    assert sorted(keys(store.search(("c",), filter={"v": {"$lt": "a"}}))) == ["text", "upper"]  # "Z" < "a"
    assert store.search(("c",), filter={"v": {"$gt": False}}) == []
    assert store.search(("c",), filter={"v": {"$lt": [11]}}) == []


@pytest.mark.parametrize("flt", [{"a": {"$in": [1]}}, {"a": {"$regex": "x"}}, {"a": {"$gt": 1, "$like": 2}}], ids=repr)
def test_unknown_operator(store: Store, flt: dict[str, Any]) -> None:
    store.put(("u",), "k", {"a": 1})
    with pytest.raises(MemoryFilterError):
        store.search(("u",), filter=flt)
    assert issubclass(MemoryFilterError, MemoryStoreError)


def test_sql_injection_filter_key(store: Store) -> None:
    # test_sql_injection_vulnerability (sqlite). LangGraph refuses the key ("Invalid filter
    # key"); plait takes any key as a literal path: it may refuse it (MemoryFilterError) or
    # find nothing, but never the private document.
    store.put(("docs",), "public", {"access": "public", "data": "public info"})
    store.put(("docs",), "private", {"access": "private", "data": "secret", "password": "123"})
    assert keys(store.search(("docs",), filter={"access": "public"})) == ["public"]
    for bad_key in [
        "access') = 'public' OR '1'='1' OR json_extract(value, '$.",
        "access') OR ('1'='1",
        'access" = "public" OR "1"="1',
        "access'->>'x' OR TRUE --",
    ]:
        try:
            found = store.search(("docs",), filter={bad_key: "dummy"})
        except MemoryFilterError:
            found = []
        assert found == [], bad_key
    assert len(store.search(("docs",))) == 2  # nothing was dropped either


def test_sql_injection_filter_values(store: Store) -> None:
    # test_sql_injection_filter_values (sqlite)
    store.put(("docs",), "doc1", {"access": "public", "title": "Public Document"})
    store.put(("docs",), "doc2", {"access": "private", "title": "Private Document"})
    store.put(("docs",), "doc3", {"access": "secret", "title": "Secret Document"})
    for bad in [
        "public' OR '1'='1",
        "public'; --",
        "public' UNION SELECT * FROM store --",
        "''''",
        "public' OR 'א'='א",
        "public\\' OR 1=1 --",
    ]:
        assert store.search(("docs",), filter={"access": bad}) == [], bad
        assert store.search(("docs",), filter={"access": {"$gt": bad, "$lt": bad + "~"}}) == [], bad
    # a NUL in a filter value: no match (or a refusal), never an error from the database
    try:
        found = store.search(("docs",), filter={"access": "public\x00' OR '1'='1"})
    except MemoryFilterError:
        found = []
    assert found == []

    store.put(("docs",), "doc4", {"title": "O'Brien's Document", "access": "public"})
    found = store.search(("docs",), filter={"title": "O'Brien's Document"})
    assert keys(found) == ["doc4"] and found[0].value["title"] == "O'Brien's Document"


def test_numeric_filter_safety(store: Store) -> None:
    # test_numeric_filter_safety (sqlite)
    store.put(("items",), "item1", {"price": 10, "quantity": 5})
    store.put(("items",), "item2", {"price": 20, "quantity": 3})
    store.put(("items",), "item3", {"price": 30, "quantity": 1})
    found = store.search(("items",), filter={"price": {"$gt": 15}})
    assert sorted(keys(found)) == ["item2", "item3"]
    assert len(store.search(("items",), filter={"price": {"$lt": 1e300}})) == 3
    assert len(store.search(("items",), filter={"price": {"$gt": -1e300}})) == 3
    assert len(store.search(("items",), filter={"price": {"$lt": 2**63 - 1}})) == 3
    # inf and NaN are no JSON, nor are ints beyond 64 bits (plait refuses them in values):
    # LangGraph answers (3 below 10**100 and inf, none equal to NaN); plait's spec does not
    # say, so a refusal (MemoryFilterError) passes too, a wrong answer does not.
    cases: list[tuple[dict[str, Any], int]] = [
        ({"price": {"$lt": 10**100}}, 3),
        ({"price": {"$gt": -(10**100)}}, 3),
        ({"price": {"$gt": 2**63}}, 0),
        ({"price": {"$lt": math.inf}}, 3),
        ({"price": {"$gt": -math.inf}}, 3),
        ({"price": {"$eq": math.nan}}, 0),
        ({"price": math.nan}, 0),
    ]
    for flt, expected in cases:
        try:
            found = store.search(("items",), filter=flt)
        except MemoryFilterError:
            continue
        assert len(found) == expected, flt
    store.put(("items",), "item4", {"price": -10, "quantity": 0})
    assert keys(store.search(("items",), filter={"price": {"$lt": 0}})) == ["item4"]
    assert keys(store.search(("items",), filter={"price": -10.0})) == ["item4"]


def test_boolean_filter_safety(store: Store) -> None:
    # test_boolean_filter_safety (sqlite); and plait's "True is not 1"
    store.put(("flags",), "flag1", {"active": True, "name": "Feature A"})
    store.put(("flags",), "flag2", {"active": False, "name": "Feature B"})
    store.put(("flags",), "flag3", {"active": True, "name": "Feature C"})
    store.put(("flags",), "flag4", {"active": 1, "name": "Feature D"})
    store.put(("flags",), "flag5", {"active": 0, "name": "Feature E"})
    found = store.search(("flags",), filter={"active": True})
    assert sorted(keys(found)) == ["flag1", "flag3"]
    assert all(r.value["active"] is True for r in found)
    assert keys(store.search(("flags",), filter={"active": False})) == ["flag2"]
    assert keys(store.search(("flags",), filter={"active": 1})) == ["flag4"]
    assert keys(store.search(("flags",), filter={"active": 0})) == ["flag5"]
    assert sorted(keys(store.search(("flags",), filter={"active": {"$ne": True}}))) == ["flag2", "flag4", "flag5"]


# ---------------------------------------------------------------------------------------------
# list_namespaces
# ---------------------------------------------------------------------------------------------


def _put_namespaces(store: Store, namespaces: Sequence[tuple[str, ...]]) -> None:
    for i, namespace in enumerate(namespaces):
        store.put(namespace, f"id_{i}", {"data": f"value_{i:02d}"})


def test_list_namespaces_basic(store: Store) -> None:
    # test_list_namespaces_basic (checkpoint). plait sorts, so the sorted() of LangGraph's
    # assertions is dropped: every result is compared as it comes.
    _put_namespaces(
        store,
        [
            ("a", "b", "c"),
            ("a", "b", "d", "e"),
            ("a", "b", "d", "i"),
            ("a", "b", "f"),
            ("a", "c", "f"),
            ("b", "a", "f"),
            ("users", "123"),
            ("users", "456", "settings"),
            ("admin", "users", "789"),
        ],
    )
    assert store.list_namespaces(prefix=("a", "b")) == [
        ("a", "b", "c"),
        ("a", "b", "d", "e"),
        ("a", "b", "d", "i"),
        ("a", "b", "f"),
    ]
    assert store.list_namespaces(suffix=("f",)) == [("a", "b", "f"), ("a", "c", "f"), ("b", "a", "f")]
    assert store.list_namespaces(prefix=("a",), suffix=("f",)) == [("a", "b", "f"), ("a", "c", "f")]
    assert store.list_namespaces(prefix=("a", "b"), max_depth=3) == [("a", "b", "c"), ("a", "b", "d"), ("a", "b", "f")]
    assert store.list_namespaces(prefix=("a", "b"), limit=2) == [("a", "b", "c"), ("a", "b", "d", "e")]
    assert store.list_namespaces(prefix=("a", "b"), offset=2) == [("a", "b", "d", "i"), ("a", "b", "f")]
    assert store.list_namespaces(prefix=("a", "*", "f")) == [("a", "b", "f"), ("a", "c", "f")]
    assert store.list_namespaces(suffix=("*", "f")) == [("a", "b", "f"), ("a", "c", "f"), ("b", "a", "f")]
    assert store.list_namespaces(prefix=("nonexistent",)) == []
    assert store.list_namespaces(prefix=("users", "123")) == [("users", "123")]


def test_list_namespaces_with_wildcards(store: Store) -> None:
    # test_list_namespaces_with_wildcards (checkpoint); LangGraph's last case builds an
    # expectation it never asserts: here it is asserted.
    _put_namespaces(
        store,
        [
            ("users", "123"),
            ("users", "456"),
            ("users", "789", "settings"),
            ("admin", "users", "789"),
            ("guests", "123"),
            ("guests", "456", "preferences"),
        ],
    )
    assert store.list_namespaces(prefix=("users", "*")) == [
        ("users", "123"),
        ("users", "456"),
        ("users", "789", "settings"),
    ]
    assert store.list_namespaces(suffix=("*", "preferences")) == [("guests", "456", "preferences")]
    assert store.list_namespaces(prefix=("*", "users"), suffix=("*", "settings")) == []
    store.put(("admin", "users", "settings", "789"), "foo", {"data": "some_val"})
    assert store.list_namespaces(prefix=("*", "users"), suffix=("settings", "*")) == [
        ("admin", "users", "settings", "789")
    ]
    assert store.list_namespaces(prefix=("*",)) == store.list_namespaces()
    assert store.list_namespaces(prefix=("*", "*", "*", "*")) == [("admin", "users", "settings", "789")]


def test_list_namespaces_pagination(store: Store) -> None:
    # test_list_namespaces_pagination (checkpoint)
    for i in range(20):
        store.put(("namespace", f"sub_{i:02d}"), f"id_{i:02d}", {"data": f"value_{i:02d}"})
    for offset in (0, 5, 15):
        assert store.list_namespaces(prefix=("namespace",), limit=5, offset=offset) == [
            ("namespace", f"sub_{i:02d}") for i in range(offset, offset + 5)
        ]
    assert store.list_namespaces(prefix=("namespace",), limit=5, offset=18) == [
        ("namespace", "sub_18"),
        ("namespace", "sub_19"),
    ]
    assert store.list_namespaces(prefix=("namespace",), offset=20) == []
    assert len(store.list_namespaces()) == 20


def test_list_namespaces_max_depth(store: Store) -> None:
    # test_list_namespaces_max_depth (checkpoint)
    _put_namespaces(
        store, [("a", "b", "c", "d"), ("a", "b", "c", "e"), ("a", "b", "f"), ("a", "g"), ("h", "i", "j", "k")]
    )
    assert store.list_namespaces(max_depth=2) == [("a", "b"), ("a", "g"), ("h", "i")]
    assert store.list_namespaces(max_depth=1) == [("a",), ("h",)]
    assert store.list_namespaces(max_depth=3, limit=2) == [("a", "b", "c"), ("a", "b", "f")]
    assert store.list_namespaces(max_depth=3, offset=2) == [("a", "g"), ("h", "i", "j")]


def test_list_namespaces_no_conditions_and_empty(store: Store) -> None:
    # test_list_namespaces_no_conditions, test_list_namespaces_empty_store (checkpoint)
    assert store.list_namespaces() == []
    _put_namespaces(store, [("e", "f", "g"), ("c", "d"), ("a", "b")])
    assert store.list_namespaces() == [("a", "b"), ("c", "d"), ("e", "f", "g")]


def test_list_namespaces(store: Store) -> None:
    # test_list_namespaces (postgres, sqlite)
    namespaces = [
        ("test", "documents", "public"),
        ("test", "documents", "private"),
        ("test", "images", "public"),
        ("test", "images", "private"),
        ("prod", "documents", "public"),
        ("prod", "documents", "private"),
    ]
    for namespace in namespaces:
        store.put(namespace, "dummy", {"content": "dummy"})
    assert store.list_namespaces() == sorted(namespaces)
    found = store.list_namespaces(prefix=("test",))
    assert len(found) == 4 and all(ns[0] == "test" for ns in found)
    public = store.list_namespaces(suffix=("public",))
    assert len(public) == 3 and all(ns[-1] == "public" for ns in public)
    assert store.list_namespaces(max_depth=2) == [("prod", "documents"), ("test", "documents"), ("test", "images")]
    assert len(store.list_namespaces(limit=3)) == 3
    for namespace in namespaces:
        store.delete(namespace, "dummy")
    assert store.list_namespaces() == []


def test_list_namespaces_operations(store: Store) -> None:
    # test_list_namespaces_operations (sqlite)
    pref = str(uuid.uuid4())
    namespaces = [
        (pref, "test", "documents", "public", pref),
        (pref, "test", "documents", "private", pref),
        (pref, "test", "images", "public", pref),
        (pref, "test", "images", "private", pref),
        (pref, "prod", "documents", "public", pref),
        (pref, "prod", "documents", "some", "nesting", "public", pref),
        (pref, "prod", "documents", "private", pref),
    ]
    for namespace in namespaces:
        store.put(namespace, "dummy", {"content": "dummy"})

    found = store.list_namespaces(prefix=(pref, "test"))
    assert len(found) == 4 and all(ns[1] == "test" for ns in found)
    found = store.list_namespaces(prefix=(pref, "test", "documents"))
    assert len(found) == 2 and all(ns[1:3] == ("test", "documents") for ns in found)
    found = store.list_namespaces(suffix=("public", pref))
    assert len(found) == 4 and all(ns[-2] == "public" for ns in found)
    found = store.list_namespaces(prefix=(pref, "test"), suffix=("public", pref))
    assert len(found) == 2 and all(ns[1] == "test" and ns[-2] == "public" for ns in found)
    found = store.list_namespaces(prefix=(pref, "*", "documents"))
    assert len(found) == 5 and all(ns[2] == "documents" for ns in found)
    found = store.list_namespaces(suffix=("*", "public", pref))
    assert len(found) == 4 and all(ns[-2] == "public" for ns in found)
    assert store.list_namespaces(suffix=("some", "*", "public", pref)) == [
        (pref, "prod", "documents", "some", "nesting", "public", pref)
    ]
    assert all(len(ns) <= 3 for ns in store.list_namespaces(max_depth=3))
    found = store.list_namespaces(max_depth=4, prefix=(pref, "*", "documents"))
    assert len(set(found)) == len(found) == 5
    assert len(store.list_namespaces(prefix=(pref,), limit=3)) == 3
    assert len(store.list_namespaces(prefix=(pref,), offset=3)) == len(namespaces) - 3
    assert store.list_namespaces(prefix=(pref,)) == sorted(namespaces)
    for namespace in namespaces:
        store.delete(namespace, "dummy")
    assert store.list_namespaces(prefix=(pref,)) == []


def test_list_namespaces_segment_boundary(store: Store) -> None:
    # test_list_namespaces_segment_boundary (postgres, sqlite)
    for namespace in [
        ("foo",),
        ("foo", "child"),
        ("foobar",),
        ("foobar", "baz"),
        ("uid", "users", "alice"),
        ("uid", "users", "malice"),
        ("uid", "a", "b", "alice"),
    ]:
        store.put(namespace, "k", {"v": 1})
    assert store.list_namespaces(prefix=("foo",), limit=100) == [("foo",), ("foo", "child")]
    assert store.list_namespaces(suffix=("alice",), limit=100) == [
        ("uid", "a", "b", "alice"),
        ("uid", "users", "alice"),
    ]
    assert store.list_namespaces(prefix=("uid", "*", "alice"), limit=100) == [("uid", "users", "alice")]
    assert store.list_namespaces(prefix=("uid",), limit=100) == [
        ("uid", "a", "b", "alice"),
        ("uid", "users", "alice"),
        ("uid", "users", "malice"),
    ]


def test_namespace_labels_with_trailing_newline(store: Store) -> None:
    # test_namespace_labels_with_trailing_newline (postgres, sqlite)
    store.put(("users", "alice"), "k", {"v": 1})
    store.put(("users", "alice\n"), "k", {"v": 2})
    assert store.list_namespaces(suffix=("alice",), limit=100) == [("users", "alice")]
    assert store.list_namespaces(prefix=("users", "alice"), limit=100) == [("users", "alice")]
    assert store.list_namespaces(suffix=("alice\n",), limit=100) == [("users", "alice\n")]
    assert namespaces_of(store.search(("users", "alice"))) == {("users", "alice")}
    got = store.get(("users", "alice\n"), "k")
    assert got is not None and got.value == {"v": 2}


def test_list_namespaces_metacharacter_labels(store: Store) -> None:
    # test_list_namespaces_metacharacter_labels (sqlite), with the suffix path too
    pairs = [
        ("star*", "starX"),
        ("q?m", "qXm"),
        ("br[ack]et", "brXacXket"),
        ("user_1", "userX1"),
        ("a%b", "axxb"),
        ("plus+", "plusX"),
        ("back\\slash", "backXslash"),
        ("caret^$", "caretXX"),
    ]
    for label, decoy in pairs:
        store.put((label,), "k", {"v": 1})
        store.put((decoy,), "k", {"v": 1})
        store.put((label, "child"), "k", {"v": 1})
    for label, decoy in pairs:
        assert store.list_namespaces(prefix=(label,), limit=100) == [(label,), (label, "child")]
        assert store.list_namespaces(prefix=(label, "child"), limit=100) == [(label, "child")]
        assert store.list_namespaces(prefix=(label, "*"), limit=100) == [(label, "child")]
        assert store.list_namespaces(suffix=(label,), limit=100) == [(label,)]
        assert store.list_namespaces(suffix=(decoy,), limit=100) == [(decoy,)]
        assert namespaces_of(store.search((label,), limit=100)) == {(label,), (label, "child")}


def test_async_list_namespaces(store: Store) -> None:
    # test_list_namespaces (sqlite async)
    async def main() -> None:
        for namespace in [("test", "documents", "public"), ("test", "images", "public"), ("prod", "documents", "x")]:
            await store.aput(namespace, "dummy", {"content": "dummy"})
        assert await store.alist_namespaces(prefix=("test",)) == [
            ("test", "documents", "public"),
            ("test", "images", "public"),
        ]
        assert await store.alist_namespaces(suffix=("public",), max_depth=2) == [
            ("test", "documents"),
            ("test", "images"),
        ]
        assert await store.alist_namespaces(prefix=("*", "documents"), limit=1, offset=1) == [
            ("test", "documents", "public")
        ]

    asyncio.run(main())


# ---------------------------------------------------------------------------------------------
# batch
# ---------------------------------------------------------------------------------------------


def test_batch_order(store: Store) -> None:
    # test_batch_order (postgres, sqlite): results come back in the order of the ops.
    # LangGraph runs a batch's reads before its puts, so no read sees a put of its own batch;
    # plait's spec does not say, so only reads placed before the put are checked here.
    store.put(("test", "foo"), "key1", {"data": "value1"})
    store.put(("test", "bar"), "key2", {"data": "value2"})

    results = store.batch(
        [
            GetOp(namespace=("test", "foo"), key="key1"),
            PutOp(namespace=("test", "bar"), key="key2", value={"data": "value2"}),
            SearchOp(namespace_prefix=("test",), filter={"data": "value1"}, limit=10, offset=0),
            ListNamespacesOp(match_conditions=None, max_depth=None, limit=10, offset=0),
            GetOp(namespace=("test",), key="key3"),
        ]
    )
    assert len(results) == 5
    first = results[0]
    assert isinstance(first, Item)
    assert first.value == {"data": "value1"} and first.key == "key1" and first.namespace == ("test", "foo")
    assert results[1] is None
    found = results[2]
    assert isinstance(found, list) and len(found) == 1
    assert isinstance(found[0], SearchItem) and found[0].key == "key1" and found[0].value == {"data": "value1"}
    assert results[3] == [("test", "bar"), ("test", "foo")]
    assert results[4] is None

    reordered = store.batch(
        [
            SearchOp(namespace_prefix=("test",), filter=None, limit=5, offset=0),
            GetOp(namespace=("test", "bar"), key="key2"),
            ListNamespacesOp(match_conditions=None, max_depth=None, limit=5, offset=0),
            PutOp(namespace=("test",), key="key3", value={"data": "value3"}),
            GetOp(namespace=("test", "foo"), key="key1"),
        ]
    )
    assert len(reordered) == 5
    before = reordered[0]
    assert isinstance(before, list) and sorted(keys(cast(list[Item], before))) == ["key1", "key2"]
    second = reordered[1]
    assert isinstance(second, Item) and second.value == {"data": "value2"} and second.namespace == ("test", "bar")
    assert reordered[2] == [("test", "bar"), ("test", "foo")]
    assert reordered[3] is None
    last = reordered[4]
    assert isinstance(last, Item) and last.value == {"data": "value1"} and last.namespace == ("test", "foo")

    item3 = store.get(("test",), "key3")
    assert item3 is not None and item3.value == {"data": "value3"}


def test_abatch_order(store: Store) -> None:
    # test_abatch_order (postgres async, sqlite async)
    async def main() -> None:
        await store.aput(("test", "foo"), "key1", {"data": "value1"})
        await store.aput(("test", "bar"), "key2", {"data": "value2"})
        results = await store.abatch(
            [
                GetOp(("test", "foo"), "key1"),
                PutOp(("test", "bar"), "key2", {"data": "value2"}),
                SearchOp(("test",), filter={"data": "value1"}),
                ListNamespacesOp(),
                GetOp(("test",), "key3"),
            ]
        )
        assert len(results) == 5
        assert isinstance(results[0], Item) and results[0].value == {"data": "value1"}
        assert results[1] is None
        assert isinstance(results[2], list) and keys(cast(list[Item], results[2])) == ["key1"]
        assert results[3] == [("test", "bar"), ("test", "foo")]
        assert results[4] is None

        reordered = await store.abatch(
            [
                SearchOp(("test",), limit=5),
                GetOp(("test", "bar"), "key2"),
                ListNamespacesOp(limit=5),
                PutOp(("test",), "key3", {"data": "value3"}),
                GetOp(("test", "foo"), "key1"),
            ]
        )
        assert isinstance(reordered[0], list) and len(reordered[0]) == 2
        assert isinstance(reordered[1], Item) and reordered[1].key == "key2"
        assert reordered[2] == [("test", "bar"), ("test", "foo")]
        assert reordered[3] is None
        assert isinstance(reordered[4], Item) and reordered[4].key == "key1"
        item3 = await store.aget(("test",), "key3")
        assert item3 is not None and item3.value == {"data": "value3"}

    asyncio.run(main())


def test_batch_get_ops(store: Store) -> None:
    # test_batch_get_ops (postgres, sqlite, sync and async)
    store.put(("test",), "key1", {"data": "value1"})
    store.put(("test",), "key2", {"data": "value2"})
    ops = [GetOp(("test",), "key1"), GetOp(("test",), "key2"), GetOp(("test",), "key3"), GetOp(("test",), "key1")]
    for results in (store.batch(ops), asyncio.run(store.abatch(ops))):
        assert len(results) == 4
        assert [r.key if isinstance(r, Item) else r for r in results] == ["key1", "key2", None, "key1"]
        assert results[0] == results[3]


def test_batch_put_ops(store: Store) -> None:
    # test_batch_put_ops (postgres, sqlite): PutOp(value=None) deletes
    store.put(("test",), "key3", {"data": "old"})
    results = store.batch(
        [
            PutOp(("test",), "key1", {"data": "value1"}),
            PutOp(("test",), "key2", {"data": "value2"}),
            PutOp(("test",), "key3", None),
        ]
    )
    assert results == [None, None, None]
    item1 = store.get(("test",), "key1")
    item2 = store.get(("test",), "key2")
    assert item1 is not None and item1.value == {"data": "value1"}
    assert item2 is not None and item2.value == {"data": "value2"}
    assert store.get(("test",), "key3") is None

    async def main() -> None:
        results = await store.abatch(
            [PutOp(("a",), "k1", {"d": 1}), PutOp(("a",), "k2", {"d": 2}), PutOp(("a",), "k3", None)]
        )
        assert results == [None, None, None]
        assert len(await store.asearch(("a",), limit=10)) == 2  # k3 was a delete

    asyncio.run(main())


def test_batch_search_ops(store: Store) -> None:
    # test_batch_search_ops (postgres, sqlite)
    for namespace, key, value in [
        (("test", "foo"), "key1", {"data": "value1", "tag": "a"}),
        (("test", "bar"), "key2", {"data": "value2", "tag": "a"}),
        (("test", "baz"), "key3", {"data": "value3", "tag": "b"}),
    ]:
        store.put(namespace, key, value)
    ops = [
        SearchOp(namespace_prefix=("test",), filter={"tag": "a"}, limit=10, offset=0),
        SearchOp(namespace_prefix=("test",), filter=None, limit=2, offset=0),
        SearchOp(namespace_prefix=("test", "foo"), filter=None, limit=10, offset=0),
        SearchOp(namespace_prefix=("test",), filter=None, limit=10, offset=2),
    ]
    for results in (store.batch(ops), asyncio.run(store.abatch(ops))):
        assert len(results) == 4
        tagged = cast(list[Item], results[0])
        assert sorted(keys(tagged)) == ["key1", "key2"] and all(item.value["tag"] == "a" for item in tagged)
        assert len(cast(list[Item], results[1])) == 2
        only = cast(list[Item], results[2])
        assert len(only) == 1 and only[0].namespace == ("test", "foo")
        assert len(cast(list[Item], results[3])) == 1


def test_batch_list_namespaces_ops(store: Store) -> None:
    # test_batch_list_namespaces_ops (postgres, sqlite)
    for namespace, key, value in [
        (("test", "documents", "public"), "doc1", {"content": "public doc"}),
        (("test", "documents", "private"), "doc2", {"content": "private doc"}),
        (("test", "images", "public"), "img1", {"content": "public image"}),
        (("prod", "documents", "public"), "doc3", {"content": "prod doc"}),
    ]:
        store.put(namespace, key, value)
    ops = [
        ListNamespacesOp(match_conditions=None, max_depth=None, limit=10, offset=0),
        ListNamespacesOp(match_conditions=None, max_depth=2, limit=10, offset=0),
        ListNamespacesOp(match_conditions=(MatchCondition("suffix", ("public",)),), max_depth=None, limit=10, offset=0),
        ListNamespacesOp(
            match_conditions=(MatchCondition("prefix", ("test",)), MatchCondition("suffix", ("public",))),
            limit=1,
            offset=1,
        ),
        ListNamespacesOp(match_conditions=(MatchCondition(match_type="prefix", path=("*", "documents")),)),
    ]
    for results in (store.batch(ops), asyncio.run(store.abatch(ops))):
        assert len(results) == 5
        assert results[0] == [
            ("prod", "documents", "public"),
            ("test", "documents", "private"),
            ("test", "documents", "public"),
            ("test", "images", "public"),
        ]
        assert results[1] == [("prod", "documents"), ("test", "documents"), ("test", "images")]
        assert results[2] == [
            ("prod", "documents", "public"),
            ("test", "documents", "public"),
            ("test", "images", "public"),
        ]
        assert results[3] == [("test", "images", "public")]
        assert results[4] == [
            ("prod", "documents", "public"),
            ("test", "documents", "private"),
            ("test", "documents", "public"),
        ]


def test_batch_reads_see_the_store_before_the_batch(store: Store) -> None:
    # LangGraph's SQL stores run a batch's reads before its puts (no test asserts it);
    # plait's Store.abatch documents the same: reads see the store as it was before the
    # batch, the puts commit together at the end, the last put of a key winning (as the
    # deduplication in LangGraph's test_async_batch_store_deduplication).
    store.put(("b",), "old", {"v": 0})
    results = store.batch(
        [
            PutOp(("b",), "new", {"v": 1}),
            GetOp(("b",), "new"),
            SearchOp(("b",)),
            ListNamespacesOp(),
            PutOp(("b",), "old", None),
            GetOp(("b",), "old"),
            PutOp(("b",), "twice", {"v": "first"}),
            PutOp(("b",), "twice", {"v": "second"}),
        ]
    )
    assert results[0] is None and results[1] is None
    assert keys(cast(list[Item], results[2])) == ["old"]
    assert results[3] == [("b",)]
    old = results[5]
    assert isinstance(old, Item) and old.value == {"v": 0}
    assert store.get(("b",), "old") is None
    new = store.get(("b",), "new")
    twice = store.get(("b",), "twice")
    assert new is not None and new.value == {"v": 1}
    assert twice is not None and twice.value == {"v": "second"}

    # a put then a delete of one key: the delete wins; a bad op: none of the puts happen
    store.batch([PutOp(("b",), "gone", {"v": 1}), PutOp(("b",), "gone", None)])
    assert store.get(("b",), "gone") is None
    with pytest.raises(InvalidNamespaceError):
        store.batch([PutOp(("b",), "never", {"v": 1}), PutOp((), "bad", {"v": 2})])
    assert store.get(("b",), "never") is None


def test_large_batches_async(store: Store) -> None:
    # test_large_batches_async (postgres, sqlite), smaller: many calls in flight at once
    n, m = 25, 4

    async def main() -> None:
        calls: list[Any] = []
        for j in range(m):
            namespace = ("test", "foo", "bar", "baz", str(j % 2))
            for i in range(n):
                calls += [
                    store.aput(namespace, f"key{i}", {"foo": f"bar{i}"}),
                    store.aget(namespace, f"key{i}"),
                    store.alist_namespaces(prefix=None, max_depth=j + 1),
                    store.asearch(("test",)),
                    store.aput(namespace, f"key{i}", {"foo": f"bar{i}"}),
                    store.adelete(namespace, f"key{i}"),
                ]
        results = await asyncio.gather(*calls)
        assert len(results) == m * n * 6
        # one more round, in order, leaves a known state
        for i in range(n):
            await store.aput(("test", "after"), f"key{i}", {"i": i})
        assert len(await store.asearch(("test", "after"), limit=100)) == n

    asyncio.run(main())


def test_sync_calls_from_threads_and_a_running_loop(store: Store) -> None:
    # test_large_batches (postgres: sync calls from a thread pool) and test_no_running_loop
    # (LangGraph's async store refuses sync calls on its loop; plait's sync calls work there)
    namespace = ("test", "threads")
    with ThreadPoolExecutor(max_workers=8) as pool:
        futures: list[Future[Any]] = [pool.submit(store.put, namespace, f"key{i}", {"i": i}) for i in range(40)]
        futures += [pool.submit(store.search, ("test",)) for _ in range(10)]
        futures += [pool.submit(store.list_namespaces, prefix=("test",)) for _ in range(10)]
        for future in futures:
            future.result()
    assert len(store.search(namespace, limit=100)) == 40

    async def main() -> None:
        store.put(("foo", "bar"), "baz", {"val": "baz"})
        got = store.get(("foo", "bar"), "baz")
        assert got is not None and got.value == {"val": "baz"}
        assert store.list_namespaces(prefix=("foo",)) == [("foo", "bar")]
        assert store.batch([GetOp(("foo", "bar"), "baz")])[0] == got
        with ThreadPoolExecutor(max_workers=1) as executor:
            assert await asyncio.wrap_future(executor.submit(store.get, ("foo", "bar"), "baz")) == got
        store.delete(("foo", "bar"), "baz")
        assert await store.aget(("foo", "bar"), "baz") is None

    asyncio.run(main())


# ---------------------------------------------------------------------------------------------
# TTL (minutes), driven by a fake clock
# ---------------------------------------------------------------------------------------------


def test_store_ttl(make_store: MakeStore) -> None:
    # test_store_ttl (postgres): a read with refresh_ttl=True restarts the item's time to live,
    # one with refresh_ttl=False does not. LangGraph searches with query="foo" on a store with
    # no index, which it ignores; plait refuses a query without an index, so none is given.
    clock = FakeClock()
    store = make_store(ttl={"default_ttl": 1, "refresh_on_read": True}, clock=clock)
    ns = ("foo",)
    store.put(ns, "item1", {"foo": "bar"}, ttl=1)  # expires at +60 s
    clock.advance(40)
    assert store.get(ns, "item1", refresh_ttl=True) is not None  # now until +100
    clock.advance(40)
    assert len(store.search(ns, refresh_ttl=True)) == 1  # now until +140
    clock.advance(40)
    assert store.get(ns, "item1", refresh_ttl=False) is not None  # +120: still until +140
    clock.advance(30)
    assert store.search(ns, refresh_ttl=False) == []  # +150
    assert store.get(ns, "item1") is None


def test_async_store_ttl(make_store: MakeStore) -> None:
    # test_store_ttl (postgres async)
    clock = FakeClock()
    store = make_store(ttl={"default_ttl": 1}, clock=clock)

    async def main() -> None:
        await store.aput(("foo",), "item1", {"foo": "bar"})  # the default: 1 minute
        clock.advance(40)
        assert await store.aget(("foo",), "item1") is not None  # refresh_on_read defaults to True
        clock.advance(40)
        assert len(await store.asearch(("foo",))) == 1
        clock.advance(40)
        assert await store.aget(("foo",), "item1", refresh_ttl=False) is not None
        clock.advance(30)
        assert await store.asearch(("foo",), refresh_ttl=False) == []
        assert await store.alist_namespaces() == []
        assert await store.asweep() == 1
        assert await store.asweep() == 0

    asyncio.run(main())


def test_expired_items_are_invisible_before_sweep(make_store: MakeStore) -> None:
    # test_omit_expired_filters_read_paths (postgres): get, search and list_namespaces leave an
    # expired item out before any sweep; sweep then finds it (it was still stored).
    clock = FakeClock()
    store = make_store(ttl={"refresh_on_read": True}, clock=clock)
    expired_ns, control_ns = ("omit", "expired"), ("omit", "control")
    store.put(expired_ns, "e", {"data": "gone"}, ttl=1)
    store.put(control_ns, "c", {"data": "keep"}, ttl=None)
    store.put(control_ns, "later", {"data": "keep"}, ttl=5)
    clock.advance(61)

    assert store.get(expired_ns, "e") is None
    assert store.get(control_ns, "c") is not None
    assert store.search(expired_ns) == []
    assert sorted(keys(store.search(control_ns))) == ["c", "later"]
    assert store.search(("omit",), filter={"data": "gone"}) == []
    assert store.list_namespaces(prefix=("omit",)) == [control_ns]
    assert store.batch([GetOp(expired_ns, "e"), SearchOp(expired_ns), ListNamespacesOp()]) == [None, [], [control_ns]]

    assert store.sweep() == 1
    assert store.sweep() == 0
    assert store.list_namespaces() == [control_ns]


def test_refresh_ttl_only_refreshes_live_items(make_store: MakeStore) -> None:
    # test_omit_expired_refresh_ttl_only_refreshes_live_rows (postgres)
    clock = FakeClock()
    store = make_store(ttl={"refresh_on_read": True}, clock=clock)
    ns = ("refresh",)
    store.put(ns, "expired", {"n": 0}, ttl=1)  # until +60
    store.put(ns, "live_get", {"n": 1}, ttl=2)  # until +120
    store.put(ns, "live_search", {"n": 2}, ttl=2)
    clock.advance(90)

    # refresh_ttl=True does not bring the expired item back...
    assert store.get(ns, "expired", refresh_ttl=True) is None
    assert sorted(keys(store.search(ns, refresh_ttl=True))) == ["live_get", "live_search"]  # both until +210
    assert store.get(ns, "expired", refresh_ttl=True) is None
    # ...but extends the live items it read
    assert store.get(ns, "live_get", refresh_ttl=True) is not None
    clock.advance(110)  # +200: past their first expiry (+120)
    assert store.get(ns, "live_get", refresh_ttl=False) is not None
    assert store.get(ns, "live_search", refresh_ttl=False) is not None
    assert store.sweep() == 1  # the expired one only
    clock.advance(15)  # +215
    assert store.get(ns, "live_get", refresh_ttl=False) is None
    assert store.search(ns, refresh_ttl=False) == []
    assert store.sweep() == 2


def test_expired_items_do_not_fill_a_page(make_store: MakeStore) -> None:
    # test_omit_expired_search_pagination (postgres): expired items are left out before
    # limit/offset, so pages stay full
    clock = FakeClock()
    store = make_store(clock=clock)
    ns = ("page",)
    store.put(ns, "c", {"k": "c"})
    clock.advance(1)
    store.put(ns, "b", {"k": "b"})
    clock.advance(1)
    store.put(ns, "expired", {"k": "x"}, ttl=1)
    clock.advance(1)
    store.put(ns, "a", {"k": "a"})
    assert keys(store.search(ns, limit=2)) == ["a", "expired"]
    clock.advance(70)
    assert keys(store.search(ns, limit=2, offset=0)) == ["a", "b"]
    assert keys(store.search(ns, limit=2, offset=2)) == ["c"]


def test_sweep(make_store: MakeStore) -> None:
    # plait's sweep(): removes expired items only, and says how many
    clock = FakeClock()
    store = make_store(clock=clock)
    store.put(("s",), "x1", {"v": 1}, ttl=1)
    store.put(("s", "deep"), "x2", {"v": 2}, ttl=1)
    store.put(("s",), "keep", {"v": 3})
    store.put(("s",), "y", {"v": 4}, ttl=10)
    assert store.sweep() == 0
    clock.advance(61)
    assert store.sweep() == 2
    assert store.sweep() == 0
    assert sorted(keys(store.search(("s",), refresh_ttl=False))) == ["keep", "y"]
    assert store.list_namespaces() == [("s",)]
    clock.advance(600)
    assert store.sweep() == 1
    assert keys(store.search(("s",))) == ["keep"]
    # an item written again after it expired lives again, from the new write
    store.put(("s",), "x1", {"v": 5}, ttl=1)
    again = store.get(("s",), "x1")
    assert again is not None and again.value == {"v": 5}
    assert again.created_at == datetime.fromtimestamp(clock.now, UTC)
    assert store.sweep() == 0


def test_default_ttl_and_per_put_ttl(make_store: MakeStore) -> None:
    # plait's spec: put(ttl=NOT_GIVEN) takes default_ttl, None never expires, a number overrides
    clock = FakeClock()
    store = make_store(ttl={"default_ttl": 1}, clock=clock)
    store.put(("d",), "default", {"v": 1})
    store.put(("d",), "forever", {"v": 2}, ttl=None)
    store.put(("d",), "five", {"v": 3}, ttl=5)
    store.batch([PutOp(("d",), "op_default", {"v": 4}), PutOp(("d",), "op_forever", {"v": 5}, ttl=None)])
    clock.advance(120)
    assert sorted(keys(store.search(("d",), refresh_ttl=False))) == ["five", "forever", "op_forever"]
    clock.advance(240)  # +360 s: past five minutes
    assert sorted(keys(store.search(("d",), refresh_ttl=False))) == ["forever", "op_forever"]
    clock.advance(10**7)
    assert sorted(keys(store.search(("d",)))) == ["forever", "op_forever"]
    # an overwrite sets the ttl again: forever becomes one minute
    store.put(("d",), "forever", {"v": 6}, ttl=1)
    clock.advance(61)
    assert store.get(("d",), "forever") is None


def test_refresh_on_read_off(make_store: MakeStore) -> None:
    # plait's spec: refresh_on_read=False makes reads not refresh unless asked to
    clock = FakeClock()
    store = make_store(ttl={"default_ttl": 1, "refresh_on_read": False}, clock=clock)
    store.put(("r",), "a", {"v": 1})
    clock.advance(40)
    assert store.get(("r",), "a") is not None
    assert len(store.search(("r",))) == 1
    clock.advance(30)  # +70: the reads did not refresh
    assert store.get(("r",), "a") is None

    store.put(("r",), "b", {"v": 2})  # until +130
    clock.advance(40)
    assert store.get(("r",), "b", refresh_ttl=True) is not None  # until +170
    clock.advance(40)  # +150
    assert keys(store.search(("r",), refresh_ttl=True)) == ["b"]  # until +210
    clock.advance(50)  # +200
    assert store.batch([GetOp(("r",), "b")])[0] is not None
    clock.advance(15)  # +215
    assert store.get(("r",), "b") is None


def test_ttl_without_config(make_store: MakeStore) -> None:
    # a store built with no ttl config keeps items forever unless a put gives a ttl
    clock = FakeClock()
    store = make_store(clock=clock)
    store.put(("n",), "forever", {"v": 1})
    store.put(("n",), "short", {"v": 2}, ttl=1)
    clock.advance(30)
    assert store.get(("n",), "short") is not None  # refresh_on_read defaults to True: until +90
    clock.advance(59)  # +89
    assert store.get(("n",), "short", refresh_ttl=False) is not None
    clock.advance(2)  # +91
    assert keys(store.search(("n",))) == ["forever"]
    clock.advance(10**8)
    assert keys(store.search(("n",))) == ["forever"]


# ---------------------------------------------------------------------------------------------
# Semantic search
# ---------------------------------------------------------------------------------------------


AUTO_DOCS: list[tuple[str, dict[str, Any]]] = [
    ("doc1", {"text": "short text"}),
    ("doc2", {"text": "longer text document"}),
    ("doc3", {"text": "longest text document here"}),
    ("doc4", {"description": "text in description field"}),
    ("doc5", {"content": "text in content field"}),
    ("doc6", {"body": "text in body field"}),
]


def test_vector_insert_with_auto_embedding(make_store: MakeStore) -> None:
    # test_vector_insert_with_auto_embedding (all three): the default field "$" embeds the
    # whole value, whatever its keys
    store = make_store(index=index_config())
    for key, value in AUTO_DOCS:
        store.put(("test",), key, value)
    found = store.search(("test",), query="long text")
    assert len(found) == 6
    assert {"doc2", "doc3"} <= set(keys(found))
    scores = [score(item) for item in found]
    assert scores == sorted(scores, reverse=True)
    assert all(-1.0 <= s <= 1.0 + 1e-6 for s in scores)


def test_async_vector_insert_with_auto_embedding(make_store: MakeStore) -> None:
    # test_async_vector_insert_with_auto_embedding (checkpoint, sqlite async), with an async
    # embed function (plait takes either)
    store = make_store(index=index_config(embed=afake_embed))

    async def main() -> None:
        for key, value in AUTO_DOCS:
            await store.aput(("test",), key, value)
        found = await store.asearch(("test",), query="long text")
        assert {"doc2", "doc3"} <= set(keys(found))
        assert len(found) == 6

    asyncio.run(main())
    assert len(store.search(("test",), query="long text", limit=2)) == 2  # sync over an async embed


def test_vector_update_with_embedding(make_store: MakeStore) -> None:
    # test_vector_update_with_embedding (all three): an overwrite embeds the new value
    store = make_store(index=index_config())
    store.put(("test",), "doc1", {"text": "zany zebra Xerxes"})
    store.put(("test",), "doc2", {"text": "something about dogs"})
    store.put(("test",), "doc3", {"text": "text about birds"})

    initial = store.search(("test",), query="Zany Xerxes")
    assert initial[0].key == "doc1"
    initial_score = score(initial[0])

    store.put(("test",), "doc1", {"text": "new text about dogs"})
    after = next(score(r) for r in store.search(("test",), query="Zany Xerxes") if r.key == "doc1")
    assert after < initial_score

    for r in store.search(("test",), query="new text about dogs"):
        if r.key == "doc1":
            assert score(r) > after

    # index=False: stored, but left out of semantic search
    store.put(("test",), "doc4", {"text": "new text about dogs"}, index=False)
    found = store.search(("test",), query="new text about dogs", limit=3)
    assert "doc4" not in keys(found)
    assert "doc4" not in keys(store.search(("test",), query="new text about dogs", limit=100))
    assert "doc4" in keys(store.search(("test",)))

    # re-indexing an unindexed item by writing it again
    store.put(("test",), "doc4", {"text": "new text about dogs"})
    assert store.search(("test",), query="new text about dogs", limit=1)[0].key in {"doc1", "doc4"}
    assert "doc4" in keys(store.search(("test",), query="new text about dogs"))


def test_async_vector_update_with_embedding(make_store: MakeStore) -> None:
    # test_async_vector_update_with_embedding (checkpoint, sqlite async)
    store = make_store(index=index_config())

    async def main() -> None:
        await store.aput(("test",), "doc1", {"text": "zany zebra Xerxes"})
        await store.aput(("test",), "doc2", {"text": "something about dogs"})
        await store.aput(("test",), "doc3", {"text": "text about birds"})
        initial = await store.asearch(("test",), query="Zany Xerxes")
        assert initial[0].key == "doc1"
        await store.aput(("test",), "doc1", {"text": "new text about dogs"})
        after = next(score(r) for r in await store.asearch(("test",), query="Zany Xerxes") if r.key == "doc1")
        assert after < score(initial[0])
        await store.aput(("test",), "doc4", {"text": "new text about dogs"}, index=False)
        found = await store.asearch(("test",), query="new text about dogs", limit=3)
        assert "doc4" not in keys(found)

    asyncio.run(main())


FILTER_DOCS: list[tuple[str, dict[str, Any]]] = [
    ("doc1", {"text": "red apple", "color": "red", "score": 4.5}),
    ("doc2", {"text": "red car", "color": "red", "score": 3.0}),
    ("doc3", {"text": "green apple", "color": "green", "score": 4.0}),
    ("doc4", {"text": "blue car", "color": "blue", "score": 3.5}),
]


@pytest.mark.parametrize("refresh_ttl", [True, False])
@pytest.mark.parametrize("fields", [None, ["text"]], ids=["whole-value", "text-field"])
def test_vector_search_with_filters(make_store: MakeStore, refresh_ttl: bool, fields: list[str] | None) -> None:
    # test_vector_search_with_filters (all three; refresh_ttl from postgres), on the whole
    # value (LangGraph's default) and on the text field
    clock = FakeClock()
    store = make_store(index=index_config(fields), ttl={"default_ttl": 60}, clock=clock)
    for key, value in FILTER_DOCS:
        store.put(("test",), key, value)

    found = store.search(("test",), query="apple", filter={"color": "red"}, refresh_ttl=refresh_ttl)
    assert sorted(keys(found)) == ["doc1", "doc2"] and found[0].key == "doc1"
    found = store.search(("test",), query="car", filter={"color": "red"}, refresh_ttl=refresh_ttl)
    assert sorted(keys(found)) == ["doc1", "doc2"] and found[0].key == "doc2"
    found = store.search(("test",), query="bbbbluuu", filter={"score": {"$gt": 3.2}}, refresh_ttl=refresh_ttl)
    assert sorted(keys(found)) == ["doc1", "doc3", "doc4"] and found[0].key == "doc4"
    found = store.search(("test",), query="apple", filter={"score": {"$gte": 4.0}, "color": "green"})
    assert keys(found) == ["doc3"]
    assert store.search(("test",), query="apple", filter={"color": "purple"}) == []

    # the searches' refresh_ttl decides whether the items outlive their first hour
    clock.advance(59 * 60)
    assert len(store.search(("test",), query="car", refresh_ttl=refresh_ttl)) == 4
    clock.advance(2 * 60)  # 61 minutes after the puts, 2 after that search
    assert len(store.search(("test",), query="car", refresh_ttl=False)) == (4 if refresh_ttl else 0)
    assert len(store.search(("test",), filter={"color": "red"}, refresh_ttl=False)) == (2 if refresh_ttl else 0)


def test_async_vector_search_with_filters(make_store: MakeStore) -> None:
    # test_async_vector_search_with_filters (checkpoint, sqlite async)
    store = make_store(index=index_config(["text"]))

    async def main() -> None:
        for key, value in FILTER_DOCS:
            await store.aput(("test",), key, value)
        found = await store.asearch(("test",), query="apple", filter={"color": "red"})
        assert len(found) == 2 and found[0].key == "doc1"
        found = await store.asearch(("test",), query="car", filter={"color": "red"})
        assert len(found) == 2 and found[0].key == "doc2"
        found = await store.asearch(("test",), query="bbbbluuu", filter={"score": {"$gt": 3.2}})
        assert len(found) == 3 and found[0].key == "doc4"
        found = await store.asearch(("test",), query="apple", filter={"score": {"$gte": 4.0}, "color": "green"})
        assert keys(found) == ["doc3"]

    asyncio.run(main())


def test_async_batched_vector_search_concurrent(make_store: MakeStore) -> None:
    # test_async_batched_vector_search_concurrent (checkpoint): concurrent writes, then
    # concurrent filtered semantic searches
    store = make_store(index=index_config(["text"]))
    colors = ["red", "blue", "green", "yellow", "purple"]
    things = ["apple", "car", "house", "book", "phone"]
    scores = [3.0, 3.5, 4.0, 4.5, 5.0]
    docs = [
        (
            f"doc{i}",
            {"text": f"{colors[i % 5]} {things[i % 5]}", "color": colors[i % 5], "score": scores[i % 5], "index": i},
        )
        for i in range(30)
    ]
    queries: list[tuple[str, dict[str, Any]]] = [
        ("apple", {"color": "red"}),
        ("car", {"color": "blue"}),
        ("house", {"color": "green"}),
        ("phone", {"score": {"$gt": 4.99}}),
        ("book", {"score": {"$lte": 3.5}}),
        ("apple", {"score": {"$gte": 3.0}, "color": "red"}),
        ("car", {"score": {"$lt": 5.1}, "color": "blue"}),
        ("house", {"index": {"$gt": 25}}),
        ("phone", {"index": {"$lte": 10}}),
    ]

    def holds(value: Mapping[str, Any], flt: Mapping[str, Any]) -> bool:
        for field, cond in flt.items():
            if not isinstance(cond, dict):
                if value[field] != cond:
                    return False
                continue
            for op, operand in cond.items():
                ok = {
                    "$gt": value[field] > operand,
                    "$gte": value[field] >= operand,
                    "$lt": value[field] < operand,
                    "$lte": value[field] <= operand,
                }[op]
                if not ok:
                    return False
        return True

    async def main() -> None:
        await asyncio.gather(*(store.aput(("test",), key, value) for key, value in docs))
        await asyncio.gather(*(store.adelete(("test",), key) for key, _ in docs[:10]))
        await asyncio.gather(*(store.aput(("test",), key, value) for key, value in docs[:10]))
        all_found = await asyncio.gather(
            *(store.asearch(("test",), query=query, filter=flt, limit=100) for query, flt in queries)
        )
        for found, (query, flt) in zip(all_found, queries, strict=True):
            expected = sorted(key for key, value in docs if holds(value, flt))
            assert sorted(keys(found)) == expected, (query, flt)
            assert found, (query, flt)

    asyncio.run(main())


def test_vector_search_pagination(make_store: MakeStore) -> None:
    # test_vector_search_pagination (all three, sync and async)
    store = make_store(index=index_config())
    for i in range(5):
        store.put(("test",), f"doc{i}", {"text": f"test document number {i}"})
    page1 = store.search(("test",), query="test", limit=2)
    page2 = store.search(("test",), query="test", limit=2, offset=2)
    page3 = store.search(("test",), query="test", limit=2, offset=4)
    assert len(page1) == 2 and len(page2) == 2 and len(page3) == 1
    everything = store.search(("test",), query="test", limit=10)
    assert len(everything) == 5
    assert keys(page1 + page2 + page3) == keys(everything)
    assert store.search(("test",), query="test", offset=5) == []

    async def main() -> None:
        apage1 = await store.asearch(("test",), query="test", limit=2)
        apage2 = await store.asearch(("test",), query="test", limit=2, offset=2)
        assert keys(apage1) == keys(page1) and keys(apage2) == keys(page2)

    asyncio.run(main())


def test_vector_search_edge_cases(make_store: MakeStore) -> None:
    # test_vector_search_edge_cases (postgres, sqlite)
    store = make_store(index=index_config())
    store.put(("test",), "doc1", {"text": "test document"})
    assert len(store.search(("test",), query="")) == 1
    found = store.search(("test",), query=None)
    assert len(found) == 1 and found[0].score is None
    assert len(store.search(("test",), query="test " * 100)) == 1
    assert len(store.search(("test",), query="test!@#$%^&*()")) == 1
    assert len(store.search(("test",), query="'; DROP TABLE items; --")) == 1
    assert len(store.search(("test",), query="这是中文 \x01 \n")) == 1
    assert store.search(("other",), query="test") == []


def test_embed_with_path(make_store: MakeStore) -> None:
    # test_embed_with_path (checkpoint), test_embed_with_path_sync (postgres): the store's
    # fields; an item scores by its best field; a missing field is skipped
    store = make_store(index=index_config(["key0", "key1", "key3"]))
    doc1 = {"key1": "xxx", "key2": "yyy", "key3": "zzz"}  # no key0: two vectors
    doc2 = {"key0": "uuu", "key1": "vvv", "key2": "www", "key3": "xxx"}  # three vectors
    store.put(("test",), "doc1", doc1)
    store.put(("test",), "doc2", doc2)

    found = store.search(("test",), query="xxx")  # doc1.key1 and doc2.key3
    assert len(found) == 2 and found[0].key != found[1].key
    ascore = score(found[0])
    assert ascore == pytest.approx(score(found[1]), abs=1e-5)
    assert ascore == pytest.approx(1.0, abs=1e-5)

    found = store.search(("test",), query="uuu")
    assert keys(found) == ["doc2", "doc1"]
    assert score(found[0]) > score(found[1])
    assert score(found[0]) == pytest.approx(ascore, abs=1e-5)

    found = store.search(("test",), query="zzz")
    assert keys(found) == ["doc1", "doc2"]
    assert score(found[0]) == pytest.approx(ascore, abs=1e-5)

    found = store.search(("test",), query="www")  # key2 is not indexed
    assert len(found) == 2
    assert all(score(r) < ascore for r in found)
    assert all(score(r) < 0.5 for r in found)


def test_embed_with_path_async(make_store: MakeStore) -> None:
    # test_embed_with_path (sqlite async)
    store = make_store(index=index_config(["key0", "key1", "key3"]))

    async def main() -> None:
        await store.aput(("test",), "doc1", {"key1": "xxx", "key2": "yyy", "key3": "zzz"})
        await store.aput(("test",), "doc2", {"key0": "uuu", "key1": "vvv", "key2": "www", "key3": "xxx"})
        found = await store.asearch(("test",), query="xxx")
        assert score(found[0]) == pytest.approx(score(found[1]), abs=1e-5)
        found = await store.asearch(("test",), query="uuu")
        assert found[0].key == "doc2" and score(found[0]) > score(found[1])

    asyncio.run(main())


def test_embed_with_path_operation_config(make_store: MakeStore) -> None:
    # test_embed_with_path (checkpoint), test_embed_with_path_operation_config (postgres):
    # put(index=[...]) names the fields of one item; index=False stores no vector.
    # LangGraph's InMemoryStore returns the unindexed doc5 from a query search with score
    # None (its Postgres store leaves it out, with a TODO); plait's spec leaves it out.
    store = make_store(index=index_config(["key17"]))  # a field no document has
    doc3 = {"key0": "aaa", "key1": "bbb", "key2": "ccc", "key3": "ddd"}
    doc4 = {"key0": "eee", "key1": "bbb", "key2": "fff", "key3": "ggg"}
    store.put(("test",), "doc3", doc3, index=["key0", "key1"])
    store.put(("test",), "doc4", doc4, index=["key1", "key3"])

    found = store.search(("test",), query="aaa")
    assert keys(found) == ["doc3", "doc4"] and score(found[0]) > score(found[1])
    found = store.search(("test",), query="ggg")
    assert keys(found) == ["doc4", "doc3"] and score(found[0]) > score(found[1])
    found = store.search(("test",), query="bbb")
    assert len(found) == 2 and found[0].key != found[1].key
    assert score(found[0]) == pytest.approx(score(found[1]), abs=1e-5)
    found = store.search(("test",), query="ccc")  # key2 is in neither item's fields
    assert len(found) == 2 and all(score(r) < 0.9 for r in found)

    store.put(("test",), "doc5", {"key0": "hhh", "key1": "iii"}, index=False)
    # the store's own fields (key17) are missing from doc6: no vector either
    store.put(("test",), "doc6", {"key0": "hhh"})
    found = store.search(("test",))
    assert sorted(keys(found)) == ["doc3", "doc4", "doc5", "doc6"]
    assert all(r.score is None for r in found)
    found = store.search(("test",), query="hhh")
    assert sorted(keys(found)) == ["doc3", "doc4"]


@pytest.mark.parametrize("query", ["aaa", "bbb", "ccc", "abcd", "poisson"])
def test_scores(make_store: MakeStore, query: str) -> None:
    # test_scores (postgres, sqlite), cosine only: the score is the cosine similarity of the
    # query's and the field's embeddings. key1 is missing: skipped.
    store = make_store(index=index_config(["key0"]))
    store.put(("test",), "doc", {"key0": "aaa"}, index=["key0", "key1"])
    found = store.search((), query=query)
    assert len(found) == 1
    assert score(found[0]) == pytest.approx(cosine(embed_text(query), embed_text("aaa")), abs=1e-3)


def test_non_ascii(make_store: MakeStore) -> None:
    # test_non_ascii (all three). Embedded on the text field: the whole value's JSON text may
    # escape non-ASCII characters, which would leave little for a character-count embedding.
    store = make_store(index=index_config(["text"]))
    texts = {"1": "这是中文", "2": "これは日本語です", "3": "이건 한국어야", "4": "Это русский", "5": "यह रूसी है"}
    for key, text in texts.items():
        store.put(("user_123", "memories"), key, {"text": text})
    for key, text in texts.items():
        found = store.search(("user_123", "memories"), query=text)
        assert found[0].key == key
        assert found[0].value == {"text": text}
        assert score(found[0]) == pytest.approx(1.0, abs=1e-5)


def test_nested_and_non_text_fields(make_store: MakeStore) -> None:
    # plait's spec: a dotted field reaches into objects; a value that is not text is embedded
    # as its JSON text
    store = make_store(index=index_config(["profile.bio", "n"]))
    store.put(("f",), "nested", {"profile": {"bio": "quiet zebra"}, "n": "x"})
    store.put(("f",), "number", {"profile": {"bio": "x"}, "n": 12345})
    store.put(("f",), "list", {"n": [1, 2]})
    store.put(("f",), "none", {"other": "quiet zebra"})  # no field: no vector
    found = store.search(("f",), query="quiet zebra")
    assert found[0].key == "nested" and score(found[0]) == pytest.approx(1.0, abs=1e-5)
    assert "none" not in keys(found)
    found = store.search(("f",), query="12345")
    assert found[0].key == "number" and score(found[0]) == pytest.approx(1.0, abs=1e-5)
    found = store.search(("f",), query=json.dumps([1, 2]))
    assert found[0].key == "list"
    found = store.search(("f",), query="quiet zebra", filter={"n": "x"})
    assert keys(found) == ["nested"]


def test_query_without_index_is_refused(store: Store) -> None:
    # plait's spec: a semantic search on a store with no index is an error (LangGraph's
    # stores ignore the query)
    store.put(("q",), "k", {"text": "hello"})
    with pytest.raises(MemoryStoreError):
        store.search(("q",), query="hello")
    with pytest.raises(MemoryStoreError):
        asyncio.run(store.asearch(("q",), query="hello"))
    assert len(store.search(("q",))) == 1


def test_put_none_deletes_as_langgraphs_put_does(store: Store) -> None:
    store.put(("t",), "k", {"v": 1})
    store.put(("t",), "k", None)
    assert store.get(("t",), "k") is None
    assert store.list_namespaces() == []
