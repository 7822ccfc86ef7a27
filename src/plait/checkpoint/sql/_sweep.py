"""A retention sweep's reads and changes on a SQL store, a batch of threads per statement.

:mod:`plait.checkpoint._sweep` decides what a sweep changes; this module reads what it
decides from and applies it, for a whole batch of groups at once. Per thread, the sweep read
its head (the policy in the head's metadata), checked its lease, read its tree and blob keys
and deleted what goes: about ten statements a thread, each a round trip on PostgreSQL, where
the issue asks 2,000 threads a second. Here each of those is one statement per batch,
naming the batch's threads (or checkpoints, or blobs) through :attr:`Dialect.rows`; what a
thread keeps is decided by the same :func:`~plait.checkpoint.sql._core.plan_prune` as
``prune``. docs/benchmarks.md, "Sweeping", has the numbers.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from plait.checkpoint import lease as rules
from plait.checkpoint._common import keep_set
from plait.checkpoint._records import RecordError, decode_body
from plait.checkpoint.sql._base import Cursor, Key, json_rows
from plait.checkpoint.sql._core import PrunePlan, plan_prune
from plait.checkpoint.sql._rows import decode_metadata
from plait.checkpoint.sql._threads import lease_row

if TYPE_CHECKING:
    from plait.checkpoint._sweep import GroupPlan
    from plait.checkpoint.sql._core import SqlCore

__all__ = ["CHUNK", "SqlSweep"]

CHUNK = 2_000
"""Rows named per statement: a batch's 256 threads x 50 checkpoints go in a few statements,
and a statement's parameters stay small whatever the batch holds."""


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
            "tree": f"SELECT ns, thread_id, id, parent_id FROM {P}checkpoints WHERE (ns, thread_id) IN ({rows(2)})",
            "bodies": f"SELECT ns, thread_id, id, body FROM {P}checkpoints WHERE (ns, thread_id, id) IN ({rows(3)})",
            "blob_keys": f"SELECT ns, thread_id, channel, id FROM {P}blobs WHERE (ns, thread_id) IN ({rows(2)})",
            "blob_rows": f"SELECT ns, thread_id, channel, id, base_id FROM {P}blobs "
            f"WHERE (ns, thread_id, channel, id) IN ({rows(4)})",
            "del_cps": f"DELETE FROM {P}checkpoints WHERE (ns, thread_id, id) IN ({rows(3)})",
            "del_writes": f"DELETE FROM {P}writes WHERE (ns, thread_id, checkpoint_id) IN ({rows(3)})",
            "del_blobs": f"DELETE FROM {P}blobs WHERE (ns, thread_id, channel, id) IN ({rows(4)})",
            "keep_cps": f"DELETE FROM {P}checkpoints WHERE (ns, thread_id) IN ({rows(2)}) "
            f"AND (ns, thread_id, id) NOT IN ({rows(3)})",
            "keep_writes": f"DELETE FROM {P}writes WHERE (ns, thread_id) IN ({rows(2)}) "
            f"AND (ns, thread_id, checkpoint_id) NOT IN ({rows(3)})",
            "keep_blobs": f"DELETE FROM {P}blobs WHERE (ns, thread_id) IN ({rows(2)}) "
            f"AND (ns, thread_id, channel, id) NOT IN ({rows(4)})",
            "reroot": f"UPDATE {P}checkpoints SET parent_id = NULL WHERE (ns, thread_id, id) IN ({rows(3)})",
        }
        if d.batch.hex_bytes:  # a batch's moved blobs by one statement
            self._sql["ins_blobs"] = (
                f"INSERT INTO {P}blobs (ns, thread_id, channel, id, base_id, data) "
                f"SELECT k.ns, k.thread_id, k.channel, k.id, k.base_id, {d.batch.hex_bytes.replace('?', 'k.data')} "
                f"FROM ({rows(6)}) AS k (ns, thread_id, channel, id, base_id, data) "
                "ON CONFLICT (ns, thread_id, channel, id) "
                "DO UPDATE SET base_id = excluded.base_id, data = excluded.data"
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

    def apply(self, cur: Cursor, plans: Sequence[GroupPlan], now: float | None) -> list[int | None]:
        """Apply a batch of a sweep's plans inside the caller's write transaction; per plan
        the checkpoints pruned, or None where a live lease holds its top-level thread."""
        core = self._core
        held = self.busy(cur, [plan.root for plan in plans], now)
        live = [plan for plan in plans if plan.root not in held]
        for plan in live:
            for ns, tid in plan.deletes:
                core.delete_thread(cur, ns, tid, now)
        pruned = self.prune_latest(cur, [key for plan in live for key in plan.prunes])
        return [None if plan.root in held else sum(pruned.get(key, 0) for key in plan.prunes) for plan in plans]

    def prune_latest(self, cur: Cursor, keys: Sequence[Key]) -> dict[Key, int]:
        """Prune each thread of ``keys`` as ``prune(keep_last=1, branches=False)`` would;
        per thread, the checkpoints dropped."""
        if not keys:
            return {}
        parents: dict[Key, dict[str, str | None]] = defaultdict(dict)
        for ns, tid, cid, parent in self._select(cur, "tree", keys, 2):
            parents[(ns, tid)][cid] = parent
        keeps = {
            key: keep_set(tree, 1, thread_id=key[1], namespace=key[0], branches=False) for key, tree in parents.items()
        }
        plans = self._plans(cur, parents, keeps)
        self._write(cur, plans, keeps)
        for key in plans:
            self._core.cache.forget(key)
        return {key: len(plan.dropped) for key, plan in plans.items()}

    def _plans(
        self, cur: Cursor, parents: Mapping[Key, Mapping[str, str | None]], keeps: Mapping[Key, set[str]]
    ) -> dict[Key, PrunePlan]:
        """Each thread's :class:`PrunePlan`, from its kept bodies and blob rows read for the
        whole batch; what a plan misses (a dropped body holding a kept blob inline, a blob
        row a kept one needs) is read for all the plans missing something, which go again."""
        kept = [(*key, cid) for key, keep in keeps.items() for cid in keep]
        bodies = {(ns, tid, cid): bytes(body) for ns, tid, cid, body in self._select(cur, "bodies", kept, 3)}
        # The keys of every blob row of the batch's threads where a prune names what goes;
        # else none ahead (on PostgreSQL, reading them all was a fifth of a sweep's time).
        # Bases only of the rows a kept checkpoint needs, as the plans ask for them.
        tables = {key: _Blobs(None) for key in parents}
        if not self._d.batch.delete_by_what_stays:
            listed: dict[Key, set[tuple[str, str]]] = {key: set() for key in parents}
            for ns, tid, ch, bid in self._select(cur, "blob_keys", list(parents), 2):
                listed[(ns, tid)].add((ch, bid))
            tables = {key: _Blobs(keys) for key, keys in listed.items()}
        self._prefetch(cur, parents, keeps, bodies, tables)
        plans: dict[Key, PrunePlan] = {}
        todo = list(parents)
        while todo:
            no_body: list[tuple[str, str, str]] = []
            no_blob: list[tuple[str, str, str, str]] = []
            for key in todo:
                try:
                    plans[key] = plan_prune(key, parents[key], keeps[key], _lookup(bodies, key), tables[key])
                except _Missing as exc:
                    if exc.blob is None:
                        no_body.append((*key, exc.cid))
                    else:
                        no_blob.append((*key, *exc.blob))
            found = {(ns, tid, cid): bytes(body) for ns, tid, cid, body in self._select(cur, "bodies", no_body, 3)}
            bodies.update(found)
            bodies.update((row, b"") for row in no_body if row not in found)  # gone meanwhile: damaged
            for ns, tid, ch, bid, base in self._select(cur, "blob_rows", no_blob, 4):
                tables[(ns, tid)].rows[(ch, bid)] = base
            for ns, tid, ch, bid in no_blob:
                tables[(ns, tid)].asked.add((ch, bid))
            todo = list(dict.fromkeys([(ns, tid) for ns, tid, _ in no_body] + [(b[0], b[1]) for b in no_blob]))
        return plans

    def _prefetch(
        self,
        cur: Cursor,
        parents: Mapping[Key, Mapping[str, str | None]],
        keeps: Mapping[Key, set[str]],
        bodies: dict[tuple[str, str, str], bytes],
        tables: Mapping[Key, _Blobs],
    ) -> None:
        """Read ahead what the plans will ask for first: the blob rows the kept bodies name,
        and the dropped bodies holding inline the ones that are not rows (a value written
        once, early, and never changed since), so that most plans are made in one go."""
        want: list[tuple[str, str, str, str]] = []
        for key, keep in keeps.items():
            for cid in keep:
                try:
                    refs = decode_body(bodies[(*key, cid)]).blobs or {}
                except (KeyError, RecordError):
                    continue  # plan_prune says what is wrong with it
                want += [(*key, ch, bid) for ch, bid in refs.items()]
        if want:
            for ns, tid, ch, bid, base in self._select(cur, "blob_rows", want, 4):
                tables[(ns, tid)].rows[(ch, bid)] = base
            for ns, tid, ch, bid in want:
                tables[(ns, tid)].asked.add((ch, bid))
        inline = {
            (ns, tid, bid)
            for ns, tid, ch, bid in want
            if (ch, bid) not in tables[(ns, tid)].rows and bid in parents[(ns, tid)] and bid not in keeps[(ns, tid)]
        }
        bodies.update(
            ((ns, tid, cid), bytes(body)) for ns, tid, cid, body in self._select(cur, "bodies", sorted(inline), 3)
        )

    def _write(self, cur: Cursor, plans: Mapping[Key, PrunePlan], keeps: Mapping[Key, set[str]]) -> None:
        """Store the moved blobs, delete what goes and make roots of kept checkpoints whose
        parent went, each by one statement for the batch."""
        moved = [row for plan in plans.values() for row in plan.moved]
        if moved and self._d.batch.hex_bytes:
            rows = [(*row[:5], row[5].hex()) for row in moved]
            cur.execute(self._sql["ins_blobs"], [json_rows(rows)])
        elif moved:
            cur.executemany(self._core.statement("ins_blob"), moved)
        if self._d.batch.delete_by_what_stays:
            threads = [json_rows(list(plans))]
            kept = [json_rows([(*key, cid) for key in plans for cid in keeps[key]])]
            stays = [json_rows([(*key, *blob) for key, plan in plans.items() for blob in plan.stays])]
            cur.execute(self._sql["keep_cps"], [*threads, *kept])
            cur.execute(self._sql["keep_writes"], [*threads, *kept])
            cur.execute(self._sql["keep_blobs"], [*threads, *stays])
        else:
            dropped = [(*key, cid) for key, plan in plans.items() for cid in plan.dropped]
            self._change(cur, "del_cps", dropped, 3)
            self._change(cur, "del_writes", dropped, 3)
            self._change(cur, "del_blobs", [row for plan in plans.values() for row in plan.gone], 4)
        self._change(cur, "reroot", [(*key, cid) for key, plan in plans.items() for cid in plan.reroot], 3)


class _Missing(Exception):
    """A body (``cid``) or blob row (``blob``) :func:`plan_prune` asked for that the batch
    has not read yet."""

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
