"""The thread rows of the SQL checkpoint store: leases fenced by generation, statuses at
rest, and listings paged and filtered in the database.

A part of :class:`plait.checkpoint.sql._core.SqlCore`. The rules are
:mod:`plait.checkpoint.lease`'s: a dialect without server-side checks (SQLite) applies them
here in Python, on the row read inside its write transaction (which holds the database's
write lock); PostgreSQL's functions apply them server-side (:mod:`plait.checkpoint.postgres._functions`),
and this module only calls them and reads their answers.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from plait.checkpoint import lease as rules
from plait.checkpoint._match import leaves
from plait.checkpoint._records import RecordError, decode_body, decode_json
from plait.checkpoint.holder import Holder
from plait.checkpoint.model import (
    Fence,
    Lease,
    PendingWrite,
    RestStatus,
    Status,
    ThreadInfo,
    check_listing,
    decode_cursor,
)
from plait.checkpoint.sql._base import Cursor, Dialect, Key
from plait.checkpoint.sql._search import metadata_clause
from plait.errors import CheckpointCorruptError

__all__ = ["SqlThreads", "holder_json"]

log = logging.getLogger("plait.checkpoint.sql")


def holder_json(holder: Holder | None) -> str | None:
    """A holder as the text its column stores."""
    return None if holder is None else orjson.dumps(holder.to_json()).decode()


def _holder(text: Any) -> Holder | None:
    if text is None:
        return None
    try:
        return Holder.from_json(orjson.loads(text) if isinstance(text, str | bytes) else text)
    except orjson.JSONDecodeError:
        return None


def _row(raw: Sequence[Any] | None) -> rules.LeaseRow | None:
    """A thread row from ``gen, owner, holder, taken_at, expires_at, held, status, updated_at``."""
    if raw is None:
        return None
    gen, owner, holder, taken_at, expires_at, held, status, updated_at = raw
    return rules.LeaseRow(
        gen=int(gen),
        owner=owner,
        holder=_holder(holder),
        taken_at=float(taken_at),
        expires_at=float(expires_at),
        held=bool(held),
        status=rules.stored_rest(status),
        updated_at=float(updated_at),
    )


def lease_row(raw: Sequence[Any] | None) -> rules.LeaseRow | None:
    """A thread row read by another module's statement (a sweep's batch), in the same
    columns as ``thread_row``."""
    return _row(raw)


class SqlThreads:
    """Thread rows over a cursor: the lease rules in Python, or PostgreSQL's functions."""

    def __init__(self, dialect: Dialect, sql: Mapping[str, str], store: str) -> None:
        self.dialect = dialect
        self._sql = sql
        self.store = store
        p = dialect.prefix
        self._parent_held = (
            f"(t.ns <> '' AND EXISTS (SELECT 1 FROM {p}threads p WHERE p.ns = '' AND p.thread_id = t.thread_id "
            "AND p.held = 1 {cond}))"
        )
        """A listing's condition: the row is a subgraph's whose parent thread's lease is held
        (``{cond}``: and live, or expired)."""
        self._held_parents = (
            f"SELECT {dialect.clock}, thread_id, gen, owner, holder, taken_at, expires_at, held, status, updated_at "
            f"FROM {p}threads WHERE ns = '' AND held = 1 AND thread_id IN ({{ids}})"
        )

    # -- the rules in Python (dialects without server-side checks) ---------------------------

    def row(self, cur: Cursor, key: Key) -> rules.LeaseRow | None:
        return _row(cur.execute(self._sql["thread_row"], key).fetchone())

    def busy(self, cur: Cursor, key: Key, now: float | None) -> bool:
        """Whether a live lease is held on ``key``, its row locked until the caller's write
        transaction ends where the dialect locks rows (a sweep's check before it changes a
        thread: a run taking the lease meanwhile waits for the sweep to commit)."""
        row = _row(cur.execute(self._sql["thread_row"] + self.dialect.row_lock, key).fetchone())
        if row is None:
            return False
        if now is None:  # the server's clock, as its lease functions read it
            now = float(cur.execute(self.dialect.q(f"SELECT {self.dialect.clock}"), (None,)).fetchone()[0])
        return rules.shown_status(row, now) == "busy"

    def put_row(self, cur: Cursor, key: Key, row: rules.LeaseRow) -> None:
        cur.execute(
            self._sql["put_row"],
            (
                *key,
                row.gen,
                row.owner,
                holder_json(row.holder),
                row.taken_at,
                row.expires_at,
                int(row.held),
                row.status,
                row.updated_at,
            ),
        )

    def take(self, cur: Cursor, key: Key, owner: str, ttl: float, now: float) -> Lease:
        """Take the lease (see :func:`plait.checkpoint.lease.take`) inside the caller's write
        transaction.

        Raises:
            ThreadBusyError: a live lease is held.
        """
        row = rules.take(
            self.row(cur, key),
            thread_id=key[1],
            namespace=key[0],
            owner=owner,
            ttl=ttl,
            now=now,
            holder=Holder.current(),
        )
        self.put_row(cur, key, row)
        lease = row.lease(key[1], key[0])
        assert lease is not None
        return lease

    def renew(self, cur: Cursor, lease: Lease, ttl: float, now: float) -> Lease:
        """Renew ``lease`` (see :func:`plait.checkpoint.lease.renew`).

        Raises:
            LeaseLostError: it is no longer the thread's current lease.
        """
        key = (lease.namespace, lease.thread_id)
        row = rules.renew(self.row(cur, key), lease, ttl=ttl, now=now)
        self.put_row(cur, key, row)
        return Lease(
            thread_id=lease.thread_id,
            namespace=lease.namespace,
            owner=lease.owner,
            token=lease.token,
            taken_at=lease.taken_at,
            expires_at=row.expires_at,
            holder=lease.holder,
        )

    def check_fence(self, cur: Cursor, key: Key, fence: Fence, now: float) -> None:
        """Check ``fence`` on one thread (see :func:`plait.checkpoint.lease.check_fence`),
        storing the row when the check revoked an expired lease.

        Raises:
            LeaseLostError: the run's lease was lost.
            ThreadBusyError: a one-off write found a live lease.
        """
        # The hot paths, once per step of every run and once per update_state: two columns,
        # no holder decoding; the whole row is read only to explain a refusal or to revoke.
        gen_held = cur.execute(self._sql["fence_gen"], key).fetchone()
        if fence.token is not None:
            if gen_held is not None and int(gen_held[0]) == fence.token and gen_held[1]:
                return
        elif gen_held is None or not gen_held[1]:
            return  # a one-off write on a thread no lease holds: nothing to refuse or revoke
        changed = rules.check_fence(self.row(cur, key), fence, thread_id=key[1], namespace=key[0], now=now)
        if changed is not None:
            self.put_row(cur, key, changed)

    # -- statements both dialects run --------------------------------------------------------

    def release(self, cur: Cursor, key: Key, token: int, status: RestStatus | None, now: float | None) -> None:
        """Give the lease of generation ``token`` back, inside a commit (nothing when it is not
        the thread's current lease)."""
        cur.execute(self._sql["release"], (status, now, *key, token))

    def settle(self, cur: Cursor, key: Key, status: RestStatus, now: float | None) -> None:
        """Record how a one-off write leaves the thread."""
        cur.execute(self._sql["settle"], (*key, status, now))

    def revoke(self, cur: Cursor, key: Key, status: RestStatus, now: float | None) -> None:
        """Revoke the lease of a thread rewritten under it (a prune back to a checkpoint),
        leaving it ``status``."""
        cur.execute(self._sql["revoke"], ("prune", status, now, *key))

    def tombstone(self, cur: Cursor, key: Key, now: float | None) -> None:
        """Revoke a deleted thread's lease, keeping its row (generations never restart)."""
        cur.execute(self._sql["tombstone"], ("delete", now, *key))

    def give_back(self, cur: Cursor, lease: Lease, status: RestStatus | None, now: float | None) -> None:
        """Give ``lease`` back outside a commit (unflushed with server-side checks: see
        ``give_lease()``)."""
        if self.dialect.server_checks:
            cur.execute(self._sql["give_lease"], (lease.namespace, lease.thread_id, lease.token, status, now))
        else:
            self.release(cur, (lease.namespace, lease.thread_id), lease.token, status, now)

    # -- the rules in the server's functions (dialects with server-side checks) --------------

    def take_by_server(
        self, cur: Cursor, key: Key, owner: str, ttl: float, over: int | None, now: float | None
    ) -> Lease:
        """Take the lease by the server's function (``over``: a generation whose holder the
        caller found dead on this machine).

        Raises:
            ThreadBusyError: a live lease is held (raised by the dialect module).
        """
        holder = Holder.current()
        gen, taken, expires = cur.execute(
            self._sql["take_lease"], (*key, owner, float(ttl), holder_json(holder), over, now)
        ).fetchone()
        return Lease(
            thread_id=key[1],
            namespace=key[0],
            owner=owner,
            token=int(gen),
            taken_at=float(taken),
            expires_at=float(expires),
            holder=holder,
        )

    def renew_by_server(self, cur: Cursor, lease: Lease, ttl: float, now: float | None) -> float:
        """Renew by the server's function; returns the new expiry.

        Raises:
            LeaseLostError: it is no longer the thread's current lease (raised by the dialect module).
        """
        (expires,) = cur.execute(
            self._sql["renew_lease"], (lease.namespace, lease.thread_id, lease.token, float(ttl), now)
        ).fetchone()
        return float(expires)

    # -- listings ----------------------------------------------------------------------------

    def page(
        self,
        cur: Cursor,
        *,
        namespace: str | None,
        status: Status | None,
        limit: int | None,
        before: str | None,
        now: float | None,
        prefix: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        counted: bool = True,
    ) -> list[ThreadInfo]:
        """A page of threads, newest first, filtered by status, id prefix and the head's
        metadata in the database (the prefix compared with ``substr``, a bound parameter: no
        LIKE pattern to escape; the metadata as :mod:`plait.checkpoint.sql._search` writes it).
        Without ``counted``, each entry's ``checkpoints`` is 0 (a sweep's listing)."""
        check_listing(status, limit, prefix, metadata)
        where: list[str] = []
        params: list[Any] = [now]
        if namespace is not None:
            where.append("t.ns = ?")
            params.append(namespace)
        if status is not None:
            clause, args = self._status_clause(status, now)
            where.append(clause)
            params += args
        if prefix:
            where.append("substr(t.thread_id, 1, length(?)) = ?")
            params += [prefix, prefix]
        if metadata:
            clause, args = metadata_clause(self.dialect, leaves(metadata))
            where.append(clause)
            params += args
        if before is not None:
            at, ns, tid = decode_cursor(before)
            where.append("(t.updated_at < ? OR (t.updated_at = ? AND (t.ns < ? OR (t.ns = ? AND t.thread_id < ?))))")
            params += [at, at, ns, ns, tid]
        params.append(self.dialect.no_limit if limit is None else limit)
        sql = self._sql["threads" if counted else "threads_uncounted"].replace(
            "{where}", self.dialect.q("WHERE " + " AND ".join(where)) if where else ""
        )
        infos = [info for raw in cur.execute(sql, params).fetchall() if (info := self._info(raw)) is not None]
        infos = self._under_parents(cur, infos, now)
        if status in ("busy", "stale"):  # a holder the store counts as live, that this machine knows is dead
            infos = [info for info in infos if info.status == status]
        return infos

    def one(self, cur: Cursor, key: Key, now: float | None) -> ThreadInfo | None:
        """One thread's listing entry; None when it has no checkpoint."""
        sql = self._sql["threads"].replace("{where}", self.dialect.q("WHERE t.ns = ? AND t.thread_id = ?"))
        found = cur.execute(sql, (now, *key, 1)).fetchone()
        info = None if found is None else self._info(found, raising=True)
        return None if info is None else self._under_parents(cur, [info], now)[0]

    def _under_parents(self, cur: Cursor, infos: list[ThreadInfo], now: float | None) -> list[ThreadInfo]:
        """Subgraph namespaces shown ``busy`` (or ``stale``) while their parent thread's lease is
        held (:func:`~plait.checkpoint.lease.under_parent`): one indexed read of the held
        parents of the page's subgraph rows, none for a page without any."""
        tids = sorted({i.thread_id for i in infos if i.namespace})
        if not tids:
            return infos
        parents: dict[str, Status] = {}
        for at in range(0, len(tids), 500):
            chunk = tids[at : at + 500]
            sql = self._held_parents.replace("{ids}", ", ".join("?" * len(chunk)))
            for raw in cur.execute(self.dialect.q(sql), (now, *chunk)).fetchall():
                row = _row(raw[2:])
                if row is not None:
                    parents[raw[1]] = rules.shown_status(row, float(raw[0]))
        return [rules.under_parent(i, parents.get(i.thread_id)) for i in infos]

    def status(self, cur: Cursor, key: Key, now: float | None) -> Status | None:
        """How one thread stands, as its listing entry would say (None: it has no row); a
        subgraph's namespace, which its parent's lease shows through, by its entry."""
        if key[0]:
            info = self.one(cur, key, now)
            return None if info is None else info.status
        return self.status_of(key, cur.execute(self._sql["thread_status"], (now, *key)).fetchone())

    def status_of(self, key: Key, found: Sequence[Any] | None) -> Status | None:
        """The status of a thread row read as ``thread_status`` reads it (the lease clock,
        then the row; None, or a row of NULLs from an outer join, for no row)."""
        if found is None or found[1] is None:
            return None
        try:
            row = _row(found[1:])
            assert row is not None
            return rules.shown_status(row, float(found[0]))
        except (TypeError, ValueError) as exc:
            raise CheckpointCorruptError(key[1], None, f"its thread row cannot be read ({exc})") from None

    def _status_clause(self, status: Status, now: float | None) -> tuple[str, list[Any]]:
        clock = self.dialect.clock
        if status in ("busy", "stale"):
            op = ">" if status == "busy" else "<="
            parent = self._parent_held.replace("{cond}", f"AND p.expires_at {op} {clock}")
            return f"(t.held = 1 AND t.expires_at {op} {clock} OR t.held = 0 AND {parent})", [now, now]
        if status == "idle":
            return f"t.held = 0 AND t.status = 'idle' AND NOT {self._parent_held.replace('{cond}', '')}", []
        # The other statuses at rest are in the partial index threads_waiting (schema 11),
        # whose condition is repeated word for word: SQLite uses a partial index only for a
        # query that holds each of its terms, and a bound parameter would hide the status.
        # (The status is one of STATUSES, checked: safe to write into the text.)
        waiting = f"t.held = 0 AND NOT {self._parent_held.replace('{cond}', '')} AND t.status <> 'idle' AND "
        if status == "ready":
            return waiting + "t.status IN ('ready', 'stale')", []
        return waiting + f"t.status = '{status}'", []

    def _info(self, raw: Sequence[Any], *, raising: bool = False) -> ThreadInfo | None:
        """A listing entry from a row; a row of foreign types (SQLite keeps whatever type a
        value was given) is skipped and logged, as the file backend skips a damaged file, so
        one damaged thread does not hide the others (``raising``: it is the thread asked for)."""
        now, ns, tid = raw[0], raw[1], raw[2]
        head, step, created, source, count = raw[11:16]
        try:
            if not (type(ns) is str and type(tid) is str and type(head) is str and type(source) is str):
                raise TypeError("ids of other types")
            if type(step) is not int or type(created) not in (int, float) or type(count) is not int:
                raise TypeError("numbers of other types")
            row = _row(raw[3:11])
            assert row is not None
        except (TypeError, ValueError) as exc:
            if raising:
                raise CheckpointCorruptError(str(tid), str(head), f"its thread row cannot be read ({exc})") from None
            log.warning("%s: skipping thread %r: its rows hold values of other types (%s)", self.store, tid, exc)
            return None
        now = float(now)
        return ThreadInfo(
            thread_id=tid,
            namespace=ns,
            status=rules.shown_status(row, now),
            head_id=head,
            step=int(step),
            created_at=float(created),
            updated_at=row.updated_at,
            source=source,
            checkpoints=int(count),
            lease=row.lease(tid, ns),
        )

    # -- migration ---------------------------------------------------------------------------

    def fill_statuses(self, cur: Cursor) -> None:
        """Give every thread of a store migrated to schema 7 the status its head stands in
        (the migration created their rows as idle): read each head's next tasks and writes.
        Runs once, inside the migration's transaction."""
        p = self.dialect.prefix
        heads = cur.execute(
            self.dialect.q(
                f"SELECT c.ns, c.thread_id, c.id, c.body FROM {p}checkpoints c JOIN (SELECT ns, thread_id, "
                f"max(id) AS head FROM {p}checkpoints GROUP BY ns, thread_id) g "
                "ON c.ns = g.ns AND c.thread_id = g.thread_id AND c.id = g.head"
            )
        ).fetchall()
        for ns, tid, cid, body in heads:
            try:
                tasks = decode_body(body, cid).next_tasks
                found = cur.execute(
                    self.dialect.q(
                        f"SELECT task_id, kind, wkey, value FROM {p}writes "
                        "WHERE ns = ? AND thread_id = ? AND checkpoint_id = ?"
                    ),
                    (ns, tid, cid),
                ).fetchall()
                pending = [PendingWrite(task_id=t, kind=k, key=w, value=decode_json(v)) for t, k, w, v in found]
            except RecordError as exc:
                raise CheckpointCorruptError(tid, cid, f"cannot migrate it to schema 7: {exc}") from None
            status = rules.rest_status(tasks, pending)
            if status != "idle":
                cur.execute(
                    self.dialect.q(f"UPDATE {p}threads SET status = ? WHERE ns = ? AND thread_id = ? AND held = 0"),
                    (status, ns, tid),
                )
