"""Writes of :class:`~plait.checkpoint.file.FileCheckpointer`, and what a failed one means.

The file system's errors (a full disk above all, a folder made read-only) reach callers as
the store's :class:`~plait.errors.CheckpointError`, saying what failed, where and what to do,
with the OSError chained: callers catch one error class for every backend, as SQLite's and
PostgreSQL's failures come as that class too.
"""

from __future__ import annotations

import errno
import functools
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Concatenate, ParamSpec, Protocol, TypeVar

from plait.errors import CheckpointError

__all__ = ["disk_errors", "io_error", "write_all", "written_before"]

P = ParamSpec("P")
R = TypeVar("R")

_DISK_FULL = frozenset((errno.ENOSPC, errno.EDQUOT))


class _Store(Protocol):
    folder: Path


S = TypeVar("S", bound=_Store)


def write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` at the file's end (a write may take only part of it)."""
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def io_error(folder: Path, exc: OSError, partly: str = "") -> CheckpointError:
    """The error for an OSError of the file system under ``folder``: what failed, where,
    and what to do. ``partly`` tells what a commit across threads wrote before it failed."""
    where = f"FileCheckpointer folder {str(folder)!r}"
    if exc.errno in _DISK_FULL:
        return CheckpointError(
            f"{where}: the disk is full ({exc.strerror}), so the write failed and nothing of it was "
            f"stored{partly}; every checkpoint committed before stays readable. Free some space on "
            "that disk (or move the store to another one), then retry."
        )
    return CheckpointError(f"{where}: {type(exc).__name__}: {exc}{partly}")


def written_before(done: Sequence[tuple[str, str]]) -> str:
    """What a commit across threads stored before a write failed (it is atomic per thread
    only): the threads in ``done``, as ``(namespace, thread id)``."""
    if not done:
        return ""
    shown = ", ".join(repr(k[1]) for k in done[:3]) + (", ..." if len(done) > 3 else "")
    return f" for thread {shown} only (this backend writes a commit across threads one file at a time)"


def disk_errors(fn: Callable[Concatenate[S, P], R]) -> Callable[Concatenate[S, P], R]:
    """Report an OSError raised by a method of the store as :func:`io_error` says it."""

    @functools.wraps(fn)
    def guarded(self: S, /, *args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(self, *args, **kwargs)
        except OSError as exc:
            raise io_error(self.folder, exc) from exc

    return guarded
