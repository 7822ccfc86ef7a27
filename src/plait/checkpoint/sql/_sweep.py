"""A retention sweep's reads and changes on a SQL store, a batch of threads per statement.

:mod:`plait.checkpoint._sweep` decides what a sweep changes; this module reads what it
decides from and applies it, for a whole batch of groups at once. Per thread, the sweep read
its head (the policy in the head's metadata), checked its lease, read its tree and blob keys
and deleted what goes: about ten statements a thread, each a round trip on PostgreSQL, where
the issue asks 2,000 threads a second. Here each of those is one statement per batch,
naming the batch's threads (or checkpoints, or blobs) through :attr:`Dialect.rows`. A
sweep keeps a thread's head alone (``prune(keep_last=1, branches=False)``), so it reads the
heads, not the trees, and :func:`~plait.checkpoint.sql._core.plan_latest` (the same rules as
``prune``'s :func:`~plait.checkpoint.sql._core.plan_prune`) says which blob rows the head
needs. On SQLite a sweep that drops most of the store empties and refills the tables
instead (:meth:`SqlSweep._rebuild_tables`). docs/benchmarks.md, "Sweeping", has the numbers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from plait.checkpoint import lease as rules
from plait.checkpoint._records import blob_map
from plait.checkpoint._sweep import Applied
from plait.checkpoint.sql._base import Cursor, Key, json_rows
from plait.checkpoint.sql._core import PrunePlan, plan_latest
from plait.checkpoint.sql._rows import decode_metadata
from plait.checkpoint.sql._threads import lease_row

if TYPE_CHECKING:
    from plait.checkpoint._sweep import GroupPlan
    from plait.checkpoint.sql._core import SqlCore

__all__ = ["CHUNK", "SqlSweep"]

CHUNK = 2_000
"""Rows named per statement: a batch's 256 threads x 50 checkpoints go in a few statements,
and a statement's parameters stay small whatever the batch holds."""

_TOUCHED = "temp.plait_sweep_touched"
_REBUILT = {"checkpoints": ("id",), "writes": ("checkpoint_id",), "blobs": ("channel", "id")}
"""The tables a rebuilding sweep empties and refills, each with the columns after ``(ns,
thread_id)`` that name a row it keeps of a pruned thread (its head, the head's writes, the
blob rows the head needs)."""


@dataclass(frozen=True, slots=True)
class _Latest:
    """A thread a sweep keeps the head of: the head's id, and what keeping it alone changes."""

    head: str
    plan: PrunePlan
    older: bool
    """Whether the thread has a checkpoint besides its head (keeping the head removes some)."""


