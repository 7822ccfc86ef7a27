"""The SQL checkpoint store, written once for SQLite and PostgreSQL: its parts, assembled.

Everything a SQL backend does (schema and migrations, commit, reads, housekeeping, leases)
is plain DB-API calls on a cursor; a dialect (:class:`Dialect`) supplies only the few
fragments that differ (column types, the parameter marker, the database clock, how a list of
keys is passed, how a table's existence is checked). The dialect packages own connections,
threads and transactions, and call the parts inside them.

:class:`SqlCore` builds the statements once, as the dialect runs them, and the parts that use
them; callers reach each part directly rather than through forwarding methods here:

- :attr:`SqlCore.component`: the schema checks and migrations (:mod:`plait.checkpoint._migrations`);
- :attr:`SqlCore.commit`: the commit path (fences, deltas against the cached head), in
  :mod:`plait.checkpoint.sql._commit`;
- :attr:`SqlCore.read`: reads (one checkpoint, a lineage, blob replay), in
  :mod:`plait.checkpoint.sql._read`;
- :attr:`SqlCore.threads`: thread rows (leases fenced by generation, statuses, listings), in
  :mod:`plait.checkpoint.sql._threads`;
- :attr:`SqlCore.cache`: the last checkpoint this process wrote per thread
  (:mod:`plait.checkpoint.sql._base`).

What this module does itself spans parts: housekeeping (delete, prune: statements, thread
rows and the cache) and the one statement that takes a lease and reads a checkpoint. The
tables and every statement are in :mod:`plait.checkpoint.sql._schema`.

Every statement is idempotent (upserts), so a commit whose outcome is unknown (the
connection dropped during COMMIT) can be retried safely.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Container, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from plait.checkpoint import lease as rules
from plait.checkpoint._common import keep_set
from plait.checkpoint._migrations import Component
from plait.checkpoint._records import RecordError, decode_body
from plait.checkpoint.holder import Holder
from plait.checkpoint.model import Checkpoint, Lease, Status
from plait.checkpoint.sql._base import Cursor, Dialect, HeadCache
from plait.checkpoint.sql._commit import SqlCommit
from plait.checkpoint.sql._memory import SqlMemory
from plait.checkpoint.sql._policy import SqlPolicy
from plait.checkpoint.sql._read import SqlRead
from plait.checkpoint.sql._schema import CHECKPOINT_WRITE_COLUMNS, MIGRATIONS, STATEMENTS, joins
from plait.checkpoint.sql._threads import SqlThreads, holder_json
from plait.errors import CheckpointCorruptError

__all__ = ["PrunePlan", "SqlCore", "plan_latest", "plan_prune"]

log = logging.getLogger("plait.checkpoint.sql")


class SqlCore:
    """The parts of the SQL store over one dialect, sharing its statements and head cache."""

    def __init__(self, dialect: Dialect, store: str) -> None:
        self.dialect = dialect
        self.store = store
        """A name for messages: ``SQLite database 'x.db'``."""
        fmt = {
            "P": dialect.prefix,
            "I": dialect.prefix.rsplit(".", 1)[-1],
            "blob": dialect.blob,
            "real": dialect.real,
            "serial_pk": dialect.serial_pk,
            "small_table": dialect.small_table,
        }
        fmt |= {
            "now": dialect.now,
            "clock": dialect.clock,
            "keys": dialect.keys,
            "where": "{where}",
            "start": "{start}",
        }
        fmt |= {k: v.replace("{P}", dialect.prefix) for k, v in joins(lateral=dialect.lateral).items()}
        self._sql = {k: dialect.q(v.format(**fmt)) for k, v in STATEMENTS.items()}
        migrations = {
            v: tuple(dialect.q(s.format(**fmt)) for s in (*MIGRATIONS.get(v, ()), *dialect.migrations.get(v, ())))
            for v in {*MIGRATIONS, *dialect.migrations}
        }
        self.cache = HeadCache()
        self.threads = SqlThreads(dialect, self._sql, store)
        self.component = Component(
            name="checkpoint store",
            table=dialect.prefix + "migrations",
            migrations=migrations,
            dialect=dialect,
            after={7: lambda cur, found: self.threads.fill_statuses(cur) if found > 0 else None},
        )
        """The checkpoint store's migrations: a component of its own (see
        :mod:`plait.checkpoint._migrations`), so the run queue's tables never bump it.
        Called with :attr:`store` (``component.migrate(cur, core.store)``) for its messages."""
        self.memory = SqlMemory(dialect)
        self.policy = SqlPolicy(dialect, store)
        """The stored retention policy (:mod:`plait.checkpoint.sql._policy`)."""
        """The memory store's items (:mod:`plait.checkpoint.sql._memory`)."""
        self.commit = SqlCommit(dialect, store, self._sql, self.cache, self.threads, self.memory)
        self.read = SqlRead(dialect, self._sql, self.cache)

    def statement(self, name: str) -> str:
        """The text of statement ``name`` of :data:`~plait.checkpoint.sql._schema.STATEMENTS`,
        as this store runs it (the same object every time)."""
        return self._sql[name]

    # -- housekeeping ------------------------------------------------------------------------

    def delete_thread(self, cur: Cursor, namespace: str, thread_id: str, now: float | None) -> None:
        """Remove a thread's checkpoints, blobs and pending writes, and revoke its lease
        (inside a transaction)."""
        for name in ("del_cps", "del_blobs", "del_writes"):
            cur.execute(self._sql[name], (namespace, thread_id))
        self.threads.tombstone(cur, (namespace, thread_id), now)
        self.cache.forget((namespace, thread_id))

    def prune(
        self,
        cur: Cursor,
        namespace: str,
        thread_id: str,
        keep_last: int | None,
        newer_than: str | None = None,
        now: float | None = None,
        branches: bool = True,
    ) -> int:
        """Drop what ``keep_last`` does not keep, and every blob no kept checkpoint needs.

        Kept checkpoints whose parent is dropped become roots. A blob kept in the body of a
        dropped checkpoint (see ``INLINE_MAX``) that a kept one still needs moves to the
        blobs table first. Runs inside the caller's write transaction; a damaged kept
        checkpoint aborts it (nothing is dropped). (A sweep prunes a batch of threads at
        once: :mod:`plait.checkpoint.sql._sweep`, with the same :func:`plan_prune`.)
        """
        where = (namespace, thread_id)
        tree = {cid: (parent, body) for cid, parent, body in cur.execute(self._sql["tree"], where)}
        if not tree:
            return 0
        parents = {cid: parent for cid, (parent, _) in tree.items()}
        keep = keep_set(parents, keep_last, newer_than, thread_id=thread_id, namespace=namespace, branches=branches)
        table = {(ch, bid): base for ch, bid, base in cur.execute(self._sql["blob_keys"], where)}
        plan = plan_prune(where, parents, keep, lambda cid: tree[cid][1], table)
        if plan.moved:
            cur.executemany(self._sql["ins_blob"], plan.moved)
        self._drop(cur, where, plan.dropped, keep, plan.gone, plan.stays)
        if plan.reroot:
            cur.executemany(self._sql["reroot"], [(*where, cid) for cid in plan.reroot])
        self.cache.forget((namespace, thread_id))
        rewound = newer_than is not None and bool(plan.dropped)
        self._revoke_after_rewind(cur, namespace, thread_id, now, rewound=rewound)
        return len(plan.dropped)

    def _drop(
        self,
        cur: Cursor,
        where: tuple[str, str],
        dropped: Sequence[str],
        keep: Collection[str],
        gone: Sequence[tuple[str, str, str, str]],
        kept_blobs: Sequence[tuple[str, str]],
    ) -> None:
        """Delete a prune's checkpoints, their writes and its unneeded blobs (``kept_blobs``:
        every blob row that stays, those just moved out of dropped bodies included): a row at a time
        when few go, else by one statement naming what stays (a sweep's ``keep_latest``
        keeps one checkpoint of fifty: a statement per dropped row was a round trip each on
        PostgreSQL, most of its sweep's time; docs/benchmarks.md, "Sweeping")."""
        if len(dropped) > len(keep) > 0:
            marks = ", ".join("?" * len(keep))
            P = self.dialect.prefix
            cur.execute(
                self.dialect.q(f"DELETE FROM {P}checkpoints WHERE ns = ? AND thread_id = ? AND id NOT IN ({marks})"),
                (*where, *keep),
            )
            cur.execute(
                self.dialect.q(
                    f"DELETE FROM {P}writes WHERE ns = ? AND thread_id = ? AND checkpoint_id NOT IN ({marks})"
                ),
                (*where, *keep),
            )
        elif dropped:
            cur.executemany(self._sql["del_cp"], [(*where, cid) for cid in dropped])
            cur.executemany(self._sql["del_writes_of"], [(*where, cid) for cid in dropped])
        if len(gone) > len(kept_blobs):
            P = self.dialect.prefix
            sql = f"DELETE FROM {P}blobs WHERE ns = ? AND thread_id = ?"
            if kept_blobs:
                sql += f" AND (channel, id) NOT IN (VALUES {', '.join(['(?, ?)'] * len(kept_blobs))})"
            cur.execute(self.dialect.q(sql), (*where, *(v for key in kept_blobs for v in key)))
        elif gone:
            cur.executemany(self._sql["del_blob"], gone)

    def _revoke_after_rewind(
        self, cur: Cursor, namespace: str, thread_id: str, now: float | None, *, rewound: bool
    ) -> None:
        """Revoke the lease of a thread ``rewound`` (pruned back to a checkpoint): it was
        rewritten under any run holding the lease, which must write nothing more (and so a
        commit may trust a lease it checked to mean that its cached parent still exists: see
        :meth:`SqlCommit._apply <plait.checkpoint.sql._commit.SqlCommit._apply>`)."""
        if not rewound:
            return
        head = self.read.get(cur, namespace, thread_id, None)
        assert head is not None
        self.threads.revoke(cur, (namespace, thread_id), rules.rest_status(head.next_tasks, head.pending_writes), now)

    def get_with_status(
        self, cur: Cursor, thread_id: str, checkpoint_id: str | None, now: float | None
    ) -> tuple[Checkpoint | None, Status | None]:
        """A checkpoint of a root thread (the head when ``checkpoint_id`` is None) and how
        its thread stands, from one statement: the checkpoint's row and writes, as
        :meth:`SqlRead.get` reads them, with the thread's row joined on (a state read shows
        the status; on PostgreSQL a second statement was a round trip of its own)."""
        params: tuple[Any, ...]
        if checkpoint_id is None:
            sql, params = self._sql["head_writes_status"], (now, "", thread_id, "", thread_id, "", thread_id)
        else:
            sql, params = self._sql["one_writes_status"], (now, "", thread_id, checkpoint_id)
        rows = cur.execute(sql, params).fetchall()
        width = CHECKPOINT_WRITE_COLUMNS
        cp = self.read.from_rows(cur, "", thread_id, [r[:width] for r in rows])
        return cp, None if cp is None else self.threads.status_of(("", thread_id), rows[0][width:])

    # -- leases -----------------------------------------------------------------------------

    def take_lease_and_get(
        self,
        cur: Cursor,
        namespace: str,
        thread_id: str,
        owner: str,
        ttl: float,
        checkpoint_id: str | None,
        over: int | None,
        now: float | None,
        rider: tuple[str, Sequence[Any]] | None = None,
    ) -> tuple[Lease, Checkpoint | None]:
        """Take the lease, then read the checkpoint a run starts from, by one statement;
        server-side checks only. A ``rider`` (a data-modifying statement of the caller's,
        which may read the id of the checkpoint read as ``(SELECT id FROM l LIMIT 1)``) goes
        in the same statement, and so commits with the lease or not at all.

        Raises:
            ThreadBusyError: a live lease is held (raised by the dialect module).
        """
        assert self.dialect.server_checks
        holder = Holder.current()
        sql = self._sql["take_lease_and_get"]
        params: list[Any] = [namespace, thread_id, owner, float(ttl), holder_json(holder), over, now, checkpoint_id]
        if rider is not None:
            sql = f"WITH l AS MATERIALIZED ({sql}), r AS ({rider[0]}) SELECT * FROM l"
            params += rider[1]
        rows = cur.execute(sql, params).fetchall()
        gen, taken, expires = rows[0][:3]
        lease = Lease(
            thread_id=thread_id,
            namespace=namespace,
            owner=owner,
            token=int(gen),
            taken_at=float(taken),
            expires_at=float(expires),
            holder=holder,
        )
        found = [r[3:] for r in rows if r[3] is not None]
        return lease, self.read.from_rows(cur, namespace, thread_id, found, resume=True)


