"""The two libraries' memory stores behind one small interface, for ``benchmarks.store_bench``.

Each side is built the way its library documents: plait's ``Store()`` and
``checkpointer.store``; LangGraph's ``InMemoryStore()``, ``SqliteStore.from_conn_string(path)``
and ``PostgresStore.from_conn_string(dsn)`` (autocommit connections, as their docs require),
with ``setup()`` called. Both SQLite stores live in a file on disk. The filters each side is
given mean the same thing; where one side cannot express a filter, :meth:`Side.filter_for`
says why and the case is reported as not runnable there, never run with another meaning.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import random
import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks._common import QUICK, Env, scratch_schema

PLAIT = "plait"
LG = "langgraph"
DIMS = 64
CITIES = ("Oslo", "Lima", "Pune", "Kyiv", "Baku", "Doha", "Riga")
WORDS = tuple("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november".split())
Value = dict[str, Any]
Entry = tuple[tuple[str, ...], str, Value]


class NotRunnable(Exception):
    """A case one side cannot run here; the message says why."""


# --------------------------------------------------------------------------- data


def fake_embed(texts: Sequence[str]) -> list[list[float]]:
    """A deterministic 64-number vector per text (a seeded RNG per text hash): the SAME
    function is every store's ``embed``, so both libraries rank the same vectors."""
    out = []
    for t in texts:
        rng = random.Random(hashlib.blake2b(t.encode(), digest_size=8).digest())
        out.append([rng.gauss(0.0, 1.0) for _ in range(DIMS)])
    return out


def item(k: int, rng: random.Random) -> Entry:
    """Item ``k`` of a fill: five namespaces under ``("bench",)``, 20 categories (5 % each),
    scores 0-99, seven cities (about 14 % each), a short text."""
    text = f"note {k}: " + " ".join(rng.choices(WORDS, k=12))
    value = {
        "category": f"c{k % 20}",
        "score": rng.randrange(100),
        "profile": {"city": CITIES[k % 7], "age": 20 + k % 50},
        "text": text,
    }
    return ("bench", f"ns{k % 5}"), f"item-{k}", value


@functools.lru_cache(maxsize=4)
def items(n: int, seed: int = 29) -> list[Entry]:
    rng = random.Random(seed)
    return [item(k, rng) for k in range(n)]


# --------------------------------------------------------------------------- the filters


@dataclass(frozen=True)
class FilterCase:
    """A filtered search: its label, plait's filter (the reference meaning) and a predicate
    over a value that says whether a result is right."""

    label: str
    filter: Mapping[str, Any] | None
    check: Any = field(compare=False)


FILTERS = (
    FilterCase("no filter (newest 10)", None, lambda v: True),
    FilterCase('category = "c3" (5 %)', {"category": "c3"}, lambda v: v["category"] == "c3"),
    FilterCase("score >= 90 (10 %)", {"score": {"$gte": 90}}, lambda v: v["score"] >= 90),
    FilterCase('profile.city = "Oslo" (14 %)', {"profile.city": "Oslo"}, lambda v: v["profile"]["city"] == "Oslo"),
    FilterCase(
        'category = "c3" and score >= 90 (0.5 %)',
        {"category": "c3", "score": {"$gte": 90}},
        lambda v: v["category"] == "c3" and v["score"] >= 90,
    ),
    FilterCase('category = "none" (no match)', {"category": "none"}, lambda v: False),
)


# --------------------------------------------------------------------------- the sides


class Side:
    """One library's store on one backend."""

    lib: str
    backend: str
    store: Any

    def put(self, ns: tuple[str, ...], key: str, value: Value) -> None:
        self.store.put(ns, key, value)

    def get(self, ns: tuple[str, ...], key: str) -> Value | None:
        got = self.store.get(ns, key)
        return None if got is None else dict(got.value)

    def put_many(self, entries: Sequence[Entry]) -> None:
        """One ``batch`` call of puts (each library has one)."""
        raise NotImplementedError

    def filter_for(self, case: FilterCase) -> Mapping[str, Any] | None:
        """This library's spelling of ``case``'s filter; NotRunnable when it has none."""
        return case.filter

    def search(self, prefix: tuple[str, ...], flt: Mapping[str, Any] | None, limit: int) -> list[Value]:
        return [dict(r.value) for r in self.store.search(prefix, filter=flt, limit=limit)]

    def query(self, prefix: tuple[str, ...], text: str, limit: int) -> list[str]:
        """The keys of a semantic search, best first."""
        return [r.key for r in self.store.search(prefix, query=text, limit=limit)]

    def analyze(self) -> None:
        """PostgreSQL: gather the planner's statistics of this side's tables, as autovacuum
        does within a minute of a bulk load on a live database (a fresh table has none, and
        a plan made without them can be far off). Elsewhere nothing."""

    def close(self) -> None:
        raise NotImplementedError


