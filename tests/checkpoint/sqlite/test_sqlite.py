"""SqliteCheckpointer: round trips, compact storage, history, prune, corruption, leases across
processes, group commit, reopening, and awkward ids. Every test uses a real SQLite file."""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import orjson
import pytest

from plait._codec import canonical, freeze
from plait._frozen import FrozenDict, FrozenList
from plait.checkpoint import delta
from plait.checkpoint.model import Checkpoint, CheckpointWrite, Fence, Lease, PendingWrite, Task, WritesBatch
from plait.checkpoint.sql._base import CommitRequest, Cursor
from plait.checkpoint.sql._core import SqlCore
from plait.checkpoint.sqlite._store import _DIALECT, SqliteCheckpointer
from plait.checkpoint.sqlite._worker import lease_transaction as _lease_transaction
from plait.checkpoint.sqlite._worker import transaction as _transaction
from plait.errors import (
    MAX_ID_BYTES,
    CheckpointCorruptError,
    CheckpointError,
    ConcurrentUpdateError,
    LeaseLostError,
    StoreVersionError,
    ThreadBusyError,
)

from .._backend_helpers import append_chat, make, same


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "plait.db"


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_a_checkpoint_reads_back_whole_with_frozen_values(db: Path) -> None:
    async def go() -> None:
        cp = SqliteCheckpointer(db)
        await cp.asetup()
        root = make("t", None, {"messages": [{"id": "1", "text": "hi"}], "n": 1, "flag": True, "x": None})
        child = make("t", root.checkpoint, {"n": 2, "phase": "go"}, next_tasks=[Task(id="k", node="b")])
        await cp.acommit(checkpoints=[root, child])
        head = await cp.aget("t")
        same(head, child.checkpoint)
        same(await cp.aget("t", root.checkpoint.id), root.checkpoint)
        assert head is not None and isinstance(head.values["messages"], FrozenList)
        assert isinstance(head.values, FrozenDict) and head.values["flag"] is True
        assert await cp.aget("t", "nope") is None and await cp.aget("other") is None
        await cp.aclose()

    run(go())


def test_pending_writes_upsert_and_fold_with_the_next_checkpoint(db: Path) -> None:
    async def go() -> None:
        cp = SqliteCheckpointer(db)
        root = make("t", None, {"n": 1})
        await cp.acommit(checkpoints=[root])
        rid = root.checkpoint.id
        w1 = PendingWrite(task_id="a", kind="result", value={"writes": [["n", 1]]})
        w2 = PendingWrite(task_id="b", kind="effect", key="pay", value={"ok": 1})
        await cp.acommit(writes=[WritesBatch(thread_id="t", checkpoint_id=rid, writes=(w1, w2))])
        again = PendingWrite(task_id="a", kind="result", value={"writes": [["n", 5]]})
        await cp.acommit(writes=[WritesBatch(thread_id="t", checkpoint_id=rid, writes=(again,))])
        got = await cp.aget("t")
        assert got is not None and got.pending_writes == (again, w2)  # replaced in place, order kept
        child = make("t", root.checkpoint, {"n": 5}, folds=True)
        await cp.acommit(checkpoints=[child])
        assert (await cp.aget("t", rid)).pending_writes == ()  # type: ignore[union-attr]
        await cp.aclose()

    run(go())


def test_500_appends_of_1kb_cost_about_1mb_on_disk_and_read_back(db: Path) -> None:
    async def go() -> list[Checkpoint]:
        cp = SqliteCheckpointer(db)
        written = await append_chat(cp, "chat", 500)
        history = await cp.ahistory("chat")
        assert [c.id for c in history] == [c.id for c in reversed(written)]
        for got, want in zip(history, reversed(written), strict=True):
            assert len(got.values["messages"]) == len(want.values["messages"])
        for i in (0, 1, 255, 256, 257, 499):
            same(await cp.aget("chat", written[i].id), written[i])
        await cp.aclose()
        return written

    written = run(go())
    assert not Path(str(db) + "-wal").exists()
    raw = len(canonical(written[-1].values["messages"]))
    size = db.stat().st_size
    assert size < 1_500_000, f"{size} bytes on disk for {raw} bytes of messages"
    with closing(sqlite3.connect(db)) as conn, conn:  # commits, then closes
        fulls, deltas = conn.execute(
            "SELECT sum(base_id IS NULL), sum(base_id IS NOT NULL) FROM plait_blobs WHERE channel = 'messages'"
        ).fetchone()
    assert deltas > fulls > 1