@dataclass(frozen=True, slots=True)
class PrunePlan:
    """What pruning one thread changes: ``dropped`` checkpoint ids, ``gone`` blob rows
    ``(ns, thread_id, channel, id)``, ``moved`` inline blobs that become blob rows (rows of
    ``ins_blob``), ``stays``: every blob ``(channel, id)`` left, the moved ones included, and
    ``reroot``: kept checkpoints whose parent goes."""

    dropped: list[str]
    gone: list[tuple[str, str, str, str]]
    moved: list[tuple[str, str, str, str, str | None, bytes]]
    stays: list[tuple[str, str]]
    reroot: list[str]


def plan_prune(
    where: tuple[str, str],
    parents: Mapping[str, str | None],
    keep: Collection[str],
    body: Callable[[str], bytes],
    table: Mapping[tuple[str, str], str | None],
) -> PrunePlan:
    """What pruning the thread ``where`` to ``keep`` changes, from its checkpoints' parents,
    the body of a checkpoint (``body(id)``: only kept ones, and the dropped ones a kept blob
    rests on, are asked for) and its blob rows' delta bases ``table``.

    Raises:
        CheckpointCorruptError: a kept checkpoint's body does not decode.
    """
    dropped = [cid for cid in parents if cid not in keep]
    reroot = [cid for cid in keep if parents[cid] is not None and parents[cid] not in keep]
    return _plan(where, keep, parents, body, table, dropped, reroot)


