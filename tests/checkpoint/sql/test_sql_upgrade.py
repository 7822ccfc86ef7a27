"""Stores left by an older plait (every released schema version) are refused until migrated,
then upgraded in place: their checkpoints, pending writes and leases read back, each thread
gets the status its head stands in, and runs go on with leases fenced by generation."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from plait import END, START, AppendList, Graph, StateSchema, ThreadBusyError
from plait.checkpoint._records import encode_body, encode_json
from plait.checkpoint.model import Checkpoint, PendingWrite, Task
from plait.checkpoint.sql._schema import SCHEMA_VERSION
from plait.errors import StoreVersionError

from .._backend_helpers import Backend, make, same


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    yield Backend(request.param, tmp_path, request)


def _body(cp: Checkpoint) -> bytes:
    """A body as every version since the first stores it: naming a full blob per value."""
    blobs = dict.fromkeys(cp.values, cp.id)
    raw = orjson.loads(encode_body(cp, blobs=blobs))
    raw["b"] = blobs  # every blob id and task written out, as before schema 12
    if cp.next_tasks:
        raw["n"] = [t.to_json() for t in cp.next_tasks]
    return orjson.dumps(raw)


def _insert(backend: Backend, cp: Checkpoint, writes: tuple[PendingWrite, ...] = ()) -> None:
    """Rows as every version since the first stores them: values as full blobs, a body
    naming them, pending writes."""
    body = _body(cp)
    backend.sql(
        "INSERT INTO {P}checkpoints (ns, thread_id, id, parent_id, step, created_at, source, metadata, body)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
        cp.namespace,
        cp.thread_id,
        cp.id,
        cp.parent_id,
        cp.step,
        cp.created_at,
        str(cp.metadata.get("source", "")),
        encode_json(cp.metadata),
        body,
    )
    _insert_blobs(backend, cp)
    for w in writes:
        backend.sql(
            "INSERT INTO {P}writes (ns, thread_id, checkpoint_id, task_id, kind, wkey, value)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s)",
            cp.namespace,
            cp.thread_id,
            cp.id,
            w.task_id,
            w.kind,
            w.key,
            encode_json(w.value),
        )


def _insert_blobs(backend: Backend, cp: Checkpoint) -> None:
    for ch, value in cp.values.items():
        backend.sql(
            "INSERT INTO {P}blobs (ns, thread_id, channel, id, base_id, data) VALUES (%s, %s, %s, %s, NULL, %s)",
            cp.namespace,
            cp.thread_id,
            ch,
            cp.id,
            orjson.dumps(value),
        )


def _indexes(backend: Backend) -> str:
    if backend.kind == "sqlite":
        rows = backend.sql("SELECT name FROM sqlite_master WHERE type = 'index'")
    else:
        rows = backend.sql("SELECT indexname FROM pg_indexes WHERE schemaname = %s", backend.schema)
    return " ".join(str(r[0]) for r in rows)


def _graph() -> Any:
    schema = StateSchema.builder().add("log", AppendList()).build()
    return Graph(schema).add_node("a", lambda s: {"log": ["a"]}).add_edge(START, "a").add_edge("a", END)


@pytest.mark.parametrize("version", range(1, SCHEMA_VERSION))
def test_a_store_of_every_older_version_is_refused_then_upgraded_in_place(backend: Backend, version: int) -> None:
    backend.build(version)
    done = make("done", None, {"log": ["x"]})
    waiting = make("waiting", None, {"log": ["y"]}, next_tasks=(Task(id="task-1", node="a"),))
    asked = PendingWrite(
        task_id="task-1",
        kind="interrupt",
        key="0",
        value={"id": "i1", "value": "ok?", "node": "a", "task_id": "task-1", "index": 0},
    )
    unfinished = make("unfinished", None, {"log": ["z"]}, next_tasks=(Task(id="task-2", node="a"),))
    running = make("running", None, {"log": ["w"]}, next_tasks=(Task(id="task-3", node="a"),))
    _insert(backend, done.checkpoint)
    _insert(backend, waiting.checkpoint, (asked,))
    _insert(backend, unfinished.checkpoint)
    _insert(backend, running.checkpoint)
    if version < 7:  # the leases table, before thread rows existed
        backend.sql(
            "INSERT INTO {P}leases (ns, thread_id, owner, expires_at) VALUES (%s, %s, %s, %s)",
            "",
            "running",
            "an older plait",
            time.time() + 600,
        )
    else:  # the thread rows version 7 keeps, as its commits and leases left them
        now = time.time()
        for tid, gen, held, status, expires in (
            ("done", 0, 0, "idle", 0.0),
            ("waiting", 0, 0, "interrupted", 0.0),
            ("unfinished", 0, 0, "stale", 0.0),
            ("running", 1, 1, "idle", now + 600),
        ):
            backend.sql(
                "INSERT INTO {P}threads (ns, thread_id, gen, owner, holder, taken_at, expires_at, held, status,"
                " updated_at) VALUES (%s, %s, %s, %s, NULL, %s, %s, %s, %s, %s)",
                "",
                tid,
                gen,
                "an older plait" if held else None,
                now,
                expires,
                held,
                status,
                now,
            )

    if backend.kind == "postgres":  # migrations are explicit there (SQLite's file upgrades itself on open)
        from plait.checkpoint.postgres import PostgresCheckpointer

        old = PostgresCheckpointer(backend.dsn, schema=backend.schema)
        try:
            with pytest.raises(StoreVersionError) as info:
                asyncio.run(old.aget("done"))
            assert (info.value.found, info.value.known) == (version, SCHEMA_VERSION)
        finally:
            old.close()
    store = backend.open()  # migrates
    try:
        same(asyncio.run(store.aget("done")), done.checkpoint)
        head = asyncio.run(store.aget("waiting"))
        same(head, waiting.checkpoint)
        assert head is not None and head.pending_writes == (asked,)
        statuses = {t.thread_id: t.status for t in asyncio.run(store.alist_threads())}
        assert statuses == {"done": "idle", "waiting": "interrupted", "unfinished": "ready", "running": "busy"}
        by_status = {
            s: [t.thread_id for t in asyncio.run(store.alist_threads(status=s))] for s in set(statuses.values())
        }
        assert by_status == {"idle": ["done"], "interrupted": ["waiting"], "ready": ["unfinished"], "busy": ["running"]}
        assert "threads_waiting" in _indexes(backend)  # version 11: what a status filter reads
        with pytest.raises(ThreadBusyError) as busy:  # the older plait's lease is still honoured
            asyncio.run(store.atake_lease("running", "a new run"))
        assert busy.value.owner == "an older plait"
        app = _graph().compile(checkpointer=store)
        assert app.invoke(None, thread_id="unfinished")["log"] == ["z", "a"]
        assert app.invoke({"log": ["new"]}, thread_id="fresh")["log"] == ["new", "a"]
        statuses = {t.thread_id: t.status for t in asyncio.run(store.alist_threads())}
        assert statuses["unfinished"] == statuses["fresh"] == "idle"
        past = app.get_state_history("fresh")[-1].checkpoint_id
        for word in ("b1", "b2"):  # the second builds on the past checkpoint as remembered (fenced: schema 13)
            made = app.update_state("fresh", {"log": [word]}, checkpoint_id=past)
            assert app.get_state("fresh", made).values["log"] == ["new", word]
    finally:
        asyncio.run(store.aclose())


_PUT_CHECKPOINT_12 = """SELECT {P}put_checkpoint(%s::text, %s::text, %s::text, %s::bigint, %s::boolean, %s::text,
    %s::text, %s::text, %s::boolean, %s::float8, %s::text, %s::text, %s::bigint, %s::float8, %s::text, %s::bytea,
    %s::bytea, %s::boolean, %s::boolean, %s::text)"""
"""The usual commit as a plait of schema 12 sends it."""


@pytest.mark.postgres
def test_a_plait_of_schema_12_still_running_commits_through_its_functions_after_the_upgrade(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Schema 13 adds overloads of fence() and put_checkpoint() and drops none, so a process
    of the previous version that checked the store before the upgrade keeps committing."""
    import psycopg

    backend = Backend("postgres", tmp_path, request)
    backend.build(12)
    first = make("t", None, {"log": ["x"]})
    _insert(backend, first.checkpoint)
    store = backend.open()  # migrates to 13
    try:

        def put(cp: Checkpoint) -> None:  # an update on the first checkpoint, fenced on it as the head
            fence = ("", "t", "an older plait", None, True, first.checkpoint.id, cp.id, None, False, None)
            row = (cp.id, cp.parent_id, cp.step, cp.created_at, "", encode_json(cp.metadata), _body(cp))
            _insert_blobs(backend, cp)  # (its own statements, before the call)
            backend.sql(_PUT_CHECKPOINT_12, *fence, *row, False, True, "idle")

        second = make("t", first.checkpoint, {"log": ["x", "y"]}).checkpoint
        put(second)
        same(asyncio.run(store.aget("t")), second)
        with pytest.raises(psycopg.Error, match="another head"):  # its fence still checks the head
            put(make("t", first.checkpoint, {"log": ["x", "z"]}).checkpoint)
    finally:
        asyncio.run(store.aclose())
