"""Helpers shared by the SQL backend tests (``sqlite/``, ``postgres/``, ``sql/`` and the tests
of every backend here).

Tests import it as ``from ._backend_helpers import ...`` (``from .._backend_helpers`` in the
folders below; the test folders are packages). The writer processes of
``sqlite/test_sqlite_wal.py`` import it by its bare name, this folder on their ``sys.path``:
so it imports nothing relatively itself.
"""

from __future__ import annotations

import sqlite3
import time
import weakref
from collections.abc import Mapping, Sequence
from contextlib import closing
from pathlib import Path
from typing import Any

import orjson
import pytest

from plait._codec import canonical, freeze
from plait._frozen import FrozenDict, FrozenList
from plait.checkpoint._records import encode_body
from plait.checkpoint.base import Checkpointer
from plait.checkpoint.model import Checkpoint, CheckpointWrite, Task, new_checkpoint_id
from plait.checkpoint.sql._core import SqlCore
from plait.checkpoint.sqlite._store import _DIALECT, SqliteCheckpointer
from plait.checkpoint.sqlite._worker import transaction as _transaction

__all__ = ["Backend", "RowStore", "append_chat", "make", "read_back_all", "same"]


def make(
    thread: str,
    parent: Checkpoint | None,
    updates: Mapping[str, Any],
    *,
    namespace: str = "",
    metadata: Mapping[str, Any] | None = None,
    folds: bool = False,
    next_tasks: Sequence[Task] = (),
) -> CheckpointWrite:
    """A checkpoint on ``parent`` (or a root) with ``updates`` applied; ``changed`` = updated keys."""
    values = dict(parent.values) if parent else {}
    values.update({k: freeze(v, k) for k, v in updates.items()})
    step = parent.step + 1 if parent else 0
    versions = dict(parent.versions) if parent else {}
    for k in updates:
        versions[k] = max(versions.values(), default=0) + 1
    cp = Checkpoint(
        thread_id=thread,
        namespace=namespace,
        id=new_checkpoint_id(parent.id if parent else None),
        parent_id=parent.id if parent else None,
        step=step,
        values=FrozenDict(values),
        versions=versions,
        next_tasks=tuple(next_tasks),
        barriers={"join:c": ("a",)} if step % 2 else {},
        metadata=dict(metadata) if metadata is not None else {"source": "loop", "step": step},
        created_at=time.time(),
    )
    return CheckpointWrite(
        checkpoint=cp, changed=frozenset(updates) if parent else frozenset(values), folds_parent_writes=folds
    )


def same(a: Checkpoint | None, b: Checkpoint) -> None:
    """Read-back equality, in JSON terms (1 and True differ), ignoring pending writes."""
    assert a is not None
    for name in ("thread_id", "namespace", "id", "parent_id", "step", "next_tasks", "created_at"):
        assert getattr(a, name) == getattr(b, name), name
    for name in ("values", "versions", "metadata"):
        assert canonical(getattr(a, name)) == canonical(getattr(b, name)), name
    assert {k: tuple(v) for k, v in a.barriers.items()} == {k: tuple(v) for k, v in b.barriers.items()}


