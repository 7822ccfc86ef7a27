"""FileCheckpointer: one append-only JSON-lines file per thread, in a folder.

No server, no database: every thread is a file you can read with ``jq``. Each commit appends
one line per thread it touches and fsyncs it before returning (the folder is fsync'd too when a
file is created), so a committed checkpoint survives a process crash or a power loss.

File layout (``<folder>/<name>.jsonl``)::

    {"plait": "file-checkpointer", "v": 1, "ns": "...", "t": "...", "g": "<nonce>"}   header
    [{"k": "w", ...}, {"k": "c", ...}]    one commit's records for this thread (one line)
    ...

Guarantees, stated honestly:

* **Atomic per thread.** All the records one commit makes for a thread are one line, written
  by one ``write`` and fsync'd. A crash mid-write leaves a torn last line (no newline), which
  every reader ignores and the next writer cuts off: the commit is then absent, never partial.
* **Not atomic across threads.** A commit touching several threads writes their files one
  after the other (in a fixed order, all values encoded before the first byte is written, so
  a value that cannot be encoded leaves nothing behind). A crash between two files leaves the
  commit in the first threads and not in the rest. plait's engine commits one thread at a
  time, so this only concerns callers that put several threads in one commit; use the SQLite
  or Postgres backend if that must be all-or-nothing.
* **Names are data, never paths.** A file name is ``t-`` plus the namespace and thread id,
  percent-encoded down to ``[a-z0-9_-]`` (so no name holds ``/``, ``..``, NUL, or differs
  from another only by case), or ``h-`` plus a hash when that would be long. The real ids are
  stored in the header and checked on every read.
* **Storage grows with what was written** (changed channels only, as deltas: :mod:`plait.checkpoint.delta`).
* **No memory store**: it would be written across thread files, which a crash can cut in half.
* **Damage is reported, not guessed around.** Anything but a torn last line that cannot be
  read raises :class:`~plait.errors.CheckpointCorruptError` for that thread; other threads
  stay readable and :meth:`list_threads` skips (and logs) the damaged one.

Several processes on one machine may share a folder: writers take an ``flock`` on the thread
file, leases live in ``<name>.lease`` files updated under ``flock`` with wall-clock expiry
(they are run coordination, not thread data, so ``delete_thread`` leaves them, as the memory
backend does), and ``prune`` rewrites a file through a temporary file, fsync'd and renamed over
the old one. ``flock`` makes it POSIX-only (a network file system without ``flock``: unsupported).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from plait.checkpoint import delta
from plait.checkpoint import lease as rules
from plait.checkpoint._common import check_prune, keep_set
from plait.checkpoint._validate import check_commit, check_thread
from plait.checkpoint.base import Capabilities, Checkpointer
from plait.checkpoint.feed import ChangeFeed
from plait.checkpoint.file._feed import FileFeed
from plait.checkpoint.file._format import (
    Corrupt,
    Key,
    State,
    checkpoint_record,
    checkpoint_values,
    dumps,
    file_stem,
    header_line,
    kept_writes_records,
    rewritten_record,
    writes_record,
)
from plait.checkpoint.file._io import disk_errors, io_error, write_all, written_before
from plait.checkpoint.file._lease import read_row, unlink_if_empty, write_row
from plait.checkpoint.file._policy import read_policy, write_policy
from plait.checkpoint.file._read import FileReads
from plait.checkpoint.holder import Holder
from plait.checkpoint.model import (
    CheckpointWrite,
    Fence,
    Lease,
    RestStatus,
    WritesBatch,
    fence_targets,
)
from plait.checkpoint.retention import Retention
from plait.errors import CheckpointCorruptError, ConcurrentUpdateError
from plait.store import MemoryWrite

if TYPE_CHECKING:
    from plait.checkpoint.cache import NodeCache

__all__ = ["FileCheckpointer"]

log = logging.getLogger("plait.checkpoint.file")

T = TypeVar("T")


class FileCheckpointer(FileReads, Checkpointer):
    """Checkpoints in a folder of JSON-lines files, one per thread.

    Args:
        folder: where the files live; created by :meth:`setup` if missing.
        lease_ttl: seconds a run's lease lasts unless renewed.
        clock: the lease clock (unix seconds, shared by every process using the folder);
            tests pass one they advance by hand.
        retention: the policy :meth:`asweep` applies (see :class:`~plait.checkpoint.retention.Retention`).
    """

    capabilities = Capabilities(kind="file", any_loop=True, change_feed=True)
    memory_refusal = "a step's memory would span thread files a crash can cut in half; use SQLite or plait.Store()"

    def __init__(
        self,
        folder: str | os.PathLike[str],
        *,
        lease_ttl: float = 30.0,
        clock: Callable[[], float] = time.time,
        retention: Retention | None = None,
    ) -> None:
        self.lease_ttl = lease_ttl
        self.clock = clock
        self.set_retention(retention)
        self.folder = Path(folder)
        self._lock = threading.RLock()
        self._states: dict[Path, State] = {}
        self._written: dict[Key, tuple[str, Mapping[str, Any], dict[str, delta.Chain]]] = {}
        """The values (the caller's objects) of the last checkpoint this instance wrote per
        thread: list deltas are found by identity, and a child shares its parent's items."""

    # -- the protocol -----------------------------------------------------------------

    def open_cache(self) -> NodeCache:
        """The node cache in this folder (see :mod:`plait.checkpoint.cache._file`)."""
        from plait.checkpoint.cache._file import FileCache

        return FileCache(self.folder, self.store_time)

    async def asetup(self) -> None:
        await asyncio.to_thread(self.folder.mkdir, parents=True, exist_ok=True)

    async def _aread_policy(self) -> Any:
        try:
            return await asyncio.to_thread(read_policy, self.folder)
        except OSError as exc:
            raise io_error(self.folder, exc) from exc

    async def _awrite_policy(self, data: dict[str, Any] | None) -> None:
        try:
            await asyncio.to_thread(self.folder.mkdir, parents=True, exist_ok=True)
            await asyncio.to_thread(write_policy, self.folder, data)
        except OSError as exc:
            raise io_error(self.folder, exc) from exc

    def disk_bytes(self) -> int | None:
        return sum(os.path.getsize(os.path.join(root, f)) for root, _, files in os.walk(self.folder) for f in files)

    @property
    def address(self) -> str | None:
        return self.folder.absolute().as_uri()

    def achanges(
        self, *, namespace: str | None = None, thread_id: str | None = None, interval: float | None = None
    ) -> ChangeFeed:
        """The times and sizes of the thread and lease files, looked at every ``interval``
        seconds (0.5 by default): any process writing to the folder is seen."""
        return FileFeed(self.folder, interval=interval, namespace=namespace, thread_id=thread_id)

    async def acommit(
        self,
        *,
        checkpoints: Sequence[CheckpointWrite] = (),
        writes: Sequence[WritesBatch] = (),
        fence: Fence | None = None,
        memory: Sequence[MemoryWrite] = (),
    ) -> None:
        if memory:
            self.check_memory()
        if checkpoints or writes:
            check_commit(checkpoints, writes)  # before any file is created or locked
            if fence is not None:
                fence_targets(checkpoints, writes, fence)  # a misuse fails before any file is touched
            await asyncio.to_thread(self._commit, checkpoints, writes, fence)

    async def adelete_thread(self, thread_id: str, *, namespace: str = "") -> None:
        check_thread(thread_id, namespace)
        await asyncio.to_thread(self._delete, (namespace, thread_id))

        await asyncio.to_thread(self._revoke, (namespace, thread_id))

    @disk_errors
    def _revoke(self, key: Key, status: RestStatus | None = None) -> None:
        """After a delete: a thread that ever had a lease keeps its lease file, the lease
        revoked (generations never restart, so a run that held it cannot write into a new
        thread of the same id); one that never had a lease leaves no file. With a
        ``status`` (a prune back to a checkpoint, leaving the thread so): the lease is
        revoked and the file kept."""
        path = self._path(key, ".lease")
        try:
            fd = os.open(path, os.O_RDWR)
        except FileNotFoundError:
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            row = read_row(fd)
            if status is not None:
                if row is not None:
                    write_row(fd, key, rules.revoked(row, owner="prune", status=status, now=self.clock()))
            elif row is None or row.gen == 0:
                path.unlink()
            else:
                now = self.clock()
                write_row(
                    fd, key, replace(row, gen=row.gen + 1, owner="delete", holder=None, held=False, updated_at=now)
                )
        finally:
            os.close(fd)

    async def aprune(
        self,
        thread_id: str,
        *,
        keep_last: int | None = None,
        newer_than: str | None = None,
        namespace: str = "",
        branches: bool = True,
    ) -> int:
        check_prune(keep_last, newer_than)
        check_thread(thread_id, namespace)
        return await asyncio.to_thread(self._prune, (namespace, thread_id), keep_last, newer_than, branches)

    async def atake_lease(self, thread_id: str, owner: str, *, namespace: str = "", ttl: float | None = None) -> Lease:
        check_thread(thread_id, namespace)  # before the lease file is created
        seconds = self.lease_ttl if ttl is None else ttl
        key = (namespace, thread_id)

        def take(row: rules.LeaseRow | None, now: float) -> tuple[rules.LeaseRow, Lease]:
            new = rules.take(
                row,
                thread_id=thread_id,
                namespace=namespace,
                owner=owner,
                ttl=seconds,
                now=now,
                holder=Holder.current(),
            )
            lease = new.lease(thread_id, namespace)
            assert lease is not None
            return new, lease

        return await asyncio.to_thread(self._lease_op, key, take)

    async def arenew_lease(self, lease: Lease, *, ttl: float | None = None) -> Lease:
        check_thread(lease.thread_id, lease.namespace)
        seconds = self.lease_ttl if ttl is None else ttl

        def renew(row: rules.LeaseRow | None, now: float) -> tuple[rules.LeaseRow, Lease]:
            new = rules.renew(row, lease, ttl=seconds, now=now)
            return new, replace(lease, expires_at=new.expires_at)

        return await asyncio.to_thread(self._lease_op, (lease.namespace, lease.thread_id), renew)

    async def arelease_lease(self, lease: Lease, *, status: RestStatus | None = None) -> None:
        check_thread(lease.thread_id, lease.namespace)

        def release(row: rules.LeaseRow | None, now: float) -> tuple[rules.LeaseRow | None, None]:
            return rules.release(row, lease.token, status=status, now=now), None

        await asyncio.to_thread(self._lease_op, (lease.namespace, lease.thread_id), release)

    async def aclose(self) -> None:
        with self._lock:
            self._states.clear()
            self._written.clear()

    # -- writing ----------------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self, key: Key, *, create: bool, parse: bool = True) -> Iterator[tuple[int, State, bool] | None]:
        """The thread file opened and flock'ed, torn tail cut off, header present, and
        whether this call wrote the header; None when it does not exist and ``create`` is
        false. With ``parse=False`` the file is only locked (deleting a damaged file)."""
        path = self._path(key)
        while True:
            try:
                fd = os.open(path, os.O_RDWR | os.O_APPEND | (os.O_CREAT if create else 0), 0o644)
            except FileNotFoundError:
                yield None
                return
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                try:
                    same = os.stat(path).st_ino == os.fstat(fd).st_ino
                except FileNotFoundError:
                    same = False
                if not same:  # renamed over (prune) or deleted while we waited: retry
                    continue
                if not parse:
                    yield fd, State(), False
                    return
                try:
                    state = self._load(path, fd)
                except Corrupt as exc:
                    raise self._corrupt(key, exc, path) from None
                assert state is not None
                if state.key is not None and state.key != key:
                    raise CheckpointCorruptError(key[1], None, f"{path.name} holds another thread")
                if os.fstat(fd).st_size > state.offset:
                    os.ftruncate(fd, state.offset)  # a torn line from a crashed writer
                created = state.key is None
                if created:
                    try:
                        write_all(fd, header_line(key) + b"\n")
                        os.fsync(fd)
                        self._fsync_folder()
                    except OSError:
                        self._cut_back(key, fd, state, True)  # (a full disk, say: leave no torn header)
                        raise
                    state = self._load(path, fd)
                    assert state is not None
                yield fd, state, created
                return
            finally:
                os.close(fd)  # closing releases the flock

    @disk_errors
    def _commit(
        self, checkpoints: Sequence[CheckpointWrite], writes: Sequence[WritesBatch], fence: Fence | None
    ) -> None:
        groups: dict[Key, tuple[list[WritesBatch], list[CheckpointWrite]]] = {}
        for batch in writes:
            groups.setdefault((batch.namespace, batch.thread_id), ([], []))[0].append(batch)
        for cw in checkpoints:
            groups.setdefault((cw.checkpoint.namespace, cw.checkpoint.thread_id), ([], []))[1].append(cw)
        order = sorted(groups, key=lambda k: file_stem(*k))  # one lock order for every process
        with self._lock, contextlib.ExitStack() as stack:
            opened: dict[Key, tuple[int, State, bool]] = {}
            try:
                for key in order:
                    handle = stack.enter_context(self._locked(key, create=True))
                    assert handle is not None
                    opened[key] = handle
            except BaseException:  # (a full disk, say, at the next file's header)
                self._forget_created(list(opened), opened)
                raise
            # A subgraph's commit is fenced by its parent thread's lease: lock that lease file too.
            leased = (
                order
                if fence is None or fence.lease_namespace is None
                else fence_targets(checkpoints, writes, fence)[0]
            )
            rows = self._lock_rows(stack, sorted(set(order) | set(leased), key=lambda k: file_stem(*k)))
            now = self.clock()
            if fence is not None:
                try:
                    self._check_fence(rows, order, fence, checkpoints, opened, now)
                except BaseException:
                    self._forget_created(order, opened)
                    raise
            lines: dict[Key, tuple[bytes, dict[Key, tuple[str, Mapping[str, Any], dict[str, delta.Chain]]]]] = {}
            try:
                for key in order:
                    lines[key] = self._encode(key, opened[key][1], *groups[key])
            except BaseException:
                self._forget_created(order, opened)
                raise
            done: list[Key] = []
            for key in order:
                fd, state, created = opened[key]
                try:
                    write_all(fd, lines[key][0])
                    os.fsync(fd)
                except OSError as exc:
                    self._cut_back(key, fd, state, created)
                    raise io_error(self.folder, exc, written_before(done)) from exc
                done.append(key)
                self._written.update(lines[key][1])
            if len(self._written) > 1024:
                self._written.clear()
            self._after_commit(rows, order, fence, checkpoints, writes, now)

    def _lock_rows(
        self, stack: contextlib.ExitStack, order: Sequence[Key]
    ) -> dict[Key, tuple[int, rules.LeaseRow | None]]:
        """Open and lock the lease file of every thread of a commit, while its thread files
        are locked; they stay locked until the commit is written (the ``stack`` releases them
        with the thread files), so a lease cannot be taken between a fence's check and the
        write. Lease changes lock only the lease file, so waiting for it while holding
        thread files cannot deadlock."""
        rows: dict[Key, tuple[int, rules.LeaseRow | None]] = {}
        for key in order:
            path = self._path(key, ".lease")
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
                created = True
            except FileExistsError:
                fd = os.open(path, os.O_RDWR)
                created = False
            stack.callback(os.close, fd)  # closing releases the flock
            if created:  # gone again (before the close above) if the commit records nothing in it
                stack.callback(unlink_if_empty, path, fd)
            fcntl.flock(fd, fcntl.LOCK_EX)
            rows[key] = (fd, read_row(fd))
        return rows

    def _after_commit(
        self,
        rows: Mapping[Key, tuple[int, rules.LeaseRow | None]],
        order: Sequence[Key],
        fence: Fence | None,
        checkpoints: Sequence[CheckpointWrite],
        writes: Sequence[WritesBatch],
        now: float,
    ) -> None:
        """The thread rows a written commit changes: a run's last commit gives its lease
        back; a one-off write records how it leaves its threads (see :mod:`plait.checkpoint.lease`)."""
        if fence is not None and fence.release and fence.token is not None:
            for key in order:
                fd, row = rows[key]
                released = rules.release(row, fence.token, status=fence.status, now=now)
                if released is not None:
                    write_row(fd, key, released)
        elif fence is None or fence.token is None:
            for key, status in rules.settled(checkpoints, writes).items():
                fd, row = rows[key]
                write_row(fd, key, replace(row or rules.LeaseRow(), status=status, updated_at=now))

    @disk_errors
    def _lease_op(self, key: Key, fn: Callable[[rules.LeaseRow | None, float], tuple[rules.LeaseRow | None, T]]) -> T:
        """Read the thread's lease row under an flock on its lease file, apply ``fn`` (which
        raises to refuse), and write the row it returns (None: unchanged)."""
        fd = os.open(self._path(key, ".lease"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            row, result = fn(read_row(fd), self.clock())
            if row is not None:
                write_row(fd, key, row)
            return result
        finally:
            os.close(fd)

    def _cut_back(self, key: Key, fd: int, state: State, created: bool) -> None:
        """Undo a write that failed part way (a full disk): cut the file back to the lines it
        held, or remove it if this commit created it, so that no half-written line stays
        (a later fsync could otherwise make one durable after its commit was reported failed).
        Best effort: cutting a file back needs no space, but the disk may be failing."""
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0 if created else state.offset)
            if created:
                self._path(key).unlink()
        self._states.pop(self._path(key), None)

    def _forget_created(self, order: Sequence[Key], opened: Mapping[Key, tuple[int, State, bool]]) -> None:
        """Leave no empty file behind for a thread a refused or failed commit created."""
        for key in order:
            if opened[key][2]:
                self._path(key).unlink()
                self._states.pop(self._path(key), None)

    def _check_fence(
        self,
        rows: dict[Key, tuple[int, rules.LeaseRow | None]],
        order: Sequence[Key],
        fence: Fence,
        checkpoints: Sequence[CheckpointWrite],
        opened: Mapping[Key, tuple[int, State, bool]],
        now: float,
    ) -> None:
        """Check ``fence`` while every thread file and lease file of the commit is locked.

        Raises:
            LeaseLostError: the run's lease is no longer the thread's current one.
            ThreadBusyError: a one-off write found a live lease on a thread of the commit.
            ConcurrentUpdateError: the head (or the parent, see Fence) is not as the fence expects.
        """
        _, head = fence_targets(checkpoints, [], fence)  # the commit's threads are ``order``: writes included
        if fence.lease_namespace is not None:  # a subgraph's commit: its parent's lease fences it
            order = sorted({(fence.lease_namespace, tid) for _, tid in order})
        for key in order:
            fd, row = rows[key]
            changed = rules.check_fence(row, fence, thread_id=key[1], namespace=key[0], now=now)
            if changed is not None:  # a revoked lease: stored now, the commit goes on under the lock
                write_row(fd, key, changed)
                rows[key] = (fd, changed)
        if head is not None:
            state = opened[(head.namespace, head.thread_id)][1]
            found = max(state.records) if state.records else None
            if not head.holds(found):
                raise ConcurrentUpdateError(head.thread_id, head.expected, found)
            if head.needs_quiet(found) and state.writes.get(str(found)):
                raise ConcurrentUpdateError(head.thread_id, head.expected, found, pending_writes=True)
        kept = {key: st for key, (_, st, _) in opened.items()}  # the parent's thread is the commit's
        is_kept, busy = (lambda *w: w[2] in kept[w[:2]].records), (lambda *w: bool(kept[w[:2]].writes.get(w[2])))
        rules.check_quiet_parent(checkpoints, fence, is_kept, busy)

    def _encode(
        self, key: Key, state: State, batches: list[WritesBatch], cws: list[CheckpointWrite]
    ) -> tuple[bytes, dict[Key, tuple[str, Mapping[str, Any], dict[str, delta.Chain]]]]:
        """One line with every record of this commit for one thread. Raises before anything
        is written when a value is not JSON data."""
        records: list[Any] = [writes_record(batch) for batch in batches]
        here: dict[str, tuple[Mapping[str, Any], dict[str, delta.Chain]]] = {}
        last: dict[Key, tuple[str, Mapping[str, Any], dict[str, delta.Chain]]] = {}
        for cw in cws:
            cp = cw.checkpoint
            parent = self._parent_values(key, state, cp.parent_id, here)
            record, chains = checkpoint_record(cw, parent)
            records.append(record)
            here[cp.id] = (cp.values, chains)
            if all(type(v) is not list and type(v) is not dict for v in cp.values.values()):
                last[key] = (cp.id, cp.values, chains)  # frozen: safe to diff against later
        return dumps(records, "checkpoint record") + b"\n", last

    def _parent_values(
        self,
        key: Key,
        state: State,
        parent_id: str | None,
        here: Mapping[str, tuple[Mapping[str, Any], dict[str, delta.Chain]]],
    ) -> tuple[Mapping[str, Any], dict[str, delta.Chain]] | None:
        """The parent's values and delta chains, preferring the caller's own objects (deltas
        of lists are found by identity); None when the parent is not stored in this thread."""
        if parent_id is None:
            return None
        if parent_id in here:
            return here[parent_id]
        if parent_id not in state.records:
            return None
        written = self._written.get(key)
        if written is not None and written[0] == parent_id:
            return written[1], written[2]
        try:
            return checkpoint_values(state, parent_id)
        except Corrupt as exc:
            raise self._corrupt(key, exc, self._path(key)) from None

    @disk_errors
    def _delete(self, key: Key) -> None:
        with self._lock, self._locked(key, create=False, parse=False) as handle:
            if handle is None:
                return
            path = self._path(key)
            path.unlink()
            self._fsync_folder()
            self._states.pop(path, None)
            self._written.pop(key, None)

    @disk_errors
    def _prune(self, key: Key, keep_last: int | None, newer_than: str | None, branches: bool = True) -> int:
        with self._lock, self._locked(key, create=False) as handle:
            if handle is None:
                return 0
            state = handle[1]
            keep = keep_set(
                {cid: rec.parent_id for cid, rec in state.records.items()},
                keep_last,
                newer_than,
                thread_id=key[1],
                namespace=key[0],
                branches=branches,
            )
            dropped = len(state.records) - len(keep)
            if dropped == 0:
                return 0
            if newer_than is not None:
                # First, so that a crash before the rewrite leaves the history whole and the
                # lease revoked: a run holding it was writing onto what is about to go.
                head = max(keep)
                pending = state.writes.get(head, {}).values()
                self._revoke(key, rules.rest_status(state.records[head].next_tasks, pending))
            path = self._path(key)
            try:
                lines = [header_line(key)]
                for cid, rec in state.records.items():
                    if cid not in keep:
                        continue
                    lines.append(dumps([rewritten_record(state, rec, keep)], "checkpoint record"))
                kept_writes = kept_writes_records(state, keep)
                if kept_writes:
                    lines.append(dumps(kept_writes, "pending writes"))
            except Corrupt as exc:
                raise self._corrupt(key, exc, path) from None
            tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}-{os.urandom(4).hex()}")
            try:
                with open(tmp, "wb") as out:
                    out.write(b"\n".join(lines) + b"\n")
                    out.flush()
                    os.fsync(out.fileno())
                os.replace(tmp, path)
            finally:
                with contextlib.suppress(FileNotFoundError):
                    tmp.unlink()
            self._fsync_folder()
            self._states.pop(path, None)
            self._written.pop(key, None)
            return dropped