class SqlSweep:
    """The sweep's batched reads and changes over one store's :class:`SqlCore`."""

    def __init__(self, core: SqlCore) -> None:
        self._core = core
        d = core.dialect
        P = d.prefix
        self._d = d
        rows = d.batch.rows
        self._sql = {
            "heads": f"SELECT ns, thread_id, id, metadata FROM {P}checkpoints WHERE (ns, thread_id, id) IN ({rows(3)})",
            "rows": "SELECT ns, thread_id, gen, owner, holder, taken_at, expires_at, held, status, updated_at "
            f"FROM {P}threads WHERE (ns, thread_id) IN ({rows(2)}){d.row_lock}",
            # Each thread's head (its greatest id), with its parent and body, and whether it
            # has any other checkpoint: two seeks on the primary key a thread, where reading
            # every thread's tree was a fifth of a sweep (and counting its rows, 4 times the
            # cost of the read; PostgreSQL counts what a batch's delete removed in all). A
            # head with a parent has another (a prune makes a root of a head whose parent
            # goes); only a root head is looked past, a third seek and a heap page.
            "latest": f"WITH r (ns, thread_id) AS ({rows(2)}), k (ns, thread_id, head) AS ("
            f"SELECT r.ns, r.thread_id, (SELECT max(x.id) FROM {P}checkpoints x "
            "WHERE x.ns = r.ns AND x.thread_id = r.thread_id) FROM r) "
            "SELECT k.ns, k.thread_id, c.id, c.parent_id, c.body, CASE WHEN c.parent_id IS NULL THEN "
            f"EXISTS (SELECT 1 FROM {P}checkpoints y "
            "WHERE y.ns = k.ns AND y.thread_id = k.thread_id AND y.id < k.head) ELSE 1 = 1 END "
            f"FROM k JOIN {P}checkpoints c ON c.ns = k.ns AND c.thread_id = k.thread_id AND c.id = k.head",
            # A thread's checkpoints and pending writes but its head's: one range of the
            # primary key (the writes' unique index), a statement a thread (SQLite).
            "but_cps": f"DELETE FROM {P}checkpoints WHERE ns = ? AND thread_id = ? AND id <> ?",
            "but_writes": f"DELETE FROM {P}writes WHERE ns = ? AND thread_id = ? AND checkpoint_id <> ?",
            "bodies": f"SELECT ns, thread_id, id, body FROM {P}checkpoints WHERE (ns, thread_id, id) IN ({rows(3)})",
            "blob_keys": f"SELECT ns, thread_id, channel, id FROM {P}blobs WHERE (ns, thread_id) IN ({rows(2)})",
            "blob_rows": f"SELECT ns, thread_id, channel, id, base_id FROM {P}blobs "
            f"WHERE (ns, thread_id, channel, id) IN ({rows(4)})",
            "del_blobs": f"DELETE FROM {P}blobs WHERE (ns, thread_id, channel, id) IN ({rows(4)})",
            # counted in all (a statement's row count is not known in a pipeline until its
            # result is read): per thread, RETURNING into a GROUP BY cost 0.15-0.45 s more
            # over a sweep of 10,000 threads x 50 steps (of about 5 s)
            "keep_cps": f"WITH d AS (DELETE FROM {P}checkpoints WHERE (ns, thread_id) IN ({rows(2)}) "
            f"AND (ns, thread_id, id) NOT IN ({rows(3)}) RETURNING 1) SELECT count(*) FROM d",
            "keep_writes": f"DELETE FROM {P}writes WHERE (ns, thread_id) IN ({rows(2)}) "
            f"AND (ns, thread_id, checkpoint_id) NOT IN ({rows(3)})",
            "keep_blobs": f"DELETE FROM {P}blobs WHERE (ns, thread_id) IN ({rows(2)}) "
            f"AND (ns, thread_id, channel, id) NOT IN ({rows(4)})",
            "reroot": f"UPDATE {P}checkpoints SET parent_id = NULL WHERE (ns, thread_id, id) IN ({rows(3)})",
            "count": f"WITH k (ns, thread_id) AS ({rows(2)}) SELECT k.ns, k.thread_id, "
            f"(SELECT count(*) FROM {P}checkpoints c WHERE c.ns = k.ns AND c.thread_id = k.thread_id) FROM k",
        }
        if d.batch.hex_bytes:  # a batch's moved blobs by one statement
            self._sql["ins_blobs"] = (
                f"INSERT INTO {P}blobs (ns, thread_id, channel, id, base_id, data) "
                f"SELECT k.ns, k.thread_id, k.channel, k.id, k.base_id, {d.batch.hex_bytes.replace('?', 'k.data')} "
                f"FROM ({rows(6)}) AS k (ns, thread_id, channel, id, base_id, data) "
                "ON CONFLICT (ns, thread_id, channel, id) "
                "DO UPDATE SET base_id = excluded.base_id, data = excluded.data"
            )
        self._rebuild: dict[str, tuple[str, ...]] = {}
        if d.batch.rebuild:  # see _rebuild; each copy has its table's columns, whatever they are
            self._sql |= {
                "touched": f"CREATE TEMP TABLE {_TOUCHED} (ns TEXT NOT NULL, thread_id TEXT NOT NULL, "
                "PRIMARY KEY (ns, thread_id)) WITHOUT ROWID",
                "touch": f"INSERT OR IGNORE INTO {_TOUCHED} (ns, thread_id) {rows(2)}",
                "untouched": f"DROP TABLE {_TOUCHED}",
            }
            for table, named in _REBUILT.items():
                kept, cols = f"temp.plait_sweep_{table}", ("ns", "thread_id", *named)
                on = " AND ".join(f"b.{col} = k.{col}" for col in cols)
                self._rebuild[table] = tuple(
                    d.q(sql)
                    for sql in (
                        f"CREATE TEMP TABLE {kept} AS SELECT * FROM {P}{table} WHERE 0",
                        f"INSERT INTO {kept} SELECT b.* FROM (SELECT DISTINCT ns, thread_id FROM {P}{table}) t "
                        f"JOIN {P}{table} b ON b.ns = t.ns AND b.thread_id = t.thread_id "
                        f"WHERE NOT EXISTS (SELECT 1 FROM {_TOUCHED} s "
                        "WHERE s.ns = t.ns AND s.thread_id = t.thread_id)",
                        f"WITH k ({', '.join(cols)}) AS ({rows(len(cols))}) INSERT INTO {kept} "
                        f"SELECT b.* FROM k JOIN {P}{table} b ON {on}",
                        f"DELETE FROM {P}{table}",
                        f"INSERT INTO {P}{table} SELECT * FROM {kept}",
                        f"DROP TABLE {kept}",
                    )
                )
        self._sql = {k: d.q(v) for k, v in self._sql.items()}

    def _select(self, cur: Cursor, name: str, rows: Sequence[Sequence[str]], n: int) -> list[Any]:
        found: list[Any] = []
        for start in range(0, len(rows), CHUNK):
            found += cur.execute(self._sql[name], [json_rows(rows[start : start + CHUNK])]).fetchall()
        return found

    def _change(self, cur: Cursor, name: str, rows: Sequence[Sequence[str]], n: int) -> None:
        for start in range(0, len(rows), CHUNK):
            cur.execute(self._sql[name], [json_rows(rows[start : start + CHUNK])])

    # -- reads -------------------------------------------------------------------------------

    def heads_metadata(self, cur: Cursor, heads: Sequence[tuple[str, str, str]]) -> list[Any]:
        """The metadata of each ``(ns, thread_id, checkpoint_id)`` (None where it is gone)."""
        found = {
            (ns, tid, cid): decode_metadata(tid, cid, raw) for ns, tid, cid, raw in self._select(cur, "heads", heads, 3)
        }
        return [found.get(head) for head in heads]

    def counts(self, cur: Cursor, keys: Sequence[Key]) -> dict[Key, int]:
        """The checkpoints of each thread of ``keys``."""
        return {(ns, tid): int(n) for ns, tid, n in self._select(cur, "count", keys, 2)}

    def busy(self, cur: Cursor, keys: Sequence[Key], now: float | None) -> set[Key]:
        """Which of ``keys`` a live lease holds, their rows locked until the transaction ends
        where the dialect locks rows (see :meth:`SqlThreads.busy
        <plait.checkpoint.sql._threads.SqlThreads.busy>`)."""
        rows = self._select(cur, "rows", keys, 2)
        if rows and now is None:  # the server's clock, as its lease functions read it
            now = float(cur.execute(self._d.q(f"SELECT {self._d.clock}"), (None,)).fetchone()[0])
        held: set[Key] = set()
        for raw in rows:
            row = lease_row(raw[2:])
            if row is not None and now is not None and rules.shown_status(row, now) == "busy":
                held.add((raw[0], raw[1]))
        return held

    # -- changes -----------------------------------------------------------------------------

    def apply(self, cur: Cursor, plans: Sequence[GroupPlan], now: float | None, *, rebuild: bool = False) -> Applied:
        """Apply a batch of a sweep's plans inside the caller's write transaction (a plan
        whose top-level thread a live lease holds is left alone). ``rebuild``: the batch is
        the whole sweep, and empties and refills the tables (see :meth:`_rebuild_tables`)
        where the dialect does so."""
        core = self._core
        held = self.busy(cur, [plan.root for plan in plans], now)
        live = [plan for plan in plans if plan.root not in held]
        rebuild = rebuild and self._d.batch.rebuild
        latest = self._latest(cur, [key for plan in live for key in plan.prunes], listed=not rebuild)
        rebuilt = self._rebuild_tables(cur, live, latest) if rebuild else None
        for plan in live:
            for ns, tid in plan.deletes:
                core.delete_thread(cur, ns, tid, now)
        removed = self._write(cur, latest, rebuilt)
        for key in latest:
            core.cache.forget(key)
        pruned = [
            None if plan.root in held else any(key in latest and latest[key].older for key in plan.prunes)
            for plan in plans
        ]
        return Applied(pruned, removed)

    def _latest(self, cur: Cursor, keys: Sequence[Key], *, listed: bool) -> dict[Key, _Latest]:
        """Each thread's head and :class:`PrunePlan` (keeping the head alone), from its
        head's body and blob rows read for the whole batch; what a plan misses (a dropped
        body holding a kept blob inline, a blob row a kept one needs) is read for all the
        plans missing something, which go again. ``listed``: the plans name the blob rows
        that go (the threads' blob keys are read for it) where the dialect deletes them so."""
        if not keys:
            return {}
        found: dict[Key, tuple[str, bool]] = {}
        bodies: dict[tuple[str, str, str], bytes] = {}
        heads = self._select(cur, "latest", keys, 2)
        older = {(ns, tid) for ns, tid, *_, other in heads if other}
        for ns, tid, head, parent, body, _ in heads:
            found[(ns, tid)] = (head, parent is not None)
            bodies[(ns, tid, head)] = bytes(body)
        # The keys of every blob row of the batch's threads where a prune names what goes;
        # else none ahead (on PostgreSQL, reading them all was a fifth of a sweep's time).
        # Bases only of the rows a kept checkpoint needs, as the plans ask for them.
        tables = {key: _Blobs(None) for key in found}
        if listed and not self._d.batch.delete_by_what_stays:
            keyed: dict[Key, set[tuple[str, str]]] = {key: set() for key in found}
            for ns, tid, ch, bid in self._select(cur, "blob_keys", list(found), 2):
                keyed[(ns, tid)].add((ch, bid))
            tables = {key: _Blobs(keys) for key, keys in keyed.items()}
        self._prefetch(cur, found, bodies, tables)
        plans: dict[Key, _Latest] = {}
        todo = list(found)
        while todo:
            no_body: list[tuple[str, str, str]] = []
            no_blob: list[tuple[str, str, str, str]] = []
            for key in todo:
                head, rooted = found[key]
                try:
                    plan = plan_latest(key, head, rooted, _lookup(bodies, key), tables[key])
                except _Missing as exc:
                    if exc.blob is None:
                        no_body.append((*key, exc.cid))
                    else:
                        no_blob.append((*key, *exc.blob))
                else:
                    plans[key] = _Latest(head, plan, key in older)
            got = {(ns, tid, cid): bytes(body) for ns, tid, cid, body in self._select(cur, "bodies", no_body, 3)}
            bodies.update(got)
            bodies.update((row, b"") for row in no_body if row not in got)  # none such, or gone: damaged
            for ns, tid, ch, bid, base in self._select(cur, "blob_rows", no_blob, 4):
                tables[(ns, tid)].rows[(ch, bid)] = base
            for ns, tid, ch, bid in no_blob:
                tables[(ns, tid)].asked.add((ch, bid))
            todo = list(dict.fromkeys([(ns, tid) for ns, tid, _ in no_body] + [(b[0], b[1]) for b in no_blob]))
        return plans

    def _prefetch(
        self,
        cur: Cursor,
        found: Mapping[Key, tuple[str, bool]],
        bodies: dict[tuple[str, str, str], bytes],
        tables: Mapping[Key, _Blobs],
    ) -> None:
        """Read ahead what the plans will ask for first: the blob rows the heads' bodies name,
        and the dropped bodies holding inline the ones that are not rows (a value written
        once, early, and never changed since), so that most plans are made in one go."""
        want: list[tuple[str, str, str, str]] = []
        for key, (head, _) in found.items():
            want += [(*key, ch, bid) for ch, bid in _blob_refs(bodies[(*key, head)], head).items()]
        if want:
            for ns, tid, ch, bid, base in self._select(cur, "blob_rows", want, 4):
                tables[(ns, tid)].rows[(ch, bid)] = base
            for ns, tid, ch, bid in want:
                tables[(ns, tid)].asked.add((ch, bid))
        inline = {
            (ns, tid, bid)
            for ns, tid, ch, bid in want
            if (ch, bid) not in tables[(ns, tid)].rows and bid < found[(ns, tid)][0]
        }
        bodies.update(
            ((ns, tid, cid), bytes(body)) for ns, tid, cid, body in self._select(cur, "bodies", sorted(inline), 3)
        )
        bodies.update((row, b"") for row in inline if row not in bodies)  # not a checkpoint (any longer)

    def _write(self, cur: Cursor, latest: Mapping[Key, _Latest], rebuilt: int | None) -> int:
        """Store the moved blobs, delete what goes (unless the tables were ``rebuilt``, which
        says how many checkpoints went) and make roots of the heads whose parent went, each
        by one statement for the batch (SQLite: the deletes of checkpoints and writes by one
        range of a thread's primary key each); the checkpoints deleted."""
        plans = {key: found.plan for key, found in latest.items()}
        moved = [row for plan in plans.values() for row in plan.moved]
        if moved and self._d.batch.hex_bytes:
            rows = [(*row[:5], row[5].hex()) for row in moved]
            cur.execute(self._sql["ins_blobs"], [json_rows(rows)])
        elif moved:
            cur.executemany(self._core.statement("ins_blob"), moved)
        heads = [(*key, found.head) for key, found in latest.items()]
        reroot = [(*key, cid) for key, plan in plans.items() for cid in plan.reroot]
        if rebuilt is not None:
            self._change(cur, "reroot", reroot, 3)
            return rebuilt
        if self._d.batch.delete_by_what_stays:  # the count read last: the rest needs no wait
            threads = [json_rows(list(plans))]
            stays = [json_rows([(*key, *blob) for key, plan in plans.items() for blob in plan.stays])]
            cur.execute(self._sql["keep_writes"], [*threads, json_rows(heads)])
            cur.execute(self._sql["keep_blobs"], [*threads, *stays])
            self._change(cur, "reroot", reroot, 3)
            return int(cur.execute(self._sql["keep_cps"], [*threads, json_rows(heads)]).fetchone()[0])
        dropped = 0
        for row in heads:
            dropped += cur.execute(self._sql["but_cps"], row).rowcount
        cur.executemany(self._sql["but_writes"], heads)
        self._change(cur, "del_blobs", [row for plan in plans.values() for row in plan.gone], 4)
        self._change(cur, "reroot", reroot, 3)
        return dropped

    def _rebuild_tables(self, cur: Cursor, live: Sequence[GroupPlan], latest: Mapping[Key, _Latest]) -> int:
        """Copy out the rows that stay of the checkpoints, writes and blobs tables, empty
        each and put its copy back, instead of deleting the rest row by row (a sweep whose
        groups hold most of the store); per pruned thread, the checkpoints that went.

        On SQLite a deleted row costs a seek and a rebalance in its table and in each index:
        5.6 s to delete the 950,000 rows and commit, for a sweep of 10,000 threads x 50
        steps, against 1.8 s to copy out the 30,000 that stay, empty the tables (``DELETE``
        without ``WHERE`` frees their pages whole) and write them back (docs/benchmarks.md,
        "Sweeping"). What stays: every row of a thread the sweep does not touch, the heads
        of the pruned threads with their pending writes, and the blob rows the heads need.
        Returns the checkpoints of the pruned threads that went.
        """
        touched = [key for plan in live for key in plan.deletes] + list(latest)
        heads = [(*key, found.head) for key, found in latest.items()]
        named: dict[str, Sequence[Sequence[str]]] = {
            "checkpoints": heads,
            "writes": heads,
            "blobs": [(*key, *blob) for key, found in latest.items() for blob in found.plan.stays],
        }
        cur.execute(self._sql["touched"])
        self._change(cur, "touch", touched, 2)
        went = sum(n - 1 for n in self.counts(cur, list(latest)).values())
        for table, (create, untouched, keep, clear, back, drop) in self._rebuild.items():
            cur.execute(create)
            cur.execute(untouched)
            rows = named[table]
            for start in range(0, len(rows), CHUNK):
                cur.execute(keep, [json_rows(rows[start : start + CHUNK])])
            for sql in (clear, back, drop):
                cur.execute(sql)
        cur.execute(self._sql["untouched"])
        return went


