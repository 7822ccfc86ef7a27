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
* **Storage grows with what was written.** A channel is stored only when it is in the
  commit's ``changed`` set, and list and dict values as deltas against the parent's value when
  that is smaller (:mod:`plait.checkpoint.delta`), so a chat of N messages costs O(N) bytes.
* **Damage is reported, not guessed around.** Anything but a torn last line that cannot be
  read raises :class:`~plait.errors.CheckpointCorruptError` for that thread; other threads
  stay readable and :meth:`list_threads` skips (and logs) the damaged one.

Several processes on one machine may share a folder: writers take an ``flock`` on the thread
file, leases live in ``<name>.lease`` files updated under ``flock`` with wall-clock expiry
(they are run coordination, not thread data, so ``delete_thread`` leaves them, as the memory
backend does), and ``prune`` rewrites a file by writing a temporary file, fsyncing it and
renaming it over the old one. ``flock`` makes this backend POSIX-only, and a network file
system that does not honour ``flock`` is not supported.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson

from plait.checkpoint import delta
from plait.checkpoint._common import check_filter, keep_set, walk_lineage
from plait.checkpoint._file_format import FORMAT as FORMAT  # noqa: PLC0414 - re-exported, as before the split
from plait.checkpoint._file_format import (
    Corrupt,
    Key,
    Rec,
    State,
    checkpoint_record,
    checkpoint_values,
    dumps,
    header_line,
    kept_writes_records,
    parse_lines,
    rewritten_record,
    writes_record,
)
from plait.checkpoint._file_format import file_stem as file_stem  # noqa: PLC0414 - re-exported, tests use it
from plait.checkpoint._file_io import disk_errors, io_error, write_all, written_before
from plait.checkpoint._validate import check_commit, check_id, check_thread
from plait.checkpoint.base import (
    Checkpoint,
    Checkpointer,
    CheckpointWrite,
    Fence,
    ThreadInfo,
    WritesBatch,
    fence_targets,
)
from plait.errors import (
    CheckpointCorruptError,
    ConcurrentUpdateError,
    StoreVersionError,
    ThreadBusyError,
)

__all__ = ["FileCheckpointer"]

log = logging.getLogger("plait.checkpoint.file")


