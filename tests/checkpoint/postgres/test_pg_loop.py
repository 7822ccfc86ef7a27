"""A PostgresCheckpointer whose hot calls run on an async pool of the caller's loop
(``use_async_pool``, what a ``plait worker`` does): which calls take it, that they keep the
fences and the retry policy of the thread path, and the replaying cursor reads run on.
The whole checkpointer contract runs on this path too (``postgres-on-loop`` in
test_conformance.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from plait.checkpoint.model import Fence
from plait.checkpoint.postgres._loop import Replay, Unanswered
from plait.checkpoint.postgres._send import NeedsAnswer
from plait.errors import LeaseLostError
from plait.testing import ManualClock

from .._backend_helpers import make

pytestmark = pytest.mark.postgres


def test_replay_answers_what_ran_and_stops_at_the_next_statement() -> None:
    cur = Replay([(("SELECT 1", (1,)), [(1,), (2,)])])
    assert cur.execute("SELECT 1", (1,)).fetchone() == (1,)
    assert cur.fetchall() == [(2,)]
    assert cur.fetchone() is None
    with pytest.raises(Unanswered) as more:
        cur.execute("SELECT 2", ("x",))
    assert more.value.statement == ("SELECT 2", ("x",))


def test_replay_of_another_statement_in_a_place_goes_to_the_thread_path() -> None:
    with pytest.raises(NeedsAnswer):
        Replay([(("SELECT 1", (1,)), [])]).execute("SELECT 1", (2,))
    with pytest.raises(NeedsAnswer):
        Replay([]).executemany("INSERT", [(1,)])


async def _autocommit(conn: Any) -> None:
    await conn.set_autocommit(True)


def _on_loop(dsn: str, schema: str, go: Callable[[Any, Any], Awaitable[None]], clock: Any = None) -> None:
    """``go(checkpointer, pool)`` on a fresh loop: a set-up checkpointer running its hot
    calls on an async pool of that loop."""
    from psycopg_pool import AsyncConnectionPool

    from plait.checkpoint.postgres import PostgresCheckpointer

    async def main() -> None:
        pool = AsyncConnectionPool(dsn, min_size=1, max_size=3, open=False, configure=_autocommit)
        await pool.open(wait=True)
        cp = PostgresCheckpointer(dsn, schema=schema, clock=clock)
        await cp.asetup()
        cp.use_async_pool(pool)
        try:
            await go(cp, pool)
        finally:
            await cp.aclose()
            await pool.close()

    asyncio.run(main())


def _asked(pool: Any) -> int:
    return int(pool.get_stats().get("requests_num", 0))


def test_a_runs_calls_go_on_the_loops_pool_not_the_threads(postgres_dsn: str, postgres_schema: str) -> None:
    async def go(cp: Any, pool: Any) -> None:
        own, asked = _asked(cp._pool), _asked(pool)
        lease, head = await cp.atake_lease_and_get("t", "me")
        assert head is None
        first = make("t", None, {"n": 1})
        await cp.acommit(checkpoints=[first], fence=Fence(owner="me", token=lease.token))
        last = make("t", first.checkpoint, {"n": 2})
        await cp.acommit(checkpoints=[last], fence=Fence(owner="me", token=lease.token, release=True))
        found = await cp.aget("t")
        assert found is not None and found.id == last.checkpoint.id and found.values["n"] == 2
        assert (await cp.atake_lease("t", "next")).owner == "next"  # the last commit gave the lease back
        assert _asked(cp._pool) == own  # nothing went through the query threads
        assert _asked(pool) - asked >= 5

    _on_loop(postgres_dsn, postgres_schema, go)


def test_a_commit_under_a_lease_taken_over_is_refused_on_the_loop(postgres_dsn: str, postgres_schema: str) -> None:
    clock = ManualClock()

    async def go(cp: Any, pool: Any) -> None:
        lease, _ = await cp.atake_lease_and_get("t", "first", ttl=5)
        clock.advance(6)  # the lease ran out, and another run takes the thread
        await cp.atake_lease("t", "second")
        asked = _asked(pool)
        with pytest.raises(LeaseLostError):
            await cp.acommit(checkpoints=[make("t", None, {"n": 1})], fence=Fence(owner="first", token=lease.token))
        assert _asked(pool) > asked  # refused by the server, on the loop's pool
        assert await cp.aget("t") is None

    _on_loop(postgres_dsn, postgres_schema, go, clock)


def test_a_broken_connection_is_retried_on_a_fresh_one(postgres_dsn: str, postgres_schema: str) -> None:
    import psycopg

    async def go(cp: Any, pool: Any) -> None:
        lease, _ = await cp.atake_lease_and_get("t", "me")
        conn = await pool.getconn()
        pid = conn.info.backend_pid
        await pool.putconn(conn)
        with psycopg.connect(postgres_dsn, autocommit=True) as killer:
            killer.execute("SELECT pg_terminate_backend(%s)", (pid,))
        first = make("t", None, {"n": 1})
        await cp.acommit(checkpoints=[first], fence=Fence(owner="me", token=lease.token))
        found = await cp.aget("t")
        assert found is not None and found.id == first.checkpoint.id

    _on_loop(postgres_dsn, postgres_schema, go)


def test_calls_from_another_loop_take_the_threads(postgres_dsn: str, postgres_schema: str) -> None:
    async def go(cp: Any, pool: Any) -> None:
        asked = _asked(pool)
        first = make("t", None, {"n": 1})
        await asyncio.to_thread(lambda: cp.commit(checkpoints=[first]))
        found = await asyncio.to_thread(lambda: cp.get("t"))
        assert found is not None and found.id == first.checkpoint.id
        assert _asked(pool) == asked

    _on_loop(postgres_dsn, postgres_schema, go)


def test_an_update_of_a_remembered_past_checkpoint_is_one_call_on_the_loop_and_still_fenced(
    postgres_dsn: str, postgres_schema: str
) -> None:
    """Updates of one past checkpoint: the first reads it, the next ones build on it as
    remembered, one call of put_checkpoint() on the loop's pool. Task results another
    process saved on it meanwhile, or its removal, make the store refuse such an update;
    it is then read again, and the update carries those results (or finds it gone)."""
    from plait import END, START, AppendList, CheckpointNotFoundError, Graph, StateSchema
    from plait.checkpoint.model import PendingWrite, WritesBatch
    from plait.checkpoint.postgres import PostgresCheckpointer

    graph = Graph(StateSchema.builder().add("log", AppendList()).build()).add_node("a", lambda s: {"log": ["a"]})

    async def go(cp: Any, pool: Any) -> None:
        app = graph.add_edge(START, "a").add_edge("a", END).compile(cp)
        other = PostgresCheckpointer(postgres_dsn, schema=postgres_schema)  # another process
        try:
            pasts = {}
            for thread in ("t", "pruned"):
                await app.ainvoke({"log": ["in"]}, thread_id=thread)
                pasts[thread] = (await app.aget_state_history(thread))[-1].checkpoint_id
                await app.aupdate_state(thread, {"log": ["u1"]}, checkpoint_id=pasts[thread])  # read, remembered
                assert cp.known_checkpoint(thread, pasts[thread]) is not None
            own, asked = _asked(cp._pool), _asked(pool)
            await app.aupdate_state("t", {"log": ["u2"]}, checkpoint_id=pasts["t"])
            assert (_asked(pool) - asked, _asked(cp._pool) - own) == (1, 0), "one call on the loop's pool"

            saved = (PendingWrite(task_id="x", kind="effect", key="k", value=1),)
            await other.acommit(writes=[WritesBatch(thread_id="t", checkpoint_id=pasts["t"], writes=saved)])
            asked = _asked(pool)
            cid = await app.aupdate_state("t", {"log": ["u3"]}, checkpoint_id=pasts["t"])
            assert _asked(pool) - asked > 1, "refused, then read again"
            stored = await cp.aget("t", cid)
            assert stored is not None and stored.parent_id == pasts["t"] and stored.values["log"] == ["in", "u3"]
            assert [(w.task_id, w.value) for w in stored.pending_writes] == [("x", 1)]

            head = (await app.aget_state("pruned")).checkpoint_id
            assert await other.aprune("pruned", keep_last=1, branches=False) > 0
            with pytest.raises(CheckpointNotFoundError):
                await app.aupdate_state("pruned", {"log": ["u2"]}, checkpoint_id=pasts["pruned"])
            assert [s.checkpoint_id for s in await app.aget_state_history("pruned")] == [head]
            assert _asked(cp._pool) == own, "nothing went through the query threads"
        finally:
            await other.aclose()

    _on_loop(postgres_dsn, postgres_schema, go)
