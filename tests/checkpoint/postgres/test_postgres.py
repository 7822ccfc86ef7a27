"""PostgresCheckpointer against a real PostgreSQL: explicit migrations and the version check,
schemas, compact storage, branches and prune, corruption, leases on the database clock,
connection loss, NUL handling, and a borrowed pool. Each test gets a fresh schema."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from plait._codec import canonical
from plait.checkpoint.model import Checkpoint, PendingWrite, WritesBatch
from plait.checkpoint.sql._schema import SCHEMA_VERSION
from plait.errors import (
    CheckpointCorruptError,
    CheckpointError,
    InvalidIdError,
    LeaseLostError,
    StoreVersionError,
    ThreadBusyError,
)

from .._backend_helpers import append_chat, make, same

pytestmark = pytest.mark.postgres
psycopg = pytest.importorskip("psycopg")
postgres = pytest.importorskip("plait.checkpoint.postgres")


@pytest.fixture
def store(postgres_dsn: str, postgres_schema: str) -> Iterator[tuple[str, str]]:
    yield postgres_dsn, postgres_schema


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def sql(dsn: str, statement: str, *params: Any) -> list[Any]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(statement, params or None)
        return cur.fetchall() if cur.description else []


def test_a_store_that_is_not_set_up_is_refused_until_setup(store: tuple[str, str]) -> None:
    dsn, schema = store

    async def go() -> None:
        cp = postgres.PostgresCheckpointer(dsn, schema=schema)
        with pytest.raises(StoreVersionError, match="plait db migrate") as info:
            await cp.aget("t")
        assert info.value.found == 0
        await asyncio.gather(
            cp.asetup(), postgres.PostgresCheckpointer(dsn, schema=schema).asetup()
        )  # concurrent: safe
        await cp.asetup()  # and repeatable
        assert await cp.aget("t") is None
        await cp.aclose()

    run(go())
    sql(dsn, f'INSERT INTO "{schema}".plait_migrations VALUES (42, 0)')

    async def newer() -> None:
        cp = postgres.PostgresCheckpointer(dsn, schema=schema)
        with pytest.raises(StoreVersionError, match="upgrade plait"):
            await cp.alist_threads()
        with pytest.raises(StoreVersionError):
            await cp.asetup()
        await cp.aclose()

    run(newer())


def test_migrate_creates_the_schema_and_tables(postgres_dsn: str, postgres_schema: str) -> None:
    schema = postgres_schema + "_new"
    cp = postgres.PostgresCheckpointer(postgres_dsn, schema=schema)
    try:
        assert cp.migrate() == 0
        assert cp.migrate() == SCHEMA_VERSION
        tables = {r[0] for r in sql(postgres_dsn, "SELECT tablename FROM pg_tables WHERE schemaname = %s", schema)}
        assert {"plait_checkpoints", "plait_blobs", "plait_writes", "plait_threads", "plait_migrations"} <= tables
        assert "plait_leases" not in tables  # replaced by plait_threads in version 7
    finally:
        cp.close()
        sql(postgres_dsn, f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def test_round_trip_deltas_and_storage_size(store: tuple[str, str]) -> None:
    dsn, schema = store

    async def go() -> list[Checkpoint]:
        cp = postgres.PostgresCheckpointer(dsn, schema=schema)
        await cp.asetup()
        written = await append_chat(cp, "chat", 300)
        history = await cp.ahistory("chat")
        assert [c.id for c in history] == [c.id for c in reversed(written)]
        for got, want in zip(history[:5] + history[-5:], list(reversed(written))[:5] + list(reversed(written))[-5:]):
            same(got, want)
        same(await cp.aget("chat"), written[-1])
        same(await cp.aget("chat", written[100].id), written[100])
        await cp.aclose()
        return written

    written = run(go())
    raw = len(canonical(written[-1].values["messages"]))
    ((stored, deltas),) = sql(
        dsn, f'SELECT sum(length(data)), count(base_id) FROM "{schema}".plait_blobs WHERE channel = %s', "messages"
    )
    assert stored < 3 * raw and deltas > 250


def test_pending_writes_and_folding(store: tuple[str, str]) -> None:
    dsn, schema = store

    async def go() -> None:
        cp = postgres.PostgresCheckpointer(dsn, schema=schema)
        await cp.asetup()
        root = make("t", None, {"n": 1})
        await cp.acommit(checkpoints=[root])
        w = PendingWrite(task_id="a", kind="result", value={"writes": [["n", 2]]})
        w2 = PendingWrite(task_id="a", kind="result", value={"writes": [["n", 3]]})
        for batch in (w, w2):
            await cp.acommit(writes=[WritesBatch(thread_id="t", checkpoint_id=root.checkpoint.id, writes=(batch,))])
        got = await cp.aget("t")
        assert got is not None and got.pending_writes == (w2,)
        await cp.acommit(checkpoints=[make("t", root.checkpoint, {"n": 3}, folds=True)])
        assert (await cp.aget("t", root.checkpoint.id)).pending_writes == ()
        await cp.aclose()

    run(go())


def test_branches_prune_and_history(store: tuple[str, str]) -> None:
    dsn, schema = store

    async def go() -> None:
        cp = postgres.PostgresCheckpointer(dsn, schema=schema)
        await cp.asetup()
        written = await append_chat(cp, "t", 30, size=200)
        branch = make("t", written[8], {"turn": -1})
        await cp.acommit(checkpoints=[branch])
        assert [c.id for c in await cp.ahistory("t", limit=3)] == [branch.checkpoint.id, written[8].id, written[7].id]
        assert [c.id for c in await cp.ahistory("t", filter={"step": 3})] == [written[3].id]
        keep = {c.id: c for c in await cp.ahistory("t", before=written[-1].id, limit=3)}
        keep[written[-1].id] = written[-1]
        assert await cp.aprune("t", keep_last=4) == 31 - 8
        for cid, want in keep.items():
            got = await cp.aget("t", cid)
            assert got is not None and canonical(got.values) == canonical(want.values)
        same(await cp.aget("t"), branch.checkpoint)
        (info,) = await cp.alist_threads()
        assert info.checkpoints == 8 and info.head_id == branch.checkpoint.id
        await cp.adelete_thread("t")
        assert await cp.alist_threads() == [] and await cp.aget("t") is None
        await cp.aclose()

    run(go())


def test_corruption_is_named_and_contained(store: tuple[str, str]) -> None:
    dsn, schema = store

    async def fill() -> None:
        cp = postgres.PostgresCheckpointer(dsn, schema=schema)
        await cp.asetup()
        for name in ("bad", "good"):
            await append_chat(cp, name, 5, size=100)
        await cp.aclose()

    run(fill())
    sql(dsn, f"UPDATE \"{schema}\".plait_blobs SET data = '\\x00ff'::bytea WHERE thread_id = 'bad'")

    async def check() -> None:
        cp = postgres.PostgresCheckpointer(dsn, schema=schema)
        with pytest.raises(CheckpointCorruptError) as info:
            await cp.aget("bad")
        assert info.value.thread_id == "bad" and info.value.checkpoint_id
        assert len(await cp.alist_threads()) == 2
        assert await cp.aget("good") is not None
        await cp.aclose()

    run(check())


def test_leases_use_the_database_clock_across_instances(store: tuple[str, str]) -> None:
    dsn, schema = store

    async def go() -> None:
        a = postgres.PostgresCheckpointer(dsn, schema=schema)
        b = postgres.PostgresCheckpointer(dsn, schema=schema)
        await a.asetup()
        first = await a.atake_lease("t", "a", ttl=600)
        with pytest.raises(ThreadBusyError) as info:
            await b.atake_lease("t", "b")
        assert info.value.owner == "a" and 0 < info.value.expires_in <= 600
        assert info.value.alive is True and info.value.token == first.token  # this process: alive
        expired = await a.arenew_lease(first, ttl=0)  # renewed, already expired on the server's clock
        taken = await b.atake_lease("t", "b", ttl=600)  # taken over
        assert taken.token > expired.token
        await a.arelease_lease(expired)  # not the current lease: nothing happens
        with pytest.raises(ThreadBusyError):
            await a.atake_lease("t", "a")
        with pytest.raises(LeaseLostError) as lost:
            await a.arenew_lease(expired)
        assert lost.value.taken_by == "b"
        await b.arelease_lease(taken)
        await a.atake_lease("t", "a")
        await a.aclose()
        await b.aclose()

    run(go())


def test_a_dropped_connection_is_retried_and_nothing_half_written_is_read(store: tuple[str, str]) -> None:
    dsn, schema = store

    app = f"plait-{schema}"  # only this test's connections are cut
    conninfo = psycopg.conninfo.make_conninfo(dsn, application_name=app)

    async def go() -> None:
        cp = postgres.PostgresCheckpointer(conninfo, schema=schema, max_connections=2)
        await cp.asetup()
        written = await append_chat(cp, "t", 5, size=100)
        for _ in range(3):
            cut = sql(dsn, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s", app)
            assert cut
            head = await cp.aget("t")
            same(head, written[-1])
            nxt = make("t", written[-1], {"turn": 100 + len(written)})
            await cp.acommit(checkpoints=[nxt])
            written.append(nxt.checkpoint)
        same(await cp.aget("t"), written[-1])
        assert len(await cp.ahistory("t")) == len(written)
        await cp.aclose()

    run(go())


def test_an_unreachable_database_is_a_checkpoint_error() -> None:
    async def go() -> None:
        cp = postgres.PostgresCheckpointer("postgresql://postgres@127.0.0.1:1/none", connect_timeout=1)
        with pytest.raises(CheckpointError, match="connection failed"):
            await cp.aget("t")
        await cp.aclose()

    run(go())


def test_nul_in_ids_is_refused_cleanly_and_values_keep_it(store: tuple[str, str]) -> None:
    dsn, schema = store

    async def go() -> None:
        cp = postgres.PostgresCheckpointer(dsn, schema=schema)
        await cp.asetup()
        with pytest.raises(InvalidIdError, match="NUL"):
            await cp.acommit(checkpoints=[make("a\x00b", None, {"v": 1})])
        with pytest.raises(InvalidIdError, match="NUL"):
            await cp.aget("a\x00b")
        with pytest.raises(CheckpointError, match="NUL"):
            await cp.atake_lease("t", "own\x00er")
        cw = make("t", None, {"v": "x\x00y"}, metadata={"label": "\x00"})
        await cp.acommit(checkpoints=[cw])
        same(await cp.aget("t"), cw.checkpoint)
        await cp.aclose()

    run(go())


def test_a_borrowed_pool_stays_open(store: tuple[str, str]) -> None:
    dsn, schema = store
    from psycopg_pool import ConnectionPool

    pool = ConnectionPool(dsn, min_size=1, max_size=2, open=True)
    try:

        async def go() -> None:
            cp = postgres.PostgresCheckpointer(pool, schema=schema)
            await cp.asetup()
            cw = make("t", None, {"v": [1, 2]})
            await cp.acommit(checkpoints=[cw])
            same(await cp.aget("t"), cw.checkpoint)
            await cp.aclose()
            with pytest.raises(CheckpointError, match="closed"):
                await cp.aget("t")

        run(go())
        with pool.connection() as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
    finally:
        pool.close()


def test_a_pool_that_prepares_nothing_runs_graphs_without_prepared_statements(store: tuple[str, str]) -> None:
    """Behind a pooler that cannot keep prepared statements (PgBouncer in transaction mode),
    a pool with prepare_threshold=None serves every call unprepared (howto.md)."""
    dsn, schema = store
    from psycopg_pool import ConnectionPool

    from plait import END, START, Graph, StateSchema

    graph = Graph(StateSchema.builder().add_lww("n").build())
    graph.add_node("inc", lambda s: {"n": s["n"] + 1}).add_edge(START, "inc")
    graph.add_conditional_edges("inc", lambda s: "inc" if s["n"] < 12 else END)
    kwargs = {"autocommit": True, "prepare_threshold": None}
    with ConnectionPool(dsn, min_size=1, max_size=1, open=True, kwargs=kwargs) as pool:
        cp = postgres.PostgresCheckpointer(pool, schema=schema)
        cp.migrate()
        app = graph.compile(checkpointer=cp)
        for thread in ("a", "b"):
            assert app.invoke({"n": 0}, thread_id=thread) == {"n": 12}
            assert app.get_state(thread).values == {"n": 12}
        with pool.connection() as conn:
            assert conn.execute("SELECT count(*) FROM pg_prepared_statements").fetchone() == (0,)
        cp.close()


def test_import_plait_does_not_import_psycopg() -> None:
    import subprocess

    code = "import sys, plait, plait.checkpoint.sqlite; print('psycopg' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("fenced", [False, True], ids=["require_parent", "fence"])
def test_a_parent_deleted_by_another_process_is_not_built_upon(store: tuple[str, str], fenced: bool) -> None:
    """A commit on a cached parent checks, in its transaction, that the parent still exists
    (require_parent(), or the fence when the commit has one); one deleted meanwhile makes it
    store its values from what the database holds instead."""
    dsn, schema = store
    from plait._codec import freeze
    from plait._frozen import FrozenList
    from plait.checkpoint.model import Fence

    fence = Fence(owner="run") if fenced else None

    async def go() -> None:
        a = postgres.PostgresCheckpointer(dsn, schema=schema)
        b = postgres.PostgresCheckpointer(dsn, schema=schema)
        await a.asetup()
        written = await append_chat(a, "t", 4, size=100)
        await b.adelete_thread("t")
        msgs = FrozenList([*written[-1].values["messages"], freeze({"id": "late"}, "m")])
        child = make("t", written[-1], {"messages": msgs})
        await a.acommit(checkpoints=[child], fence=fence)
        grandchild = make("t", child.checkpoint, {"turn": 99})
        await a.acommit(checkpoints=[grandchild], fence=fence)
        for cp in (a, b):
            same(await cp.aget("t"), grandchild.checkpoint)
            same(await cp.aget("t", child.checkpoint.id), child.checkpoint)
        await a.aclose()
        await b.aclose()

    run(go())


def test_a_lease_leaves_the_pooled_connection_as_it_was(store: tuple[str, str]) -> None:
    """Leases commit with synchronous_commit off (set_config(..., true) in take_lease() and
    give_lease()): the setting ends with the lease's transaction, so a commit on the same
    connection is flushed as usual."""
    dsn, schema = store
    from psycopg_pool import ConnectionPool

    pool = ConnectionPool(dsn, min_size=1, max_size=1, open=True, kwargs={"autocommit": True})
    try:

        async def go() -> None:
            cp = postgres.PostgresCheckpointer(pool, schema=schema)
            await cp.asetup()
            mine = await cp.atake_lease("t", "me")
            with pytest.raises(ThreadBusyError):
                await cp.atake_lease("t", "other")
            await cp.arelease_lease(mine)
            await cp.atake_lease("t", "other")
            await cp.aclose()

        run(go())
        with pool.connection() as conn:
            assert conn.execute("SHOW synchronous_commit").fetchone() == ("on",)
        assert sql(dsn, f'SELECT owner, held FROM "{schema}".plait_threads') == [("other", 1)]
    finally:
        pool.close()


def test_only_sync_facade_calls_run_on_the_callers_thread(store: tuple[str, str]) -> None:
    """An async caller's loop may have other work a network stall would hold up, so its
    queries go to the query threads; a sync facade call (which blocks anyway) runs them on
    its own thread when nothing else of the checkpointer is running."""
    import threading

    from plait._sync import run_sync

    dsn, schema = store
    cp = postgres.PostgresCheckpointer(dsn, schema=schema)
    cp.migrate()
    ran_on: list[int] = []
    original = cp._transaction

    def spy(fn: Any, **kw: Any) -> Any:
        ran_on.append(threading.get_ident())
        return original(fn, **kw)

    cp._transaction = spy

    async def lone() -> int:
        await cp.aget("t")
        return threading.get_ident()

    try:
        caller = asyncio.run(lone())
        assert ran_on == [ran_on[0]] and ran_on[0] != caller, "async caller: a query thread"
        ran_on.clear()
        caller = run_sync(lone())
        assert ran_on == [caller], "sync facade: the caller's own thread"
    finally:
        cp.close()


def test_a_commit_chosen_as_a_deadlock_victim_is_run_again_and_lands(store: tuple[str, str]) -> None:
    """Another session's DDL (the Studio creating its notify trigger) can deadlock with a
    commit: the server then rolls the commit back whole, and the checkpointer runs it again.
    The deadlock is built for real: the other session holds the checkpoints table and waits for
    the thread's fence lock, which the commit holds while it waits for the table."""
    import threading

    from plait.checkpoint.model import Fence
    from plait.checkpoint.postgres._functions import PG_LOCK_KEY

    dsn, schema = store
    app = f"plait-{schema}"
    conninfo = psycopg.conninfo.make_conninfo(dsn, application_name=app)
    cp = postgres.PostgresCheckpointer(conninfo, schema=schema)
    cp.setup()
    lease = cp.take_lease("t", "run")
    table_held, done = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def other_session() -> None:
        try:
            with psycopg.connect(dsn) as conn:
                conn.execute("SET deadlock_timeout = '60s'")  # so the commit is the victim, not this
                conn.execute(f'LOCK TABLE "{schema}".plait_checkpoints IN SHARE ROW EXCLUSIVE MODE')
                table_held.set()
                deadline = time.monotonic() + 30
                while not sql(  # until the commit waits for the table, holding the fence lock
                    dsn,
                    "SELECT 1 FROM pg_stat_activity WHERE application_name = %s AND wait_event_type = 'Lock'",
                    app,
                ):
                    assert time.monotonic() < deadline, "the commit never waited for the table"
                    time.sleep(0.01)
                conn.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (PG_LOCK_KEY, "/t"))
                conn.rollback()
        except BaseException as exc:
            errors.append(exc)
        finally:
            done.set()

    worker = threading.Thread(target=other_session)
    worker.start()
    assert table_held.wait(30)
    first = make("t", None, {"n": 1})
    cp.commit(checkpoints=[first], fence=Fence(owner="run", token=lease.token))
    assert done.wait(30)
    worker.join()
    assert not errors, errors
    same(cp.get("t"), first.checkpoint)
    cp.close()


