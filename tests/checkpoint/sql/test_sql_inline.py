"""Small blobs kept in checkpoint bodies (``INLINE_MAX``), on both SQL backends.

A blob is found by ``(channel, id)`` in the blobs table or in the body of checkpoint ``id``;
these tests build threads where values, and the bases of delta chains, sit in one place or
the other, and read them back every way: a fresh process (no head cache), by id, as a
history, after prune dropped the checkpoints holding them, and damaged.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from plait.checkpoint.base import Checkpointer
from plait.checkpoint.model import Checkpoint
from plait.checkpoint.sql._commit import INLINE_MAX
from plait.errors import CheckpointCorruptError

from .._backend_helpers import Backend, make, read_back_all, same


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    yield Backend(request.param, tmp_path, request)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def inline_of(backend: Backend, cid: str) -> dict[str, Any]:
    (body,) = backend.sql("SELECT body FROM {P}checkpoints WHERE id = %s", cid)[0]
    return dict(orjson.loads(bytes(body)).get("i", {}))


def blob_rows(backend: Backend, cid: str) -> set[str]:
    return {r[0] for r in backend.sql("SELECT channel FROM {P}blobs WHERE id = %s", cid)}


def grow(backend: Backend, store: Checkpointer, steps: int) -> list[Checkpoint]:
    """A thread whose ``log`` list grows by one short item per step (small deltas, stored in
    bodies, on bases that are full values or anchors: in a body while small, a blob row once
    large) and whose ``turn`` counter changes every step (always in a body)."""
    written: list[Checkpoint] = []
    parent: Checkpoint | None = None
    for i in range(steps):
        log = [*(parent.values["log"] if parent else []), f"entry {i:03d} of the log"]
        cw = make("t", parent, {"log": log, "turn": i})
        run(store.acommit(checkpoints=[cw]))
        parent = cw.checkpoint
        written.append(parent)
    return written


def test_small_values_and_deltas_live_in_bodies_and_read_back_everywhere(backend: Backend) -> None:
    store = backend.open()
    written = grow(backend, store, 60)
    run(store.aclose())
    first, last = written[0], written[-1]
    assert inline_of(backend, first.id).keys() == {"log", "turn"} and blob_rows(backend, first.id) == set()
    assert blob_rows(backend, last.id) <= {"log"}, "a large full value is a row; small writes are not"
    assert any("log" in blob_rows(backend, c.id) for c in written), "the list outgrew INLINE_MAX"
    assert any("log" in inline_of(backend, c.id) and inline_of(backend, c.id)["log"][0] for c in written), (
        "some deltas are kept in bodies, on bases elsewhere"
    )
    read_back_all(backend, "t", written)


def test_an_unchanged_small_value_is_read_from_the_body_of_the_checkpoint_that_wrote_it(backend: Backend) -> None:
    store = backend.open()
    root = make("t", None, {"flag": True, "big": "x" * (INLINE_MAX * 4)})
    run(store.acommit(checkpoints=[root]))
    parent = root.checkpoint
    for i in range(5):
        cw = make("t", parent, {"big": f"{i}" * (INLINE_MAX * 4)})
        run(store.acommit(checkpoints=[cw]))
        parent = cw.checkpoint
    run(store.aclose())
    assert inline_of(backend, root.checkpoint.id) == {"flag": [None, True]}
    fresh = backend.open()
    got = run(fresh.aget("t"))  # one row read; "flag" is in the root's body
    same(got, parent)
    run(fresh.aclose())


def test_prune_moves_a_needed_value_out_of_a_dropped_body(backend: Backend) -> None:
    store = backend.open()
    root = make("t", None, {"flag": "kept in the root's body", "n": 0})
    run(store.acommit(checkpoints=[root]))
    parent = root.checkpoint
    for i in range(1, 6):
        cw = make("t", parent, {"n": i})
        run(store.acommit(checkpoints=[cw]))
        parent = cw.checkpoint
    assert run(store.aprune("t", keep_last=2)) == 4
    run(store.aclose())
    assert backend.sql("SELECT count(*) FROM {P}checkpoints WHERE id = %s", root.checkpoint.id)[0][0] == 0
    assert blob_rows(backend, root.checkpoint.id) == {"flag"}, "moved to the blobs table"
    fresh = backend.open()
    same(run(fresh.aget("t")), parent)
    assert [c.values["flag"] for c in run(fresh.ahistory("t"))] == ["kept in the root's body"] * 2
    run(fresh.aclose())


def test_a_damaged_inline_blob_is_reported_with_its_checkpoint(backend: Backend) -> None:
    store = backend.open()
    items = [f"item {i} " * 4 for i in range(5)]
    root = make("t", None, {"log": items})
    run(store.acommit(checkpoints=[root]))
    child = make("t", root.checkpoint, {"log": [*items, "b"]})
    run(store.acommit(checkpoints=[child]))
    run(store.aclose())
    assert inline_of(backend, child.checkpoint.id)["log"][0] == root.checkpoint.id, "a delta on the root's value"
    bad = orjson.dumps({"v": {"log": 1}, "b": {"log": root.checkpoint.id}, "i": {"log": "not an entry"}})
    backend.sql("UPDATE {P}checkpoints SET body = %s WHERE id = %s", bad, root.checkpoint.id)
    fresh = backend.open()
    with pytest.raises(CheckpointCorruptError) as info:
        run(fresh.aget("t", root.checkpoint.id))
    assert info.value.checkpoint_id == root.checkpoint.id
    with pytest.raises(CheckpointCorruptError) as info:
        run(fresh.aget("t"))  # the child's value needs the root's
    assert info.value.thread_id == "t"
    run(fresh.aclose())
