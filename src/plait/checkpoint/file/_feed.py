"""The change feed of a file store: the times and sizes of its thread and lease files.

Every write to a thread appends to its ``.jsonl`` file (or renames a rewritten one over it)
and every lease change rewrites its ``.lease`` file, so a look at the folder (one ``stat``
per file, no file read) says which threads changed since the last look. A file's time has
the granularity of the kernel's clock, so a file written within a moment of a look is
reported at the next look too: a second write in the same tick, which the look could not
tell from the first, is never missed. A new file's thread is read from its header once.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import orjson

from plait.checkpoint.feed import POLL, ChangeFeed, ThreadChange

__all__ = ["FileFeed"]

TICK = 0.05
"""Seconds within which a file's time cannot be told apart from a look's (well above the
kernel's clock tick)."""

_Stat = tuple[int, int, int]  # (mtime_ns, size, inode)


class FileFeed(ChangeFeed):
    """Changes of the file store in ``folder``, every ``interval`` seconds."""

    def __init__(
        self, folder: Path, *, interval: float | None = None, namespace: str | None = None, thread_id: str | None = None
    ) -> None:
        super().__init__(mechanism="file times", namespace=namespace, thread_id=thread_id)
        self.folder = folder
        self.interval: float = POLL if interval is None else interval
        self._keys: dict[str, tuple[str, str]] = {}
        """The thread of each file name seen (from its header or lease row)."""

    def _scan(self) -> dict[str, _Stat]:
        out: dict[str, _Stat] = {}
        try:
            entries = os.scandir(self.folder)
        except FileNotFoundError:
            return out
        with entries:
            for entry in entries:
                if entry.name.endswith((".jsonl", ".lease")):
                    try:
                        st = entry.stat()
                    except FileNotFoundError:
                        continue
                    out[entry.name] = (st.st_mtime_ns, st.st_size, st.st_ino)
        return out

    def _key(self, name: str) -> tuple[str, str] | None:
        """The thread of a file, from its first line (a header or a lease row)."""
        stem = name.rsplit(".", 1)[0]
        key = self._keys.get(stem)
        if key is not None:
            return key
        try:
            with open(self.folder / name, "rb") as f:
                first = orjson.loads(f.readline().strip() or b"{}")
            key = (str(first["ns"]), str(first["t"]))
        except (OSError, orjson.JSONDecodeError, KeyError, TypeError):
            return None  # torn or being created: its next write is reported
        self._keys[stem] = key
        return key

    def _changes(self, last: dict[str, _Stat], now: dict[str, _Stat], looked: float) -> list[ThreadChange]:
        recent = int((looked - TICK) * 1e9)
        names = {n for n, st in now.items() if last.get(n) != st or st[0] >= recent} | (last.keys() - now.keys())
        keys = {key for n in names if (key := self._key(n)) is not None}
        return [ThreadChange(namespace=ns, thread_id=t) for ns, t in sorted(keys)]

    def _look(self, last: dict[str, _Stat], looked: float) -> tuple[dict[str, _Stat], float, list[ThreadChange]]:
        started = time.time()
        now = self._scan()
        return now, started, self._changes(last, now, looked)

    async def _watch(self) -> None:
        looked = time.time()
        last = await asyncio.to_thread(self._scan)
        await asyncio.to_thread(lambda: [self._key(name) for name in last])
        self.ready.set()
        while True:
            await asyncio.sleep(self.interval)
            last, looked, changed = await asyncio.to_thread(self._look, last, looked)
            if changed:
                self._emit(changed)
