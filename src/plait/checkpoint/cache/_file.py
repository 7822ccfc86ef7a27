"""The node cache in a file store's folder: ``node-cache/<namespace hash>/<key>.json``, each
entry written through a temporary file renamed over it (a reader sees an old entry or a new
one, never part of one). Thread files end in ``.jsonl`` at the top of the folder, so no
listing mistakes the cache for a thread. Expiry is by the store's clock; a read deletes an
expired entry."""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path

import orjson

from plait.checkpoint.cache._base import NodeCache

__all__ = ["CACHE_FOLDER", "FileCache"]

CACHE_FOLDER = "node-cache"


def _ns_dir(root: Path, namespace: str) -> Path:
    return root / hashlib.blake2b(namespace.encode("utf-8", "surrogatepass"), digest_size=12).hexdigest()


class FileCache(NodeCache):
    """The cache of one file store (``folder``), expiring by ``clock``."""

    def __init__(self, folder: Path, clock: Callable[[], float]) -> None:
        self._root = folder / CACHE_FOLDER
        self._clock = clock

    def _get(self, namespace: str, key: str) -> str | None:
        path = _ns_dir(self._root, namespace) / f"{key}.json"
        try:
            entry = orjson.loads(path.read_bytes())
            value, expires = entry["value"], entry["expires_at"]
        except FileNotFoundError:
            return None
        except (orjson.JSONDecodeError, KeyError, TypeError):
            return None  # not an entry this code wrote: a miss, replaced by the next store
        if expires is not None and expires <= self._clock():
            path.unlink(missing_ok=True)
            return None
        return value if isinstance(value, str) else None

    def _set(self, namespace: str, key: str, value: str, ttl: float | None) -> None:
        folder = _ns_dir(self._root, namespace)
        folder.mkdir(parents=True, exist_ok=True)
        expires = None if ttl is None else self._clock() + ttl
        tmp = folder / f"{key}.{os.getpid()}.tmp"
        tmp.write_bytes(orjson.dumps({"ns": namespace, "value": value, "expires_at": expires}))
        os.replace(tmp, folder / f"{key}.json")

    def _clear(self, namespaces: Sequence[str] | None) -> int:
        folders = [p for p in self._root.iterdir() if p.is_dir()] if namespaces is None and self._root.is_dir() else []
        if namespaces is not None:
            folders = [_ns_dir(self._root, ns) for ns in set(namespaces)]
        removed = 0
        for folder in folders:
            if folder.is_dir():
                removed += sum(1 for p in folder.iterdir() if p.suffix == ".json")
                shutil.rmtree(folder, ignore_errors=True)
        return removed

    def _sweep(self) -> int:
        if not self._root.is_dir():
            return 0
        removed = 0
        for folder in self._root.iterdir():
            for path in folder.glob("*.json") if folder.is_dir() else ():
                try:
                    expires = orjson.loads(path.read_bytes())["expires_at"]
                except (OSError, orjson.JSONDecodeError, KeyError, TypeError):
                    continue
                if expires is not None and expires <= self._clock():
                    path.unlink(missing_ok=True)
                    removed += 1
        return removed

    async def aget(self, namespace: str, key: str) -> str | None:
        return await asyncio.to_thread(self._get, namespace, key)

    async def aset(self, namespace: str, key: str, value: str, ttl: float | None) -> None:
        await asyncio.to_thread(self._set, namespace, key, value, ttl)

    async def aclear(self, namespaces: Sequence[str] | None = None) -> int:
        return await asyncio.to_thread(self._clear, namespaces)

    async def asweep(self) -> int:
        return await asyncio.to_thread(self._sweep)

    def __repr__(self) -> str:
        return f"<node cache in {self._root}>"