def plan_latest(
    where: tuple[str, str],
    head: str,
    rooted: bool,
    body: Callable[[str], bytes],
    table: Mapping[tuple[str, str], str | None],
) -> PrunePlan:
    """What keeping only ``head`` of the thread ``where`` changes (a sweep's ``keep_latest``:
    ``prune(keep_last=1, branches=False)`` keeps the greatest id alone), without its tree:
    every other checkpoint goes, so any blob id below ``head`` may name one whose body holds
    the blob inline, and ``body`` is asked for it (a missing one answers ``b""``, which reads
    as damaged and holds nothing). ``dropped`` is left empty: the caller deletes by range.
    ``rooted``: the head has a parent now (it becomes a root).

    Raises:
        CheckpointCorruptError: the head's body does not decode.
    """
    return _plan(where, (head,), _Older(head), body, table, [], [head] if rooted else [])


class _Older:
    """The ids a thread pruned to ``head`` alone may have held besides it: all below it."""

    def __init__(self, head: str) -> None:
        self.head = head

    def __contains__(self, cid: object) -> bool:
        return isinstance(cid, str) and cid < self.head


def _plan(
    where: tuple[str, str],
    keep: Collection[str],
    checkpoints: Container[str],
    body: Callable[[str], bytes],
    table: Mapping[tuple[str, str], str | None],
    dropped: list[str],
    reroot: list[str],
) -> PrunePlan:
    namespace, thread_id = where
    need: set[tuple[str, str]] = set()
    inline: dict[tuple[str, str], tuple[str | None, bytes]] = {}
    for cid in keep:
        try:
            decoded = decode_body(body(cid), cid)
        except RecordError as exc:
            raise CheckpointCorruptError(thread_id, cid, str(exc)) from None
        need.update((decoded.blobs or {}).items())
        inline.update(((ch, cid), entry) for ch, entry in (decoded.inline or {}).items())
    _close_over_bases(need, inline, table, checkpoints, body, set(keep))
    moved = [
        (namespace, thread_id, ch, cid, base, data)
        for (ch, cid), (base, data) in inline.items()
        if cid not in keep and (ch, cid) in need
    ]
    stays: list[tuple[str, str]] = []
    gone: list[tuple[str, str, str, str]] = []
    for key in table:
        if key in need or key in inline:
            stays.append(key)
        else:
            gone.append((namespace, thread_id, *key))
    stays += [(ch, cid) for _, _, ch, cid, _, _ in moved]
    return PrunePlan(dropped=dropped, gone=gone, moved=moved, stays=stays, reroot=reroot)


