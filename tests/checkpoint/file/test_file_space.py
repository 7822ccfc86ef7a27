"""The file store gives space back as it deletes and prunes: a deleted thread's file is
removed and a pruned one rewritten, so the folder shrinks with no vacuum (measured)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from plait.checkpoint.file import FileCheckpointer

from .._backend_helpers import append_chat

THREADS, STEPS = 10, 50


def _filled(folder: Path) -> FileCheckpointer:
    store = FileCheckpointer(folder)
    store.setup()

    async def go() -> None:
        for t in range(THREADS):
            await append_chat(store, f"t{t}", STEPS, size=1000)

    asyncio.run(go())
    return store


def test_deleting_threads_removes_their_files(tmp_path: Path) -> None:
    store = _filled(tmp_path / "f")
    full = store.disk_bytes()
    kept = store.get("t9")
    for t in range(THREADS - 1):
        store.delete_thread(f"t{t}")
    after = store.disk_bytes()
    assert full is not None and after is not None
    print(f"file {THREADS}x{STEPS}, delete {THREADS - 1}: {full} -> {after} bytes")
    assert after <= full / THREADS * 1.05, (full, after)
    assert store.reclaim_space() == 0 and store.space().dead.bytes == 0  # type: ignore[union-attr]
    assert store.get("t9") == kept


def test_pruning_rewrites_a_threads_file_smaller(tmp_path: Path) -> None:
    store = _filled(tmp_path / "p")
    full = store.disk_bytes()
    sizes = {t.thread_id: t.bytes for t in store.space().threads}
    heads = {f"t{t}": store.get(f"t{t}").values for t in range(THREADS)}  # type: ignore[union-attr]
    for t in range(THREADS):
        assert store.prune(f"t{t}", keep_last=1) == STEPS - 1
    after = store.disk_bytes()
    assert full is not None and after is not None
    print(f"file {THREADS}x{STEPS}, prune keep_last=1: {full} -> {after} bytes")
    assert after < full * 0.7, (full, after)
    pruned = {t.thread_id: t.bytes for t in store.space().threads}
    assert all(pruned[k] < sizes[k] for k in sizes)  # type: ignore[operator]
    assert {k: FileCheckpointer(tmp_path / "p").get(k).values for k in heads} == heads  # type: ignore[union-attr]
