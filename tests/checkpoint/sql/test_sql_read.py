"""The SQL read path (plait.checkpoint.sql._read) against a model, on SQLite.

Threads are written as rows straight into a store, so that they can be anything a database
may hold: trees of branches, ids out of time order, parents that are missing, parent cycles,
delta chains that interleave. Whatever the shape, a read must return what walking the parent
links and replaying the chains says, whether the lineage scan and the chain scans manage on
their own or hand over to the recursive queries (forced here by shrinking their budgets).
"""

from __future__ import annotations

import contextlib
import dataclasses
import sqlite3
import time
from collections.abc import Callable, Iterator
from typing import Any
from unittest import mock

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plait._codec import canonical, freeze
from plait._frozen import FrozenDict, FrozenList
from plait.checkpoint import delta
from plait.checkpoint._records import encode_body
from plait.checkpoint.model import Checkpoint
from plait.checkpoint.sql import _read as _sql_read
from plait.checkpoint.sql._base import CommitRequest
from plait.checkpoint.sql._core import SqlCore
from plait.checkpoint.sqlite._store import _DIALECT
from plait.checkpoint.sqlite._worker import transaction as _transaction
from plait.errors import CheckpointCorruptError

from .._backend_helpers import RowStore as Store
from .._backend_helpers import make

Draw = Callable[[st.SearchStrategy[Any]], Any]


@contextlib.contextmanager
def _mode(store: Store, mode: str) -> Iterator[None]:
    """Reads as configured, with one-row pages and no slack (every hand-over path taken), or
    as on an engine whose cursors fetch whole results (PostgreSQL): blobs read by id range
    instead of chain scans."""
    if mode == "range reads":
        store.core = SqlCore(dataclasses.replace(_DIALECT, lazy_rows=False), "test")
    if mode == "scans":
        yield
        return
    with mock.patch.object(_sql_read, "_FIRST_PAGE", 1), mock.patch.object(_sql_read, "_SLACK", 0):
        yield


MODES = pytest.mark.parametrize("mode", ["scans", "tight budgets", "range reads"])


def ids(cps: list[Checkpoint]) -> list[str]:
    return [c.id for c in cps]


def _lineage(parents: dict[str, str | None], start: str | None) -> list[str]:
    """The model's walk from ``start`` (raising where a parent cycle makes it loop)."""
    return _walk(parents, start)


class _Cycle(Exception):
    def __init__(self, at: str) -> None:
        self.at = at


def _walk(
    parents: dict[str, str | None], start: str | None, limit: int | None = None, keep: Callable[[str], bool] = bool
) -> list[str]:
    """Parent links from ``start``, keeping what ``keep`` keeps, until ``limit`` are kept;
    raises _Cycle naming the checkpoint whose parent is one the walk passed."""
    out: list[str] = []
    passed: set[str] = set()
    while start is not None and start in parents:
        if keep(start):
            out.append(start)
            if limit is not None and len(out) >= limit:
                break
        passed.add(start)
        if parents[start] in passed:
            raise _Cycle(start)
        start = parents[start]
    return out


def _same_walk(read: Callable[[], list[Checkpoint]], model: Callable[[], list[str]]) -> None:
    """``read()`` returns what the model walks, or raises CheckpointCorruptError where it loops."""
    try:
        want = model()
    except _Cycle as cycle:
        with pytest.raises(CheckpointCorruptError, match="cycle") as info:
            read()
        assert info.value.thread_id == "t" and info.value.checkpoint_id == cycle.at
        return
    assert ids(read()) == want


@st.composite
def _threads(draw: Draw) -> tuple[dict[str, str | None], dict[str, int]]:
    """Checkpoint ids -> parent ids (any order, some missing, maybe a cycle), and a mark each."""
    n = draw(st.integers(1, 14))
    ids = [f"c{i:02d}" for i in range(n)]
    in_order = draw(st.booleans())
    parents: dict[str, str | None] = {}
    for i, cid in enumerate(ids):
        if i == 0 or draw(st.integers(0, 7)) == 0:
            parents[cid] = None if draw(st.booleans()) or i == 0 else "gone"
        elif in_order:
            parents[cid] = ids[draw(st.integers(0, i - 1))]
        else:
            parents[cid] = draw(st.sampled_from(ids))
    marks = {cid: draw(st.integers(0, 2)) for cid in ids}
    return parents, marks


@MODES
@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_history_follows_parent_links_whatever_the_rows(mode: str, data: st.DataObject) -> None:
    parents, marks = data.draw(_threads())
    store = Store()
    store.blob("c", "b", None, b"[1]")
    for cid, parent in parents.items():
        store.checkpoint(cid, parent, {"c": "b"}, {"mark": marks[cid], "writes": {"n": ["c"]}})
    with _mode(store, mode):
        _check_history(store, parents, marks, data)


