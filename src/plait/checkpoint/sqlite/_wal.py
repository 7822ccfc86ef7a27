"""Zeroed room ahead of SQLite's write-ahead log, so that an fsync'd commit overwrites blocks
the log file already has instead of growing it.

Why: on a journaling file system (ext4 here) ``fdatasync`` of a write that grows a file must
also commit the new size to the journal: a second flush, so an fsync'd append costs about
twice what the same bytes written over blocks that already hold data cost (zeros written and
synced once; figures in docs/benchmarks.md), and a WAL-mode commit is exactly such
an append: SQLite writes its frames at the end of the ``-wal`` file and fsyncs it. The log only
stops growing once a checkpoint resets it, about 4 MB later, and it is deleted when the last
connection closes, so every process that opens the database pays the growing rate for its
first thousand or so commits. PostgreSQL zero-fills its WAL segments ahead of use for the same
reason. Space reserved with ``fallocate`` does not help: the file system still records the
first write to each block, and that costs the same flush.

Safety: the zeros are written only beyond the file's current end, and only while this
connection holds SQLite's write lock (inside ``BEGIN IMMEDIATE``), which every change of the
log file needs: no frame of another connection can be there or arrive meanwhile. Zeros are
never a valid frame (a frame carries the log's salt and a running checksum), so recovery
stops at them as it stops at any stale frame. They are not synced here: the commit that
follows syncs the file, zeros and frames together; a crash before that leaves unsynced zeros
past the end of the log, which recovery ignores.
"""

from __future__ import annotations

import contextlib
import os

__all__ = ["WalReserve"]

_START = 16 * 1024
"""Below this log size nothing is reserved: a store that only takes a lease or two never
pays for room. Past it room is cheap (as many zeros as the log holds, flushed with a commit
that flushes anyway) and every commit it holds saves a flush."""
_STEP_MAX = 4 * 1024 * 1024
"""The most zeroed at once; a log that keeps growing (a reader holding an old snapshot
blocks its reset) gets this much more each time it reaches the end."""


class WalReserve:
    """Keeps zeroed room after the end of one database's ``-wal`` file.

    :meth:`ahead` runs at the start of every write transaction of the connection that owns
    it. In the steady state it is one ``lseek``: the file's size is the end it last planned,
    and SQLite's frames land inside the room. (The file is not replaced while SQLite's
    connection is open: SQLite deletes its log only when the last connection closes. Were it
    replaced anyway, the zeros would go to the unlinked file, which is harmless.) When the size
    changed (SQLite wrote past the room, another process added room or truncated the log) the
    room is planned again from what the log holds: frames are written from the start of the
    file in order and carry a non-zero page number, so the first frame slot whose header is
    all zeros is where the written part ends (found by bisection). The room wanted is as much
    as the log has used, at least ``_START``, at most ``_STEP_MAX``, and a log that SQLite
    checkpoints and starts over at ``restart_at`` bytes is not given room far past it; room
    that is at least half that size already (another process's) is left as it is. A log that
    grows to n bytes costs O(log n) extra flushes and about n bytes of zeros.
    """

    def __init__(self, db_path: str, *, restart_at: int | None = None) -> None:
        self._path = os.path.abspath(db_path) + "-wal"
        self.restart_at = restart_at
        """The log size at which SQLite checkpoints and writes from the start again, if known."""
        self._fd: int | None = None
        self._end = -1
        """The size the file had when room was last planned; -1: plan at the next call."""

    def ahead(self) -> None:
        """Plan room if the log's size changed since the last plan.

        Call only while holding SQLite's write lock on the database. Errors are swallowed:
        the room is an optimisation, and a commit must not fail for want of it (nor retry it
        at every commit: a plan that failed is tried again when the log's size changes).
        """
        fd = self._fd
        if fd is not None:
            try:
                # The size by lseek, not fstat: an fstat of the log makes the next commit's
                # fsync slower (the file system then records a change
                # of the inode with the next write), where lseek costs nothing of the kind.
                if os.lseek(fd, 0, os.SEEK_END) == self._end:
                    return
            except OSError:
                pass
        with contextlib.suppress(OSError):  # a full disk, say: tried again once the log changes
            self._plan()

    def _plan(self) -> None:
        fd = self._current_fd()
        if fd is None:
            self._end = -1
            return
        size = os.lseek(fd, 0, os.SEEK_END)
        self._end = size
        if size < _START:
            return  # a small log gets no room (nothing to read either)
        header = os.pread(fd, _HEADER, 0)
        if len(header) < _HEADER:
            return  # nothing written yet
        frame = int.from_bytes(header[8:12], "big") + _FRAME_HEADER
        if frame - _FRAME_HEADER not in _PAGE_SIZES:
            return  # not a log this code knows how to read: leave it alone
        used = _HEADER + frame * _written_frames(fd, frame, (size - _HEADER) // frame)
        if used < _START:
            return
        want = min(max(used, _START), _STEP_MAX)
        if size - used >= want // 2:
            return
        end = used + want
        if self.restart_at is not None and used < self.restart_at < end:
            end = self.restart_at + _START  # the log starts over there: no need to go far past
        end = used + -(-(end - used) // frame) * frame  # whole frames
        if end > size:
            os.pwrite(fd, bytes(end - size), size)
            self._end = end

    def _current_fd(self) -> int | None:
        """A descriptor of the ``-wal`` file, opened once (None while there is no file).

        The file is never created here: SQLite creates it, with the database's permissions.
        Closing a descriptor drops POSIX locks this process holds on that file, which is
        harmless here: SQLite locks the database and the ``-shm`` file, never the log.
        """
        if self._fd is None:
            try:
                self._fd = os.open(self._path, os.O_RDWR)
            except FileNotFoundError:
                return None
        return self._fd

    def close(self) -> None:
        """Close the descriptor (the connection is closing, or the file was replaced)."""
        fd, self._fd = self._fd, None
        self._end = -1
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)


_HEADER = 32
"""Bytes of the log's header; its page size is at offset 8, big-endian."""
_FRAME_HEADER = 24
"""Bytes before each page in the log; a written frame's first four are its page number (>= 1)."""
_PAGE_SIZES = frozenset(1 << n for n in range(9, 17))


def _written_frames(fd: int, frame: int, slots: int) -> int:
    """How many frame slots from the start hold a frame ever written (bisection on headers)."""
    lo, hi = 0, slots
    while lo < hi:
        mid = (lo + hi) // 2
        if any(os.pread(fd, _FRAME_HEADER, _HEADER + mid * frame)):
            lo = mid + 1
        else:
            hi = mid
    return lo
