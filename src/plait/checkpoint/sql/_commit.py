"""The commit path of the SQL checkpoint store: requests checked, fences checked, and
checkpoints stored as deltas against the head this process last wrote on the thread.

Part of :class:`plait.checkpoint.sql._core.SqlCore`, which owns the statements and the cache.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from typing import Any, cast

from plait._frozen import FrozenList
from plait.checkpoint import delta
from plait.checkpoint._records import Inline, RecordError, decode_body, encode_body, encode_json
from plait.checkpoint._validate import check_commit
from plait.checkpoint.lease import check_quiet_parent, settled
from plait.checkpoint.model import ANY_HEAD, Checkpoint, Fence, HeadCondition, fence_targets, quiet_parent
from plait.checkpoint.sql._base import PREFIXES_MAX, Chan, CommitRequest, Cursor, Dialect, Head, HeadCache, Key
from plait.checkpoint.sql._memory import SqlMemory
from plait.checkpoint.sql._threads import SqlThreads
from plait.errors import CheckpointError, ConcurrentUpdateError, LeaseLostError, ThreadBusyError

__all__ = ["INLINE_MAX", "SqlCommit", "StaleCache"]

INLINE_MAX = 256
"""A changed channel whose stored bytes (a full value or a delta) are at most this many is
kept in the checkpoint's body instead of a blob row: a step that changes a counter or a flag
then writes one row, one b-tree, not two or three (a sync commit's cost is mostly the pages
it writes), and a history reads those values with the bodies it reads anyway. A blob is
found by ``(channel, id)`` either way: in the blobs table, or in the body of checkpoint ``id``."""


class StaleCache(Exception):
    """Internal: the cached parent of a commit is gone from the database (see
    ``has_cp``); a dialect module raises it for a ``require_parent()`` refusal."""

    def __init__(self, key: Key) -> None:
        super().__init__(key)
        self.key = key


class SqlCommit:
    """Stores commits over a cursor, reading and updating the shared head cache."""

    def __init__(
        self,
        dialect: Dialect,
        store: str,
        sql: Mapping[str, str],
        cache: HeadCache,
        threads: SqlThreads,
        memory: SqlMemory,
    ) -> None:
        self.dialect = dialect
        self._memory = memory
        self.store = store
        self._sql = sql
        self._cache = cache
        self._threads = threads

    def commit_all(
        self,
        transaction: Callable[[Callable[[Cursor], Any]], Any],
        requests: Sequence[CommitRequest],
        now: Callable[[], float | None],
    ) -> list[Exception | None]:
        """Store several commits in one transaction (group commit).

        ``transaction(fn)`` must run ``fn(cursor)`` in a transaction, commit it and return
        what ``fn`` returned, or roll back and raise; it may call ``fn`` again to retry. When
        the group fails, each commit is retried alone, so one bad commit does not sink the
        others; each stays all-or-nothing.

        ``now()`` is the lease clock, read once per attempt, inside the transaction (None:
        the database's own clock, read server-side).

        A commit whose fence refuses it (checked by SELECTs, before it writes anything) is
        skipped inside the group and fails alone, without sinking or redoing the others;
        a fence checked server-side aborts the transaction, and the retry one by one then
        refuses the same commit again (its check reads the same rows).

        Returns:
            Per request: None when it is durable, else the exception that refused it.
        """
        steps = self.commit_steps(requests, now)
        try:
            fn = next(steps)
            while True:
                try:
                    result = transaction(fn)
                except Exception as exc:
                    fn = steps.throw(exc)
                else:
                    fn = steps.send(result)
        except StopIteration as done:
            return cast(list[Exception | None], done.value)

    def commit_steps(
        self, requests: Sequence[CommitRequest], now: Callable[[], float | None]
    ) -> Generator[Callable[[Cursor], Any], Any, list[Exception | None]]:
        """:meth:`commit_all` without its transactions: a generator that yields each
        transaction's ``fn`` and is sent what it returned (or thrown what it raised), so
        that a caller on an event loop can run the transactions with an async driver (see
        :mod:`plait.checkpoint.postgres._loop`) and keep every rule of the commit path."""

        def run(
            batch: Sequence[CommitRequest], use_cache: bool
        ) -> Callable[[Cursor], tuple[dict[Key, Head], list[Exception | None]]]:
            def apply_all(cur: Cursor) -> tuple[dict[Key, Head], list[Exception | None]]:
                staging: dict[Key, Head] = {}  # fresh on every attempt
                refused: list[Exception | None] = []
                clock = now()
                for request in batch:
                    refused.append(self._apply(cur, request, staging, use_cache, clock))
                return staging, refused

            return apply_all

        # Threads that get pending writes: the record of their cached head (see
        # Head.record) would be wrong. Dropped before the transaction, so that no caller
        # builds on it meanwhile (the commit may still fail: dropping is only ever safe),
        # and not published for the heads this group writes either (a later request of a
        # group may add writes to a checkpoint an earlier one stored).
        noisy = {(b.namespace, b.thread_id) for request in requests for b in request.writes if b.writes}
        if noisy:
            self._cache.unknow(noisy)

        def store(
            batch: Sequence[CommitRequest],
        ) -> Generator[Callable[[Cursor], Any], Any, list[Exception | None]]:
            try:
                staging, refused = yield run(batch, True)
            except StaleCache as stale:
                # Another process deleted a parent this process had cached: forget it and
                # store the batch again from what the database holds (rolled back, so safe).
                self._cache.forget(stale.key)
                staging, refused = yield run(batch, False)
            for key in noisy.intersection(staging):
                staging[key] = Head(staging[key].id, staging[key].chans)
            self._cache.publish(staging)
            return cast(list[Exception | None], refused)

        try:
            return (yield from store(requests))
        except Exception as exc:
            if len(requests) == 1:
                return [exc]
        results: list[Exception | None] = []
        for request in requests:
            try:
                (refused,) = yield from store([request])
            except Exception as exc:
                results.append(exc)
            else:
                results.append(refused)
        return results

    def check_request(self, request: CommitRequest) -> None:
        """Refuse, before anything is written, what this store cannot hold.

        Ids and record fields are checked by the rule every backend shares
        (:func:`~plait.checkpoint._validate.check_commit`). Besides: channel names are passed
        to the blob query as JSON, where SQLite truncates a string at NUL, so a NUL in a
        channel name is refused everywhere; when text columns cannot hold NUL at all
        (PostgreSQL), task ids and write keys with NUL are refused too.

        Raises:
            InvalidIdError: an id breaks the id rule.
            InvalidRecordError: a field is not of the type its record declares.
            CheckpointError: naming the offending text.
            ValueError: a fence expects a head but the commit stores no checkpoint.
        """
        check_commit(request.checkpoints, request.writes)
        if request.fence is not None and request.fence.expect_head is not ANY_HEAD:
            fence_targets(request.checkpoints, request.writes, request.fence)  # a misuse fails alone, early
        if request.fence is not None:
            quiet_parent(request.checkpoints, request.fence)  # the same
        texts: list[tuple[str, str | None]] = []
        for cw in request.checkpoints:
            cp = cw.checkpoint
            if "\x00" in "".join(cp.values):  # (the common case: one test for all names)
                texts.extend(("channel name", ch) for ch in cp.values)
        if not self.dialect.text_holds_nul:
            for batch in request.writes:
                texts.extend(("pending write key", t) for w in batch.writes for t in (w.task_id, w.kind, w.key))
        self.check_text(texts)

    def check_text(self, texts: Iterable[tuple[str, str | None]]) -> None:
        """Raise CheckpointError for the first text holding a NUL (see :meth:`check_request`)."""
        for what, text in texts:
            if text is not None and "\x00" in text:
                raise CheckpointError(
                    f"{self.store} cannot store a {what} containing a NUL character ({text[:60]!r}); "
                    "use ids, names and keys without NUL"
                )

    def _check_fence(
        self, cur: Cursor, request: CommitRequest, fence: Fence, parents: dict[Key, str], now: float | None
    ) -> HeadCondition | None:
        """Check ``fence`` in the commit's transaction, before it writes anything.

        With a server-side fence (PostgreSQL) each thread's check is one statement whose
        answer is never read: a refusal raises in the database, aborts the transaction and
        comes back as the commit's error (mapped to plait's errors by the dialect module).
        It also checks the parent a cached commit builds on (``parents``, taken out of the
        dict: those need no ``require_parent`` of their own), and the one
        :attr:`Fence.expect_parent_no_writes` names (``f_quiet_parent``, which also makes
        sure it exists), so that a commit built on a remembered past checkpoint reads
        nothing and is one call. Otherwise the thread rows and
        the head are read here, inside the write transaction that holds the lock (SQLite:
        BEGIN IMMEDIATE), and the lease rules applied to them
        (:func:`plait.checkpoint.lease.check_fence`).

        Returns:
            The head condition it checked (None: none), so that the commit knows which
            parent the check found in place.

        Raises:
            LeaseLostError: the run's lease is no longer the thread's current one.
            ThreadBusyError: a one-off write found a live lease on a thread it touches.
            ConcurrentUpdateError: the head (or the parent) is not as the fence expects.
        """
        sql = self._sql
        threads, head = fence_targets(request.checkpoints, request.writes, fence)
        if self.dialect.server_checks:
            quiet = quiet_parent(request.checkpoints, fence)
            for ns, tid in threads:
                parent = parents.pop((ns, tid), None)
                calm = quiet[2] if quiet is not None and quiet[:2] == (ns, tid) else None
                if parent == calm:
                    parent = None  # the quiet parent's check finds it stored, or refuses
                if head is not None and (ns, tid) == (head.namespace, head.thread_id):
                    if parent == head.expected:
                        parent = None  # a head found equal to it exists: no lookup of its own
                    check: tuple[Any, ...] = (True, head.expected, head.own, parent, head.no_writes, now, calm)
                else:
                    check = (False, None, None, parent, False, now, calm)
                cur.execute(sql["fence"], (ns, tid, fence.owner, fence.token, *check))
            if quiet is not None and quiet[:2] not in threads:  # a subgraph's commit: fenced by another row
                self._check_parent(cur, request, fence)
            return head
        assert now is not None
        for key in threads:
            self._threads.check_fence(cur, key, fence, now)
        if head is not None:
            found = cur.execute(sql["head_id"], (head.namespace, head.thread_id)).fetchone()
            found_id = None if found is None else found[0]
            if not head.holds(found_id):
                raise ConcurrentUpdateError(head.thread_id, head.expected, found_id)
            if (
                head.needs_quiet(found_id)
                and cur.execute(sql["has_writes"], (head.namespace, head.thread_id, found_id)).fetchone() is not None
            ):
                raise ConcurrentUpdateError(head.thread_id, head.expected, found_id, pending_writes=True)
        self._check_parent(cur, request, fence)
        return head

    def _check_parent(self, cur: Cursor, request: CommitRequest, fence: Fence) -> None:
        """:attr:`Fence.expect_parent_no_writes`, by reads in the commit's transaction (with
        server-side checks, only where no fence() call names the parent's thread)."""
        if fence.expect_parent_no_writes:
            check_quiet_parent(
                request.checkpoints,
                fence,
                lambda *where: cur.execute(self._sql["has_cp"], where).fetchone() is not None,
                lambda *where: cur.execute(self._sql["has_writes"], where).fetchone() is not None,
            )

    def _apply(  # noqa: PLR0912, PLR0915 - the commit's one transaction body, step by step; split, its order would be harder to check
        self, cur: Cursor, request: CommitRequest, staging: dict[Key, Head], use_cache: bool, now: float | None
    ) -> Exception | None:
        """Write one commit in the caller's transaction; return the error of a fence that
        refused it (nothing of it written), None when it is written."""
        sql = self._sql
        # The cached heads, read once: what the commit builds on and what it checks agree.
        heads = {key: self._cache.get(key) for key in _threads(request)} if use_cache else {}
        # Server-side checks: which threads' first checkpoint builds on a cached parent
        # (only a thread's first checkpoint in a transaction can: the next ones build on it).
        parents: dict[Key, str] = {}
        if self.dialect.server_checks:
            for cw in request.checkpoints:
                cp = cw.checkpoint
                key = (cp.namespace, cp.thread_id)
                if key in staging or key in parents or cp.parent_id is None:
                    continue
                if self._cached(heads, key, cp.parent_id, use_cache) is not None:
                    parents[key] = cp.parent_id
        checked: HeadCondition | None = None
        # A run's commit whose lease this transaction found current: no process deleted its
        # cached parent, since whatever could (a delete, a prune back to a checkpoint)
        # revokes the lease, and nobody else committed on the thread (see _trusts_cache).
        leased = _trusts_cache(request.fence)
        if request.fence is not None:
            try:
                checked = self._check_fence(cur, request, request.fence, parents, now)
            except (ThreadBusyError, ConcurrentUpdateError, LeaseLostError) as refused:
                return refused
        for batch in request.writes:
            if batch.writes:
                ns, tid, cid = batch.namespace, batch.thread_id, batch.checkpoint_id
                rows = [(ns, tid, cid, w.task_id, w.kind, w.key, encode_json(w.value)) for w in batch.writes]
                cur.executemany(sql["ins_write"], rows)
        for cw in request.checkpoints:
            cp = cw.checkpoint
            ns, tid, parent_id = cp.namespace, cp.thread_id, cp.parent_id
            key = (ns, tid)
            staged = staging.get(key)
            cached = staged if staged is not None else self._cached(heads, key, parent_id, use_cache)
            hit = parent_id is not None and cached is not None and cached.id == parent_id
            # A head staged in this transaction was written by it; one from the cache may be
            # stale, unless the fence found it as the thread's head (then it exists).
            check = hit and staged is None and not _found_as_head(checked, cp)
            if (
                check
                and not leased
                and not self.dialect.server_checks
                and cur.execute(sql["has_cp"], (ns, tid, parent_id)).fetchone() is None
            ):
                raise StaleCache(key)
            base = cached.chans if hit and cached is not None else self._base_from_body(cur, cp)
            chans: dict[str, Chan] = {}
            blobs: list[tuple[str, str, str, str, str | None, bytes]] = []
            inline: dict[str, Inline] = {}
            changed = cw.changed
            for ch, value in cp.values.items():
                prev = base.get(ch)
                if prev is not None and ch not in changed:
                    chans[ch] = Chan(prev.blob, value, prev.chain, prev.prefixes)
                    continue
                if prev is not None and prev.chain is not None:
                    data, base_id, chain = delta.encode_linked(value, cp.id, prev.value, prev.blob, prev.chain)
                else:
                    data, base_id, chain = delta.encode_linked(value, cp.id)
                if len(data) <= INLINE_MAX:
                    inline[ch] = (base_id, data)
                else:
                    blobs.append((ns, tid, ch, cp.id, base_id, data))
                chans[ch] = Chan(cp.id, value, chain, _line(prev, value) if base_id is not None else None)
            if blobs:
                cur.executemany(sql["ins_blob"], blobs)
            if cw.folds_parent_writes and parent_id is not None:
                cur.execute(sql["del_writes_of"], (ns, tid, parent_id))
            body = encode_body(cp, blobs={ch: c.blob for ch, c in chans.items()}, inline=inline)
            source = cp.metadata.get("source", "")
            source = (source if type(source) is str else str(source)).replace("\x00", "\ufffd")  # text refuses NUL
            params = (ns, tid, cp.id, parent_id, cp.step, cp.created_at, source, encode_json(cp.metadata), body)
            if check and self.dialect.server_checks and parents.pop(key, None) is not None:
                cur.execute(sql["require_parent"], (ns, tid, parent_id))  # not checked by a fence
            # The checkpoint row goes last: a fence followed by it is the usual commit, which a
            # dialect module may send as one call (PostgreSQL's put_checkpoint()).
            cur.execute(sql["ins_cp"], params)
            staging[key] = Head(cp.id, chans, None if cp.pending_writes else cp)
        fence = request.fence
        # Last, after the checkpoint row: the usual last commit of a run (a fence, its row and
        # its release) or one-off write (a fence, its row and how it leaves the thread) is
        # still one call for a dialect module that fuses them.
        if fence is not None and fence.release and fence.token is not None:
            for key in fence_targets(request.checkpoints, request.writes, fence)[0]:
                self._threads.release(cur, key, fence.token, fence.status, now)
        elif fence is None or fence.token is None:
            for key, status in settled(request.checkpoints, request.writes).items():
                self._threads.settle(cur, key, status, now)
        elif fence.lease_namespace is not None:  # a subgraph's commit: its namespace's own row
            for key, status in settled(request.checkpoints, request.writes).items():
                if key[0] != fence.lease_namespace:
                    cur.execute(sql["child_row"], (*key, status, now))
        # Memory writes last: after the fence let the commit through (a refusal returned
        # above, having written nothing), and after the statements a dialect module fuses.
        if request.memory:
            self._memory.apply(cur, request.memory)
        return None

    def _cached(
        self, heads: Mapping[Key, Head | None], key: Key, parent_id: str | None, use_cache: bool
    ) -> Head | None:
        """What a checkpoint on ``parent_id`` finds cached to store its deltas against: the
        thread's cached head, else the parent as a remembered past checkpoint (see
        :meth:`HeadCache.remember_past`), else the head (None when the cache is not used)."""
        head = heads.get(key)
        if use_cache and parent_id is not None and (head is None or head.id != parent_id):
            return self._cache.past(key, parent_id) or head
        return head

    def _base_from_body(self, cur: Cursor, cp: Checkpoint) -> dict[str, Chan]:
        """The parent's channels as its stored body names them (values unknown, so changed
        channels are stored in full). A root checkpoint (a new thread, a fork), a missing
        parent or a damaged one has none: its values are stored in full.
        """
        if cp.parent_id is None:
            return {}
        row = cur.execute(self._sql["body_of"], (cp.namespace, cp.thread_id, cp.parent_id)).fetchone()
        if row is None:
            return {}
        try:
            blobs = decode_body(row[0], cp.parent_id).blobs or {}
        except RecordError:
            return {}  # a damaged parent: store this checkpoint's values in full
        return {ch: Chan(blob, None, None) for ch, blob in blobs.items()}


