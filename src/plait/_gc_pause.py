"""Pausing Python's cyclic garbage collector while a read builds many containers at once.

Why: the collector runs whenever allocations of containers outrun deallocations by 700, and
every tenth run of it also walks the objects that survived earlier ones. A history read
builds a few containers per checkpoint (a snapshot, its values, versions, metadata), all of
which survive, so reading 500 checkpoints ran the collector about eight times over a growing
heap for nothing: the values read are plain JSON data, which holds no reference cycles, and
whatever they free is freed by reference counting. Measured on W4's history (500
checkpoints, SQLite): 15-20 % of the read (docs/benchmarks.md). Mercurial pauses the
collector around its bulk reads for the same reason.

The pause is process-wide (the collector has one switch), so it is counted: the collector
is switched back on when the last pause in any thread ends, and only if it was on when the
first one began (a program that switched it off keeps it off). Garbage with cycles made by
other threads meanwhile waits for the next collection after the pause, no longer.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

__all__ = ["gc_paused"]

_lock = threading.Lock()
_depth = 0
_resume = False


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Run the block with the cyclic collector off (see the module's docstring)."""
    global _depth, _resume
    with _lock:
        if _depth == 0:
            _resume = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _resume:
                gc.enable()