def test_a_time_travel_branch_shares_blobs_and_reads_back(db: Path) -> None:
    async def go() -> None:
        cp = SqliteCheckpointer(db)
        written = await append_chat(cp, "t", 20, size=200)
        fork_point = written[5]
        branch = make("t", fork_point, {"turn": 99})  # messages unchanged: the parent's blob
        await cp.acommit(checkpoints=[branch])
        more = make("t", branch.checkpoint, {"messages": [*fork_point.values["messages"], {"id": "b"}]})
        await cp.acommit(checkpoints=[more])
        same(await cp.aget("t"), more.checkpoint)
        same(await cp.aget("t", written[-1].id), written[-1])
        history = await cp.ahistory("t")
        assert [c.id for c in history] == [more.checkpoint.id, branch.checkpoint.id] + [
            c.id for c in reversed(written[:6])
        ]
        await cp.aclose()
        with closing(sqlite3.connect(db)) as conn, conn:  # commits, then closes
            bid = (branch.checkpoint.id,)
            (n,) = conn.execute("SELECT count(*) FROM plait_blobs WHERE id = ?", bid).fetchone()
            (body,) = conn.execute("SELECT body FROM plait_checkpoints WHERE id = ?", bid).fetchone()
        # only "turn" was stored for the branch checkpoint, small enough to stay in its body
        assert n == 0 and orjson.loads(body)["i"] == {"turn": [None, 99]}

    run(go())


def test_a_fork_to_another_thread_stores_its_values_in_full(db: Path) -> None:
    async def go() -> None:
        cp = SqliteCheckpointer(db)
        written = await append_chat(cp, "src", 10, size=200)
        root = make("dst", None, dict(written[-1].values), metadata={"source": "fork"})
        await cp.acommit(checkpoints=[root])
        await cp.adelete_thread("src")
        same(await cp.aget("dst"), root.checkpoint)
        assert await cp.aget("src") is None
        await cp.aclose()

    run(go())


def test_history_limit_before_and_filter(db: Path) -> None:
    async def go() -> None:
        cp = SqliteCheckpointer(db)
        written = await append_chat(cp, "t", 12, size=100)
        ids = [c.id for c in reversed(written)]
        assert [c.id for c in await cp.ahistory("t", limit=3)] == ids[:3]
        assert [c.id for c in await cp.ahistory("t", before=ids[2], limit=2)] == ids[3:5]
        got = await cp.ahistory("t", filter={"step": 4})
        assert [c.id for c in got] == [written[4].id]
        got = await cp.ahistory("t", filter={"source": "loop"}, limit=4, before=ids[0])
        assert [c.id for c in got] == ids[1:5]
        assert await cp.ahistory("t", before="missing") == []
        with pytest.raises(ValueError, match="filter key"):
            await cp.ahistory("t", filter={"x') OR 1=1 --": 1})
        await cp.aclose()

    run(go())


def test_prune_keeps_every_branch_and_what_its_deltas_need(db: Path) -> None:
    async def go() -> None:
        cp = SqliteCheckpointer(db)
        written = await append_chat(cp, "t", 40, size=300)
        branch = make("t", written[10], {"turn": -1})
        await cp.acommit(checkpoints=[branch])
        kept_before = {c.id: c for c in await cp.ahistory("t", limit=5)}
        kept_before |= {c.id: c for c in await cp.ahistory("t", before=branch.checkpoint.id, limit=4)}
        kept_before[branch.checkpoint.id] = branch.checkpoint
        dropped = await cp.aprune("t", keep_last=5)
        assert dropped == 41 - 10
        for cid, want in kept_before.items():
            got = await cp.aget("t", cid)
            assert got is not None and canonical(got.values) == canonical(want.values)
        infos = await cp.alist_threads()
        assert infos[0].checkpoints == 10
        roots = [c for c in await cp.ahistory("t") if c.parent_id is None]
        assert len(roots) == 1  # the oldest kept on the main line was re-rooted
        # the store still works on after prune: a new step on the head
        head = await cp.aget("t")
        assert head is not None
        nxt = make("t", head, {"messages": [*head.values["messages"], {"id": "after"}]})
        await cp.acommit(checkpoints=[nxt])
        same(await cp.aget("t"), nxt.checkpoint)
        await cp.aclose()
        with closing(sqlite3.connect(db)) as conn, conn:  # commits, then closes
            (blobs,) = conn.execute("SELECT count(*) FROM plait_blobs").fetchone()
        assert blobs < 2 * 41  # unneeded blobs were dropped

    run(go())


