"""A law of the SQL stores' batched sweep: each thread of a batch keeps exactly its head,
which reads back as written (a root now), whatever the batch holds.

A sweep prunes a whole batch of threads by a few statements (``sql/_sweep.py``): the threads
drawn here have delta chains of any length, values kept small in a body (which the head
needs from a dropped checkpoint: they move to the blobs table) or large in a blob row, and
time-travel branches, which ``keep_latest`` drops. A thread whose lease is live is left
whole. With ``share`` above a half (the plans' groups hold most of the store) SQLite applies
them in one transaction that empties the blobs table and writes back what stays: a thread
the plans do not name keeps every blob row, and reads back whole.
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from plait.checkpoint._sweep import Applied, GroupPlan
from plait.checkpoint.base import Checkpointer
from plait.checkpoint.model import Checkpoint

from .._backend_helpers import Backend, make, read_back_all

KINDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]

thread_shapes = st.lists(
    st.tuples(
        st.integers(min_value=1, max_value=25),  # steps
        st.integers(min_value=1, max_value=10),  # a full value every so many steps
        st.sampled_from([10, 5000]),  # its size: in the body, or a blob row
        st.integers(min_value=0, max_value=3),  # time-travel branches
    ),
    min_size=1,
    max_size=6,
)


async def _write(store: Checkpointer, thread: str, steps: int, big_every: int, size: int, forks: int) -> Checkpoint:
    line: list[Checkpoint] = []
    parent: Checkpoint | None = None
    for i in range(steps):
        values: dict[str, object] = {"log": [*(parent.values["log"] if parent else []), f"entry {i:03d}"], "n": i}
        if i == 0 or i % big_every == 0:
            values["flag"] = f"{i}:" + "x" * size
        cw = make(thread, parent, values)
        await store.acommit(checkpoints=[cw])
        parent = cw.checkpoint
        line.append(parent)
    for f in range(forks):  # a branch from an older checkpoint, then the line goes on
        await store.acommit(checkpoints=[make(thread, line[(f * 7) % len(line)], {"n": -f})])
        cw = make(thread, parent, {"n": 1000 + f})
        await store.acommit(checkpoints=[cw])
        parent = cw.checkpoint
    assert parent is not None
    return parent


@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(shapes=thread_shapes, share=st.sampled_from([0.0, 1.0]))
def test_a_batch_keeps_each_threads_head_as_written(
    tmp_path_factory: pytest.TempPathFactory,
    request: pytest.FixtureRequest,
    kind: str,
    shapes: list[tuple[int, int, int, int]],
    share: float,
) -> None:
    backend = Backend(kind, tmp_path_factory.mktemp("sweep"), request)
    store = backend.open()
    run = uuid.uuid4().hex[:8]  # one Postgres schema serves every example
    threads = [f"t{run}-{i}" for i in range(len(shapes))]
    heads = [asyncio.run(_write(store, t, *shape)) for t, shape in zip(threads, shapes, strict=True)]
    bystander = f"t{run}-untouched"
    asyncio.run(_write(store, bystander, *shapes[0]))
    whole = list(reversed(store.history(bystander)))
    sizes = {info.thread_id: info.checkpoints for info in store.list_threads() if info.thread_id in threads}
    plans = [GroupPlan(root=("", t), prunes=(("", t),)) for t in threads]
    applied = asyncio.run(store._aapply_sweep(plans, share=share))
    asyncio.run(store.aclose())
    assert applied.pruned == [sizes[t] > 1 for t in threads]
    assert applied.removed == sum(sizes[t] - 1 for t in threads)
    for t, head in zip(threads, heads, strict=True):
        read_back_all(backend, t, [dataclasses.replace(head, parent_id=None)])
    read_back_all(backend, bystander, whole)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("share", [0.0, 1.0])
def test_a_thread_under_a_live_lease_is_left_whole(
    tmp_path: Path, request: pytest.FixtureRequest, kind: str, share: float
) -> None:
    backend = Backend(kind, tmp_path, request)
    store = backend.open()
    try:
        asyncio.run(_write(store, "busy", 5, 2, 10, 1))
        asyncio.run(_write(store, "idle", 5, 2, 10, 1))
        before = store.history("busy")
        lease = store.take_lease("busy", "a run")
        plans = [GroupPlan(root=("", t), prunes=(("", t),)) for t in ("busy", "idle")]
        assert asyncio.run(store._aapply_sweep(plans, share=share)) == Applied([None, True], 6)
        assert store.history("busy") == before
        assert len(store.history("idle")) == 1
        store.release_lease(lease)
    finally:
        store.close()


@pytest.mark.parametrize("kind", KINDS)
def test_batches_under_way_together_each_apply_their_own_plans(
    tmp_path: Path, request: pytest.FixtureRequest, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PostgreSQL runs two batch transactions at once (``BatchSql.lanes``): with batches of
    two threads, each thread is pruned once, by its own batch, and the busy one is left."""
    monkeypatch.setattr("plait.checkpoint.sql._checkpointer.BATCH", 2)
    backend = Backend(kind, tmp_path, request)
    store = backend.open()
    try:
        threads = [f"b{i}" for i in range(7)]
        for t in threads:
            asyncio.run(_write(store, t, 4, 2, 10, 0))
        lease = store.take_lease("b3", "a run")
        plans = [GroupPlan(root=("", t), prunes=(("", t),)) for t in threads]
        applied = asyncio.run(store._aapply_sweep(plans))
        assert applied == Applied([True, True, True, None, True, True, True], 6 * 3)
        assert [len(store.history(t)) for t in threads] == [1, 1, 1, 4, 1, 1, 1]
        store.release_lease(lease)
    finally:
        store.close()
