"""PostgresCheckpointer: checkpoints in PostgreSQL, shared by many processes and machines.

All SQL lives in :mod:`plait.checkpoint.sql`, and how statements travel to the server in
:mod:`plait.checkpoint.postgres._send`; this module owns the pool, the threads the blocking
psycopg calls run on, migrations' locking and the retry policy. psycopg is imported inside
functions only, so ``import plait`` never needs it.

Migrations are explicit: ``await asetup()`` (or ``setup()``, or ``migrate()``, which ``plait db migrate``
calls) creates or upgrades the tables under an advisory lock, so concurrent setups are safe.
Every other call first checks the stored schema version and refuses, with
:class:`~plait.errors.StoreVersionError`, a database that is not set up or was written by a
newer plait.

Round trips: a commit or a lease reads no result (plait's functions raise server-side
instead of answering), so its statements go in one round trip, in one implicit transaction:
the usual commit (a fence and one checkpoint row) as one prepared call of
``put_checkpoint()``, others as one query (see ``send``); a run's lease and first read are
one call too (``take_lease_and_get()``), and reads send no BEGIN and COMMIT. Blocking calls
run on query threads, or on the caller's thread when its event loop has nothing else ready
and no other call of this checkpointer is running (see ``_off_loop`` and
:func:`~plait.checkpoint.sql._caller.may_block`).

Connection loss: every operation is one transaction whose statements are idempotent
(upserts keyed by ids the caller chose), so it is retried on a fresh connection when the
connection breaks, whether or not its COMMIT was reached; a transaction that did not commit
left nothing behind, and one that did is simply written again. When the retries run out,
the error is a :class:`~plait.errors.CheckpointError` naming the store.

Text columns (thread ids, namespaces, channel names, task ids, write keys, lease owners)
cannot hold NUL in PostgreSQL. Ids with NUL break the id rule every backend shares, and any
call naming one raises :class:`~plait.errors.InvalidIdError`; a commit or lease with NUL in
another text is refused with :class:`~plait.errors.CheckpointError`, in both cases before
anything is sent. Values and metadata are stored as JSON bytes and may contain anything.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

from plait.checkpoint._validate import check_thread
from plait.checkpoint.base import Capabilities
from plait.checkpoint.feed import ChangeFeed
from plait.checkpoint.model import (
    Checkpoint,
    Lease,
)
from plait.checkpoint.postgres._connect import connection_lost, failure, first_connection, redacted, refusal, scrubbed
from plait.checkpoint.postgres._dialect import pg_dialect as _dialect
from plait.checkpoint.postgres._dialect import quote_ident as _quote_ident
from plait.checkpoint.postgres._feed import PgFeed
from plait.checkpoint.postgres._loop import LoopPool, drive_steps
from plait.checkpoint.postgres._riders import LeaseRiders
from plait.checkpoint.postgres._schema import SWEEP_LOCK, SWEEP_UNLOCK
from plait.checkpoint.postgres._send import Cursors, Fusion, NeedsAnswer, Recorder, pipelined, send
from plait.checkpoint.postgres._space import dead_space, vacuum
from plait.checkpoint.retention import Retention
from plait.checkpoint.space import DeadSpace
from plait.checkpoint.sql._base import CommitRequest, Cursor
from plait.checkpoint.sql._caller import may_block
from plait.checkpoint.sql._checkpointer import SqlCheckpointer
from plait.checkpoint.sql._core import SqlCore
from plait.errors import CheckpointError, ThreadBusyError

if TYPE_CHECKING:
    import psycopg
    from psycopg_pool import AsyncConnectionPool, ConnectionPool

__all__ = ["PostgresCheckpointer"]

T = TypeVar("T")

_MIGRATION_LOCK = 0x706C616974  # "plait": pg_advisory_xact_lock key for setup()
_RETRIES = 3
_ROLLED_BACK = frozenset({"40P01", "40001"})
"""SQLSTATEs of a transaction the server rolled back whole to break a deadlock (40P01) or a
serialization conflict (40001): retried as a connection loss is."""


async def _taking_over_the_dead(take: Callable[[int | None], Awaitable[T]]) -> T:
    """``take(None)``; when that finds a live lease whose holder is provably dead on this
    machine (the server cannot tell), ``take(generation)``, which takes over exactly that
    lease (a holder that renewed or gave it back meanwhile is found again, and refuses)."""
    try:
        return await take(None)
    except ThreadBusyError as busy:
        if busy.alive is not False or busy.token is None:
            raise
        return await take(busy.token)


def _has_nul(*texts: str | None) -> bool:
    return any(t is not None and "\x00" in t for t in texts)


class PostgresCheckpointer(SqlCheckpointer):
    """Checkpoints in PostgreSQL (psycopg 3, a connection pool), one transaction per commit.

    Args:
        conninfo: a connection string (a pool is created and owned), or an open
            ``psycopg_pool.ConnectionPool`` (borrowed: :meth:`close` leaves it open).
        schema: the Postgres schema for plait's tables (created by :meth:`setup`); None
            uses the connection's search path.
        max_connections: the size of the pool created from a connection string, and the
            number of threads that run queries.
        connect_timeout: seconds to wait for a connection before failing with
            :class:`~plait.errors.CheckpointError`.
        lease_ttl: seconds a run's lease lasts unless renewed.
        clock: the lease clock (unix seconds). None (the default) uses the database server's
            clock, which every machine sharing the database agrees on; tests pass one they
            advance by hand (every process sharing the database must then use it).
        retention: the policy :meth:`asweep` applies (see :class:`~plait.checkpoint.retention.Retention`);
            its idle times are measured by ``clock``, or by this machine's clock when None.
    """

    capabilities = Capabilities(kind="postgres", any_loop=True, change_feed=True, memory=True)

    def __init__(
        self,
        conninfo: str | ConnectionPool,
        *,
        schema: str | None = None,
        max_connections: int = 4,
        connect_timeout: float = 30.0,
        lease_ttl: float = 30.0,
        clock: Callable[[], float] | None = None,
        retention: Retention | None = None,
    ) -> None:
        self.lease_ttl = lease_ttl
        self.clock = clock
        self.set_retention(retention)
        self.schema = schema
        self._conninfo = conninfo if isinstance(conninfo, str) else None
        self._max_connections = max_connections
        self._connect_timeout = connect_timeout
        self._store = f"PostgreSQL schema {schema!r}" if schema else "PostgreSQL database"
        self._core = SqlCore(_dialect(schema), self._store)
        self._cursors = Cursors()
        self._fusion = Fusion(
            *(
                self._core.statement(k)
                for k in ("fence", "ins_cp", "release", "settle", "put_checkpoint", "del_writes_of")
            )
        )
        if isinstance(conninfo, str):
            self._pool = self._new_pool()
            self._owns_pool = True
        else:
            self._pool = conninfo
            self._owns_pool = False
            max_connections = conninfo.max_size
        self._executor = ThreadPoolExecutor(max_workers=max_connections, thread_name_prefix="plait-pg")
        self._opened = False
        self._checked = False
        self._set_up = False
        """:meth:`migrate` ran: a later :meth:`asetup` has nothing to do (a graph bound per
        request, as the API server binds one, calls it each time)."""
        self.created = False
        """Whether a setup by this object found none of plait's tables and created them (what
        ``plait db migrate`` reports: a new store, not one brought up to date)."""
        self._closed = False
        self._jobs = 0
        """Jobs of this checkpointer running now, on any thread (see :meth:`_off_loop`)."""
        self._jobs_lock = threading.Lock()
        self._loop_pool: LoopPool | None = None
        """The async pool the hot calls made on its event loop run on (:meth:`use_async_pool`)."""
        self.lease_riders = LeaseRiders()
        """Callers' statements sent with a lease's (see :mod:`~plait.checkpoint.postgres._riders`)."""

    @property
    def address(self) -> str | None:
        return self._conninfo or str(self._pool.conninfo)

    @property
    def address_options(self) -> Mapping[str, Any]:
        return {"schema": self.schema} if self.schema else {}

    def achanges(
        self, *, namespace: str | None = None, thread_id: str | None = None, interval: float | None = None
    ) -> ChangeFeed:
        """LISTEN/NOTIFY on a connection of its own, through a trigger on plait's tables
        that the first feed of a schema adds (a commit pays nothing before); a role without
        the right to add it polls the thread rows every ``interval`` seconds (0.5 by
        default) and logs why."""
        return PgFeed(
            self.address or "",
            schema=self.schema,
            connect_timeout=self._connect_timeout,
            interval=interval,
            namespace=namespace,
            thread_id=thread_id,
        )

    # -- plumbing ----------------------------------------------------------------------------

    def _new_pool(self) -> ConnectionPool:
        from psycopg_pool import ConnectionPool

        assert self._conninfo is not None
        return ConnectionPool(
            self._conninfo,
            min_size=1,
            max_size=self._max_connections,
            open=False,
            timeout=self._connect_timeout,
            # No check on every checkout (a round trip per transaction): a connection that broke
            # while idle fails its first statement, and _transaction retries on another one.
            kwargs={"autocommit": True},
        )

    def _open_pool(self) -> None:
        """Open the pool this checkpointer owns; on failure, start afresh on the next call.

        One connection is made first, by hand (see
        :func:`~plait.checkpoint.postgres._connect.first_connection`): the pool's own workers retry
        a failing connection in the background, logging a warning each time, and
        ``open(wait=True)`` learns nothing of why until its timeout runs out (psycopg issue
        #556), so a wrong address, database, user or password would cost the whole
        ``connect_timeout`` and print the retries, for an error no retry can mend. The cost
        when all is well: one connection more, once per checkpointer.
        """
        import psycopg

        deadline = time.monotonic() + self._connect_timeout
        assert self._conninfo is not None
        first_connection(self._conninfo, self._store, self._connect_timeout, deadline)
        try:
            self._pool.open(wait=True, timeout=max(deadline - time.monotonic(), 1.0))
        except psycopg.OperationalError as exc:
            self._pool.close()
            self._pool = self._new_pool()
            raise CheckpointError(
                f"{self._store}: the connection failed: cannot connect to {redacted(self._conninfo)} within "
                f"{self._connect_timeout:g}s ({scrubbed(exc, self._conninfo)})"
            ) from exc
        self._opened = True

    def _transaction(
        self,
        fn: Callable[[Cursor], T],
        *,
        check: bool = True,
        pipeline: bool = False,
        batch: bool = False,
        read: bool = False,
    ) -> T:
        """Run ``fn`` in one transaction, retrying on a fresh connection if the connection breaks.

        With ``pipeline`` (commits and leases), statements are sent without waiting for their
        results (see :func:`pipelined`). With ``batch`` (commits and leases), ``fn`` first
        runs on a :class:`Recorder`, and if it reads nothing its statements go in one round
        trip (:func:`send`); ``fn`` must be safe to run again (it is, on a retry, anyway).
        With ``read`` (reads only), no BEGIN and COMMIT are sent: at READ COMMITTED every
        statement takes its own snapshot inside a transaction too, so they would only cost
        two round trips. Results come in binary form, so ``bytea`` columns arrive as bytes
        instead of hex text to decode (several times faster for values).
        """
        import psycopg

        if self._owns_pool and not self._opened:
            self._open_pool()
        for attempt in range(_RETRIES + 1):
            try:
                if batch:
                    recorder = Recorder()
                    try:
                        result = self._checked_run(recorder, fn, check)
                    except NeedsAnswer:
                        pass  # reads: statement by statement, below
                    else:
                        # getconn/putconn, not pool.connection(): its context (a generator and
                        # the connection's own commit-on-exit, a no-op in autocommit) costs
                        # something on every commit; send() leaves no transaction open, and putconn()
                        # rolls back and warns if one ever were.
                        conn = self._pool.getconn()
                        try:
                            send(conn, recorder.statements, self._fusion, self._cursors)
                        finally:
                            self._pool.putconn(conn)
                        return result
                with self._pool.connection() as conn:
                    if pipeline:
                        return pipelined(conn, lambda cur: self._checked_run(cur, fn, check))
                    if read and conn.autocommit:
                        with conn.cursor(binary=True) as cur:
                            return self._checked_run(cur, fn, check)
                    with conn.transaction(), conn.cursor(binary=True) as cur:
                        return self._checked_run(cur, fn, check)
            except psycopg.Error as exc:
                pause, lost = self._retry(exc, attempt)
                time.sleep(pause)
                if lost:
                    self._pool.check()  # drop the other idle connections that broke too (a server restart)
        raise AssertionError("unreachable")

    def _retry(self, exc: psycopg.Error, attempt: int) -> tuple[float, bool]:
        """The retry policy: how long to wait before running a failed transaction again,
        and whether its connection broke; raises what the caller gets when it is not run
        again (the thread path and the loop path share it)."""
        import psycopg

        if exc.sqlstate in _ROLLED_BACK and attempt < _RETRIES:
            # A deadlock or serialization victim: the server rolled the whole
            # transaction back (nothing of it is stored), so running it again is safe;
            # e.g. a commit that met another session's DDL (a trigger being created).
            return 0.01 * (attempt + 1), False
        lost = isinstance(exc, psycopg.OperationalError) and connection_lost(exc)
        if lost and attempt < _RETRIES:
            return 0.05 * (attempt + 1), True
        if lost:
            raise CheckpointError(
                f"{self._store}: the connection failed {attempt + 1} times ({exc}); nothing of the "
                "failed transaction was stored unless it completed, and retrying it is safe"
            ) from exc
        refused = refusal(exc)
        if refused is not None:
            raise refused from None
        raise CheckpointError(failure(self._store, exc)) from exc

    def _checked_run(self, cur: Cursor, fn: Callable[[Cursor], T], check: bool) -> T:
        if check and not self._checked:
            self._core.component.check(cur, self._store)
            self._checked = True
        return fn(cur)

    def _check_open(self) -> None:
        if self._closed:
            raise CheckpointError(f"{self._store}: the checkpointer is closed")

    async def _run(
        self,
        fn: Callable[[Cursor], T],
        *,
        pipeline: bool = False,
        batch: bool = False,
        read: bool = False,
        threaded: bool = False,
    ) -> T:
        self._check_open()
        path = self._loop_pool
        if path is not None and (read or batch) and self._checked and path.here():
            try:
                return await self._on_loop(path, fn, read=not batch)
            except NeedsAnswer:
                pass  # a read that is not the same twice, a commit that reads: the thread path
        return await self._off_loop(
            lambda: self._transaction(fn, pipeline=pipeline, batch=batch, read=read), threaded=threaded
        )

    async def _on_loop(self, path: LoopPool, fn: Callable[[Cursor], T], *, read: bool) -> T:
        """``fn`` on the loop's async pool (see :mod:`~plait.checkpoint.postgres._loop`),
        retried as :meth:`_transaction` retries. Raises NeedsAnswer for the thread path."""
        import psycopg

        for attempt in range(_RETRIES + 1):
            try:
                return await (path.read(fn) if read else path.send(fn))
            except psycopg.Error as exc:
                pause, lost = self._retry(exc, attempt)
                await asyncio.sleep(pause)
                if lost:
                    await path.pool.check()
        raise AssertionError("unreachable")

    def use_async_pool(self, pool: AsyncConnectionPool[Any]) -> None:
        """Run this checkpointer's hot calls made on the running event loop (a run's lease
        and first read, reads, commits that read nothing) on ``pool``, psycopg's async
        connections, instead of on query threads: what a ``plait worker`` does with the pool
        of its run queue, so that it holds one pool and its runs pay no thread hops (see
        :mod:`plait.checkpoint.postgres._loop`). The pool is borrowed (:meth:`close` leaves
        it open) and must give connections in autocommit; calls from other loops, and the
        calls it does not take, keep this checkpointer's own pool and threads. Call it on
        the loop the pool serves."""
        self._loop_pool = LoopPool(pool, self._fusion)

    async def _off_loop(self, job: Callable[[], T], *, threaded: bool = False) -> T:
        """Run a blocking job on a query thread, or on the caller's thread when nothing else
        can be kept waiting by it.

        A hop to a query thread and back costs two thread wake-ups (on a small virtual
        machine about a round trip to the server), which a lone caller waiting for
        the answer gains nothing from. So a call that may block its caller (see
        :func:`~plait.checkpoint.sql._caller.may_block`: a network call is not bounded, so
        only the sync facade's calls qualify) runs the job right here when no other job of
        this checkpointer is running (a pooled connection is then free).
        """
        loop = asyncio.get_running_loop()
        with self._jobs_lock:
            inline = not threaded and self._jobs == 0 and may_block(loop, bounded=False)
            self._jobs += 1
        try:
            if inline:
                return job()
            return await loop.run_in_executor(self._executor, job)
        finally:
            with self._jobs_lock:
                self._jobs -= 1

    @contextlib.asynccontextmanager
    async def _sweep_lock(self) -> AsyncIterator[bool]:
        """Hold the schema's sweep advisory lock (``pg_try_advisory_lock``, session level) on a
        connection of its own while the sweep runs: one sweeper per schema across processes."""
        self._check_open()
        if self._owns_pool and not self._opened:
            await self._off_loop(self._open_pool)
        conn = await self._off_loop(self._pool.getconn)
        try:
            got = await self._off_loop(lambda: bool(conn.execute(SWEEP_LOCK, (self.schema,)).fetchone()[0]))  # type: ignore[index]
            try:
                yield got
            finally:
                if got:
                    await self._off_loop(lambda: conn.execute(SWEEP_UNLOCK, (self.schema,)))
        finally:
            self._pool.putconn(conn)

    def _now(self) -> float | None:
        """The lease clock's time, or None for the server's (read server-side)."""
        return None if self.clock is None else self.clock()

    # -- the SqlCheckpointer hooks ------------------------------------------------------------

    async def _reading(self, fn: Callable[[Cursor], T]) -> T:
        return await self._run(fn, read=True)

    async def _writing(self, fn: Callable[[Cursor], T]) -> T:
        return await self._run(fn)

    async def _leasing(self, fn: Callable[[Cursor], T]) -> T:
        return await self._run(fn, pipeline=True, batch=True)

    async def _bulk_writing(self, fn: Callable[[Cursor], T]) -> T:
        # a sweep's batch: one round trip per read, not per row; on a query thread even when
        # nothing else runs, so that the next batch is planned meanwhile (BatchSql.lanes)
        return await self._run(fn, pipeline=True, threaded=True)

    async def _committing(self, request: CommitRequest) -> None:
        self._check_open()
        path = self._loop_pool
        if path is None or not self._checked or not path.here():
            await self._off_loop(lambda: self._commit_sync(request))
            return
        # the commit path's own steps, each transaction run as _run runs a lease
        steps = self._core.commit.commit_steps([request], self._now)
        (error,) = await drive_steps(steps, lambda fn: self._run(fn, pipeline=True, batch=True))
        if error is not None:
            raise error

    def _commit_sync(self, request: CommitRequest) -> None:
        (error,) = self._core.commit.commit_all(
            lambda fn: self._transaction(fn, pipeline=True, batch=True), [request], self._now
        )
        if error is not None:
            raise error

    def _dead_space(self, cur: Cursor) -> DeadSpace | None:
        return dead_space(cur, self._core.dialect.prefix)

    async def areclaim_space(self, *, full: bool = False) -> int | None:
        """Nothing by default (autovacuum gives dead rows' space back for reuse on its own:
        None). ``full=True`` runs ``VACUUM (ANALYZE)`` on the checkpoint tables now, and says
        how many bytes they shrank by (see :mod:`plait.checkpoint.postgres._space`)."""
        if not full:
            return None
        prefix = self._core.dialect.prefix
        # read=True: no BEGIN, on a pooled connection in autocommit, where VACUUM may run.
        freed: int = await self._run(lambda cur: vacuum(cur, prefix), read=True)
        return freed

    # -- setup -------------------------------------------------------------------------------

    def migrate(self) -> int:
        """Create or upgrade plait's tables (blocking); returns the version found before.

        Raises:
            StoreVersionError: the database was written by a newer plait.
        """

        def migrate(cur: Cursor) -> int:
            cur.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
            if self.schema:
                cur.execute(f"CREATE SCHEMA IF NOT EXISTS {_quote_ident(self.schema)}")
                return self._core.component.migrate(cur, self._store)
            # Set up through the search path: migrate with the schema it names spelled out, so
            # that the functions' bodies name their own tables (an unqualified name there would
            # be looked up in each caller's search path, not where the function lives).
            (current,) = cur.execute("SELECT current_schema()").fetchone()
            if current is None:
                raise CheckpointError(
                    f"{self._store}: the connection's search_path names no schema that exists, so plait "
                    "has nowhere to create its tables; pass schema=... (plait --db '...?options=-csearch_path%3D"
                    "NAME') naming one, or create the schema first"
                )
            return SqlCore(_dialect(str(current)), self._store).component.migrate(cur, self._store)

        found = self._transaction(migrate, check=False)
        self._checked = self._set_up = True
        self.created = self.created or found == 0
        return found

    async def asetup(self) -> None:
        """Create or upgrade plait's tables; safe to call more than once, from many processes."""
        self._check_open()
        if self._set_up:
            return
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, self.migrate)

    # -- the protocol ------------------------------------------------------------------------

    async def atake_lease(self, thread_id: str, owner: str, *, namespace: str = "", ttl: float | None = None) -> Lease:
        check_thread(thread_id, namespace)
        self._core.commit.check_text([("lease owner", owner)])
        seconds = self.lease_ttl if ttl is None else ttl

        async def take(over: int | None) -> Lease:
            return await self._run(
                lambda cur: self._core.threads.take_by_server(
                    cur, (namespace, thread_id), owner, seconds, over, self._now()
                ),
                read=True,
            )

        return await _taking_over_the_dead(take)

    async def arenew_lease(self, lease: Lease, *, ttl: float | None = None) -> Lease:
        check_thread(lease.thread_id, lease.namespace)
        seconds = self.lease_ttl if ttl is None else ttl
        expires = await self._run(
            lambda cur: self._core.threads.renew_by_server(cur, lease, seconds, self._now()), read=True
        )
        return Lease(
            thread_id=lease.thread_id,
            namespace=lease.namespace,
            owner=lease.owner,
            token=lease.token,
            taken_at=lease.taken_at,
            expires_at=expires,
            holder=lease.holder,
        )

    async def atake_lease_and_get(
        self,
        thread_id: str,
        owner: str,
        checkpoint_id: str | None = None,
        *,
        namespace: str = "",
        ttl: float | None = None,
    ) -> tuple[Lease, Checkpoint | None]:
        """Take the lease and read the checkpoint a run starts from in one round trip
        (``take_lease_and_get()``); see :meth:`Checkpointer.atake_lease_and_get`."""
        check_thread(thread_id, namespace, checkpoint_id)
        self._core.commit.check_text([("lease owner", owner)])
        seconds = self.lease_ttl if ttl is None else ttl
        self._check_open()

        key = (namespace, thread_id, owner)
        rider = self.lease_riders.waiting(key)

        async def take(over: int | None) -> tuple[Lease, Checkpoint | None]:
            return await self._run(
                lambda cur: self._core.take_lease_and_get(
                    cur, namespace, thread_id, owner, seconds, checkpoint_id, over, self._now(), rider
                ),
                read=True,
            )

        taken = await _taking_over_the_dead(take)
        if rider is not None:
            self.lease_riders.carried(key)
        return taken

    def close(self) -> None:
        """Stop the query threads and close the pool if this checkpointer created it."""
        if self._closed:
            return
        self._closed = True
        self._loop_pool = None  # borrowed: its owner closes it
        self._executor.shutdown(wait=True)
        if self._owns_pool and self._opened:
            self._pool.close()

    async def aclose(self) -> None:
        await asyncio.to_thread(self.close)

    def __repr__(self) -> str:
        return f"PostgresCheckpointer(schema={self.schema!r})"
