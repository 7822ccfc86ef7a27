"""The SQL checkpoint store, written once for SQLite and PostgreSQL.

Everything a SQL backend does (schema and migrations, commit, reads, housekeeping, leases)
is reached through :class:`SqlCore` as plain DB-API calls on a cursor; a dialect
(:class:`Dialect`) supplies only the few fragments that differ (column types, the parameter
marker, the database clock, how a list of keys is passed, how a table's existence is
checked). The dialect modules own connections, threads and transactions, and call into
:class:`SqlCore` inside them.

The core is split by responsibility: this module holds the schema checks and migrations,
listing and housekeeping (delete, prune, leases), and composes the rest:

- :mod:`plait.checkpoint.sql._base`: the cursor, dialect, commit request and head cache;
- :mod:`plait.checkpoint.sql._commit`: the commit path (fences, deltas against the cached head);
- :mod:`plait.checkpoint.sql._read`: reads (one checkpoint, a lineage, blob replay);
- :mod:`plait.checkpoint.sql._threads`: thread rows (leases fenced by generation, statuses,
  listings).

The tables and every statement are in :mod:`plait.checkpoint.sql._schema`.

Every statement is idempotent (upserts), so a commit whose outcome is unknown (the
connection dropped during COMMIT) can be retried safely.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from plait.checkpoint import lease as rules
from plait.checkpoint._common import keep_set
from plait.checkpoint._migrations import Component
from plait.checkpoint._records import RecordError, decode_body
from plait.checkpoint.holder import Holder
from plait.checkpoint.model import Checkpoint, Lease, RestStatus, Status, ThreadInfo
from plait.checkpoint.sql._base import CommitRequest, Cursor, Dialect, HeadCache
from plait.checkpoint.sql._commit import SqlCommit
from plait.checkpoint.sql._read import SqlRead
from plait.checkpoint.sql._schema import MIGRATIONS, SCHEMA_VERSION, STATEMENTS, joins
from plait.checkpoint.sql._threads import SqlThreads, holder_json
from plait.errors import CheckpointCorruptError

__all__ = ["SCHEMA_VERSION", "CommitRequest", "Cursor", "Dialect", "SqlCore"]

log = logging.getLogger("plait.checkpoint.sql")


class SqlCore:
    """Shared SQL logic over a cursor, plus the per-thread cache of the last checkpoint written."""

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
        self._sql = {k: self._q(v.format(**fmt)) for k, v in STATEMENTS.items()}
        self._migrations = {
            v: tuple(self._q(s.format(**fmt)) for s in (*MIGRATIONS.get(v, ()), *dialect.migrations.get(v, ())))
            for v in {*MIGRATIONS, *dialect.migrations}
        }
        self._cache = HeadCache()
        self.threads = SqlThreads(dialect, self._sql, store)
        self.component = Component(
            name="checkpoint store",
            table=dialect.prefix + "migrations",
            migrations=self._migrations,
            dialect=dialect,
            after={7: lambda cur, found: self.threads.fill_statuses(cur) if found > 0 else None},
        )
        """The checkpoint store's migrations: a component of its own (see
        :mod:`plait.checkpoint._migrations`), so the run queue's tables never bump it."""
        self._commit = SqlCommit(dialect, store, self._sql, self._cache, self.threads)
        self._read = SqlRead(dialect, self._sql, self._cache)

    def statement(self, name: str) -> str:
        """The text of statement ``name`` of :data:`~plait.checkpoint.sql._schema.STATEMENTS`,
        as this store runs it (the same object every time)."""
        return self._sql[name]

    def _q(self, sql: str) -> str:
        return self.dialect.q(sql)

    # -- schema ------------------------------------------------------------------------------

    def version(self, cur: Cursor) -> int:
        """The store's schema version; 0 when it has never been set up."""
        return self.component.version(cur)

    def check_version(self, cur: Cursor) -> None:
        """Refuse a store this code does not understand, saying what to do.

        Raises:
            StoreVersionError: the store is newer than this code, or not (fully) set up.
        """
        self.component.check(cur, self.store)

    def migrate(self, cur: Cursor, *, target: int = SCHEMA_VERSION) -> int:
        """Bring the store to :data:`SCHEMA_VERSION` inside the caller's transaction
        (``target``: an older version, as an older plait left it; for upgrade tests).

        Returns:
            The version found before migrating.

        Raises:
            StoreVersionError: the store was written by a newer plait.
        """
        return self.component.migrate(cur, self.store, target=target)

    # -- commit (see plait.checkpoint.sql._commit) -------------------------------------------

    def commit_all(
        self,
        transaction: Callable[[Callable[[Cursor], Any]], Any],
        requests: Sequence[CommitRequest],
        now: Callable[[], float | None],
    ) -> list[Exception | None]:
        """Store several commits in one transaction (group commit).

        See :meth:`~plait.checkpoint.sql._commit.SqlCommit.commit_all` for the retry rules.

        Returns:
            Per request: None when it is durable, else the exception that refused it.
        """
        return self._commit.commit_all(transaction, requests, now)

    def check_request(self, request: CommitRequest) -> None:
        """Refuse, before anything is written, text this store cannot hold; see
        :meth:`~plait.checkpoint.sql._commit.SqlCommit.check_request`."""
        self._commit.check_request(request)

    def check_text(self, texts: Iterable[tuple[str, str | None]]) -> None:
        """Raise CheckpointError for the first text holding a NUL (see :meth:`check_request`)."""
        self._commit.check_text(texts)

    def forget(self, namespace: str, thread_id: str) -> None:
        """Drop the cached head of a thread (after delete or prune)."""
        self._cache.forget((namespace, thread_id))

    def known_head(self, namespace: str, thread_id: str) -> Checkpoint | None:
        """The head this process last committed on the thread, if it had no pending writes
        (see :meth:`Checkpointer.known_head`)."""
        return self._cache.known((namespace, thread_id))

    # -- reads (see plait.checkpoint.sql._read) ----------------------------------------------

    def get(
        self, cur: Cursor, namespace: str, thread_id: str, checkpoint_id: str | None, *, resume: bool = False
    ) -> Checkpoint | None:
        """One checkpoint (the head when ``checkpoint_id`` is None) with its pending writes.

        ``resume``: a run starts from it here (see :meth:`SqlRead.from_rows`)."""
        return self._read.get(cur, namespace, thread_id, checkpoint_id, resume=resume)

    def history(
        self,
        cur: Cursor,
        namespace: str,
        thread_id: str,
        *,
        limit: int | None,
        before: str | None,
        filter: Mapping[str, Any] | None,
    ) -> list[Checkpoint]:
        """The lineage newest first; see :meth:`~plait.checkpoint.sql._read.SqlRead.history`."""
        return self._read.history(cur, namespace, thread_id, limit=limit, before=before, filter=filter)

    def list_threads(
        self,
        cur: Cursor,
        *,
        namespace: str | None,
        status: Status | None,
        limit: int | None,
        before: str | None,
        now: float | None,
        prefix: str | None = None,
    ) -> list[ThreadInfo]:
        """A page of threads, newest first (see :meth:`SqlThreads.page`); never decodes data."""
        return self.threads.page(
            cur, namespace=namespace, status=status, limit=limit, before=before, now=now, prefix=prefix
        )

    def thread(self, cur: Cursor, namespace: str, thread_id: str, now: float | None) -> ThreadInfo | None:
        """One thread's status, head and lease; None when it has no checkpoint."""
        return self.threads.one(cur, (namespace, thread_id), now)

    # -- housekeeping ------------------------------------------------------------------------

    def delete_thread(self, cur: Cursor, namespace: str, thread_id: str, now: float | None) -> None:
        """Remove a thread's checkpoints, blobs and pending writes, and revoke its lease
        (inside a transaction)."""
        for name in ("del_cps", "del_blobs", "del_writes"):
            cur.execute(self._sql[name], (namespace, thread_id))
        self.threads.tombstone(cur, (namespace, thread_id), now)
        self.forget(namespace, thread_id)

    def prune(
        self,
        cur: Cursor,
        namespace: str,
        thread_id: str,
        keep_last: int | None,
        newer_than: str | None = None,
        now: float | None = None,
    ) -> int:
        """Drop what ``keep_last`` does not keep, and every blob no kept checkpoint needs.

        Kept checkpoints whose parent is dropped become roots. A blob kept in the body of a
        dropped checkpoint (see ``INLINE_MAX``) that a kept one still needs moves to the
        blobs table first. Runs inside the caller's write transaction; a damaged kept
        checkpoint aborts it (nothing is dropped).
        """
        where = (namespace, thread_id)
        tree = {cid: (parent, body) for cid, parent, body in cur.execute(self._sql["tree"], where)}
        if not tree:
            return 0
        parents = {cid: parent for cid, (parent, _) in tree.items()}
        keep = keep_set(parents, keep_last, newer_than, thread_id=thread_id, namespace=namespace)
        dropped = [cid for cid in tree if cid not in keep]
        need: set[tuple[str, str]] = set()
        inline: dict[tuple[str, str], tuple[str | None, bytes]] = {}
        for cid, (_, raw) in tree.items():
            try:
                body = decode_body(raw)
            except RecordError as exc:
                if cid in keep:
                    raise CheckpointCorruptError(thread_id, cid, str(exc)) from None
                continue  # a damaged checkpoint that goes anyway
            if cid in keep:
                need.update((body.blobs or {}).items())
            for ch, entry in (body.inline or {}).items():
                inline[(ch, cid)] = entry
        bases = {(ch, bid): base for ch, bid, base in cur.execute(self._sql["blob_keys"], where)}
        bases.update((key, base) for key, (base, _) in inline.items())
        stack = list(need)
        while stack:
            ch, bid = stack.pop()
            base = bases.get((ch, bid))
            if base is not None and (ch, base) not in need:
                need.add((ch, base))
                stack.append((ch, base))
        gone_ids = set(dropped)
        moved = [
            (*where, ch, cid, base, data)
            for (ch, cid), (base, data) in inline.items()
            if cid in gone_ids and (ch, cid) in need
        ]
        if moved:
            cur.executemany(self._sql["ins_blob"], moved)
        if dropped:
            cur.executemany(self._sql["del_cp"], [(*where, cid) for cid in dropped])
            cur.executemany(self._sql["del_writes_of"], [(*where, cid) for cid in dropped])
        gone = [(*where, ch, bid) for ch, bid in bases if (ch, bid) not in need and (ch, bid) not in inline]
        if gone:
            cur.executemany(self._sql["del_blob"], gone)
        reroot = [(*where, cid) for cid in keep if tree[cid][0] is not None and tree[cid][0] not in keep]
        if reroot:
            cur.executemany(self._sql["reroot"], reroot)
        self.forget(namespace, thread_id)
        self._revoke_after_rewind(cur, namespace, thread_id, now, rewound=newer_than is not None and bool(dropped))
        return len(dropped)

    def _revoke_after_rewind(
        self, cur: Cursor, namespace: str, thread_id: str, now: float | None, *, rewound: bool
    ) -> None:
        """Revoke the lease of a thread ``rewound`` (pruned back to a checkpoint): it was
        rewritten under any run holding the lease, which must write nothing more (and so a
        commit may trust a lease it checked to mean that its cached parent still exists: see
        :meth:`SqlCommit._apply <plait.checkpoint.sql._commit.SqlCommit._apply>`)."""
        if not rewound:
            return
        head = self.get(cur, namespace, thread_id, None)
        assert head is not None
        self.threads.revoke(cur, (namespace, thread_id), rules.rest_status(head.next_tasks, head.pending_writes), now)

    # -- leases (see plait.checkpoint.lease) -------------------------------------------------

    def take_lease(self, cur: Cursor, namespace: str, thread_id: str, owner: str, ttl: float, now: float) -> Lease:
        """Take the lease in the caller's write transaction (the rules applied in Python).

        Raises:
            ThreadBusyError: a live lease is held.
        """
        return self.threads.take(cur, (namespace, thread_id), owner, ttl, now)

    def renew_lease(self, cur: Cursor, lease: Lease, ttl: float, now: float) -> Lease:
        """Renew ``lease`` in the caller's write transaction (the rules applied in Python).

        Raises:
            LeaseLostError: it is no longer the thread's current lease.
        """
        return self.threads.renew(cur, lease, ttl, now)

    def release_lease(self, cur: Cursor, lease: Lease, status: RestStatus | None, now: float | None) -> None:
        """Give ``lease`` back (unflushed with server-side checks: see ``give_lease()``)."""
        if self.dialect.server_checks:
            cur.execute(self._sql["give_lease"], (lease.namespace, lease.thread_id, lease.token, status, now))
        else:
            self.threads.release(cur, (lease.namespace, lease.thread_id), lease.token, status, now)

    def take_lease_server(
        self, cur: Cursor, namespace: str, thread_id: str, owner: str, ttl: float, over: int | None, now: float | None
    ) -> Lease:
        """Take the lease by the server's function (``over``: a generation whose holder the
        caller found dead on this machine); server-side checks only.

        Raises:
            ThreadBusyError: a live lease is held (raised by the dialect module).
        """
        holder = Holder.current()
        gen, taken, expires = cur.execute(
            self._sql["take_lease"], (namespace, thread_id, owner, float(ttl), holder_json(holder), over, now)
        ).fetchone()
        return Lease(
            thread_id=thread_id,
            namespace=namespace,
            owner=owner,
            token=int(gen),
            taken_at=float(taken),
            expires_at=float(expires),
            holder=holder,
        )

    def renew_lease_server(self, cur: Cursor, lease: Lease, ttl: float, now: float | None) -> float:
        """Renew by the server's function; returns the new expiry.

        Raises:
            LeaseLostError: it is no longer the thread's current lease (raised by the dialect module).
        """
        (expires,) = cur.execute(
            self._sql["renew_lease"], (lease.namespace, lease.thread_id, lease.token, float(ttl), now)
        ).fetchone()
        return float(expires)

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
    ) -> tuple[Lease, Checkpoint | None]:
        """Take the lease, then read the checkpoint a run starts from, by one statement;
        server-side checks only.

        Raises:
            ThreadBusyError: a live lease is held (raised by the dialect module).
        """
        assert self.dialect.server_checks
        holder = Holder.current()
        rows = cur.execute(
            self._sql["take_lease_and_get"],
            (namespace, thread_id, owner, float(ttl), holder_json(holder), over, now, checkpoint_id),
        ).fetchall()
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
        return lease, self._read.from_rows(cur, namespace, thread_id, found, resume=True)
