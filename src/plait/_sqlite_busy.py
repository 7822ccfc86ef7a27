"""Waiting for a SQLite file that another connection holds, by polling: for the statements
SQLite's own busy handler does not wait on (``PRAGMA journal_mode``), and for waits that must
be shorter than its sleeps (1, 2, 5, 10 ms and more between tries). Shared by the SQLite
checkpointer and the API server's run log, which write the same file."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from typing import TypeVar

__all__ = ["is_busy", "until_free"]

T = TypeVar("T")


def is_busy(exc: sqlite3.OperationalError) -> bool:
    """Whether ``exc`` says another connection holds the lock (SQLITE_BUSY, any variant)."""
    return exc.sqlite_errorcode & 0xFF == sqlite3.SQLITE_BUSY


def until_free(attempt: Callable[[], T], *, patience: float, pause: float, most: float) -> T:
    """``attempt()``, tried again while it fails with SQLITE_BUSY, the pause between tries
    doubling from ``pause`` up to ``most``; the last refusal is raised once ``patience``
    seconds would be over."""
    deadline = time.monotonic() + patience
    while True:
        try:
            return attempt()
        except sqlite3.OperationalError as exc:
            if not is_busy(exc) or time.monotonic() + pause > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, most)