def test_corrupt_data_names_the_checkpoint_and_spares_other_threads(db: Path) -> None:
    async def go() -> dict[str, str]:
        cp = SqliteCheckpointer(db)
        ids = {}
        for name in ("body", "blob", "base", "meta", "fine"):
            written = await append_chat(cp, name, 30, size=300)
            ids[name] = written[-1].id
        await cp.aclose()
        return ids

    ids = run(go())
    with closing(sqlite3.connect(db)) as conn, conn:  # commits, then closes
        conn.execute("UPDATE plait_checkpoints SET body = x'7b6e6f' WHERE thread_id = 'body'")
        conn.execute("UPDATE plait_blobs SET data = x'ff00' WHERE thread_id = 'blob' AND id = ?", (ids["blob"],))
        conn.execute(
            "DELETE FROM plait_blobs WHERE thread_id = 'base' AND channel = 'messages' AND base_id IS NULL "
            "AND id = (SELECT max(id) FROM plait_blobs WHERE thread_id = 'base' AND base_id IS NULL "
            "AND channel = 'messages')"
        )
        conn.execute("UPDATE plait_checkpoints SET metadata = x'5b' WHERE thread_id = 'meta'")

    async def check() -> None:
        cp = SqliteCheckpointer(db)
        for name in ("body", "blob", "base", "meta"):
            with pytest.raises(CheckpointCorruptError) as info:
                await cp.aget(name)
            assert info.value.thread_id == name and info.value.checkpoint_id == ids[name]
            with pytest.raises(CheckpointCorruptError):
                await cp.ahistory(name)
        assert len(await cp.alist_threads()) == 5
        assert (await cp.aget("fine")) is not None
        await cp.aclose()

    run(check())


_LEASE_CHILD = """
import asyncio, sys
from plait.checkpoint.sqlite import SqliteCheckpointer
from plait.errors import ThreadBusyError
async def main():
    cp = SqliteCheckpointer(sys.argv[1])
    try:
        lease = await cp.atake_lease("t", sys.argv[2], ttl=float(sys.argv[3]))
        print("ok", lease.token, flush=True)
    except ThreadBusyError as exc:
        print("busy", exc.owner, exc.alive, flush=True)
        return
    if sys.argv[4] == "hold":  # hold it until told, then exit without giving it back
        sys.stdin.readline()
    await cp.aclose()
asyncio.run(main())
"""


def _child(db: Path, owner: str, ttl: float, hold: bool = False) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", _LEASE_CHILD, str(db), owner, str(ttl), "hold" if hold else "exit"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def _line(child: subprocess.Popen[str]) -> str:
    assert child.stdout is not None
    return child.stdout.readline().strip()


def test_leases_hold_across_processes_until_their_holder_is_gone(db: Path) -> None:
    """A live holder in another process keeps the thread (waited out, said to be alive); a
    holder that exited without giving its lease back is seen to be gone, and its lease is
    taken over at once, long before it expires."""
    with _child(db, "proc-a", 600, hold=True) as holder:
        assert _line(holder).startswith("ok ")
        with pytest.raises(ThreadBusyError) as info:
            run(SqliteCheckpointer(db).atake_lease("t", "main", ttl=600))
        assert info.value.owner == "proc-a" and 0 < info.value.expires_in <= 600
        assert info.value.alive is True, "the holder runs on this machine: alive"
        with _child(db, "proc-b", 600) as other:
            assert _line(other) == "busy proc-a True"
        assert holder.stdin is not None
        holder.stdin.write("\n")
        holder.stdin.flush()
        assert holder.wait(timeout=60) == 0  # gone, its lease still unexpired for ten minutes
    with _child(db, "proc-b", 600) as taker:
        got = _line(taker)
    assert got.startswith("ok "), got

    async def release() -> None:
        cp = SqliteCheckpointer(db)
        try:
            lease = await cp.atake_lease("t", "main")  # proc-b is gone too
            assert lease.token == int(got.split()[1]) + 1
            with pytest.raises(ThreadBusyError):
                await cp.atake_lease("t", "someone")
            await cp.arelease_lease(lease)
            await cp.atake_lease("t", "someone")
        finally:
            await cp.aclose()

    run(release())


