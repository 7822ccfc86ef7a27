"""How a PostgreSQL transaction's statements travel to the server, in as few round trips
and as little server work as possible (see :func:`send`).

A commit or a lease reads no result (plait's functions raise server-side instead of
answering), so :class:`Recorder` records its statements and :func:`send` ships them: the
usual commit as one prepared call (:class:`Fusion`), others as one simple query, and a
transaction that reads something or is too big in a pipeline (:func:`pipelined`). psycopg
is imported inside the functions only: ``import plait`` never needs it.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from plait.checkpoint.sql._base import Cursor

if TYPE_CHECKING:
    import psycopg

__all__ = ["ONE_QUERY_MAX", "Cursors", "Fusion", "NeedsAnswer", "Recorder", "pipelined", "send"]

T = TypeVar("T")


def pipelined(conn: psycopg.Connection[Any], fn: Callable[[Cursor], T]) -> T:
    """Run ``fn`` in one transaction in pipeline mode: the commits and leases that read
    something (a cache miss reads the parent's body; the first call checks the schema
    version) or have too many statements for one query.

    BEGIN, the statements and COMMIT are sent without waiting for each other's results; the
    connection waits only where ``fn`` reads a result and at the final sync. psycopg's
    ``conn.transaction()`` is not used here: inside a pipeline it syncs on entry and on
    exit, which would cost two more round trips.

    Only commits and leases run this way: their statements are known, and none raises a
    NOTICE (psycopg 3.3 was seen to mismatch results in a pipeline when a fresh connection
    received a NOTICE, which migrations' ``IF NOT EXISTS`` statements do).
    """
    import psycopg.pq

    try:
        with conn.pipeline(), conn.cursor(binary=True) as cur:
            cur.execute("BEGIN")
            result = fn(cur)
            cur.execute("COMMIT")
        return result
    except BaseException:
        # An error (or fn's own exception) leaves the transaction open or aborted: end it
        # here, so that the connection goes back to the pool idle.
        if not conn.closed and conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            with contextlib.suppress(Exception):
                conn.rollback()
        raise


class NeedsAnswer(Exception):
    """Internal: a transaction recorded by :class:`Recorder` reads a result; it runs
    statement by statement instead."""


class Recorder:
    """A cursor that records statements instead of running them, so that a transaction
    that reads nothing (a commit on a cached head) can be sent in one round trip."""

    def __init__(self) -> None:
        self.statements: list[tuple[str, Sequence[Any]]] = []

    def execute(self, sql: str, params: Sequence[Any] = (), /) -> Recorder:
        self.statements.append((sql, params))
        return self

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]], /) -> None:
        self.statements.extend((sql, row) for row in rows)

    def fetchone(self) -> Any:
        raise NeedsAnswer

    def fetchall(self) -> Any:
        raise NeedsAnswer

    def __iter__(self) -> Any:
        raise NeedsAnswer


ONE_QUERY_MAX = 64
"""Statements sent as one query at most; a larger transaction (a group commit, a step of
many tasks) goes through a pipeline of prepared statements, which parses each kind once."""


@dataclass(frozen=True, slots=True)
class Fusion:
    """The statements of the usual commit (a fence, then one checkpoint row, then maybe the
    lease given back or how a one-off write leaves the thread) and the one call that does
    them all (``put_checkpoint()``).

    A step's commit that folds its parent's pending writes (a resume after a failure or an
    interrupt, a step some of whose tasks had saved their results) deletes them between the
    fence and the row: that ``DELETE`` rides on the same call as a data-modifying ``WITH``,
    so that such a commit is one prepared statement too, instead of a query of four that the
    server parsed and planned at every commit. A fence that reads pending writes (the head's
    for ``no_writes``, a quiet parent's) keeps the statements apart: the parts of one
    statement may run in any order. Otherwise nothing in ``put_checkpoint()`` reads the
    writes the ``DELETE`` removes.
    """

    fence: str
    insert: str
    release: str
    settle: str
    put: str
    fold: str
    """The statement deleting a checkpoint's pending writes (``del_writes_of``)."""

    def fuse(self, statements: Sequence[tuple[str, Sequence[Any]]]) -> tuple[str, Sequence[Any]] | None:
        """The call doing ``statements``, or None when they are not a fence and its row."""
        if len(statements) >= 3 and statements[0][0] == self.fence and statements[1][0] == self.fold:
            fence, folded = statements[0][1], statements[1][1]
            if fence[8] or fence[10] is not None:
                return None  # the fence checks pending writes (of the head, of a quiet parent): in order
            fused = self._fuse([statements[0], *statements[2:]])
            if fused is None or tuple(folded[:2]) != tuple(fence[:2]):
                return None
            return f"WITH folded AS ({self.fold}) {fused[0]}", (*folded, *fused[1])
        return self._fuse(statements)

    def _fuse(self, statements: Sequence[tuple[str, Sequence[Any]]]) -> tuple[str, Sequence[Any]] | None:
        if not 2 <= len(statements) <= 3:
            return None
        (first, fence), (second, row) = statements[:2]
        if first != self.fence or second != self.insert or tuple(row[:2]) != tuple(fence[:2]):
            return None
        if len(statements) == 2:
            return self.put, (*fence, *row[2:], False, False, None)
        third, args = statements[2]
        if third == self.release and tuple(args[2:]) == (*fence[:2], fence[3]):  # (status, now, ns, tid, token)
            return self.put, (*fence, *row[2:], True, False, args[0])
        if third == self.settle and tuple(args[:2]) == tuple(fence[:2]):  # (ns, tid, status, now)
            return self.put, (*fence, *row[2:], False, True, args[2])
        return None


class Cursors:
    """One reusable cursor per pooled connection, for the one-statement commit.

    ``conn.execute()`` builds a cursor (and its adapters map) per call, which costs a commit
    as much as the fence's checks on the server. A
    connection is used by one thread at a time (the pool lends it), so its cursor is too.
    Entries of closed connections are dropped when a new one is added.
    """

    def __init__(self) -> None:
        self._by_conn: dict[psycopg.Connection[Any], psycopg.Cursor[Any]] = {}
        self._lock = threading.Lock()

    def of(self, conn: psycopg.Connection[Any]) -> psycopg.Cursor[Any]:
        cur = self._by_conn.get(conn)
        if cur is not None and not cur.closed:
            return cur
        cur = conn.cursor()
        with self._lock:
            for old in [c for c in self._by_conn if c.closed]:
                del self._by_conn[old]
            self._by_conn[conn] = cur
        return cur


def send(
    conn: psycopg.Connection[Any],
    statements: Sequence[tuple[str, Sequence[Any]]],
    fusion: Fusion,
    cursors: Cursors,
) -> None:
    """Run recorded statements as one transaction, in one round trip.

    A lone statement (the usual commit is one, fused by ``fusion``) is bound server-side,
    so that psycopg prepares it after a few uses and the server neither parses nor plans it
    again. Up to :data:`ONE_QUERY_MAX` statements go as one simple query, parameters bound
    on the client: PostgreSQL runs the statements of one query in one implicit transaction
    (all or nothing) and answers once.
    """
    import psycopg

    if conn.autocommit:
        fused = fusion.fuse(statements)
        if fused is not None or len(statements) == 1:
            sql, params = fused if fused is not None else statements[0]
            cursors.of(conn).execute(sql, params)
            return
        if len(statements) <= ONE_QUERY_MAX:
            query = ";\n".join(sql for sql, _ in statements)
            flat = [p for _, row in statements for p in row]
            with psycopg.ClientCursor(conn) as cur:
                cur.execute(query, flat)
            return

    def replay(cur: Cursor) -> None:
        for sql, row in statements:
            cur.execute(sql, row)

    pipelined(conn, replay)
