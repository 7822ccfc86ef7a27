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
import hashlib
import logging
import os
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args

import orjson

from plait._codec import freeze, freeze_trusted
from plait._frozen import FrozenDict, thaw
from plait.checkpoint import delta
from plait.checkpoint._common import check_filter, keep_set, matches
from plait.checkpoint.base import (
    Checkpoint,
    Checkpointer,
    CheckpointWrite,
    PendingWrite,
    Task,
    ThreadInfo,
    WriteKind,
    WritesBatch,
)
from plait.errors import CheckpointCorruptError, NotSerializableError, StoreVersionError, ThreadBusyError

__all__ = ["FileCheckpointer"]

log = logging.getLogger("plait.checkpoint.file")

FORMAT = 1
_MAGIC = "file-checkpointer"
_SAFE = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_-")
_MAX_PLAIN_NAME = 150
_MEMO_CAP = 512
_Key = tuple[str, str]  # (namespace, thread_id)
_WRITE_KINDS = frozenset(get_args(WriteKind))


def file_stem(namespace: str, thread_id: str) -> str:
    """The file name (without suffix) of a thread: injective, and never a path."""

    def enc(s: str) -> str:
        return "".join(c if c in _SAFE else "".join(f"%{b:02x}" for b in c.encode("utf-8", "surrogatepass")) for c in s)

    plain = enc(namespace) + "~" + enc(thread_id)
    if len(plain) <= _MAX_PLAIN_NAME:
        return "t-" + plain
    digest = hashlib.blake2b(orjson.dumps([namespace, thread_id]), digest_size=20).hexdigest()
    return "h-" + digest


class _Corrupt(Exception):
    def __init__(self, reason: str, checkpoint_id: str | None = None) -> None:
        self.reason = reason
        self.checkpoint_id = checkpoint_id


@dataclass(slots=True)
class _Entry:
    """One stored channel value: full, or a delta against the parent's value."""

    is_delta: bool
    data: Any
    chain: delta.Chain


@dataclass(slots=True)
class _Rec:
    """A parsed checkpoint record."""

    id: str
    parent_id: str | None
    step: int
    created_at: float
    metadata: Any
    versions: dict[str, int]
    next_tasks: tuple[Task, ...]
    barriers: dict[str, tuple[str, ...]]
    full: bool
    """True: ``entries`` hold every channel; else they are changes over the parent's values."""
    entries: dict[str, _Entry]
    gone: tuple[str, ...]
    fold: bool


@dataclass(slots=True)
class _State:
    """A thread file, parsed: everything but values is decoded eagerly; values on demand."""

    key: _Key | None = None
    header: bytes = b""
    offset: int = 0
    """Bytes of complete lines consumed."""
    stamp: tuple[int, int, int] = (0, 0, 0)
    records: dict[str, _Rec] = field(default_factory=dict)
    writes: dict[str, dict[tuple[str, str, str], PendingWrite]] = field(default_factory=dict)
    memo: dict[str, tuple[FrozenDict, dict[str, delta.Chain]]] = field(default_factory=dict)