def test_many_concurrent_commits_all_land(db: Path) -> None:
    async def go() -> None:
        cp = SqliteCheckpointer(db)
        results = await asyncio.gather(*(append_chat(cp, f"t{i}", 15, size=100) for i in range(40)))
        for i, written in enumerate(results):
            same(await cp.aget(f"t{i}"), written[-1])
            assert len(await cp.ahistory(f"t{i}")) == 15
        assert len(await cp.alist_threads()) == 40
        await cp.aclose()

    run(go())


def test_a_bad_commit_in_a_group_does_not_sink_the_others(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "g.db", isolation_level=None)
    core = SqlCore(_DIALECT, "test store")
    _transaction(conn, lambda cur: core.component.migrate(cur, core.store))
    good = [CommitRequest(checkpoints=[make(f"g{i}", None, {"v": i})], writes=()) for i in range(3)]
    bad_cp = make("bad", None, {"v": 0}).checkpoint
    bad_values = FrozenDict({"v": {1, 2}})  # not JSON: the encoder refuses it mid-transaction
    bad = CommitRequest(
        checkpoints=[
            CheckpointWrite(
                checkpoint=Checkpoint(**{**_fields(bad_cp), "values": bad_values}), changed=frozenset({"v"})
            )
        ],
        writes=(),
    )
    results = core.commit.commit_all(lambda fn: _transaction(conn, fn), [good[0], bad, good[1], good[2]], time.time)
    assert results[0] is None and results[2] is None and results[3] is None
    assert isinstance(results[1], TypeError)
    stored = {r[0] for r in conn.execute("SELECT thread_id FROM plait_checkpoints")}
    assert stored == {"g0", "g1", "g2"}
    conn.close()


def test_a_group_that_stores_a_checkpoint_then_writes_on_it_does_not_remember_it(tmp_path: Path) -> None:
    """known_head() offers only a head without pending writes, also when a group commit
    stores the head in one request and writes on it in a later one."""
    conn = sqlite3.connect(tmp_path / "k.db", isolation_level=None)
    core = SqlCore(_DIALECT, "test store")
    _transaction(conn, lambda cur: core.component.migrate(cur, core.store))
    root = make("t", None, {"v": 0})
    saved = (PendingWrite(task_id="x", kind="effect", key="k", value=1),)
    on_root = WritesBatch(thread_id="t", checkpoint_id=root.checkpoint.id, writes=saved)
    requests = [CommitRequest(checkpoints=[root], writes=()), CommitRequest(checkpoints=(), writes=[on_root])]
    assert core.commit.commit_all(lambda fn: _transaction(conn, fn), requests, time.time) == [None, None]
    assert core.cache.known(("", "t")) is None
    child = make("t", root.checkpoint, {"v": 1})
    assert core.commit.commit_all(
        lambda fn: _transaction(conn, fn), [CommitRequest(checkpoints=[child], writes=())], time.time
    ) == [None]
    known = core.cache.known(("", "t"))
    assert known is not None and known.id == child.checkpoint.id and known.values == child.checkpoint.values
    conn.close()


def _fields(cp: Checkpoint) -> dict[str, Any]:
    return {name: getattr(cp, name) for name in Checkpoint.__slots__}


def test_a_concurrent_bad_commit_fails_alone(db: Path) -> None:
    async def go() -> None:
        cp = SqliteCheckpointer(db)
        bad_cp = make("bad", None, {"v": 0}).checkpoint
        bad = CheckpointWrite(
            checkpoint=Checkpoint(**{**_fields(bad_cp), "values": FrozenDict({"v": object()})}),
            changed=frozenset({"v"}),
        )
        goods = [make(f"ok{i}", None, {"v": i}) for i in range(20)]
        outcomes = await asyncio.gather(
            *(cp.acommit(checkpoints=[g]) for g in goods[:10]),
            cp.acommit(checkpoints=[bad]),
            *(cp.acommit(checkpoints=[g]) for g in goods[10:]),
            return_exceptions=True,
        )
        assert [type(o) for o in outcomes].count(TypeError) == 1 and outcomes.count(None) == 20
        for g in goods:
            same(await cp.aget(g.checkpoint.thread_id), g.checkpoint)
        assert await cp.aget("bad") is None
        await cp.aclose()

    run(go())