def _check_history(store: Store, parents: dict[str, str | None], marks: dict[str, int], data: st.DataObject) -> None:
    head = max(parents)
    _same_walk(store.history, lambda: _walk(parents, head))
    limit = data.draw(st.integers(1, 5))
    _same_walk(lambda: store.history(limit=limit), lambda: _walk(parents, head, limit))
    before = data.draw(st.sampled_from(sorted(parents)))
    _same_walk(lambda: store.history(before=before), lambda: _walk(parents, parents[before]))
    mark = data.draw(st.integers(0, 2))

    def marked(c: str) -> bool:
        return marks[c] == mark

    _same_walk(lambda: store.history(filter={"mark": mark}), lambda: _walk(parents, head, keep=marked))
    _same_walk(
        lambda: store.history(filter={"mark": mark}, limit=limit), lambda: _walk(parents, head, limit, keep=marked)
    )


@st.composite
def _chains(draw: Draw) -> tuple[dict[str, str | None], dict[str, tuple[str | None, bytes]], dict[str, Any]]:
    """A tree of checkpoints whose list channel is stored as a backend stores it (each value
    a delta against its parent's when that pays off), with the values each must read back."""
    n = draw(st.integers(1, 24))
    parents: dict[str, str | None] = {"c00": None}
    values: dict[str, Any] = {"c00": freeze([{"i": 0, "text": ""}], "c")}
    data, _, chain = delta.encode(values["c00"])
    chains = {"c00": chain}
    rows: dict[str, tuple[str | None, bytes]] = {"c00": (None, data)}
    for i in range(1, n):
        cid = f"c{i:02d}"
        parent = f"c{draw(st.integers(max(0, i - 3), i - 1)):02d}" if draw(st.booleans()) else f"c{i - 1:02d}"
        prev = values[parent]
        cut = len(prev) if draw(st.integers(0, 5)) else draw(st.integers(0, len(prev)))
        new = FrozenList([*prev[:cut], freeze({"i": i, "text": "x" * draw(st.integers(0, 40))}, "c")])
        data, is_delta, chains[cid] = delta.encode(new, prev, chains[parent])
        parents[cid], values[cid], rows[cid] = parent, new, (parent if is_delta else None, data)
    return parents, rows, values


@MODES
@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_every_checkpoint_and_history_replay_their_chains(mode: str, data: st.DataObject) -> None:
    parents, rows, values = data.draw(_chains())
    store = Store()
    store.blob("k", "k0", None, b'{"same": true}')  # a channel no checkpoint changes
    for cid, (base, blob) in rows.items():
        store.blob("c", cid, base, blob)
        store.checkpoint(cid, parents[cid], {"c": cid, "k": "k0"}, {})
    with _mode(store, mode):
        _check_chains(store, parents, values, data)


def _check_chains(store: Store, parents: dict[str, str | None], values: dict[str, Any], data: st.DataObject) -> None:
    for cid in parents:
        got = store.get(cid)
        assert got is not None and canonical(got.values["c"]) == canonical(values[cid])
        assert isinstance(got.values, FrozenDict) and isinstance(got.values["c"], FrozenList)
    head = max(parents)
    history = store.history()
    assert [c.id for c in history] == _lineage(parents, head)
    for got in history:
        assert canonical(got.values["c"]) == canonical(values[got.id])
        assert all(type(item) is FrozenDict for item in got.values["c"])
    limit = data.draw(st.integers(1, 4))
    assert [canonical(c.values) for c in store.history(limit=limit)] == [canonical(c.values) for c in history][:limit]


def test_a_long_side_branch_hands_the_rest_of_the_lineage_to_the_recursive_query() -> None:
    """The main line's old part sits below many rows of a newer-than-it, older-than-the-head
    branch: the scan gives up past its slack and the recursive query reads the rest."""
    store = Store()
    store.blob("c", "b", None, b"[1]")
    store.checkpoint("a0", None, {"c": "b"}, {})
    store.checkpoint("a1", "a0", {"c": "b"}, {})
    for i in range(200):  # a branch of a1 that was left behind
        store.checkpoint(f"b{i:03d}", "a1" if i == 0 else f"b{i - 1:03d}", {"c": "b"}, {})
    store.checkpoint("c0", "a1", {"c": "b"}, {})  # the head, back on a1
    assert [c.id for c in store.history()] == ["c0", "a1", "a0"]
    assert [c.id for c in store.history(before="b199")] == [f"b{i:03d}" for i in range(198, -1, -1)] + ["a1", "a0"]


