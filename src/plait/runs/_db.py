"""One connection pool to the runs database, shared by plait's run tables and Procrastinate.

The pool is psycopg's async pool; Procrastinate's :class:`~procrastinate.PsycopgConnector` is
opened on it (so a client or a worker holds one pool, not two), and plait's own statements
borrow connections from it too. Connections set ``search_path`` to the chosen Postgres
schema alone, where both plait's run tables and Procrastinate's live: Procrastinate's SQL
(its queries, and the bodies of its functions, looked up through the caller's search path)
names its tables without a schema, and so do plait's statements on the run tables, so with
another schema on the path (``public``, say, holding a set-up of its own) a name missing
here would quietly resolve to that schema's table.

Round trips: the pool's connections are in autocommit, so a lone statement (each of
Procrastinate's queries, and most of plait's) is one round trip, not three (BEGIN, the
statement, COMMIT); statements that must stand or fall together are sent in an explicit
``conn.transaction()`` or as one statement. A connection taken from the pool is checked
with a round trip only when its socket has something to say (the server closed it, or sent
a message while it was idle): an idle, healthy connection has nothing to read, while a
connection the server ended (a restart) has the end of its stream waiting there.

Cancellation: plait borrows connections with :func:`borrow`, never with the pool's own
``connection()``. That one gives the connection back in the task that borrowed it, and
psycopg_pool hands a returned connection to a request waiting for one in two moves (take the
request off the queue, then wake it) with an await between them; a cancel that lands there
loses both the request (it waits until its timeout, 30 s) and the connection. Tasks are
cancelled in exactly that place: Starlette cancels a stream whose client went away through
an anyio cancel scope, which cancels *every* await after it, the connection's return
included. :func:`borrow` gives it back in a task of its own that a cancel does not reach.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from plait.checkpoint.address import redact
from plait.errors import RunsError

if TYPE_CHECKING:
    from procrastinate import App, PsycopgConnector
    from psycopg import AsyncConnection
    from psycopg_pool import AsyncConnectionPool

__all__ = ["Database", "borrow", "connect_kwargs", "ident"]


def ident(name: str) -> str:
    """``name`` quoted as a Postgres identifier."""
    if not name or "\x00" in name:
        raise ValueError(f"invalid Postgres schema name {name!r}")
    return '"' + name.replace('"', '""') + '"'


async def _autocommit(conn: Any) -> None:
    await conn.set_autocommit(True)


async def _check(conn: Any) -> None:
    """The pool's check of a connection it hands out: a round trip only when the socket is
    readable (see the module docstring); psycopg_pool drops a connection this raises for."""
    import select

    import psycopg
    import psycopg_pool

    if conn.closed or conn.broken:
        raise psycopg.OperationalError("the connection is closed")
    poller = select.poll()
    poller.register(conn.fileno(), select.POLLIN | select.POLLPRI)
    if poller.poll(0):
        await psycopg_pool.AsyncConnectionPool.check_connection(conn)


@contextlib.asynccontextmanager
async def borrow(pool: AsyncConnectionPool) -> AsyncIterator[AsyncConnection[Any]]:
    """A connection of ``pool`` for the block, given back even if the task is cancelled (see
    the module docstring); like the pool's ``connection()``, the block's transaction is
    committed, or rolled back when the block raises."""
    conn = await pool.getconn()
    try:
        async with conn:
            yield conn
    finally:
        await asyncio.shield(pool.putconn(conn))


def connect_kwargs(schema: str | None) -> dict[str, Any]:
    """The psycopg connection arguments that put the session in ``schema``, and only there
    (see the module docstring); None: the search path the DSN or the server sets."""
    if schema is None:
        return {}
    return {"options": f"-c search_path={ident(schema)}"}


class Database:
    """The pool, the Procrastinate connector on it, and the DSN as it may be shown."""

    def __init__(self, dsn: str, *, schema: str | None = None, max_connections: int = 10) -> None:
        if not dsn.startswith(("postgres://", "postgresql://")) and "=" not in dsn:
            raise RunsError(
                f"runs need PostgreSQL: {redact(dsn)!r} is not a PostgreSQL DSN (postgresql://user@host:5432/dbname)"
            )
        self.dsn = dsn
        self.schema = schema
        self.shown = redact(dsn) + (f" schema {schema!r}" if schema else "")
        self.max_connections = max_connections
        self._pool: AsyncConnectionPool | None = None
        self._connector: PsycopgConnector | None = None

    @property
    def pool(self) -> AsyncConnectionPool:
        if self._pool is None:
            raise RuntimeError("the runs database is not open: call await open() first")
        return self._pool

    def connection(self) -> contextlib.AbstractAsyncContextManager[AsyncConnection[Any]]:
        """A connection of the pool for a block (:func:`borrow`)."""
        return borrow(self.pool)

    async def open(self) -> None:
        """Open the pool (idempotent)."""
        if self._pool is not None:
            return
        import psycopg_pool
        from procrastinate import PsycopgConnector

        pool = psycopg_pool.AsyncConnectionPool(
            self.dsn,
            min_size=1,
            max_size=self.max_connections,
            open=False,
            kwargs=connect_kwargs(self.schema),
            configure=_autocommit,
            check=_check,
        )
        try:
            await pool.open(wait=True, timeout=30.0)
        except Exception as exc:
            await pool.close()
            raise RunsError(f"cannot connect to the runs database {self.shown}: {exc}") from exc
        if self.schema:
            async with borrow(pool) as conn:
                await conn.execute(f"CREATE SCHEMA IF NOT EXISTS {ident(self.schema)}")
        self._pool = pool
        self._connector = PsycopgConnector(kwargs=connect_kwargs(self.schema))
        await self._connector.open_async(pool)

    def app(self) -> App:
        """A Procrastinate app on this pool (tasks are registered by the caller)."""
        from procrastinate import App

        if self._connector is None:
            raise RuntimeError("the runs database is not open: call await open() first")
        return App(connector=self._connector)

    @property
    def connector(self) -> PsycopgConnector:
        if self._connector is None:
            raise RuntimeError("the runs database is not open: call await open() first")
        return self._connector

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        self._connector = None
        if pool is not None:
            await pool.close()
