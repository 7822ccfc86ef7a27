"""The reads of the SQL checkpoint store: one checkpoint, a lineage, and the replay of the
delta-encoded channel values they need (skipped for the head this process last wrote).

Part of :class:`plait.checkpoint.sql._core.SqlCore`, which owns the statements and the cache.

A lineage is read by scanning the thread's checkpoints newest first, in pages, and following
the parent links through the rows the scan returns: an index range scan costs a fraction of
the recursive query's index lookup per row, and in the usual thread (one line, or a few
branches) nearly every row scanned is in the lineage. When the scan turns out a poor guess
(many rows of other branches, a parent it cannot find) the recursive query takes over, so
the scan only ever decides speed, never the result.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import replace
from itertools import islice, repeat
from typing import Any, cast

from plait._fast_init import positional_maker
from plait._frozen import FrozenDict, FrozenList
from plait.checkpoint import delta
from plait.checkpoint._common import check_filter, cycle_error, matches
from plait.checkpoint._records import BodyFields, RecordError, decode_body_fields, decode_json
from plait.checkpoint._validate import WRITE_KINDS
from plait.checkpoint.model import Checkpoint, PendingWrite, WriteKind
from plait.checkpoint.sql._base import Chan, Cursor, Dialect, Head, HeadCache, Key
from plait.checkpoint.sql._rows import blob_row, body_of, check_row, decode_metadata
from plait.errors import CheckpointCorruptError

__all__ = ["SqlRead", "decode_metadata"]

_NO_LIMIT = 2**62
_FIRST_PAGE = 256
"""Rows of the first page of a lineage scan without a limit (each next page is 4x larger)."""
_MAX_PAGE = 16384
_SLACK = 64
"""Rows of other branches a lineage scan may pass over beyond one per lineage row taken,
before the recursive query takes over."""

_BODIES_UP = delta.K_STEP + 1
"""Levels of bodies one round of :meth:`SqlRead._fetch_inline` reads: the checkpoints asked
for and their ancestors, as far back as one run of appends and the anchor it starts from."""

_COLUMNS = "id, parent_id, step, created_at, metadata, body"
_SCANS = {
    # The newest checkpoints of a thread from its head, from an id, or below an id (the next
    # page): one backward range scan of the primary key each.
    "scan_head": f"SELECT {_COLUMNS} FROM {{P}}checkpoints WHERE ns = ? AND thread_id = ? ORDER BY id DESC LIMIT ?",
    "scan_from": f"""SELECT {_COLUMNS} FROM {{P}}checkpoints WHERE ns = ? AND thread_id = ? AND id <= ?
        ORDER BY id DESC LIMIT ?""",
    "scan_below": f"""SELECT {_COLUMNS} FROM {{P}}checkpoints WHERE ns = ? AND thread_id = ? AND id < ?
        ORDER BY id DESC LIMIT ?""",
    "parent_of": "SELECT parent_id FROM {P}checkpoints WHERE ns = ? AND thread_id = ? AND id = ?",
    "tree": "SELECT id, parent_id FROM {P}checkpoints WHERE ns = ? AND thread_id = ? ORDER BY id",
    # One channel's blobs from an id down, read lazily by SQLite (see SqlRead._scan_chains).
    "chain": """SELECT id, base_id, data FROM {P}blobs WHERE ns = ? AND thread_id = ? AND channel = ? AND id <= ?
        ORDER BY id DESC""",
}


class _Lineage:
    """The rows of a lineage as a scan found them (see :meth:`SqlRead._scan`)."""

    __slots__ = ("floor", "metas", "rows", "scanned")

    def __init__(self) -> None:
        self.rows: list[Any] = []
        self.metas: list[Any] = []
        """The decoded metadata of each row (None when no filter needed it decoded)."""
        self.scanned = 0
        """Rows the scan returned, lineage or not."""
        self.floor: str | None = None
        """The last id scanned when rows below it were not (None: the scan reached the end)."""


class SqlRead:
    """Reads checkpoints over a cursor, using the shared head cache when it holds one."""

    def __init__(self, dialect: Dialect, sql: Mapping[str, str], cache: HeadCache) -> None:
        self.dialect = dialect
        self._sql = sql
        self._scans = {k: dialect.q(v.replace("{P}", dialect.prefix)) for k, v in _SCANS.items()}
        self._cache = cache

    def get(
        self, cur: Cursor, namespace: str, thread_id: str, checkpoint_id: str | None, *, resume: bool = False
    ) -> Checkpoint | None:
        """One checkpoint (the head when ``checkpoint_id`` is None) with its pending writes,
        read by one statement; ``resume``: see :meth:`from_rows`."""
        if checkpoint_id is None:
            rows = cur.execute(self._sql["head_writes"], (namespace, thread_id, namespace, thread_id)).fetchall()
        else:
            rows = cur.execute(self._sql["one_writes"], (namespace, thread_id, checkpoint_id)).fetchall()
        return self.from_rows(cur, namespace, thread_id, rows, resume=resume)

    def from_rows(
        self, cur: Cursor, namespace: str, thread_id: str, rows: Sequence[Any], *, resume: bool = False
    ) -> Checkpoint | None:
        """The checkpoint of rows shaped as ``head_writes`` returns them (the checkpoint's
        columns, then a pending write's, one row per write), or None for no rows.

        ``resume``: the rows are the checkpoint a run starts from under its lease (the head,
        or the checkpoint a time-travelling run branches from), or that a one-off write
        builds on (an update of a past checkpoint). Its values and where they
        sit in their chains then go to the head cache, as if this process had written it,
        so that the run stores its next values as deltas on them rather than in full (a
        commit on a cached checkpoint checks that it still exists, as always). Plain reads
        leave the cache alone: a process that only inspects many threads would otherwise
        fill it with their values.
        """
        if not rows:
            return None
        row = rows[0][:6]
        check_row(thread_id, row)
        cp = self._from_cache(namespace, thread_id, row)
        if cp is None:
            chains: dict[Key, delta.Chain] | None = {} if resume else None
            (cp,) = self._build(cur, namespace, thread_id, [row], chains=chains)
            if chains is not None:
                self._remember(namespace, thread_id, row, cp, chains)
        pending = []
        for task_id, kind, wkey, value in (r[6:] for r in rows):
            if task_id is None:
                continue  # no pending writes: the one row of the outer join
            if type(task_id) is not str or type(kind) is not str or kind not in WRITE_KINDS or type(wkey) is not str:
                # Refused, not skipped: the engine would not see a finished task's result in
                # a write it does not know, and would run the task again.
                raise CheckpointCorruptError(
                    thread_id, cp.id, f"pending write ({task_id!r}, {kind!r}, {wkey!r}) is not of a kind plait knows"
                )
            try:
                pending.append(
                    PendingWrite(task_id=task_id, kind=cast(WriteKind, kind), key=wkey, value=decode_json(value))
                )
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
        """The lineage newest first: a scan (or a recursive query) for the rows, then their blobs.

        A filter is applied here, on decoded metadata, so it means exactly what it means in
        every other backend; with a filter the whole lineage is walked.
        """
        check_filter(filter)
        if limit is not None and limit <= 0:
            return []
        start: str | None = None
        if before is not None:
            found = cur.execute(self._scans["parent_of"], (namespace, thread_id, before)).fetchone()
            if found is None or found[0] is None:
                return []
            start = found[0]
        lin = self._scan(cur, namespace, thread_id, start, limit, filter)
        if lin is None:
            lin = self._recursive(cur, namespace, thread_id, start, limit, filter)
        return self._build(cur, namespace, thread_id, lin.rows, lin.metas, lineage=lin)

    def tree(self, cur: Cursor, namespace: str, thread_id: str) -> dict[str, str | None]:
        """Every checkpoint's id and parent id, oldest first (one index range, no bodies)."""
        return {row[0]: row[1] for row in cur.execute(self._scans["tree"], (namespace, thread_id)).fetchall()}

    def _scan(  # noqa: PLR0912 - one scan of the rows of a read, each row kind handled where it is met
        self,
        cur: Cursor,
        namespace: str,
        thread_id: str,
        start: str | None,
        limit: int | None,
        filter: Mapping[str, Any] | None,
    ) -> _Lineage | None:
        """The lineage from ``start`` (the head when None) by a backward scan of the thread,
        or None when the recursive query should read it instead.

        Rows are taken by following parent ids through the rows scanned so far, so the
        result does not depend on how ids sort. It gives up (None) when a parent is not
        among the rows scanned once the scan has reached the thread's first row, or when
        more rows of other branches were passed over than it can afford.
        """
        lin = _Lineage()
        want = limit if limit is not None else _NO_LIMIT
        page = min(want + 16, _FIRST_PAGE) if not filter else _FIRST_PAGE
        where = (namespace, thread_id)
        if start is None:
            batch = cur.execute(self._scans["scan_head"], (*where, page)).fetchall()
            if batch:
                start = batch[0][0]
        else:
            batch = cur.execute(self._scans["scan_from"], (*where, start, page)).fetchall()
        pending: dict[str, Any] = {}
        expected: str | None = start
        taken: set[str] = set()
        while True:
            lin.scanned += len(batch)
            for row in batch:
                pending[row[0]] = row
            while expected is not None and expected in pending:
                row = pending.pop(expected)
                taken.add(expected)
                if filter:
                    meta = decode_metadata(thread_id, row[0], row[4])
                    if matches(meta, filter):
                        lin.rows.append(row)
                        lin.metas.append(meta)
                else:
                    lin.rows.append(row)
                    lin.metas.append(None)
                if len(lin.rows) >= want:
                    expected = None
                    break
                expected = row[1]
                if expected in taken:  # foreign data with a parent cycle
                    raise cycle_error(thread_id, row[0], expected)
            if expected is None or not batch:
                break
            if len(batch) < page:  # the scan reached the thread's end, and not the parent
                return None  # (foreign data): the recursive query decides
            if len(pending) > len(taken) + _SLACK:
                return None  # mostly other branches: the recursive query reads only the lineage
            page = min(page * 4, _MAX_PAGE)
            batch = cur.execute(self._scans["scan_below"], (*where, batch[-1][0], page)).fetchall()
        if expected is not None:
            return None  # the scan found nothing (a head that vanished, or no such start)
        lin.floor = batch[-1][0] if batch and len(batch) >= page else None
        return lin

    def _recursive(
        self,
        cur: Cursor,
        namespace: str,
        thread_id: str,
        start: str | None,
        limit: int | None,
        filter: Mapping[str, Any] | None,
    ) -> _Lineage:
        """The lineage from ``start`` (the head when None) by one recursive query."""
        if start is None:
            first = "(SELECT max(id) FROM {P}checkpoints WHERE ns = ? AND thread_id = ?)"
            first_params: tuple[Any, ...] = (namespace, thread_id)
        else:
            first, first_params = "?", (start,)
        sql = self._sql["lineage"].replace("{start}", self.dialect.q(first.replace("{P}", self.dialect.prefix)))
        cap = limit if limit is not None and not filter else _NO_LIMIT
        where = (namespace, thread_id)
        rows = cur.execute(sql, (*where, *first_params, *where, cap, *where, *where)).fetchall()
        lin = _Lineage()
        lin.scanned = int(rows[0][6]) if rows else 0  # the thread's size bounds any range read
        seen: set[str] = set()
        prev: Any = None
        for row in rows:
            if row[0] in seen:  # foreign data with a parent cycle (the query stops at the thread's size)
                raise cycle_error(thread_id, prev[0], row[0])
            seen.add(row[0])
            prev = row
            meta = None
            if filter:
                meta = decode_metadata(thread_id, row[0], row[4])
                if not matches(meta, filter):
                    continue
            lin.rows.append(row)
            lin.metas.append(meta)
            if limit is not None and len(lin.rows) >= limit:
                break
        return lin

    def _from_cache(self, namespace: str, thread_id: str, row: Any) -> Checkpoint | None:
        """The checkpoint of ``row`` without touching its blobs, when it is the one this
        process last wrote on the thread: a checkpoint never changes once stored, so the
        values kept for computing deltas are its values (the common read of a thread's head
        right after a run needs no delta replay)."""
        head = self._cache.get((namespace, thread_id))
        if head is None or head.id != row[0]:
            return None
        versions, next_tasks, barriers, blobs, _ = body_of(thread_id, row)
        if blobs is None or set(blobs) != set(head.chans):
            return None
        return Checkpoint(
            thread_id=thread_id,
            namespace=namespace,
            id=row[0],
            parent_id=row[1],
            step=int(row[2]),
            values=FrozenDict({ch: head.chans[ch].value for ch in blobs}),
            versions=versions,
            next_tasks=next_tasks,
            barriers=barriers,
            metadata=decode_metadata(thread_id, row[0], row[4]),
            created_at=float(row[3]),
        )

    def _known_values(self, namespace: str, thread_id: str, keys: set[Key]) -> dict[Hashable, Any] | None:
        """The values of ``keys`` this process knows without reading them: the cached
        head's (a channel unchanged since), or a first part of a list the head holds (an
        earlier value of its line of appends, see :attr:`Chan.prefixes`). Blobs never change
        once stored, so what was true when they were written still is."""
        head = self._cache.get((namespace, thread_id))
        if head is None:
            return None
        known: dict[Hashable, Any] = {}
        for key in keys:
            chan = head.chans.get(key[0])
            if chan is None or chan.value is None:
                continue
            if chan.blob == key[1]:
                known[key] = chan.value
            elif chan.prefixes is not None and (n := chan.prefixes.get(key[1])) is not None and n <= len(chan.value):
                known[key] = FrozenList(islice(chan.value, n))
        return known

    def _remember(
        self, namespace: str, thread_id: str, row: Any, cp: Checkpoint, chains: Mapping[Key, delta.Chain]
    ) -> None:
        """Put the head ``cp`` (built from ``row``) in the head cache, with the chain
        position of each channel's value that its read found (see :func:`delta.chain_of`)."""
        blobs = body_of(thread_id, row)[3]
        if not blobs or set(blobs) != set(cp.values):
            return
        chans = {ch: Chan(blob, cp.values[ch], chains.get((ch, blob))) for ch, blob in blobs.items()}
        self._cache.publish({(namespace, thread_id): Head(cp.id, chans)})

    def _build(
        self,
        cur: Cursor,
        namespace: str,
        thread_id: str,
        rows: Sequence[Any],
        metas: Sequence[Any] = (),
        *,
        lineage: _Lineage | None = None,
        chains: dict[Key, delta.Chain] | None = None,
    ) -> list[Checkpoint]:
        """Checkpoints from their rows, fetching and replaying all their blobs at once.

        ``metas`` holds each row's metadata already decoded (None where it is not); with
        ``lineage`` (a history) the blobs may be read by id range (see :meth:`_values`).
        ``chains``, when given, receives the chain position of every value read.
        """
        bodies: list[BodyFields] = []
        keys: set[tuple[str, str]] = set()
        stored: dict[Hashable, tuple[Hashable | None, bytes]] = {}  # the blobs read so far
        last: Mapping[str, str] | None = None
        for row in rows:
            check_row(thread_id, row)
            try:
                body = decode_body_fields(row[5], row[0])
            except RecordError as exc:
                raise CheckpointCorruptError(thread_id, row[0], str(exc)) from None
            blobs = body[3]
            if blobs is None:
                raise CheckpointCorruptError(thread_id, row[0], "checkpoint body has no blob map")
            if blobs != last:  # consecutive checkpoints often point at the same blobs
                keys.update(blobs.items())
                last = blobs
            if body[4]:
                _take_inline(stored, row[0], body[4])
            bodies.append(body)
        known = self._known_values(namespace, thread_id, keys) if lineage is None and chains is None else None
        if known:
            keys.difference_update(known)
        values = self._values(cur, namespace, thread_id, keys, rows, bodies, lineage, stored) if keys else {}
        if known:
            values.update(known)
        if chains is not None:
            for key in keys:
                chain = delta.chain_of(stored, key, values[key], _blob_id)
                if chain is not None:
                    chains[key] = chain
        out = []
        shared: dict[bytes, Any] = {}
        last = None
        chans: Mapping[str, Any] = FrozenDict()
        for row, (versions, next_tasks, barriers, blobs, _), meta in zip(
            rows, bodies, metas or repeat(None, len(rows)), strict=True
        ):
            if blobs != last:  # (the same blobs: the same frozen values, shared)
                assert blobs is not None
                chans = FrozenDict(zip(blobs, map(values.__getitem__, blobs.items()), strict=True))
                last = blobs
            out.append(
                _checkpoint(
                    thread_id,
                    namespace,
                    row[0],
                    row[1],
                    int(row[2]),
                    chans,
                    versions,
                    next_tasks,
                    barriers,
                    decode_metadata(thread_id, row[0], row[4], shared) if meta is None else meta,
                    float(row[3]),
                    (),
                )
            )
        return out

    def _values(  # noqa: PLR0912 - the cached, inline and chained cases of a value read in one place, the hot read path
        self,
        cur: Cursor,
        namespace: str,
        thread_id: str,
        keys: set[tuple[str, str]],
        rows: Sequence[Any],
        bodies: Sequence[BodyFields],
        lineage: _Lineage | None,
        stored: dict[Hashable, tuple[Hashable | None, bytes]],
    ) -> dict[Hashable, Any]:
        """The values of ``keys``: their blobs and bases fetched, then replayed together.

        ``stored`` holds the blobs read so far: those kept in the bodies of ``rows``. A blob
        is a row of the blobs table or, when small, part of the body of the checkpoint that
        wrote it (see ``INLINE_MAX``); what neither the rows' bodies nor the blobs table
        hold is looked up in the bodies of the checkpoints that wrote it.

        By default one recursive query walks the delta chains from the keys: a list chain
        links its anchors past the appends between them (see :func:`delta.encode_linked`),
        so one value's chain is a few rows spread over many, which lookups reach directly.
        A history needs nearly every row of its channels instead. SQLite then scans each
        channel's rows (:meth:`_scan_chains`). Elsewhere, for a lineage that is at least
        half of the checkpoints its scan went through, each channel whose keys all lie in
        the scanned id range first has every blob between its oldest and newest key read
        (an index range scan, much cheaper per row than a recursive step; at most about as
        many rows again as needed, since every blob in the range was written by a scanned
        checkpoint); the recursive query then fetches only what that missed (the bases
        older than the range).
        """
        todo = cast(set[Key], delta.unresolved(stored, keys)) if stored else keys
        seeds: Iterable[Key] = todo
        if not todo:
            pass
        elif self.dialect.lazy_rows and lineage is not None:
            seeds = self._scan_chains(cur, namespace, thread_id, todo, stored)
        elif lineage is not None and rows and 2 * len(rows) >= lineage.scanned:
            ranges: dict[str, tuple[str, str]] = {}
            for ch, blob in todo:
                lo, hi = ranges.get(ch, (blob, blob))
                ranges[ch] = (min(lo, blob), max(hi, blob))
            for ch, (lo, hi) in ranges.items():
                if lineage.floor is not None and lo < lineage.floor:
                    continue  # the range reaches below the scan: its size is unknown
                for channel, blob, base_id, data in cur.execute(
                    self._sql["blob_range"], (namespace, thread_id, ch, lo, hi)
                ).fetchall():
                    stored[(channel, blob)] = blob_row(thread_id, channel, blob, base_id, data)
            if stored:
                seeds = cast(set[Key], delta.unresolved(stored, todo))  # keys of the rows above
        missing = self._fetch_chains(cur, namespace, thread_id, seeds, stored) if seeds else None
        # Blobs the blobs table lacks may be kept in the bodies of checkpoints outside
        # ``rows`` (an older value of a small channel, the small appends of a list); then
        # the rows below them, and so on: a chain may pass from bodies to rows and back. A
        # round reads bodies, then rows, for what is still missing; each finds something
        # or the reading stops (replay then names what is missing).
        absent, rounds = missing, 0
        while absent is not None and rounds <= delta.K_MAX:
            rounds += 1
            left = cast(set[Key], delta.unresolved(stored, keys))
            if not left:
                break
            found = self._fetch_inline(cur, namespace, thread_id, left, stored)
            left = cast(set[Key], delta.unresolved(stored, keys))
            if not left:
                break
            before = len(stored)
            absent = self._fetch_chains(cur, namespace, thread_id, left, stored)
            if not found and len(stored) == before:
                break
            missing = missing if absent is None else absent
        bad: Hashable | None = None
        try:
            return delta.replay(stored, keys)
        except delta.DeltaError as exc:
            bad = exc.key
            reason = f"channel value {bad!r}: {exc.reason}"
        except RecursionError:  # deeper than any value plait writes (MAX_DEPTH)
            reason = "a channel value is nested deeper than plait ever writes one"
        if missing is not None:
            reason += f" (blob {missing!r} is missing)"
        culprit = rows[0][0]
        for row, body in zip(rows, bodies, strict=True):
            blobs = body[3]
            if blobs and any((ch, b) == bad for ch, b in blobs.items()):
                culprit = row[0]
                break
        raise CheckpointCorruptError(thread_id, culprit, reason)

    def _fetch_chains(
        self, cur: Cursor, namespace: str, thread_id: str, seeds: Iterable[Key], stored: dict[Hashable, Any]
    ) -> Key | None:
        """Read the blob rows of ``seeds`` and their chains (one recursive query) into
        ``stored``; return a key the blobs table does not hold, if any."""
        missing: Key | None = None
        params = [*self.dialect.keys_params(sorted(seeds)), namespace, thread_id, namespace, thread_id]
        for channel, blob, base_id, data in cur.execute(self._sql["blobs"], params).fetchall():
            if data is None:
                missing = missing or (channel, blob)
                continue
            stored[(channel, blob)] = blob_row(thread_id, channel, blob, base_id, data)
        return missing

    def _fetch_inline(
        self, cur: Cursor, namespace: str, thread_id: str, keys: set[Key], stored: dict[Hashable, Any]
    ) -> bool:
        """Read the blobs ``keys`` name from the bodies of the checkpoints that wrote them,
        and those their ancestors up to :data:`_BODIES_UP` levels keep, into ``stored``;
        False when nothing new was found there.

        Small deltas are kept in bodies (``INLINE_MAX``) and based on blobs of ancestors, so
        reading the bodies of one level per round trip would make a value's chain of small
        appends cost one round trip per append (up to ``K_STEP`` between two anchors).
        """
        params = [*self.dialect.keys_params(sorted(keys)), namespace, thread_id, namespace, thread_id, _BODIES_UP]
        before = len(stored)
        seen: set[str] = set()
        for cid, body in cur.execute(self._sql["bodies_up"], params).fetchall():
            if cid in seen or type(cid) is not str:  # (no key names a checkpoint by anything but text)
                continue
            seen.add(cid)
            inline = body_of(thread_id, (cid, None, None, None, None, body))[4]
            if inline:
                _take_inline(stored, cid, inline)
        return len(stored) > before

    def _scan_chains(
        self,
        cur: Cursor,
        namespace: str,
        thread_id: str,
        keys: set[tuple[str, str]],
        stored: dict[Hashable, tuple[Hashable | None, bytes]],
    ) -> set[Key]:
        """Read the delta chains of ``keys`` into ``stored`` by one backward scan per channel,
        from its newest key down to the full values its chains start from; return the keys
        (or bases) still missing, for the recursive query.

        Only for SQLite, whose cursor steps through rows as they are read, so that a scan
        stops where the chains end and reads nothing past them, and only for a history: in
        one line of checkpoints every blob of a channel is then needed, so nearly every row
        read is (one value's chain skips most rows: lookups reach it faster). A scan that
        passes over more rows of other branches than it can afford stops and leaves the
        rest to the recursive query. The scans run on a cursor of their
        own, closed at the end: a statement left part-read would hold its snapshot of the
        database (and keep the WAL from being checkpointed) until it is reset.
        """
        wanted: dict[str, set[str]] = {}
        for ch, blob in keys:
            wanted.setdefault(ch, set()).add(blob)
        exact = True
        scan = cur.connection.cursor()  # type: ignore[attr-defined]  # (lazy_rows: sqlite3)
        try:
            for ch, need in wanted.items():
                taken = skipped = 0
                for blob, base_id, data in scan.execute(self._scans["chain"], (namespace, thread_id, ch, max(need))):
                    row = stored[(ch, blob)] = blob_row(thread_id, ch, blob, base_id, data)
                    base = row[0]
                    if blob not in need:
                        skipped += 1
                        if skipped > taken + _SLACK:
                            break
                        continue
                    taken += 1
                    need.discard(blob)
                    if base is not None:
                        if base in stored:
                            exact = False  # a base read before the value (foreign order): see below
                        else:
                            need.add(base_id)
                    if not need:
                        break
                exact = exact and not need
        finally:
            scan.close()
        # Every chain is complete when each base was still ahead of the scan when its value
        # was read, and found; otherwise the chains are checked one by one.
        return set() if exact else cast(set[Key], delta.unresolved(stored, keys))


_checkpoint = positional_maker(Checkpoint)
"""``Checkpoint(...)`` with every field, in order: a history builds one per row."""


def _blob_id(key: Hashable) -> str:
    """The blob id of a ``(channel, blob id)`` key."""
    return cast(tuple[str, str], key)[1]


def _take_inline(stored: dict[Hashable, Any], cid: str, inline: Mapping[str, tuple[str | None, bytes]]) -> None:
    """Add the blobs checkpoint ``cid`` keeps in its body to ``stored``, keyed as blob rows are."""
    for ch, (base, data) in inline.items():
        stored[(ch, cid)] = (None if base is None else (ch, base), data)