def test_a_store_set_up_through_the_search_path_writes_its_own_tables_when_named_by_schema(
    postgres_dsn: str, postgres_schema: str
) -> None:
    """Set up with no schema= (the search path names it) and then used with schema=, from a
    session whose search path names another plait schema: every write lands in its own."""
    from plait import END, START, AppendList, Graph, StateSchema

    decoy = postgres_schema + "_decoy"
    sep = "&" if "?" in postgres_dsn else "?"

    def on_path(name: str) -> str:
        return f"{postgres_dsn}{sep}options=-csearch_path%3D{name}"

    setup = postgres.PostgresCheckpointer(on_path(postgres_schema))
    other = postgres.PostgresCheckpointer(postgres_dsn, schema=decoy)
    try:
        setup.setup()
        other.setup()
        store = postgres.PostgresCheckpointer(on_path(decoy), schema=postgres_schema)
        try:
            g = Graph(StateSchema.builder().add("log", AppendList()).build())
            g.add_node("n", lambda s: {"log": ["x" * 200]})  # big enough for the blobs table
            g.add_edge(START, "n")
            g.add_edge("n", END)
            app = g.compile(checkpointer=store)
            app.invoke({}, thread_id="t")
            app.invoke({}, thread_id="t")
            assert app.get_state("t").values["log"] == ["x" * 200] * 2
        finally:
            store.close()
        for table in ("checkpoints", "blobs", "threads"):
            mine = sql(postgres_dsn, f'SELECT count(*) FROM "{postgres_schema}".plait_{table}')[0][0]
            theirs = sql(postgres_dsn, f'SELECT count(*) FROM "{decoy}".plait_{table}')[0][0]
            assert (mine > 0, theirs) == (True, 0), table
    finally:
        setup.close()
        other.close()
        sql(postgres_dsn, f'DROP SCHEMA IF EXISTS "{decoy}" CASCADE')
