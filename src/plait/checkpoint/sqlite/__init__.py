"""The SQLite store: the embedded default, one file, written by one thread per process.

The store is :class:`SqliteCheckpointer` (``_store.py``), the shared SQL base
(:mod:`plait.checkpoint.sql`) over the threads that own its connections (``_worker``) and the
zeroed room it keeps after SQLite's log (``_wal``).
"""

from plait.checkpoint.sqlite._store import SqliteCheckpointer

__all__ = ["SqliteCheckpointer"]
