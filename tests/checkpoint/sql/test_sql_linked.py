"""List chains linked through anchors (``delta.encode_linked``), on both SQL backends.

A list that grows by appends is stored as one delta per step, and every ``K_STEP``-th
append also as everything since the previous anchor, based on that anchor. These tests read
such threads back every way (a fresh process, by id, as a history), after prune, and on a
branch taken from the middle, and check on disk that a value's chain is short.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from plait._codec import canonical, freeze
from plait._frozen import FrozenList
from plait.checkpoint import delta
from plait.checkpoint.model import Checkpoint

from .._backend_helpers import Backend, append_chat, make, read_back_all, same

STEPS = 100


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    yield Backend(request.param, tmp_path, request)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def chains(backend: Backend) -> dict[str, str | None]:
    """``blob id -> base id`` of the ``messages`` blobs (rows and those kept in bodies)."""
    import orjson

    links: dict[str, str | None] = dict(backend.sql("SELECT id, base_id FROM {P}blobs WHERE channel = 'messages'"))
    for cid, body in backend.sql("SELECT id, body FROM {P}checkpoints"):
        kept = orjson.loads(bytes(body)).get("i", {})
        if "messages" in kept:
            links[cid] = kept["messages"][0]
    return links


def path_length(links: dict[str, str | None], cid: str) -> int:
    n = 0
    cursor: str | None = cid
    while cursor is not None:
        n, cursor = n + 1, links[cursor]
    return n


def chat(backend: Backend, steps: int = STEPS) -> list[Checkpoint]:
    store = backend.open()
    try:
        written: list[Checkpoint] = run(append_chat(store, "t", steps, size=300))
    finally:
        run(store.aclose())
    return written


def test_every_value_of_a_linked_chat_is_a_short_chain_and_reads_back_every_way(backend: Backend) -> None:
    written = chat(backend)
    links = chains(backend)
    ids = sorted(links)
    anchors = [cid for cid, base in links.items() if base is not None and ids.index(base) < ids.index(cid) - 1]
    assert len(anchors) >= STEPS // delta.K_STEP - 3
    assert max(path_length(links, cp.id) for cp in written) <= delta.K_STEP + STEPS // delta.K_STEP + 2
    read_back_all(backend, "t", written)


def test_prune_keeps_the_anchors_the_kept_checkpoints_need(backend: Backend) -> None:
    written = chat(backend)
    before = len(chains(backend))
    store = backend.open()
    try:
        dropped = run(store.aprune("t", keep_last=3))
        assert dropped == STEPS - 3
    finally:
        run(store.aclose())
    links = chains(backend)
    assert len(links) < before / 3, "blobs only the dropped checkpoints needed are gone"
    fresh = backend.open()
    try:
        oldest = run(fresh.aget("t", written[-3].id))
        assert oldest is not None and oldest.parent_id is None  # prune makes it the root
        assert canonical(oldest.values) == canonical(written[-3].values)
        for cp in written[-2:]:
            same(run(fresh.aget("t", cp.id)), cp)
    finally:
        run(fresh.aclose())


def test_a_branch_from_the_middle_starts_its_own_chain_and_both_read_back(backend: Backend) -> None:
    written = chat(backend)
    store = backend.open()
    branch: list[Checkpoint] = []
    try:
        parent = written[STEPS // 2]
        for i in range(delta.K_STEP * 2 + 3):  # long enough to write anchors of its own
            msgs = FrozenList([*parent.values["messages"], freeze({"id": f"b{i}", "text": "x" * 300}, "m")])
            cw = make("t", parent, {"messages": msgs})
            run(store.acommit(checkpoints=[cw]))
            parent = cw.checkpoint
            branch.append(parent)
    finally:
        run(store.aclose())
    links = chains(backend)
    assert links[branch[0].id] is None, "the first write off the cached head is a full value"
    fresh = backend.open()
    try:
        for cp in [*written, *branch]:
            same(run(fresh.aget("t", cp.id)), cp)
        history = run(fresh.ahistory("t"))  # the head's lineage: the branch, then the trunk below it
        assert [c.id for c in history] == [c.id for c in reversed([*written[: STEPS // 2 + 1], *branch])]
    finally:
        run(fresh.aclose())


def test_a_value_built_of_small_appends_is_read_in_a_few_round_trips(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Appends small enough to be kept in checkpoint bodies chain through ancestors' bodies;
    one query reads the bodies of a whole run of them (and the rows below), instead of one
    round trip per append."""
    from plait.checkpoint.sql import _read as _sql_read

    store = backend.open()
    try:
        written: list[Checkpoint] = run(append_chat(store, "t", STEPS, size=40))
    finally:
        run(store.aclose())
    rows = {cid for (cid,) in backend.sql("SELECT id FROM {P}blobs WHERE channel = 'messages'")}
    in_bodies = [base for cid, base in chains(backend).items() if cid not in rows and base is not None]
    assert len(in_bodies) > STEPS // 2, "most appends are kept in bodies, based on their parents'"
    reads: list[str] = []
    for name in ("_fetch_inline", "_fetch_chains"):
        original = getattr(_sql_read.SqlRead, name)

        def counted(self: Any, *args: Any, _original: Any = original, _name: str = name) -> Any:
            reads.append(_name)
            return _original(self, *args)

        monkeypatch.setattr(_sql_read.SqlRead, name, counted)
    fresh = backend.open()
    try:
        most = 0
        for cp in written:
            reads.clear()
            same(run(fresh.aget("t", cp.id)), cp)
            most = max(most, len(reads))
    finally:
        run(fresh.aclose())
    assert most <= 4, f"{most} reads of bodies or rows for one checkpoint"


