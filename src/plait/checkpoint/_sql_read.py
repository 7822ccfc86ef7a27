"""The reads of the SQL checkpoint store: one checkpoint, a lineage, and the replay of the
delta-encoded channel values they need (skipped for the head this process last wrote).

Part of :class:`plait.checkpoint._sql.SqlCore`, which owns the statements and the cache.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any, cast

from plait._frozen import FrozenDict
from plait.checkpoint import delta
from plait.checkpoint._common import check_filter, matches
from plait.checkpoint._records import Body, RecordError, decode_body, decode_json
from plait.checkpoint._sql_base import Cursor, Dialect, HeadCache, Key
from plait.checkpoint.base import Checkpoint, PendingWrite
from plait.errors import CheckpointCorruptError

__all__ = ["SqlRead", "decode_metadata"]

_NO_LIMIT = 2**62


def decode_metadata(thread_id: str, cid: str, data: bytes) -> Any:
    """A checkpoint's stored metadata, which must be a JSON object.

    Raises:
        CheckpointCorruptError: it does not decode to one.
    """
    try:
        meta = decode_json(data)
    except RecordError as exc:
        raise CheckpointCorruptError(thread_id, cid, f"metadata: {exc}") from None
    if not isinstance(meta, dict):
        raise CheckpointCorruptError(thread_id, cid, "metadata is not a JSON object")
    return meta


class SqlRead:
    """Reads checkpoints over a cursor, using the shared head cache when it holds one."""

    def __init__(self, dialect: Dialect, sql: Mapping[str, str], cache: HeadCache) -> None:
        self.dialect = dialect
        self._sql = sql
        self._cache = cache

    def get(self, cur: Cursor, namespace: str, thread_id: str, checkpoint_id: str | None) -> Checkpoint | None:
        """One checkpoint (the head when ``checkpoint_id`` is None) with its pending writes."""
        if checkpoint_id is None:
            row = cur.execute(self._sql["head"], (namespace, thread_id)).fetchone()
        else:
            row = cur.execute(self._sql["one"], (namespace, thread_id, checkpoint_id)).fetchone()
        if row is None:
            return None
        cp = self._from_cache(namespace, thread_id, row)
        if cp is None:
            (cp,) = self._build(cur, namespace, thread_id, [row])
        pending = []
        for task_id, kind, wkey, value in cur.execute(self._sql["writes_of"], (namespace, thread_id, cp.id)):
            try:
                pending.append(PendingWrite(task_id=task_id, kind=kind, key=wkey, value=decode_json(value)))
            except RecordError as exc:
                raise CheckpointCorruptError(thread_id, cp.id, f"pending write {task_id!r}/{kind}: {exc}") from None
        return replace(cp, pending_writes=tuple(pending)) if pending else cp

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
        """The lineage newest first: one recursive query for the rows, one for their blobs.

        A filter is applied here, on decoded metadata, so it means exactly what it means in
        every other backend; with a filter the whole lineage is walked.
        """
        check_filter(filter)
        if limit is not None and limit <= 0:
            return []
        p = self._sql["lineage"]
        if before is None:
            start = "(SELECT max(id) FROM {P}checkpoints WHERE ns = ? AND thread_id = ?)"
            start_params: tuple[Any, ...] = (namespace, thread_id)
        else:
            start = "(SELECT parent_id FROM {P}checkpoints WHERE ns = ? AND thread_id = ? AND id = ?)"
            start_params = (namespace, thread_id, before)
        sql = p.replace("{start}", self.dialect.q(start.replace("{P}", self.dialect.prefix)))
        cap = limit if limit is not None and not filter else _NO_LIMIT
        where = (namespace, thread_id)
        params = (*where, *start_params, *where, cap, *where, *where)
        rows = cur.execute(sql, params).fetchall()
        chosen = []
        seen: set[str] = set()
        for row in rows:
            if row[0] in seen:
                break  # foreign data with a parent cycle
            seen.add(row[0])
            if filter and not matches(decode_metadata(thread_id, row[0], row[4]), filter):
                continue
            chosen.append(row)
            if limit is not None and len(chosen) >= limit:
                break
        # When the chosen checkpoints are at least half the thread, their blobs are read by
        # id range (see _values): at most about as many rows again as needed are read.
        by_range = bool(chosen) and 2 * len(chosen) >= int(rows[0][6])
        return self._build(cur, namespace, thread_id, chosen, by_range=by_range)

    def _from_cache(self, namespace: str, thread_id: str, row: Any) -> Checkpoint | None:
        """The checkpoint of ``row`` without touching its blobs, when it is the one this
        process last wrote on the thread: a checkpoint never changes once stored, so the
        values kept for computing deltas are its values (the common read of a thread's head
        right after a run needs no delta replay)."""
        head = self._cache.get((namespace, thread_id))
        if head is None or head.id != row[0]:
            return None
        try:
            body = decode_body(row[5])
        except RecordError as exc:
            raise CheckpointCorruptError(thread_id, row[0], str(exc)) from None
        if body.blobs is None or set(body.blobs) != set(head.chans):
            return None
        return Checkpoint(
            thread_id=thread_id,
            namespace=namespace,
            id=row[0],
            parent_id=row[1],
            step=int(row[2]),
            values=FrozenDict({ch: head.chans[ch].value for ch in body.blobs}),
            versions=body.versions,
            next_tasks=body.next_tasks,
            barriers=body.barriers,
            metadata=decode_metadata(thread_id, row[0], row[4]),
            created_at=float(row[3]),
        )

    def _build(
        self, cur: Cursor, namespace: str, thread_id: str, rows: Sequence[Any], *, by_range: bool = False
    ) -> list[Checkpoint]:
        """Checkpoints from their rows, fetching and replaying all their blobs at once."""
        bodies: list[Body] = []
        keys: set[tuple[str, str]] = set()
        for row in rows:
            try:
                body = decode_body(row[5])
            except RecordError as exc:
                raise CheckpointCorruptError(thread_id, row[0], str(exc)) from None
            if body.blobs is None:
                raise CheckpointCorruptError(thread_id, row[0], "checkpoint body has no blob map")
            bodies.append(body)
            keys.update(body.blobs.items())
        values = self._values(cur, namespace, thread_id, keys, rows, bodies, by_range) if keys else {}
        out = []
        for row, body in zip(rows, bodies, strict=True):
            cid = row[0]
            blobs = body.blobs
            assert blobs is not None
            out.append(
                Checkpoint(
                    thread_id=thread_id,
                    namespace=namespace,
                    id=cid,
                    parent_id=row[1],
                    step=int(row[2]),
                    values=FrozenDict({ch: values[(ch, blob)] for ch, blob in blobs.items()}),
                    versions=body.versions,
                    next_tasks=body.next_tasks,
                    barriers=body.barriers,
                    metadata=decode_metadata(thread_id, cid, row[4]),
                    created_at=float(row[3]),
                )
            )
        return out

    def _values(
        self,
        cur: Cursor,
        namespace: str,
        thread_id: str,
        keys: set[tuple[str, str]],
        rows: Sequence[Any],
        bodies: Sequence[Body],
        by_range: bool,
    ) -> dict[Hashable, Any]:
        """The values of ``keys``: their blobs and bases fetched, then replayed together.

        By default one recursive query walks the delta chains from the keys. ``by_range``
        first reads, per channel, every blob between the oldest and newest key (an index
        range scan, much cheaper per row than a recursive step); the recursive query then
        fetches only what that missed (the bases older than the range).
        """
        stored: dict[Hashable, tuple[Hashable | None, bytes]] = {}
        seeds: Iterable[Key] = keys
        if by_range:
            ranges: dict[str, tuple[str, str]] = {}
            for ch, blob in keys:
                lo, hi = ranges.get(ch, (blob, blob))
                ranges[ch] = (min(lo, blob), max(hi, blob))
            for ch, (lo, hi) in ranges.items():
                for channel, blob, base_id, data in cur.execute(
                    self._sql["blob_range"], (namespace, thread_id, ch, lo, hi)
                ).fetchall():
                    stored[(channel, blob)] = (None if base_id is None else (channel, base_id), bytes(data))
            seeds = cast(set[Key], delta.unresolved(stored, keys))  # keys of the rows above
        missing: tuple[str, str] | None = None
        if seeds:
            ordered = sorted(seeds)
            params = [*self.dialect.keys_params(ordered), namespace, thread_id, namespace, thread_id]
            for channel, blob, base_id, data in cur.execute(self._sql["blobs"], params).fetchall():
                if data is None:
                    missing = missing or (channel, blob)
                    continue
                stored[(channel, blob)] = (None if base_id is None else (channel, base_id), bytes(data))
        try:
            return delta.replay(stored, keys)
        except delta.DeltaError as exc:
            bad = exc.key
            reason = f"channel value {bad!r}: {exc.reason}"
        if missing is not None:
            reason += f" (blob {missing!r} is missing)"
        culprit = rows[0][0]
        for row, body in zip(rows, bodies, strict=True):
            if body.blobs and any((ch, b) == bad for ch, b in body.blobs.items()):
                culprit = row[0]
                break
        raise CheckpointCorruptError(thread_id, culprit, reason)