def _close_over_bases(
    need: set[tuple[str, str]],
    inline: dict[tuple[str, str], tuple[str | None, bytes]],
    table: Mapping[tuple[str, str], str | None],
    parents: Container[str],
    body: Callable[[str], bytes],
    opened: set[str],
) -> None:
    """Add to ``need`` every delta base the needed blobs rest on, and to ``inline`` the inline
    blobs of the dropped checkpoints that hold one.

    A dropped checkpoint's body is read only when a kept one needs a blob kept inline in it:
    most of a long thread goes unread, which was most of a sweep's cost (docs/benchmarks.md,
    "Sweeping").
    """
    stack = list(need)
    while stack:
        ch, bid = stack.pop()
        if (ch, bid) not in table and (ch, bid) not in inline and bid in parents and bid not in opened:
            opened.add(bid)
            try:
                decoded = decode_body(body(bid), bid)
            except RecordError:
                decoded = None  # a damaged checkpoint that goes anyway
            if decoded is not None:
                inline.update(((c, bid), entry) for c, entry in (decoded.inline or {}).items())
        base = table.get((ch, bid))
        if base is None and (ch, bid) in inline:
            base = inline[(ch, bid)][0]
        if base is not None and (ch, base) not in need:
            need.add((ch, base))
            stack.append((ch, base))
