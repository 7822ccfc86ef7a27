"""The file backend's read path: parsing thread files (incrementally: only what was appended
since the cached parse) and turning their records into checkpoints and listings."""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from plait.checkpoint import lease as rules
from plait.checkpoint._common import check_filter, page_threads, walk_lineage
from plait.checkpoint._match import matches
from plait.checkpoint._validate import check_id, check_thread
from plait.checkpoint.file._format import Corrupt, Key, Rec, State, checkpoint_values, file_stem, parse_lines
from plait.checkpoint.file._io import disk_errors
from plait.checkpoint.file._lease import peek_row
from plait.checkpoint.model import Checkpoint, Status, ThreadInfo, check_listing
from plait.checkpoint.space import DeadSpace, StoreSpace, ThreadSpace
from plait.errors import CheckpointCorruptError, StoreVersionError

__all__ = ["FileReads"]

log = logging.getLogger("plait.checkpoint.file")


class FileReads:
    """Reading a folder of thread files; :class:`~plait.checkpoint.file.FileCheckpointer`
    adds the protocol and the write path on top."""

    folder: Path
    clock: Callable[[], float]
    _lock: threading.RLock
    _states: dict[Path, State]

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

    async def alist_threads(
        self,
        *,
        namespace: str | None = None,
        status: Status | None = None,
        limit: int | None = None,
        before: str | None = None,
        prefix: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> list[ThreadInfo]:
        check_listing(status, limit, prefix, metadata)
        if namespace is not None:
            check_id(namespace, "namespace")
        infos = await asyncio.to_thread(self._list_threads, namespace, metadata)
        return page_threads(infos, status=status, limit=limit, before=before, prefix=prefix)

    async def aget_thread(self, thread_id: str, *, namespace: str = "") -> ThreadInfo | None:
        check_thread(thread_id, namespace)
        return await asyncio.to_thread(self._thread, (namespace, thread_id))

    async def atree(self, thread_id: str, *, namespace: str = "") -> dict[str, str | None]:
        check_thread(thread_id, namespace)
        return await asyncio.to_thread(self._tree, (namespace, thread_id))

    @disk_errors
    def _tree(self, key: Key) -> dict[str, str | None]:
        with self._lock:
            state, _ = self._read(key)
            if state is None:
                return {}
            return {rid: state.records[rid].parent_id for rid in sorted(state.records)}

    @disk_errors
    def _list_threads(self, namespace: str | None, metadata: Mapping[str, Any] | None = None) -> list[ThreadInfo]:
        """Every thread's listing entry (of ``namespace``, whose head's metadata contains
        ``metadata``), newest first."""
        infos = []
        now = self.clock()
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
                if metadata and not matches(state.records[max(state.records)].metadata, metadata):
                    continue
                infos.append(self._info(state.key, state, now))
        infos.sort(key=lambda t: (t.updated_at, t.namespace, t.thread_id), reverse=True)
        return infos

    @disk_errors
    def _thread(self, key: Key) -> ThreadInfo | None:
        with self._lock:
            state, _ = self._read(key)
            if state is None or not state.records:
                return None
            return self._info(key, state, self.clock())

    def _info(self, key: Key, state: State, now: float) -> ThreadInfo:
        head = state.records[max(state.records)]
        row = self._peek_row(key)
        pending = state.writes.get(head.id)
        fallback = rules.rest_status(head.next_tasks, pending.values() if pending else ())
        parent = self._peek_row(("", key[1])) if key[0] else None  # a subgraph's: busy while its parent is
        info = ThreadInfo(
            thread_id=key[1],
            namespace=key[0],
            status=rules.shown_status(row, now, fallback),
            head_id=head.id,
            step=head.step,
            created_at=head.created_at,
            updated_at=row.updated_at if row is not None and row.updated_at else head.created_at,
            source=str(head.metadata.get("source", "")),
            checkpoints=len(state.records),
            lease=row.lease(key[1], key[0]) if row is not None else None,
        )
        return info if parent is None else rules.under_parent(info, rules.shown_status(parent, now))

    def _peek_row(self, key: Key) -> rules.LeaseRow | None:
        """The thread's lease row, read without a lock (for listings)."""
        return peek_row(self._path(key, ".lease"))

    async def aspace(self) -> StoreSpace:
        """Each listed thread's file size (its lease file aside); no dead space: a delete
        removes the file and a prune rewrites it, so nothing freed stays behind."""
        return await asyncio.to_thread(self._space)

    @disk_errors
    def _space(self) -> StoreSpace:
        threads = []
        for t in self._list_threads(None):
            try:
                size = os.path.getsize(self._path((t.namespace, t.thread_id)))
            except FileNotFoundError:  # deleted since it was listed
                continue
            threads.append(
                ThreadSpace(namespace=t.namespace, thread_id=t.thread_id, checkpoints=t.checkpoints, bytes=size)
            )
        return StoreSpace(threads=threads, dead=DeadSpace(bytes=0, reclaim="a delete or prune gives it back at once"))