async def append_chat(cp: Any, thread: str, steps: int, *, size: int = 1000) -> list[Checkpoint]:
    """A thread that appends one ~``size``-byte message per step, one commit per step."""
    written: list[Checkpoint] = []
    parent: Checkpoint | None = None
    for i in range(steps):
        msgs = list(parent.values["messages"]) if parent else []
        msgs.append(freeze({"id": f"m{i}", "role": "user", "text": f"{i:06d}" + "lorem ipsum " * (size // 12)}, "m"))
        cw = make(thread, parent, {"messages": FrozenList(msgs), "turn": i}, folds=True)
        await cp.acommit(checkpoints=[cw])
        parent = cw.checkpoint
        written.append(parent)
    return written


class Backend:
    """Opens stores on one database and runs raw SQL against it."""

    def __init__(self, kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
        self.kind = kind
        if kind == "sqlite":
            self.path = tmp_path / "store.db"
        else:
            self.dsn = request.getfixturevalue("postgres_dsn")
            self.schema = request.getfixturevalue("postgres_schema")

    def open(self) -> Checkpointer:
        if self.kind == "sqlite":
            return SqliteCheckpointer(self.path)
        from plait.checkpoint.postgres import PostgresCheckpointer

        store = PostgresCheckpointer(self.dsn, schema=self.schema)
        store.migrate()
        return store

    def build(self, version: int) -> None:
        """A store as plait left it at ``version``: the migrations of that time, run in order."""
        if self.kind == "sqlite":
            with closing(sqlite3.connect(self.path, isolation_level=None)) as conn:
                conn.execute("BEGIN IMMEDIATE")
                SqlCore(_DIALECT, "old store").component.migrate(conn.cursor(), "old store", target=version)
                conn.execute("COMMIT")
            return
        import psycopg

        from plait.checkpoint.postgres._dialect import pg_dialect as _dialect

        with psycopg.connect(self.dsn) as pg, pg.cursor() as cur:
            cur.execute(f'CREATE SCHEMA IF NOT EXISTS "{self.schema}"')
            SqlCore(_dialect(self.schema), "old store").component.migrate(cur, "old store", target=version)

    def sql(self, statement: str, *params: Any) -> list[Any]:
        if self.kind == "sqlite":
            import sqlite3

            with closing(sqlite3.connect(self.path)) as conn, conn:  # commits, then closes
                return conn.execute(statement.replace("%s", "?").replace("{P}", "plait_"), params).fetchall()
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True) as pg:
            cur = pg.execute(statement.replace("{P}", f'"{self.schema}".plait_'), params or None)
            return cur.fetchall() if cur.description else []


def read_back_all(backend: Backend, thread: str, written: Sequence[Checkpoint]) -> None:
    """A store opened afresh (no head cache: every value comes from storage) reads each of
    ``written`` (one line of checkpoints, oldest first) back by id, and as the history."""
    import asyncio

    fresh = backend.open()
    try:
        for cp in written:
            same(asyncio.run(fresh.aget(thread, cp.id)), cp)
        history = asyncio.run(fresh.ahistory(thread))
        assert [c.id for c in history] == [c.id for c in reversed(written)]
        for got, want in zip(history, reversed(written), strict=True):
            same(got, want)
    finally:
        asyncio.run(fresh.aclose())


class RowStore:
    """A SQLite store in memory with rows written by hand (thread ``t``), read through the
    SQL core directly: rows can then be anything a database may hold."""

    def __init__(self) -> None:
        # A store per hypothesis example, closed when dropped (by whichever thread collects it).
        self.conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        weakref.finalize(self, self.conn.close)
        self.core = SqlCore(_DIALECT, "test")
        _transaction(self.conn, lambda cur: self.core.component.migrate(cur, self.core.store))
        self.cur: Any = self.conn.cursor()

    def checkpoint(self, cid: str, parent: str | None, blobs: dict[str, str], metadata: Any) -> None:
        cp = Checkpoint(thread_id="t", id=cid, parent_id=parent, step=0, values={})
        self.cur.execute(
            "INSERT INTO plait_checkpoints VALUES ('', 't', ?, ?, 0, 0, 'loop', ?, ?)",
            (cid, parent, orjson.dumps(metadata), encode_body(cp, blobs=blobs)),
        )

    def blob(self, channel: str, bid: str, base: str | None, data: bytes) -> None:
        self.cur.execute("INSERT INTO plait_blobs VALUES ('', 't', ?, ?, ?, ?)", (channel, bid, base, data))

    def history(self, **kw: Any) -> list[Checkpoint]:
        args: dict[str, Any] = {"limit": None, "before": None, "filter": None} | kw
        return self.core.read.history(self.cur, "", "t", **args)

    def get(self, cid: str | None) -> Checkpoint | None:
        return self.core.read.get(self.cur, "", "t", cid)