def _blob_refs(body: bytes, cid: str) -> dict[str, str]:
    """The blob map of checkpoint ``cid``'s body, parsed alone (the rest of the body, and
    whether it is well formed, are for :func:`~plait.checkpoint.sql._core.plan_latest`, which
    decodes it whole): the body's other fields cost twice as much to decode, for nothing here."""
    try:
        raw = orjson.loads(body)
    except orjson.JSONDecodeError:
        return {}
    refs = blob_map(raw, cid) if type(raw) is dict else None
    if type(refs) is not dict:
        return {}
    return {ch: bid for ch, bid in refs.items() if type(bid) is str}


class _Missing(Exception):
    """A body (``cid``) or blob row (``blob``) that
    :func:`~plait.checkpoint.sql._core.plan_latest` asked for and the batch has not read yet."""

    def __init__(self, cid: str = "", blob: tuple[str, str] | None = None) -> None:
        super().__init__(cid, blob)
        self.cid = cid
        self.blob = blob


class _Blobs(Mapping[tuple[str, str], "str | None"]):
    """A thread's blob rows ``(channel, id) -> base_id`` as far as read: which rows exist is
    known for all of them (``present``, where a prune names what goes) or for those asked
    for; a base is known for the rows asked for. Asking for another raises :class:`_Missing`.
    (Listing the keys alone reads SQLite's primary-key index only; the bases are in the
    table, a page read per row: 2 of a 15 s sweep of 10,000 threads read them all.)"""

    def __init__(self, present: set[tuple[str, str]] | None) -> None:
        self.present = present
        self.rows: dict[tuple[str, str], str | None] = {}
        self.asked: set[tuple[str, str]] = set()

    def __contains__(self, key: object) -> bool:
        if key in self.rows:
            return True
        if self.present is not None:
            return key in self.present
        if key in self.asked:
            return False
        assert isinstance(key, tuple)
        raise _Missing(blob=key)

    def __getitem__(self, key: tuple[str, str]) -> str | None:
        if key in self.rows:
            return self.rows[key]
        if key in self and key not in self.asked:
            raise _Missing(blob=key)
        raise KeyError(key)

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return iter(self.present if self.present is not None else self.rows)

    def __len__(self) -> int:
        return len(self.present if self.present is not None else self.rows)


def _lookup(bodies: Mapping[tuple[str, str, str], bytes], key: Key) -> Callable[[str], bytes]:
    def body(cid: str) -> bytes:
        found = bodies.get((*key, cid))
        if found is None:
            raise _Missing(cid)
        return found

    return body
