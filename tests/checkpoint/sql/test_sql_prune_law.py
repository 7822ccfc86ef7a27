"""A law of pruning on the SQL stores: whatever a prune keeps reads back exactly as written.

Prune deletes row by row when few checkpoints go and by statements naming what stays when
most go (a sweep's ``keep_latest``), and it moves small values kept in dropped bodies to the
blobs table first; both paths, and delta chains of any length, are drawn here.
"""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from plait.checkpoint.model import Checkpoint

from .._backend_helpers import Backend, make, read_back_all


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    steps=st.integers(min_value=1, max_value=30),
    keep_last=st.integers(min_value=1, max_value=30),
    big_every=st.integers(min_value=1, max_value=12),
    flag_size=st.sampled_from([10, 5000]),
)
def test_what_a_prune_keeps_reads_back_as_written(
    tmp_path_factory: pytest.TempPathFactory,
    request: pytest.FixtureRequest,
    steps: int,
    keep_last: int,
    big_every: int,
    flag_size: int,
) -> None:
    tmp: Path = tmp_path_factory.mktemp("prune")
    backend = Backend("sqlite", tmp, request)
    store = backend.open()
    written: list[Checkpoint] = []
    parent: Checkpoint | None = None
    for i in range(steps):
        values: dict[str, object] = {"log": [*(parent.values["log"] if parent else []), f"entry {i:03d}"], "n": i}
        if i == 0 or i % big_every == 0:
            values["flag"] = f"{i}:" + "x" * flag_size  # full values, small (in a body) or large (a blob row)
        cw = make("t", parent, values)
        asyncio.run(store.acommit(checkpoints=[cw]))
        parent = cw.checkpoint
        written.append(parent)
    removed = asyncio.run(store.aprune("t", keep_last=keep_last))
    asyncio.run(store.aclose())
    kept = written[-keep_last:]
    assert removed == steps - len(kept)
    kept[0] = dataclasses.replace(kept[0], parent_id=None)  # its parent went: it is a root now
    read_back_all(backend, "t", kept)