def test_history_leaves_no_statement_running(tmp_path: Any) -> None:
    """A chain scan stops part way through its rows; it must not keep a read open (in WAL
    mode that would stop the file's checkpoints from getting past it)."""
    path = tmp_path / "t.db"
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("PRAGMA journal_mode = WAL")
    core = SqlCore(_DIALECT, "test")
    _transaction(writer, lambda cur: core.component.migrate(cur, core.store))
    for i in range(50):
        writer.execute("INSERT INTO plait_blobs VALUES ('', 't', 'c', ?, NULL, ?)", (f"b{i:02d}", b"[1]"))
    cp = Checkpoint(thread_id="t", id="x", parent_id=None, step=0, values={})
    writer.execute(
        "INSERT INTO plait_checkpoints VALUES ('', 't', 'x', NULL, 0, 0, 'loop', '{}', ?)",
        (encode_body(cp, blobs={"c": "b40"}),),
    )
    reader = sqlite3.connect(path, isolation_level=None)
    cur = reader.cursor()
    (got,) = core.read.history(cur, "", "t", limit=None, before=None, filter=None)
    assert got.values == {"c": [1]}
    writer.execute("INSERT INTO plait_blobs VALUES ('', 't', 'c', 'z', NULL, x'5b5d')")
    busy, _, _ = writer.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    reader.close()
    writer.close()
    assert busy == 0


def test_metadata_parts_are_shared_only_when_their_json_is_the_same() -> None:
    store = Store()
    store.blob("c", "b", None, b"[]")
    metas = [{"w": {"n": [1]}}, {"w": {"n": [1]}}, {"w": {"n": [1.0]}}, {"w": {"n": [True]}}, {"w": {"n": [1]}}]
    for i, meta in enumerate(metas):
        store.checkpoint(f"c{i}", f"c{i - 1}" if i else None, {"c": "b"}, meta)
    got = list(reversed(store.history()))
    assert [orjson.dumps(c.metadata) for c in got] == [orjson.dumps(m) for m in metas]
    assert got[0].metadata["w"] is got[1].metadata["w"] is got[4].metadata["w"]
    assert got[2].metadata["w"] is not got[0].metadata["w"]
    for cp in got:
        assert type(cp.metadata) is FrozenDict and type(cp.metadata["w"]["n"]) is FrozenList


@pytest.mark.parametrize(
    ("metadata", "reason"),
    [(b"[1]", "metadata is not a JSON object"), (b"{", "metadata: not JSON"), (b'{"a": [1', "metadata: not JSON")],
)
def test_damaged_metadata_names_the_checkpoint(metadata: bytes, reason: str) -> None:
    store = Store()
    store.blob("c", "b", None, b"[]")
    store.checkpoint("c0", None, {"c": "b"}, {})
    store.checkpoint("c1", "c0", {"c": "b"}, {})
    store.cur.execute("UPDATE plait_checkpoints SET metadata = ? WHERE id = 'c0'", (metadata,))
    for read in (lambda: store.history(), lambda: store.get("c0")):
        with pytest.raises(CheckpointCorruptError, match=reason) as info:
            read()
        assert info.value.thread_id == "t" and info.value.checkpoint_id == "c0"


def test_a_checkpoint_without_channels_reads_back() -> None:
    store = Store()
    store.checkpoint("c0", None, {}, {"source": "input"})
    got = store.get("c0")
    assert got is not None and got.values == {} and got.metadata == {"source": "input"}
    assert [c.id for c in store.history()] == ["c0"]


def test_a_state_read_takes_the_thread_row_from_the_same_statement(tmp_path: Any) -> None:
    """get_state shows the thread's status: the head (or a checkpoint by id), its pending
    writes and the thread's row come from one statement, and say what the separate reads say
    (no row, a row at rest, a held lease)."""
    conn = sqlite3.connect(tmp_path / "f.db", isolation_level=None)
    core = SqlCore(_DIALECT, "test store")
    _transaction(conn, lambda cur: core.component.migrate(cur, core.store))
    root = make("t", None, {"n": 0})
    child = make("t", root.checkpoint, {"n": 1})
    for cw in (root, child):
        core.commit.commit_all(
            lambda fn: _transaction(conn, fn), [CommitRequest(checkpoints=[cw], writes=())], time.time
        )
    seen: list[str] = []
    conn.set_trace_callback(seen.append)

    def both(cid: str | None) -> tuple[Any, Any, Any, Any]:
        cur = conn.cursor()
        seen.clear()
        cp, status = core.get_with_status(cur, "t", cid, time.time())
        statements = len(seen)
        return (
            cp,
            status,
            statements,
            (core.read.get(cur, "", "t", cid), core.threads.status(cur, ("", "t"), time.time())),
        )

    for cid, want in ((None, child), (root.checkpoint.id, root)):
        cp, status, statements, (alone, alone_status) = both(cid)
        assert statements == 1
        assert cp is not None and cp.id == want.checkpoint.id and cp == alone
        assert status == alone_status
    assert both("no-such-checkpoint")[:3] == (None, None, 1)
    lease = _transaction(conn, lambda cur: core.threads.take(cur, ("", "t"), "run", 30.0, time.time()))
    assert lease is not None
    cp, status, _, (_, alone_status) = both(None)
    assert status == alone_status == "busy"
    conn.execute("DELETE FROM plait_threads")  # a thread written before thread rows existed
    cp, status, _, (_, alone_status) = both(None)
    assert cp is not None and status is None and alone_status is None
    conn.close()