class FileCheckpointer(Checkpointer):
    """Checkpoints in a folder of JSON-lines files, one per thread.

    Args:
        folder: where the files live; created by :meth:`setup` if missing.
    """

    def __init__(self, folder: str | os.PathLike[str]) -> None:
        self.folder = Path(folder)
        self._lock = threading.RLock()
        self._states: dict[Path, State] = {}
        self._written: dict[Key, tuple[str, Mapping[str, Any], dict[str, delta.Chain]]] = {}
        """The values (the caller's objects) of the last checkpoint this instance wrote per
        thread: list deltas are found by identity, and a child shares its parent's items."""

    # -- the protocol -----------------------------------------------------------------

    async def asetup(self) -> None:
        await asyncio.to_thread(self.folder.mkdir, parents=True, exist_ok=True)

    async def acommit(
        self,
        *,
        checkpoints: Sequence[CheckpointWrite] = (),
        writes: Sequence[WritesBatch] = (),
        fence: Fence | None = None,
    ) -> None:
        if checkpoints or writes:
            check_commit(checkpoints, writes)  # before any file is created or locked
            if fence is not None:
                fence_targets(checkpoints, writes, fence)  # a misuse fails before any file is touched
            await asyncio.to_thread(self._commit, checkpoints, writes, fence)

    async def aget(self, thread_id: str, checkpoint_id: str | None = None, *, namespace: str = "") -> Checkpoint | None:
        check_thread(thread_id, namespace, checkpoint_id)
        return await asyncio.to_thread(self._get, (namespace, thread_id), checkpoint_id)

    async def ahistory(
        self,
        thread_id: str,
        *,
        namespace: str = "",
        limit: int | None = None,
        before: str | None = None,
        filter: Mapping[str, Any] | None = None,
    ) -> list[Checkpoint]:
        check_thread(thread_id, namespace, before, what="before")
        check_filter(filter)
        return await asyncio.to_thread(self._history, (namespace, thread_id), limit, before, filter)

    async def alist_threads(self, *, namespace: str | None = None) -> list[ThreadInfo]:
        if namespace is not None:
            check_id(namespace, "namespace")
        return await asyncio.to_thread(self._list_threads, namespace)

    async def adelete_thread(self, thread_id: str, *, namespace: str = "") -> None:
        check_thread(thread_id, namespace)
        await asyncio.to_thread(self._delete, (namespace, thread_id))

    async def aprune(self, thread_id: str, *, keep_last: int, namespace: str = "") -> int:
        if keep_last < 1:
            raise ValueError("prune(keep_last=...) must keep at least 1 checkpoint")
        check_thread(thread_id, namespace)
        return await asyncio.to_thread(self._prune, (namespace, thread_id), keep_last)

    async def atake_lease(self, thread_id: str, owner: str, *, namespace: str = "", ttl: float | None = None) -> None:
        check_thread(thread_id, namespace)  # before the lease file is created
        ttl = self.lease_ttl if ttl is None else ttl
        await asyncio.to_thread(self._lease, (namespace, thread_id), owner, ttl)

    async def arelease_lease(self, thread_id: str, owner: str, *, namespace: str = "") -> None:
        check_thread(thread_id, namespace)
        await asyncio.to_thread(self._lease, (namespace, thread_id), owner, None)

    async def aclose(self) -> None:
        with self._lock:
            self._states.clear()
            self._written.clear()

    # -- paths and errors -------------------------------------------------------------

    def _path(self, key: Key, suffix: str = ".jsonl") -> Path:
        return self.folder / (file_stem(*key) + suffix)

    def _corrupt(self, key: Key, exc: Corrupt, path: Path) -> CheckpointCorruptError:
        return CheckpointCorruptError(key[1], exc.checkpoint_id, f"{exc.reason} (in {path.name})")

    def _fsync_folder(self) -> None:
        fd = os.open(self.folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    # -- reading ----------------------------------------------------------------------

    def _load(self, path: Path, fd: int | None = None) -> State | None:
        """The parsed file (None if absent), re-reading only what was appended since the
        cached parse. Raises Corrupt."""
        own = fd is None
        if own:
            try:
                fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:
                self._states.pop(path, None)
                return None
        assert fd is not None
        try:
            st = os.fstat(fd)
            stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
            cached = self._states.get(path)
            if cached is not None and cached.stamp == stamp:
                return cached
            state = cached
            if (
                state is None
                or state.stamp[0] != st.st_ino
                or st.st_size < state.offset
                or os.pread(fd, len(state.header), 0) != state.header
            ):
                state = State()
            data = os.pread(fd, st.st_size - state.offset, state.offset)
            self._states.pop(path, None)
            parse_lines(state, data)
            state.stamp = stamp
            self._states[path] = state
            return state
        finally:
            if own:
                os.close(fd)

    def _read(self, key: Key) -> tuple[State | None, Path]:
        path = self._path(key)
        try:
            state = self._load(path)
        except Corrupt as exc:
            raise self._corrupt(key, exc, path) from None
        if state is not None and state.key is not None and state.key != key:
            raise CheckpointCorruptError(key[1], None, f"{path.name} holds another thread ({state.key[1]!r})")
        return state, path

    def _checkpoint(self, key: Key, state: State, rec: Rec, *, with_writes: bool) -> Checkpoint:
        values = checkpoint_values(state, rec.id)[0]
        pending = state.writes.get(rec.id) if with_writes else None
        return Checkpoint(
            thread_id=key[1],
            namespace=key[0],
            id=rec.id,
            parent_id=rec.parent_id,
            step=rec.step,
            values=values,
            versions=rec.versions,
            next_tasks=rec.next_tasks,
            barriers=rec.barriers,
            metadata=rec.metadata,
            created_at=rec.created_at,
            pending_writes=tuple(pending.values()) if pending else (),
        )

    @disk_errors
    def _get(self, key: Key, checkpoint_id: str | None) -> Checkpoint | None:
        with self._lock:
            state, path = self._read(key)
            if state is None or not state.records:
                return None
            rec = state.records.get(checkpoint_id if checkpoint_id is not None else max(state.records))
            if rec is None:
                return None
            try:
                return self._checkpoint(key, state, rec, with_writes=True)
            except Corrupt as exc:
                raise self._corrupt(key, exc, path) from None

    @disk_errors
    def _history(
        self, key: Key, limit: int | None, before: str | None, flt: Mapping[str, Any] | None
    ) -> list[Checkpoint]:
        with self._lock:
            state, path = self._read(key)
            if state is None or not state.records:
                return []
            chosen = walk_lineage(
                key[1],
                state.records,
                before=before,
                limit=limit,
                filter=flt,
                parent_of=lambda rec: rec.parent_id,
                metadata_of=lambda rec: rec.metadata,
            )
            try:
                for rec in reversed(chosen):  # oldest first: each builds on its memoised parent
                    checkpoint_values(state, rec.id)
                return [self._checkpoint(key, state, rec, with_writes=False) for rec in chosen]
            except Corrupt as exc:
                raise self._corrupt(key, exc, path) from None

    @disk_errors
    def _list_threads(self, namespace: str | None) -> list[ThreadInfo]:
        infos = []
        with self._lock:
            try:
                entries = sorted(p for p in self.folder.iterdir() if p.suffix == ".jsonl")
            except FileNotFoundError:
                return []
            for path in entries:
                try:
                    state = self._load(path)
                except Corrupt as exc:
                    log.warning("skipping damaged thread file %s: %s", path.name, exc.reason)
                    continue
                except StoreVersionError as exc:
                    log.warning("skipping thread file %s: %s", path.name, exc)
                    continue
                if state is None or state.key is None or not state.records:
                    continue
                if namespace is not None and state.key[0] != namespace:
                    continue
                head = state.records[max(state.records)]
                infos.append(
                    ThreadInfo(
                        thread_id=state.key[1],
                        namespace=state.key[0],
                        head_id=head.id,
                        step=head.step,
                        created_at=head.created_at,
                        source=str(head.metadata.get("source", "")),
                        checkpoints=len(state.records),
                    )
                )
        infos.sort(key=lambda t: t.head_id, reverse=True)
        return infos

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
            if fence is not None:
                try:
                    self._check_fence(stack, order, fence, checkpoints, opened)
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
        stack: contextlib.ExitStack,
        order: Sequence[Key],
        fence: Fence,
        checkpoints: Sequence[CheckpointWrite],
        opened: Mapping[Key, tuple[int, State, bool]],
    ) -> None:
        """Check ``fence`` while every thread file of the commit is locked.

        The lease files are locked too, and stay locked until the commit is written (the
        ``stack`` releases them with the thread files), so a lease cannot be taken between
        the check and the write; lease changes lock only the lease file, so waiting for it
        while holding thread files cannot deadlock.

        Raises:
            ThreadBusyError: another owner holds an unexpired lease on a thread of the commit.
            ConcurrentUpdateError: the head is not the one the fence expects.
        """
        threads, head = fence_targets(checkpoints, [], fence)
        del threads  # the commit's threads are ``order``: writes included
        now = time.time()
        for key in order:
            fd = os.open(self._path(key, ".lease"), os.O_RDWR | os.O_CREAT, 0o644)
            stack.callback(os.close, fd)  # closing releases the flock
            fcntl.flock(fd, fcntl.LOCK_EX)
            held = _read_lease(fd)
            if held is not None and held[0] != fence.owner and held[1] > now:
                raise ThreadBusyError(key[1], held[0], held[1] - now)
        if head is not None:
            state = opened[(head.namespace, head.thread_id)][1]
            found = max(state.records) if state.records else None
            if not head.holds(found):
                raise ConcurrentUpdateError(head.thread_id, head.expected, found)
            if head.needs_quiet(found) and state.writes.get(str(found)):
                raise ConcurrentUpdateError(head.thread_id, head.expected, found, pending_writes=True)

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
    def _prune(self, key: Key, keep_last: int) -> int:
        with self._lock, self._locked(key, create=False) as handle:
            if handle is None:
                return 0
            state = handle[1]
            keep = keep_set({cid: rec.parent_id for cid, rec in state.records.items()}, keep_last)
            dropped = len(state.records) - len(keep)
            if dropped == 0:
                return 0
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

    # -- leases -----------------------------------------------------------------------

    @disk_errors
    def _lease(self, key: Key, owner: str, ttl: float | None) -> None:
        """Acquire (ttl given) or release (ttl None) under an flock on the lease file.

        Expiry is wall-clock time, so it holds across processes on one machine."""
        fd = os.open(self._path(key, ".lease"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            held = _read_lease(fd)
            now = time.time()
            if ttl is None:
                if held is not None and held[0] == owner:
                    os.ftruncate(fd, 0)
                return
            if held is not None and held[0] != owner and held[1] > now:
                raise ThreadBusyError(key[1], held[0], held[1] - now)
            body = orjson.dumps({"o": owner, "e": now + ttl, "ns": key[0], "t": key[1]})
            os.ftruncate(fd, 0)
            os.pwrite(fd, body, 0)
        finally:
            os.close(fd)


def _read_lease(fd: int) -> tuple[str, float] | None:
    """The ``(owner, expiry)`` stored in a lease file; None when it is empty or unreadable
    (a lease is run coordination: a damaged one counts as no lease)."""
    raw = os.pread(fd, 1 << 20, 0)
    with contextlib.suppress(orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        data = orjson.loads(raw) if raw else None
        if data is not None:
            return (str(data["o"]), float(data["e"]))
    return None