class PlaitSide(Side):
    lib = PLAIT

    def __init__(self, backend: str, env: Env, *, index: bool) -> None:
        from plait import Store
        from plait.errors import StoreUnsupportedError

        self.backend = backend
        self.env = env
        self._stack = contextlib.ExitStack()
        cfg = {"dims": DIMS, "embed": fake_embed, "fields": ["text"]} if index else None
        self.checkpointer: Any = None
        if backend == "memory":
            self.store = Store(index=cfg)
            return
        if backend == "sqlite":
            from plait import SqliteCheckpointer

            self.checkpointer = SqliteCheckpointer(env.sqlite_path("plait-store"))
        else:
            from plait import PostgresCheckpointer

            self.schema = schema = self._stack.enter_context(scratch_schema(_dsn(env), "store"))
            self.checkpointer = PostgresCheckpointer(_dsn(env), schema=schema)
        self._stack.callback(self.checkpointer.close)
        self.checkpointer.setup()  # creates the tables (SQLite does on open; PostgreSQL asks)
        try:
            self.store = Store(self.checkpointer, index=cfg) if index else self.checkpointer.store
        except StoreUnsupportedError as exc:
            self._stack.close()
            raise NotRunnable(str(exc)) from exc

    def analyze(self) -> None:
        if self.backend == "postgres":
            import psycopg

            with psycopg.connect(_dsn(self.env), autocommit=True) as conn:
                q = "SELECT quote_ident(schemaname) || '.' || quote_ident(tablename) FROM pg_tables"
                q += " WHERE schemaname = %s"
                for (table,) in conn.execute(q, (self.schema,)).fetchall():
                    conn.execute(f"ANALYZE {table}")

    def put_many(self, entries: Sequence[Entry]) -> None:
        from plait import PutOp

        self.store.batch([PutOp(ns, key, value) for ns, key, value in entries])

    def close(self) -> None:
        self._stack.close()


class LangGraphSide(Side):
    lib = LG

    def __init__(self, backend: str, env: Env, *, index: bool, wal: bool = False) -> None:
        self.backend = backend
        self._stack = contextlib.ExitStack()
        cfg: Any = {"dims": DIMS, "embed": fake_embed, "fields": ["text"]} if index else None
        try:
            if backend == "memory":
                from langgraph.store.memory import InMemoryStore

                self.store = InMemoryStore(index=cfg)
            elif backend == "sqlite":
                from langgraph.store.sqlite import SqliteStore

                path = str(env.sqlite_path("lg-store"))
                self.store = self._stack.enter_context(SqliteStore.from_conn_string(path, index=cfg))
                if wal:
                    self.store.conn.execute("PRAGMA journal_mode=WAL")
                self._setup("SqliteStore with an index loads the sqlite-vec extension")
            else:
                from langgraph.store.postgres import PostgresStore

                self.dsn = dsn = self._stack.enter_context(env.fresh_pg("lgstore"))
                self.store = self._stack.enter_context(PostgresStore.from_conn_string(dsn, index=cfg))
                self._setup("PostgresStore with an index needs the pgvector extension")
        except BaseException:
            self._stack.close()
            raise

    def _setup(self, why: str) -> None:
        try:
            self.store.setup()
        except Exception as exc:
            if not self.store.index_config:
                raise
            detail = _why_no_vectors(self.backend, exc)
            raise NotRunnable(f"{why}: {detail}") from exc

    def analyze(self) -> None:
        if self.backend == "postgres":
            import psycopg

            with psycopg.connect(self.dsn, autocommit=True) as conn:
                conn.execute("ANALYZE")  # its own scratch database

    def put_many(self, entries: Sequence[Entry]) -> None:
        from langgraph.store.base import PutOp

        self.store.batch([PutOp(ns, key, value) for ns, key, value in entries])

    def filter_for(self, case: FilterCase) -> Mapping[str, Any] | None:
        flt = case.filter
        if not flt or not any("." in k for k in flt):
            return flt
        if self.backend == "memory":  # InMemoryStore matches a nested object partially
            nested: dict[str, Any] = {}
            for k, v in flt.items():
                head, _, rest = k.partition(".")
                nested[head] = {rest: v} if rest else v
            return nested
        if self.backend == "postgres":
            raise NotRunnable(
                "PostgresStore reads a filter key as one top-level key (value->'profile.city'), "
                "and a nested object as operators: it has no filter on a nested field"
            )
        return flt  # SqliteStore: json_extract(value, '$.profile.city')

    def close(self) -> None:
        self._stack.close()


def _why_no_vectors(backend: str, exc: Exception) -> str:
    if backend == "sqlite" and not hasattr(sqlite3.Connection, "enable_load_extension"):
        return (
            "this Python's sqlite3 module cannot load extensions (built without "
            f"--enable-loadable-sqlite-extensions; {type(exc).__name__}: {exc})"
        )
    return f"{type(exc).__name__}: {str(exc).strip().splitlines()[0]}"


def open_side(lib: str, backend: str, env: Env, *, index: bool = False, wal: bool = False) -> Side:
    """A fresh, empty store of ``lib`` on ``backend`` (``wal``: LangGraph's SQLite connection
    in WAL mode). Raises NotRunnable with the reason."""
    if lib == PLAIT:
        return PlaitSide(backend, env, index=index)
    return LangGraphSide(backend, env, index=index, wal=wal)


# --------------------------------------------------------------------------- PostgreSQL scratch


def _dsn(env: Env) -> str:
    assert env.pg_dsn is not None
    return env.pg_dsn


def make_env(workdir: Path, pg_dsn: str | None) -> Env:
    """The main harness's :class:`Env` (scratch files, scratch databases); its sizes unused."""
    return Env(workdir=workdir, pg_dsn=pg_dsn, sizes=QUICK)