def test_a_thread_resumed_by_new_processes_keeps_one_linked_chain(backend: Backend) -> None:
    """Ten stores opened one after another (as ten processes would), each starting a run
    (lease and head read) and appending ten messages: each first append is a delta on the
    head it read, not the whole list again, and the chain stays linked through anchors
    across them. A plain read of the head does not make a store build on it."""
    written: list[Checkpoint] = []
    parent: Checkpoint | None = None
    for segment in range(10):
        store = backend.open()
        try:
            if parent is not None:
                if segment == 5:  # a plain read first: it leaves the head cache alone
                    assert run(store.aget("t")) is not None
                    assert not store._core.cache.get(("", "t"))  # type: ignore[attr-defined]
                lease, head = run(store.atake_lease_and_get("t", "writer"))  # what a resuming run reads
                assert head is not None and head.id == parent.id
                parent = head
            for i in range(segment * 10, segment * 10 + 10):
                msgs = list(parent.values["messages"]) if parent else []
                msgs.append(freeze({"id": f"m{i}", "text": f"{i:04d}" + "lorem ipsum " * 25}, "m"))
                cw = make("t", parent, {"messages": FrozenList(msgs)})
                run(store.acommit(checkpoints=[cw]))
                parent = cw.checkpoint
                written.append(parent)
            if segment:
                run(store.arelease_lease(lease))
        finally:
            run(store.aclose())
    links = chains(backend)
    fulls = [cid for cid, base in links.items() if base is None]
    assert len(fulls) <= 3, f"{len(fulls)} full values: the resumes rewrote the list"
    ids = sorted(links)
    anchors = [cid for cid, base in links.items() if base is not None and ids.index(base) < ids.index(cid) - 1]
    assert len(anchors) >= 4
    assert max(path_length(links, cp.id) for cp in written) <= delta.K_STEP + len(written) // delta.K_STEP + 2
    read_back_all(backend, "t", written)


def test_a_run_branching_from_a_middle_checkpoint_stores_deltas_on_it(backend: Backend) -> None:
    """Time travel: a run that starts from an older checkpoint (read under its lease, in a
    process that did not write it) stores its first value as a delta on that checkpoint's."""
    written = chat(backend)
    middle = written[STEPS // 2]
    store = backend.open()
    try:
        lease, start = run(store.atake_lease_and_get("t", "traveller", middle.id))
        assert start is not None and start.id == middle.id
        msgs = FrozenList([*start.values["messages"], freeze({"id": "b0", "text": "x" * 300}, "m")])
        child = make("t", start, {"messages": msgs})
        run(store.acommit(checkpoints=[child]))
        run(store.arelease_lease(lease))
    finally:
        run(store.aclose())
    links = chains(backend)
    assert links[child.checkpoint.id] == middle.id, "the branch's first value is a delta on the one it started from"
    fresh = backend.open()
    try:
        same(run(fresh.aget("t", child.checkpoint.id)), child.checkpoint)
    finally:
        run(fresh.aclose())