def _line(prev: Chan | None, value: Any) -> dict[str, int] | None:
    """The earlier values of a list stored as a delta on ``prev``'s value (a list delta is
    an append of the very items before it, so every earlier value of the line, and
    ``prev``'s own, is a prefix of ``value``; see :attr:`Chan.prefixes`)."""
    if prev is None or type(value) not in _LISTS or type(prev.value) not in _LISTS:
        return None
    line = prev.prefixes if prev.prefixes is not None else {}
    if len(line) < PREFIXES_MAX:
        line[prev.blob] = len(prev.value)
    return line


_LISTS = (list, FrozenList)


def _trusts_cache(fence: Fence | None) -> bool:
    """Whether a commit that passed ``fence`` may build on a cached parent without looking it
    up: one made under a thread's own lease (a token, and no other namespace's lease), which
    the fence check found current and held in this very transaction.

    The cached parent is the last checkpoint this process committed on the thread; under the
    lease nobody else committed on it since, so it is the head of its branch, which a prune by
    ``keep_last`` always keeps, and everything that drops it otherwise (a delete, a prune back
    to an older checkpoint, an import that replaces the thread) revokes the lease first, which
    the fence would have found. A subgraph's commit (``lease_namespace``) is not trusted: its
    namespace has no lease of its own that such an operation would revoke.
    """
    return fence is not None and fence.token is not None and fence.lease_namespace is None


def _found_as_head(checked: HeadCondition | None, cp: Checkpoint) -> bool:
    """Whether the fence found ``cp``'s parent as the head of ``cp``'s thread (then the
    parent exists)."""
    return (
        checked is not None
        and checked.expected == cp.parent_id
        and (checked.namespace, checked.thread_id) == (cp.namespace, cp.thread_id)
    )


def _threads(request: CommitRequest) -> set[Key]:
    """The threads a commit stores checkpoints on."""
    return {(cw.checkpoint.namespace, cw.checkpoint.thread_id) for cw in request.checkpoints}