def test_reopening_reads_everything_back_and_deltas_continue(db: Path) -> None:
    async def first() -> list[Checkpoint]:
        cp = SqliteCheckpointer(db)
        written = await append_chat(cp, "t", 30, size=200)
        await cp.acommit(
            writes=[
                WritesBatch(
                    thread_id="t", checkpoint_id=written[-1].id, writes=(PendingWrite(task_id="a", kind="result"),)
                )
            ]
        )
        cp.close()
        cp.close()  # idempotent
        return written

    written = run(first())

    async def second() -> None:
        cp = SqliteCheckpointer(db)
        history = await cp.ahistory("t")
        for got, want in zip(history, reversed(written), strict=True):
            same(got, want)
        head = await cp.aget("t")
        assert head is not None and len(head.pending_writes) == 1
        nxt = make("t", head, {"messages": [*head.values["messages"], {"id": "new"}]})
        await cp.acommit(checkpoints=[nxt])  # a cache miss: stored in full, still right
        same(await cp.aget("t"), nxt.checkpoint)
        await cp.aclose()

    run(second())


def test_one_checkpointer_serves_several_event_loops(db: Path) -> None:
    cp = SqliteCheckpointer(db)
    root = make("t", None, {"n": 1})
    asyncio.run(cp.acommit(checkpoints=[root]))
    child = make("t", root.checkpoint, {"n": 2})
    asyncio.run(cp.acommit(checkpoints=[child]))
    same(asyncio.run(cp.aget("t")), child.checkpoint)
    cp.close()
    with pytest.raises(CheckpointError, match="closed"):
        asyncio.run(cp.aget("t"))


AWKWARD = [
    "it's",
    'say "hi"',
    "a; DROP TABLE plait_checkpoints; --",
    "../../etc/passwd",
    "control\x01\x7finside",
    "é😀",
    "x" * MAX_ID_BYTES,
]


def test_awkward_ids_and_metadata_are_plain_data(db: Path) -> None:
    async def go() -> None:
        cp = SqliteCheckpointer(db)
        for i, text in enumerate(AWKWARD):
            cw = make(text, None, {"v": text}, namespace=AWKWARD[-1 - i], metadata={"source": text, "label": text})
            await cp.acommit(checkpoints=[cw])
            same(await cp.aget(text, namespace=AWKWARD[-1 - i]), cw.checkpoint)
            await cp.atake_lease(text, text, namespace=AWKWARD[-1 - i])
        infos = await cp.alist_threads()
        assert sorted(t.thread_id for t in infos) == sorted(AWKWARD)
        with pytest.raises(CheckpointError, match="NUL"):
            await cp.acommit(checkpoints=[make("t", None, {"a\x00b": 1})])
        assert await cp.aget("t") is None
        await cp.aclose()

    run(go())


def test_a_database_from_a_newer_plait_is_refused(db: Path) -> None:
    SqliteCheckpointer(db).close()
    with closing(sqlite3.connect(db)) as conn, conn:  # commits, then closes
        conn.execute("INSERT INTO plait_migrations VALUES (99, 0)")
    cp = SqliteCheckpointer(db)
    with pytest.raises(StoreVersionError, match="version 99") as info:
        run(cp.asetup())
    assert info.value.found == 99
    cp.close()


