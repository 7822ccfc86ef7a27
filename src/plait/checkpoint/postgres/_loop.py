"""The checkpointer's hot calls on an async pool of the caller's event loop, with no query
threads (see :meth:`PostgresCheckpointer.use_async_pool`).

Why: the blocking psycopg calls run on query threads, and a hop there and back costs two
thread wake-ups, and every C call of the event loop that lets the GIL go may then wait to
get it back. A ``plait worker`` runs ten runs on one loop, and each run's lease, head read
and commits paid that on top of the round trip; on psycopg's async connections they pay only
the round trip. The calls it takes are the ones a run makes on every step: the lease with
the first read, reads, and the commits that read nothing (the usual ones, one round trip).
Anything else (a commit that reads, a write, a sweep, the first call of a checkpointer,
which checks the schema version) keeps the thread path, and so does every call made from
another event loop.

Nothing about what is stored changes: the statements are the ones the thread path sends
(recorded by the same code, :class:`~plait.checkpoint.postgres._send.Recorder`), sent the
same way (one fused prepared call, or one query: one implicit transaction), fences checked
server-side by the same functions; a connection that breaks is retried by the same policy.

Reads run by replay: the read's code runs on :class:`Replay`, a cursor that answers the
statements already run and stops at the first one that is not, which is then run on the
connection; the code runs again with one answer more, until it finishes. A read is a few
statements at most (usually one), each its own snapshot in autocommit as on the thread path.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Generator, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, cast

from plait.checkpoint.postgres._send import ONE_QUERY_MAX, Cursors, Fusion, NeedsAnswer, Recorder

if TYPE_CHECKING:
    from psycopg import AsyncConnection, AsyncCursor
    from psycopg_pool import AsyncConnectionPool

    from plait.checkpoint.sql._base import Cursor

__all__ = ["LoopPool", "Replay", "Unanswered", "drive_steps"]

T = TypeVar("T")

_Statement = tuple[str, Sequence[Any]]


class Unanswered(Exception):
    """Internal: the statement :class:`Replay` has no answer for yet (to run, then replay)."""

    def __init__(self, statement: _Statement) -> None:
        super().__init__(statement[0])
        self.statement = statement


class Replay:
    """A cursor answering a read's statements from the rows they gave when run, in order;
    a statement past those raises :class:`Unanswered`. A statement that differs from the one
    run in its place (a read that is not the same code path twice) raises NeedsAnswer, and
    the read goes to the thread path."""

    def __init__(self, answers: Sequence[tuple[_Statement, list[Any]]]) -> None:
        self._answers = answers
        self._next = 0
        self._rows: list[Any] = []
        self._at = 0

    def execute(self, sql: str, params: Sequence[Any] = (), /) -> Replay:
        if self._next == len(self._answers):
            raise Unanswered((sql, params))
        (ran, ran_params), rows = self._answers[self._next]
        if ran != sql or list(ran_params) != list(params):
            raise NeedsAnswer
        self._next += 1
        self._rows, self._at = rows, 0
        return self

    def executemany(self, sql: str, rows: Any, /) -> None:
        raise NeedsAnswer  # reads do not: a write goes to the thread path

    def fetchone(self) -> Any:
        if self._at >= len(self._rows):
            return None
        self._at += 1
        return self._rows[self._at - 1]

    def fetchall(self) -> list[Any]:
        rest, self._at = self._rows[self._at :], len(self._rows)
        return rest

    def __iter__(self) -> Iterator[Any]:
        return iter(self.fetchall())


class LoopPool:
    """A borrowed async pool in autocommit, and the event loop it serves."""

    def __init__(self, pool: AsyncConnectionPool[Any], fusion: Fusion) -> None:
        self.pool = pool
        self.loop = asyncio.get_running_loop()
        self._fusion = fusion
        self._cursors = Cursors()

    def here(self) -> bool:
        """Whether the caller runs on the pool's loop (psycopg's async connections serve one)."""
        try:
            return asyncio.get_running_loop() is self.loop
        except RuntimeError:
            return False

    async def _conn(self) -> AsyncConnection[Any]:
        conn: AsyncConnection[Any] = await self.pool.getconn()
        if not conn.autocommit:
            await asyncio.shield(self.pool.putconn(conn))
            raise RuntimeError("use_async_pool: the pool's connections must be in autocommit")
        return conn

    async def send(self, fn: Callable[[Cursor], T]) -> T:
        """Run a commit's or lease's ``fn`` on a :class:`Recorder` and send its statements
        in one round trip (as :func:`~plait.checkpoint.postgres._send.send` does in
        autocommit). Raises NeedsAnswer when ``fn`` reads, or is too big for one query."""
        import psycopg

        recorder = Recorder()
        result = fn(recorder)
        statements = recorder.statements
        fused = self._fusion.fuse(statements)
        if fused is None and len(statements) != 1 and not 1 < len(statements) <= ONE_QUERY_MAX:
            raise NeedsAnswer
        conn = await self._conn()
        try:
            if fused is not None or len(statements) == 1:
                sql, params = fused if fused is not None else statements[0]
                cur = cast("AsyncCursor[Any]", self._cursors.of(conn))  # type: ignore[arg-type]
                await cur.execute(sql, params)
            else:
                query = ";\n".join(sql for sql, _ in statements)
                async with psycopg.AsyncClientCursor(conn) as client:
                    await client.execute(query, [p for _, row in statements for p in row])
        finally:
            await asyncio.shield(self.pool.putconn(conn))
        return result

    async def read(self, fn: Callable[[Cursor], T]) -> T:
        """Run a read's ``fn`` by replay (see the module's docstring), on one connection."""
        answers: list[tuple[_Statement, list[Any]]] = []
        conn = await self._conn()
        try:
            while True:
                try:
                    return fn(Replay(answers))
                except Unanswered as more:
                    sql, params = more.statement
                    async with conn.cursor(binary=True) as cur:
                        await cur.execute(sql, params)
                        rows = await cur.fetchall() if cur.description is not None else []
                    answers.append((more.statement, rows))
        finally:
            await asyncio.shield(self.pool.putconn(conn))


async def drive_steps(
    steps: Generator[Callable[[Cursor], Any], Any, T], transaction: Callable[[Callable[[Cursor], Any]], Awaitable[Any]]
) -> T:
    """Run the transactions a step generator yields (``SqlCommit.commit_steps``) with an
    async ``transaction``: what ``SqlCommit.commit_all`` does with a blocking one."""
    try:
        fn = next(steps)
        while True:
            try:
                result = await transaction(fn)
            except Exception as exc:
                fn = steps.throw(exc)
            else:
                fn = steps.send(result)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