class FileCheckpointer(Checkpointer):
    """Checkpoints in a folder of JSON-lines files, one per thread.

    Args:
        folder: where the files live; created by :meth:`setup` if missing.
    """

    def __init__(self, folder: str | os.PathLike[str]) -> None:
        self.folder = Path(folder)
        self._lock = threading.RLock()
        self._states: dict[Path, _State] = {}
        self._written: dict[_Key, tuple[str, Mapping[str, Any], dict[str, delta.Chain]]] = {}
        """The values (the caller's objects) of the last checkpoint this instance wrote per
        thread: list deltas are found by identity, and a child shares its parent's items."""

    # -- the protocol -----------------------------------------------------------------

    async def setup(self) -> None:
        await asyncio.to_thread(self.folder.mkdir, parents=True, exist_ok=True)

    async def commit(self, *, checkpoints: Sequence[CheckpointWrite] = (), writes: Sequence[WritesBatch] = ()) -> None:
        if checkpoints or writes:
            await asyncio.to_thread(self._commit, checkpoints, writes)

    async def get(self, thread_id: str, checkpoint_id: str | None = None, *, namespace: str = "") -> Checkpoint | None:
        return await asyncio.to_thread(self._get, (namespace, thread_id), checkpoint_id)

    async def history(
        self,
        thread_id: str,
        *,
        namespace: str = "",
        limit: int | None = None,
        before: str | None = None,
        filter: Mapping[str, Any] | None = None,
    ) -> list[Checkpoint]:
        check_filter(filter)
        return await asyncio.to_thread(self._history, (namespace, thread_id), limit, before, filter)

    async def list_threads(self, *, namespace: str | None = None) -> list[ThreadInfo]:
        return await asyncio.to_thread(self._list_threads, namespace)

    async def delete_thread(self, thread_id: str, *, namespace: str = "") -> None:
        await asyncio.to_thread(self._delete, (namespace, thread_id))

    async def prune(self, thread_id: str, *, keep_last: int, namespace: str = "") -> int:
        if keep_last < 1:
            raise ValueError("prune(keep_last=...) must keep at least 1 checkpoint")
        return await asyncio.to_thread(self._prune, (namespace, thread_id), keep_last)

    async def acquire_lease(self, thread_id: str, owner: str, *, namespace: str = "", ttl: float | None = None) -> None:
        ttl = self.lease_ttl if ttl is None else ttl
        await asyncio.to_thread(self._lease, (namespace, thread_id), owner, ttl)

    async def release_lease(self, thread_id: str, owner: str, *, namespace: str = "") -> None:
        await asyncio.to_thread(self._lease, (namespace, thread_id), owner, None)

    async def aclose(self) -> None:
        with self._lock:
            self._states.clear()
            self._written.clear()

    # -- paths and errors -------------------------------------------------------------

    def _path(self, key: _Key, suffix: str = ".jsonl") -> Path:
        return self.folder / (file_stem(*key) + suffix)

    def _corrupt(self, key: _Key, exc: _Corrupt, path: Path) -> CheckpointCorruptError:
        return CheckpointCorruptError(key[1], exc.checkpoint_id, f"{exc.reason} (in {path.name})")

    def _fsync_folder(self) -> None:
        fd = os.open(self.folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    # -- reading ----------------------------------------------------------------------

    def _load(self, path: Path, fd: int | None = None) -> _State | None:
        """The parsed file (None if absent), re-reading only what was appended since the
        cached parse. Raises _Corrupt."""
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
                state = _State()
            data = os.pread(fd, st.st_size - state.offset, state.offset)
            self._states.pop(path, None)
            _parse(state, data)
            state.stamp = stamp
            self._states[path] = state
            return state
        finally:
            if own:
                os.close(fd)

    def _read(self, key: _Key) -> tuple[_State | None, Path]:
        path = self._path(key)
        try:
            state = self._load(path)
        except _Corrupt as exc:
            raise self._corrupt(key, exc, path) from None
        if state is not None and state.key is not None and state.key != key:
            raise CheckpointCorruptError(key[1], None, f"{path.name} holds another thread ({state.key[1]!r})")
        return state, path

    def _values(self, state: _State, cid: str) -> tuple[FrozenDict, dict[str, delta.Chain]]:
        path: list[_Rec] = []
        cursor: str | None = cid
        base: tuple[FrozenDict, dict[str, delta.Chain]] | None = None
        while cursor is not None:
            if cursor in state.memo:
                base = state.memo[cursor]
                break
            rec = state.records.get(cursor)
            if rec is None:
                raise _Corrupt(f"checkpoint {cursor!r}, which it builds on, is missing", cid)
            path.append(rec)
            if rec.full:
                break
            cursor = rec.parent_id
        for rec in reversed(path):
            values: dict[str, Any] = {} if rec.full or base is None else dict(base[0])
            chains: dict[str, delta.Chain] = {} if rec.full or base is None else dict(base[1])
            for ch in rec.gone:
                values.pop(ch, None)
                chains.pop(ch, None)
            for ch, entry in rec.entries.items():
                if entry.is_delta:
                    if ch not in values:
                        raise _Corrupt(f"channel {ch!r} is a delta with no value before it", rec.id)
                    try:
                        values[ch] = delta.apply(values[ch], entry.data)
                    except delta.DeltaError as exc:
                        raise _Corrupt(f"channel {ch!r}: {exc.reason}", rec.id) from None
                else:
                    values[ch] = entry.data
                chains[ch] = entry.chain
            base = (FrozenDict(values), chains)
            if len(state.memo) >= _MEMO_CAP:
                state.memo.clear()
            state.memo[rec.id] = base
        assert base is not None
        return base

    def _checkpoint(self, key: _Key, state: _State, rec: _Rec, *, with_writes: bool) -> Checkpoint:
        values = self._values(state, rec.id)[0]
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

    def _get(self, key: _Key, checkpoint_id: str | None) -> Checkpoint | None:
        with self._lock:
            state, path = self._read(key)
            if state is None or not state.records:
                return None
            rec = state.records.get(checkpoint_id if checkpoint_id is not None else max(state.records))
            if rec is None:
                return None
            try:
                return self._checkpoint(key, state, rec, with_writes=True)
            except _Corrupt as exc:
                raise self._corrupt(key, exc, path) from None

    def _history(
        self, key: _Key, limit: int | None, before: str | None, flt: Mapping[str, Any] | None
    ) -> list[Checkpoint]:
        with self._lock:
            state, path = self._read(key)
            if state is None or not state.records:
                return []
            records = state.records
            if before is not None:
                start = records.get(before)
                cursor = start.parent_id if start else None
            else:
                cursor = max(records)
            chosen: list[_Rec] = []
            while cursor is not None and (limit is None or len(chosen) < limit):
                rec = records.get(cursor)
                if rec is None:
                    break
                if matches(rec.metadata, flt):
                    chosen.append(rec)
                cursor = rec.parent_id
            try:
                for rec in reversed(chosen):  # oldest first: each builds on its memoised parent
                    self._values(state, rec.id)
                return [self._checkpoint(key, state, rec, with_writes=False) for rec in chosen]
            except _Corrupt as exc:
                raise self._corrupt(key, exc, path) from None

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
                except _Corrupt as exc:
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
    def _locked(self, key: _Key, *, create: bool, parse: bool = True) -> Iterator[tuple[int, _State, bool] | None]:
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
                    yield fd, _State(), False
                    return
                try:
                    state = self._load(path, fd)
                except _Corrupt as exc:
                    raise self._corrupt(key, exc, path) from None
                assert state is not None
                if state.key is not None and state.key != key:
                    raise CheckpointCorruptError(key[1], None, f"{path.name} holds another thread")
                if os.fstat(fd).st_size > state.offset:
                    os.ftruncate(fd, state.offset)  # a torn line from a crashed writer
                created = state.key is None
                if created:
                    header = orjson.dumps(
                        {"plait": _MAGIC, "v": FORMAT, "ns": key[0], "t": key[1], "g": os.urandom(8).hex()}
                    )
                    _write_all(fd, header + b"\n")
                    os.fsync(fd)
                    self._fsync_folder()
                    state = self._load(path, fd)
                    assert state is not None
                yield fd, state, created
                return
            finally:
                os.close(fd)  # closing releases the flock

    def _commit(self, checkpoints: Sequence[CheckpointWrite], writes: Sequence[WritesBatch]) -> None:
        groups: dict[_Key, tuple[list[WritesBatch], list[CheckpointWrite]]] = {}
        for batch in writes:
            groups.setdefault((batch.namespace, batch.thread_id), ([], []))[0].append(batch)
        for cw in checkpoints:
            groups.setdefault((cw.checkpoint.namespace, cw.checkpoint.thread_id), ([], []))[1].append(cw)
        order = sorted(groups, key=lambda k: file_stem(*k))  # one lock order for every process
        with self._lock, contextlib.ExitStack() as stack:
            opened: dict[_Key, tuple[int, _State, bool]] = {}
            for key in order:
                handle = stack.enter_context(self._locked(key, create=True))
                assert handle is not None
                opened[key] = handle
            lines: dict[_Key, tuple[bytes, dict[_Key, tuple[str, Mapping[str, Any], dict[str, delta.Chain]]]]] = {}
            try:
                for key in order:
                    lines[key] = self._encode(key, opened[key][1], *groups[key])
            except BaseException:
                for key in order:  # leave no empty file behind for a thread this commit created
                    if opened[key][2]:
                        self._path(key).unlink()
                        self._states.pop(self._path(key), None)
                raise
            for key in order:
                fd = opened[key][0]
                _write_all(fd, lines[key][0])
                os.fsync(fd)
                self._written.update(lines[key][1])
            if len(self._written) > 1024:
                self._written.clear()

    def _encode(
        self, key: _Key, state: _State, batches: list[WritesBatch], cws: list[CheckpointWrite]
    ) -> tuple[bytes, dict[_Key, tuple[str, Mapping[str, Any], dict[str, delta.Chain]]]]:
        """One line with every record of this commit for one thread. Raises before anything
        is written when a value is not JSON data."""
        records: list[Any] = []
        for batch in batches:
            rows = []
            for w in batch.writes:
                what = f"pending write ({w.task_id!r}, {w.kind!r}, {w.key!r})"
                rows.append(orjson.Fragment(_dumps(w.to_json(), what)))
            records.append({"k": "w", "cp": batch.checkpoint_id, "w": rows})
        here: dict[str, tuple[Mapping[str, Any], dict[str, delta.Chain]]] = {}
        last: dict[_Key, tuple[str, Mapping[str, Any], dict[str, delta.Chain]]] = {}
        for cw in cws:
            cp = cw.checkpoint
            parent = self._parent_values(key, state, cp.parent_id, here)
            entries: dict[str, Any] = {}
            chains: dict[str, delta.Chain] = {}
            gone: list[str] = []
            if parent is None:
                stored = set(cp.values)
            else:
                chains = dict(parent[1])
                stored = {ch for ch in cp.values if ch in cw.changed or ch not in parent[0]}
                gone = [ch for ch in parent[0] if ch not in cp.values]
                for ch in gone:
                    chains.pop(ch, None)
            for ch in sorted(stored):
                new = cp.values[ch]
                try:
                    if parent is not None and ch in parent[0] and ch in parent[1]:
                        data, is_delta, chain = delta.encode(new, parent[0][ch], parent[1][ch])
                    else:
                        data, is_delta, chain = delta.encode(new)
                except TypeError as exc:
                    raise _not_json(ch, new, exc) from None
                entries[ch] = ["d" if is_delta else "f", orjson.Fragment(data), *_chain_json(chain)]
                chains[ch] = chain
            record: dict[str, Any] = {"k": "c", "id": cp.id, "p": cp.parent_id, "s": cp.step, "t": cp.created_at}
            record["m"] = orjson.Fragment(_dumps(cp.metadata, "metadata"))
            record["v"] = cp.versions
            if cp.next_tasks:
                record["n"] = orjson.Fragment(_dumps([t.to_json() for t in cp.next_tasks], "a task's arg"))
            if cp.barriers:
                record["j"] = {k: list(v) for k, v in cp.barriers.items()}
            record["full"] = parent is None
            record["x"] = entries
            if gone:
                record["gone"] = gone
            if cw.folds_parent_writes:
                record["fold"] = True
            records.append(record)
            here[cp.id] = (cp.values, chains)
            if all(type(v) is not list and type(v) is not dict for v in cp.values.values()):
                last[key] = (cp.id, cp.values, chains)  # frozen: safe to diff against later
        return _dumps(records, "checkpoint record") + b"\n", last

    def _parent_values(
        self,
        key: _Key,
        state: _State,
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
            return self._values(state, parent_id)
        except _Corrupt as exc:
            raise self._corrupt(key, exc, self._path(key)) from None

    def _delete(self, key: _Key) -> None:
        with self._lock, self._locked(key, create=False, parse=False) as handle:
            if handle is None:
                return
            path = self._path(key)
            path.unlink()
            self._fsync_folder()
            self._states.pop(path, None)
            self._written.pop(key, None)

    def _prune(self, key: _Key, keep_last: int) -> int:
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
                lines = [self._header(key)]
                for cid, rec in state.records.items():
                    if cid not in keep:
                        continue
                    lines.append(_dumps([self._rewrite(state, rec, keep)], "checkpoint record"))
                kept_writes = [
                    {"k": "w", "cp": cid, "w": [w.to_json() for w in ws.values()]}
                    for cid, ws in state.writes.items()
                    if cid in keep and ws
                ]
                if kept_writes:
                    lines.append(_dumps(kept_writes, "pending writes"))
            except _Corrupt as exc:
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

    def _header(self, key: _Key) -> bytes:
        return orjson.dumps({"plait": _MAGIC, "v": FORMAT, "ns": key[0], "t": key[1], "g": os.urandom(8).hex()})

    def _rewrite(self, state: _State, rec: _Rec, keep: set[str]) -> dict[str, Any]:
        """A kept record for the pruned file: as stored if its parent stays, else a root
        holding every value in full."""
        out: dict[str, Any] = {"k": "c", "id": rec.id, "p": rec.parent_id, "s": rec.step, "t": rec.created_at}
        out |= {"m": rec.metadata, "v": rec.versions, "n": [t.to_json() for t in rec.next_tasks]}
        out["j"] = {k: list(v) for k, v in rec.barriers.items()}
        if rec.parent_id is not None and rec.parent_id in keep:
            out["full"] = rec.full
            out["x"] = {
                ch: ["d" if e.is_delta else "f", e.data, *_chain_json(e.chain)] for ch, e in rec.entries.items()
            }
            out["gone"] = list(rec.gone)
        else:
            values = self._values(state, rec.id)[0]
            out["p"] = None
            out["full"] = True
            out["x"] = {}
            for ch, value in values.items():
                data, _, chain = delta.encode(value)
                out["x"][ch] = ["f", orjson.Fragment(data), *_chain_json(chain)]
        return out

    # -- leases -----------------------------------------------------------------------

    def _lease(self, key: _Key, owner: str, ttl: float | None) -> None:
        """Acquire (ttl given) or release (ttl None) under an flock on the lease file.

        Expiry is wall-clock time, so it holds across processes on one machine."""
        fd = os.open(self._path(key, ".lease"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            raw = os.pread(fd, 1 << 20, 0)
            held: tuple[str, float] | None = None
            with contextlib.suppress(orjson.JSONDecodeError, KeyError, TypeError, ValueError):
                data = orjson.loads(raw) if raw else None
                if data is not None:
                    held = (str(data["o"]), float(data["e"]))
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


# -- parsing --------------------------------------------------------------------------


def _parse(state: _State, data: bytes) -> None:
    """Apply the complete lines of ``data`` (read at ``state.offset``) to ``state``. A last
    line without a newline is a torn write and is left unread. Raises _Corrupt."""
    pos = 0
    while True:
        end = data.find(b"\n", pos)
        if end < 0:
            return
        line = data[pos:end]
        if state.key is None:
            _parse_header(state, line)
        else:
            _apply(state, line)
        pos = end + 1
        state.offset += len(line) + 1


def _parse_header(state: _State, line: bytes) -> None:
    try:
        raw = orjson.loads(line)
        if raw["plait"] != _MAGIC:
            raise TypeError("not a plait file")
        version = raw["v"]
        key = (raw["ns"], raw["t"])
    except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
        raise _Corrupt(f"the header line is not readable ({exc})") from None
    if version != FORMAT:
        raise StoreVersionError("a FileCheckpointer thread file", int(version), FORMAT)
    if not isinstance(key[0], str) or not isinstance(key[1], str):
        raise _Corrupt("the header line does not name a thread")
    state.key = key
    state.header = line + b"\n"


def _apply(state: _State, line: bytes) -> None:
    try:
        records = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        after = f"after checkpoint {max(state.records)!r}" if state.records else "before any checkpoint"
        raise _Corrupt(f"a line {after} is not JSON ({exc})") from None
    if type(records) is not list:
        raise _Corrupt("a line is not a list of records")
    for raw in records:
        cid = raw.get("id") if type(raw) is dict else None
        try:
            kind = raw["k"]
            if kind == "w":
                slot = state.writes.setdefault(str(raw["cp"]), {})
                for row in raw["w"]:
                    w = PendingWrite.from_json(freeze_trusted(row))
                    if w.kind not in _WRITE_KINDS or not isinstance(w.task_id, str) or not isinstance(w.key, str):
                        raise ValueError(f"pending write of kind {w.kind!r}")
                    slot[(w.task_id, w.kind, w.key)] = w
            elif kind == "c":
                rec = _parse_checkpoint(raw)
                if not rec.full and rec.parent_id not in state.records:
                    raise _Corrupt(f"its parent {rec.parent_id!r} is not stored before it", rec.id)
                if rec.id in state.records:
                    state.memo.clear()
                state.records[rec.id] = rec
                if rec.fold and rec.parent_id is not None:
                    state.writes.pop(rec.parent_id, None)
            else:
                raise _Corrupt(f"a record of unknown kind {kind!r}", cid if isinstance(cid, str) else None)
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
            raise _Corrupt(f"a record has the wrong shape ({exc!r})", cid if isinstance(cid, str) else None) from None


def _parse_checkpoint(raw: dict[str, Any]) -> _Rec:
    entries = {}
    for ch, e in raw["x"].items():
        tag = e[0]
        if tag not in ("f", "d"):
            raise ValueError(f"value tag {tag!r}")
        entries[ch] = _Entry(
            is_delta=tag == "d",
            data=e[1] if tag == "d" else freeze_trusted(e[1]),
            chain=delta.Chain(int(e[2]), int(e[3]), int(e[4]), int(e[5])),
        )
    parent = raw["p"]
    return _Rec(
        id=str(raw["id"]),
        parent_id=None if parent is None else str(parent),
        step=int(raw["s"]),
        created_at=float(raw["t"]),
        metadata=freeze_trusted(raw["m"]) if type(raw["m"]) is dict else _bad("metadata is not an object"),
        versions={str(k): int(v) for k, v in raw["v"].items()},
        next_tasks=tuple(Task.from_json(freeze_trusted(t)) for t in raw.get("n", ())),
        barriers={str(k): tuple(map(str, v)) for k, v in raw.get("j", {}).items()},
        full=bool(raw["full"]),
        entries=entries,
        gone=tuple(map(str, raw.get("gone", ()))),
        fold=bool(raw.get("fold", False)),
    )


def _bad(reason: str) -> Any:
    raise ValueError(reason)


# -- encoding helpers -----------------------------------------------------------------


def _chain_json(chain: delta.Chain) -> list[int]:
    return [chain.depth, chain.delta_bytes, chain.full_bytes, chain.size]


def _dumps(value: Any, what: str) -> bytes:
    try:
        return orjson.dumps(value)
    except TypeError as exc:
        raise _not_json(what, value, exc) from None


def _not_json(what: str, value: Any, exc: Exception) -> NotSerializableError:
    """The error for a value that slipped past freeze(): find the path if we can."""
    try:
        freeze(thaw(value), what)
    except NotSerializableError as precise:
        return precise
    return NotSerializableError(what, what, f"value ({exc})")


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]