def test_synchronous_is_full_unless_normal_is_asked_for(db: Path) -> None:
    with pytest.raises(ValueError, match="synchronous"):
        SqliteCheckpointer(db, synchronous="off")  # type: ignore[arg-type]
    cp = SqliteCheckpointer(db, synchronous="normal")
    run(cp.acommit(checkpoints=[make("t", None, {"n": 1})]))
    cp.close()
    with closing(sqlite3.connect(db)) as conn, conn:  # commits, then closes
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_chains_on_disk_are_linked_through_anchors(db: Path) -> None:
    """A list that grows for K_MAX + 20 steps: every value's chain on disk (blob rows and
    deltas kept in bodies) is at most K_STEP appends plus its anchors long, never K_MAX, and
    the value reads back (delta's own tests drive a chain to K_MAX)."""

    async def go() -> None:
        cp = SqliteCheckpointer(db)
        parent: Checkpoint | None = None
        for i in range(delta.K_MAX + 20):
            big = [] if parent is None else list(parent.values["items"])
            if parent is None:
                big = ["x" * 100_000]
            cw = make("t", parent, {"items": [*big, i]})
            await cp.acommit(checkpoints=[cw])
            parent = cw.checkpoint
        same(await cp.aget("t"), parent)  # type: ignore[arg-type]
        await cp.aclose()

    run(go())
    with closing(sqlite3.connect(db)) as conn, conn:  # commits, then closes
        rows = {r[0]: r[1] for r in conn.execute("SELECT id, base_id FROM plait_blobs WHERE channel = 'items'")}
        for cid, body in conn.execute("SELECT id, body FROM plait_checkpoints"):  # small deltas: in bodies
            kept = orjson.loads(body).get("i", {})
            if "items" in kept:
                rows[cid] = kept["items"][0]
    longest = 0
    for base in rows.values():
        n, cursor = 0, base
        while cursor is not None:
            n, cursor = n + 1, rows[cursor]
        longest = max(longest, n)
    assert longest <= delta.K_STEP + (delta.K_MAX + 20) // delta.K_STEP + 1 < delta.K_MAX
    ids = sorted(rows)
    skips = [cid for cid, base in rows.items() if base is not None and ids.index(base) < ids.index(cid) - 1]
    assert len(skips) >= (delta.K_MAX + 20) // delta.K_STEP - 2, "anchors link past the appends between them"


def test_a_parent_deleted_by_another_process_is_not_built_upon(db: Path) -> None:
    """The writer caches the last checkpoint it wrote and stores the next one's deltas against
    it without reading it back; a parent deleted meanwhile must not leave deltas on nothing."""

    async def go() -> None:
        a, b = SqliteCheckpointer(db), SqliteCheckpointer(db)
        written = await append_chat(a, "t", 4, size=100)
        await b.adelete_thread("t")
        msgs = FrozenList([*written[-1].values["messages"], freeze({"id": "late"}, "m")])
        child = make("t", written[-1], {"messages": msgs})
        await a.acommit(checkpoints=[child])
        grandchild = make("t", child.checkpoint, {"turn": 99})
        await a.acommit(checkpoints=[grandchild])  # and the cache holds the new head
        for cp in (a, b):
            same(await cp.aget("t"), grandchild.checkpoint)
            same(await cp.aget("t", child.checkpoint.id), child.checkpoint)
        await a.aclose()
        await b.aclose()

    run(go())


class _Traced:
    """A bare SQL core on a fresh file, its statements traced: which commits look a parent up."""

    def __init__(self, tmp_path: Path, request: pytest.FixtureRequest) -> None:
        self.conn = sqlite3.connect(tmp_path / "f.db", isolation_level=None)
        request.addfinalizer(self.conn.close)
        self.core = SqlCore(_DIALECT, "test store")
        _transaction(self.conn, lambda cur: self.core.component.migrate(cur, self.core.store))
        self.seen: list[str] = []
        self.conn.set_trace_callback(self.seen.append)

    def commit(self, cw: CheckpointWrite, fence: Fence) -> Exception | None:
        self.seen.clear()
        request = CommitRequest(checkpoints=[cw], writes=(), fence=fence)
        (result,) = self.core.commit.commit_all(lambda fn: _transaction(self.conn, fn), [request], time.time)
        return result

    def parent_lookups(self) -> int:
        return sum(1 for sql in self.seen if sql.startswith("SELECT 1 FROM plait_checkpoints"))


def test_a_fence_that_checks_the_head_spares_the_parent_lookup_and_still_refuses_a_gone_one(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A cached commit looks its parent up (another process may have deleted it), unless its
    fence checks that the parent is the thread's head: a head found equal to it exists."""
    store = _Traced(tmp_path, request)
    conn, commit, parent_lookups = store.conn, store.commit, store.parent_lookups

    root = make("t", None, {"n": 0})
    assert commit(root, Fence(owner="a")) is None
    child = make("t", root.checkpoint, {"n": 1})
    assert commit(child, Fence(owner="a")) is None and parent_lookups() == 1
    grandchild = make("t", child.checkpoint, {"n": 2})
    assert commit(grandchild, Fence(owner="a", expect_head=child.checkpoint.id)) is None
    assert parent_lookups() == 0
    conn.execute("DELETE FROM plait_checkpoints")  # another process deletes the thread
    late = make("t", grandchild.checkpoint, {"n": 3})
    refused = commit(late, Fence(owner="a", expect_head=grandchild.checkpoint.id))
    assert isinstance(refused, ConcurrentUpdateError)
    assert conn.execute("SELECT count(*) FROM plait_checkpoints").fetchone() == (0,)
    conn.close()


def test_a_lease_commits_without_fsync_and_restores_the_connections_durability(db: Path) -> None:
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    core = SqlCore(_DIALECT, "test")
    _transaction(conn, lambda cur: core.component.migrate(cur, core.store))

    taken: list[Lease] = []

    def lease(cur: Cursor) -> tuple[int, int]:
        taken.append(core.threads.take(cur, ("", "t"), "me", 30.0, time.time()))
        return cur.execute("PRAGMA synchronous").fetchone()[0], cur.execute("PRAGMA wal_autocheckpoint").fetchone()[0]

    seen = _lease_transaction(conn, lease)
    assert seen == (0, 0)  # OFF, and no WAL checkpoint can run unsynced
    assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL again
    assert conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 1000
    assert not conn.in_transaction
    assert conn.execute("SELECT owner, held FROM plait_threads").fetchall() == [("me", 1)]
    conn.close()

    async def go() -> None:
        cp = SqliteCheckpointer(db)
        mine = await cp.arenew_lease(taken[0])  # the lease taken above, renewed
        with pytest.raises(ThreadBusyError):
            await cp.atake_lease("t", "other")
        await cp.arelease_lease(mine)
        await cp.atake_lease("t", "other")
        level = await cp._submit(cp._writer, lambda c: c.execute("PRAGMA synchronous").fetchone()[0])
        assert level == 2
        await cp.aclose()

    run(go())


def test_history_reads_blobs_by_range_yet_skips_other_branches_and_finds_older_bases(db: Path) -> None:
    """A history that is most of its thread reads blobs by id range: rows of a branch written
    in between are left out, and bases older than the range (kept by prune) are fetched."""

    async def go() -> None:
        cp, other = SqliteCheckpointer(db), SqliteCheckpointer(db)  # each line stored as deltas
        main = await append_chat(cp, "t", 6, size=50)
        side = [main[2]]
        for i in range(10):  # interleaved, the main line last: it holds the thread's head
            for line, tag, by in ((side, "side", other), (main, "main", cp)):
                msgs = FrozenList([*line[-1].values["messages"], freeze({"id": f"{tag}{i}"}, "m")])
                cw = make("t", line[-1], {"messages": msgs, "turn": i})
                await by.acommit(checkpoints=[cw])
                line.append(cw.checkpoint)
        await other.aclose()
        got = await cp.ahistory("t")  # 16 of the thread's 26 checkpoints
        assert [c.id for c in got] == [c.id for c in reversed(main)]
        for a, b in zip(got, reversed(main), strict=True):
            same(a, b)
        for want in side[1:]:
            same(await cp.aget("t", want.id), want)
        assert await cp.aprune("t", keep_last=4) > 0
        kept = await cp.ahistory("t")  # every kept checkpoint: their bases are older
        assert [c.id for c in kept][:4] == [c.id for c in reversed(main[-4:])]
        for a, b in zip(kept, reversed(main[-4:]), strict=False):
            assert canonical(a.values) == canonical(b.values)  # (the oldest kept is re-rooted)
        assert canonical((await cp.aget("t", side[-1].id) or side[0]).values) == canonical(side[-1].values)
        await cp.aclose()

    run(go())


def test_several_stores_opening_one_new_file_at_once_all_open(tmp_path: Path) -> None:
    """Setting WAL mode can fail at once (no busy wait) while another connection opens or
    migrates the file; each store waits and retries instead of failing."""
    failures: list[BaseException] = []
    for i in range(20):
        path = tmp_path / f"race{i}.db"
        opened: list[SqliteCheckpointer] = []

        def open_one(path: Path = path, opened: list[SqliteCheckpointer] = opened) -> None:
            try:
                store = SqliteCheckpointer(path)
                run(store.asetup())
                opened.append(store)
            except BaseException as exc:
                failures.append(exc)

        threads = [threading.Thread(target=open_one) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for store in opened:
            store.close()
    assert failures == []


def test_a_run_whose_store_is_locked_by_another_connection_waits_for_it(db: Path) -> None:
    """A commit tried on the caller's thread never waits for another connection's lock (the
    busy timeout is 0 there): it goes to the writer thread, which waits, and lands once the
    lock is released."""
    from plait import END, START, Graph, StateSchema

    graph = Graph(StateSchema.builder().add_lww("n").build())
    graph.add_node("inc", lambda s: {"n": s["n"] + 1})
    graph.add_edge(START, "inc").add_conditional_edges("inc", lambda s: "inc" if s["n"] < 5 else END)
    store = SqliteCheckpointer(db)
    app = graph.compile(checkpointer=store)
    app.invoke({"n": 0}, thread_id="warm")  # the caller's thread has used the connections
    other = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")
    release = threading.Timer(0.3, lambda: other.execute("COMMIT"))
    release.start()
    try:
        assert app.invoke({"n": 0}, thread_id="t") == {"n": 5}
        assert [h.step for h in app.get_state_history("t")] == [5, 4, 3, 2, 1, 0]  # every step stored
    finally:
        release.join()
        other.close()
        store.close()


def _file_bytes(db: Path) -> int:
    return sum(p.stat().st_size for p in (db, db.with_name(db.name + "-wal")) if p.exists())


def test_vacuum_gives_the_space_of_pruned_checkpoints_back_and_keeps_what_is_kept(db: Path) -> None:
    saver = SqliteCheckpointer(db)
    try:
        parent = None
        for i in range(200):
            cw = make("t", parent, {"blob": f"{i}:" + "x" * 3000})
            saver.commit(checkpoints=[cw])
            parent = cw.checkpoint
        head = saver.get("t")
        assert saver.prune("t", keep_last=2) == 198
        pruned = _file_bytes(db)
        saver.vacuum()
        vacuumed = _file_bytes(db)
        assert vacuumed < pruned / 4, (pruned, vacuumed)
        assert saver.get("t") == head  # nothing kept was touched
        assert [cp.step for cp in saver.history("t")] == [199, 198]
        saver.commit(checkpoints=[make("t", head, {"blob": "after"})])  # and the store goes on
        assert saver.get("t") is not None and saver.get("t").values["blob"] == "after"  # type: ignore[union-attr]
    finally:
        saver.close()


def test_a_commit_under_a_current_lease_builds_on_its_cached_parent_without_looking_it_up(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A run's commit whose lease the transaction found current trusts the cached parent (a
    delete or a prune back to a checkpoint would have revoked the lease); a one-off write and
    a subgraph's commit (another namespace's lease) still look it up."""
    store = _Traced(tmp_path, request)
    conn, core, commit, parent_lookups = store.conn, store.core, store.commit, store.parent_lookups

    lease = _transaction(conn, lambda cur: core.threads.take(cur, ("", "t"), "run", 30.0, time.time()))
    run_fence = Fence(owner="run", token=lease.token)
    root = make("t", None, {"n": 0})
    assert commit(root, run_fence) is None
    child = make("t", root.checkpoint, {"n": 1})
    assert commit(child, run_fence) is None and parent_lookups() == 0
    sub_root = make("t", None, {"n": 0}, namespace="sub")
    sub_fence = Fence(owner="run", token=lease.token, lease_namespace="")
    assert commit(sub_root, sub_fence) is None
    assert commit(make("t", sub_root.checkpoint, {"n": 1}, namespace="sub"), sub_fence) is None
    assert parent_lookups() == 1


def test_a_run_whose_thread_was_pruned_back_under_it_writes_nothing_more(db: Path) -> None:
    """Another process prunes the thread back while a run holds its lease: the run's next
    commit (on a cached parent that is gone) is refused as a lost lease, leaving no deltas on
    nothing, and the thread reads back as pruned."""

    async def go() -> None:
        a, b = SqliteCheckpointer(db), SqliteCheckpointer(db)
        lease = await a.atake_lease("t", "run")
        fence = Fence(owner="run", token=lease.token)
        root = make("t", None, {"n": 0})
        await a.acommit(checkpoints=[root], fence=fence)
        child = make("t", root.checkpoint, {"n": 1})
        await a.acommit(checkpoints=[child], fence=fence)  # a's cache: child, the head
        assert await b.aprune("t", newer_than=root.checkpoint.id) == 1
        with pytest.raises(LeaseLostError):
            await a.acommit(checkpoints=[make("t", child.checkpoint, {"n": 2})], fence=fence)
        for cp in (a, b):
            same(await cp.aget("t"), root.checkpoint)
            assert [c.id for c in await cp.ahistory("t")] == [root.checkpoint.id]
        await a.aclose()
        await b.aclose()

    run(go())
