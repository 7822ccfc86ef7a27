"""Fenced commits in the engine: a run that lost its thread cannot commit, and one-off writes
(update_state, fork) need no lease of their own yet lose nothing to a concurrent write."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from plait import (
    END,
    START,
    AppendList,
    CheckpointNotFoundError,
    CompiledGraph,
    ConcurrentUpdateError,
    FileCheckpointer,
    Graph,
    LeaseLostError,
    MemoryCheckpointer,
    SqliteCheckpointer,
    StateSchema,
    ThreadBusyError,
)
from plait._codec import canonical
from plait.checkpoint.base import Checkpointer
from plait.checkpoint.model import Checkpoint, Fence, PendingWrite, WritesBatch
from plait.testing import ManualClock

from ._intruder import try_to_take_lease


def schema() -> StateSchema:
    return StateSchema.builder().add("log", AppendList()).build()


Steal = Callable[[], None]
"""Hands the thread "t" to another owner behind the run's back, as a worker that found the
run's lease expired would: the lease clock jumps past the lease's life and an intruder takes
the thread (a new generation). The run's renewer (every 10 s at the default ttl) has not
noticed."""


def _stealer(saver: Checkpointer, clock: ManualClock) -> Steal:
    def steal() -> None:
        clock.advance(saver.lease_ttl + 1)
        assert try_to_take_lease(saver, "t") == "taken"

    return steal


def _memory(tmp_path: Path) -> tuple[Checkpointer, Steal]:
    clock = ManualClock()
    saver = MemoryCheckpointer(clock=clock)
    return saver, _stealer(saver, clock)


def _sqlite(tmp_path: Path) -> tuple[Checkpointer, Steal]:
    clock = ManualClock()
    saver = SqliteCheckpointer(tmp_path / "fence.db", clock=clock)
    return saver, _stealer(saver, clock)


def _file(tmp_path: Path) -> tuple[Checkpointer, Steal]:
    clock = ManualClock()
    saver = FileCheckpointer(tmp_path / "fence", clock=clock)
    return saver, _stealer(saver, clock)


def _postgres(request: pytest.FixtureRequest) -> tuple[Checkpointer, Steal]:
    from plait import PostgresCheckpointer

    dsn: str = request.getfixturevalue("postgres_dsn")
    schema: str = request.getfixturevalue("postgres_schema")
    clock = ManualClock()
    saver = PostgresCheckpointer(dsn, schema=schema, clock=clock)
    saver.migrate()
    return saver, _stealer(saver, clock)


BACKENDS = {"memory": _memory, "sqlite": _sqlite, "file": _file}


@pytest.fixture(params=[*BACKENDS, pytest.param("postgres", marks=pytest.mark.postgres)])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Checkpointer, Steal]]:
    saver, steal = _postgres(request) if request.param == "postgres" else BACKENDS[request.param](tmp_path)
    try:
        yield saver, steal
    finally:
        asyncio.run(saver.aclose())


@pytest.mark.parametrize("durability", ["sync", "async"])
def test_a_run_whose_lease_was_taken_over_cannot_commit_its_next_step(
    backend: tuple[Checkpointer, Steal], durability: Any
) -> None:
    saver, steal = backend
    calls = {"after": 0}
    stolen_now = asyncio.Event()

    async def stolen(state: Any) -> Any:
        steal()  # and finish at once: the renewer has no chance to notice
        stolen_now.set()
        return {"log": ["stolen"]}

    async def sibling(state: Any) -> Any:
        await stolen_now.wait()  # finishes after the steal too: its result must not be saved
        return {"log": ["sibling"]}

    def after(state: Any) -> Any:
        calls["after"] += 1
        return {"log": ["after"]}

    g = Graph(schema()).add_node("stolen", stolen).add_node("sibling", sibling).add_node("after", after)
    g.add_edge(START, "stolen").add_edge(START, "sibling").add_edge("stolen", "after")
    app = g.compile(saver)
    with pytest.raises(LeaseLostError) as info:
        app.invoke({}, thread_id="t", durability=durability)
    assert (info.value.thread_id, info.value.taken_by) == ("t", "intruder")
    if durability == "sync":  # async lets the next step run before the refusal comes back
        assert calls["after"] == 0
    # In async durability the input checkpoint may still be queued at the steal, and share
    # the refused commit; either way nothing from the stolen step on is stored.
    steps = [h.step for h in app.get_state_history("t")]
    assert steps == [0] or (durability == "async" and steps == []), "nothing after the stolen point is stored"
    head = asyncio.run(saver.aget("t"))
    assert head is None or head.pending_writes == (), "no result of the stolen step is stored"
    with pytest.raises(ThreadBusyError):  # the intruder still holds the thread
        asyncio.run(saver.atake_lease("t", "someone else"))


def test_a_run_commits_with_its_lease_owner_as_fence() -> None:
    seen: list[Fence | None] = []
    holders: list[tuple[str | None, int]] = []

    class Spy(MemoryCheckpointer):
        async def acommit(
            self,
            *,
            checkpoints: Any = (),
            writes: Any = (),
            fence: Fence | None = None,
            memory: Any = (),
        ) -> None:
            seen.append(fence)
            await super().acommit(checkpoints=checkpoints, writes=writes, fence=fence, memory=memory)

    saver = Spy()

    def a(state: Any) -> Any:
        row = saver._rows[("", "t")]
        holders.append((row.owner, row.gen))
        return {"log": ["a"]}

    Graph(schema()).add_node("a", a).add_edge(START, "a").compile(saver).invoke({}, thread_id="t")
    assert len(seen) >= 2 and all(f is not None and (f.owner, f.token) == holders[0] for f in seen)
    assert seen[-1] is not None and seen[-1].release and seen[-1].status == "idle"


# -- update_state and fork without leases ---------------------------------------------------


class _BothReadFirst(MemoryCheckpointer):
    """The first ``readers`` reads of a head wait for each other, so concurrent updates all
    build on the same head and all but one must find it moved when they commit."""

    def __init__(self) -> None:
        super().__init__()
        self._readers = 0
        self._arrived = 0
        self._all_read = asyncio.Event()
        self.refused = 0

    def arm(self, readers: int) -> None:
        """Make the next ``readers`` reads wait for each other."""
        self._readers, self._arrived, self._all_read = readers, 0, asyncio.Event()

    async def aget(self, thread_id: str, checkpoint_id: str | None = None, *, namespace: str = "") -> Checkpoint | None:
        got = await super().aget(thread_id, checkpoint_id, namespace=namespace)
        if self._arrived < self._readers:
            self._arrived += 1
            if self._arrived == self._readers:
                self._all_read.set()
            await self._all_read.wait()
        return got

    async def acommit(
        self,
        *,
        checkpoints: Any = (),
        writes: Any = (),
        fence: Fence | None = None,
        memory: Any = (),
    ) -> None:
        try:
            await super().acommit(checkpoints=checkpoints, writes=writes, fence=fence, memory=memory)
        except ConcurrentUpdateError:
            self.refused += 1
            raise


def _counter(saver: Checkpointer) -> CompiledGraph:
    return Graph(schema()).add_node("a", lambda s: {"log": ["a"]}).add_edge(START, "a").compile(saver)


def _sources(app: CompiledGraph, thread: str) -> list[str]:
    return [h.metadata["source"] for h in app.get_state_history(thread)]


def test_concurrent_updates_on_one_thread_all_land_in_the_lineage() -> None:
    saver = _BothReadFirst()
    app = _counter(saver)

    async def main() -> None:
        await app.ainvoke({}, thread_id="t")
        saver.arm(3)
        await asyncio.gather(*(app.aupdate_state("t", {"log": [f"u{i}"]}) for i in range(3)))

    asyncio.run(main())
    assert saver.refused >= 2, "the updates did collide (the test exercises the retry)"
    log = app.get_state("t").values["log"]
    assert log[0] == "a" and sorted(log[1:]) == ["u0", "u1", "u2"]
    assert _sources(app, "t")[:3] == ["update", "update", "update"]


def test_concurrent_updates_from_many_os_threads_all_land(backend: tuple[Checkpointer, Steal]) -> None:
    saver = backend[0]
    app = _counter(saver)
    app.invoke({}, thread_id="t")
    errors: list[BaseException] = []

    def update(i: int) -> None:
        try:
            for j in range(3):
                app.update_state("t", {"log": [f"u{i}.{j}"]})
        except BaseException as exc:
            errors.append(exc)

    workers = [threading.Thread(target=update, args=(i,)) for i in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert errors == []
    log = app.get_state("t").values["log"]
    assert log[0] == "a" and sorted(log[1:]) == sorted(f"u{i}.{j}" for i in range(2) for j in range(3))
    assert _sources(app, "t")[:6] == ["update"] * 6


def test_an_update_that_keeps_losing_the_race_gives_up_with_concurrent_update_error() -> None:
    class AlwaysMoved(MemoryCheckpointer):
        async def acommit(
            self,
            *,
            checkpoints: Any = (),
            writes: Any = (),
            fence: Fence | None = None,
            memory: Any = (),
        ) -> None:
            if fence is not None and fence.owner.startswith("update:"):
                raise ConcurrentUpdateError(checkpoints[0].checkpoint.thread_id, "x", "y")
            await super().acommit(checkpoints=checkpoints, writes=writes, fence=fence, memory=memory)

    app = _counter(AlwaysMoved())
    app.invoke({}, thread_id="t")
    with pytest.raises(ConcurrentUpdateError, match="changed while this write was prepared"):
        app.update_state("t", {"log": ["never"]})
    assert app.get_state("t").values["log"] == ["a"]


def test_an_update_takes_no_lease() -> None:
    saver = MemoryCheckpointer()
    app = _counter(saver)
    app.invoke({}, thread_id="t")
    token = saver._rows[("", "t")].gen
    app.update_state("t", {"log": ["u"]})
    assert saver._rows[("", "t")].gen == token and not saver._rows[("", "t")].held


def test_a_fork_into_an_existing_thread_is_refused_and_stores_nothing() -> None:
    app = _counter(MemoryCheckpointer())
    app.invoke({}, thread_id="src")
    app.invoke({}, thread_id="taken")
    before = [h.checkpoint_id for h in app.get_state_history("taken")]
    with pytest.raises(ConcurrentUpdateError) as info:
        app.fork("src", "taken")
    assert info.value.thread_id == "taken" and info.value.expected is None and info.value.found == before[0]
    assert [h.checkpoint_id for h in app.get_state_history("taken")] == before
    app.fork("src", "fresh")
    assert app.get_state("fresh").values["log"] == ["a"]


def test_a_fork_into_a_thread_a_run_holds_is_thread_busy() -> None:
    saver = MemoryCheckpointer()
    app = _counter(saver)
    app.invoke({}, thread_id="src")
    asyncio.run(saver.atake_lease("busy", "a run"))
    with pytest.raises(ThreadBusyError):
        app.fork("src", "busy")
    assert app.get_state_history("busy") == []


def test_a_fenced_commit_of_writes_only_is_refused_like_one_with_checkpoints() -> None:
    saver = MemoryCheckpointer()
    app = _counter(saver)
    app.invoke({}, thread_id="t")
    head = asyncio.run(saver.aget("t"))
    assert head is not None
    lease = asyncio.run(saver.atake_lease("t", "A"))
    batch = WritesBatch(thread_id="t", checkpoint_id=head.id, writes=())
    with pytest.raises(ThreadBusyError):
        asyncio.run(saver.acommit(writes=[batch], fence=Fence(owner="B")))
    with pytest.raises(ValueError, match="expect_head"):
        asyncio.run(saver.acommit(writes=[batch], fence=Fence(owner="A", token=lease.token, expect_head=None)))
    asyncio.run(saver.acommit(writes=[batch], fence=Fence(owner="A", token=lease.token)))
    with pytest.raises(LeaseLostError):
        asyncio.run(saver.acommit(writes=[batch], fence=Fence(owner="A", token=lease.token - 1)))


# -- updates on the head this process remembers (Checkpointer.known_head) --------------------


@pytest.fixture(params=["sqlite", "file", pytest.param("postgres", marks=pytest.mark.postgres)])
def twins(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Checkpointer, Checkpointer]]:
    """Two checkpointers on one store, as two processes would open it (memory has no such)."""
    from plait import PostgresCheckpointer

    saver = _postgres(request)[0] if request.param == "postgres" else BACKENDS[request.param](tmp_path)[0]
    if isinstance(saver, SqliteCheckpointer):
        other: Checkpointer = SqliteCheckpointer(tmp_path / "fence.db")
    elif isinstance(saver, FileCheckpointer):
        other = FileCheckpointer(tmp_path / "fence")
    else:
        assert isinstance(saver, PostgresCheckpointer)
        other = PostgresCheckpointer(request.getfixturevalue("postgres_dsn"), schema=saver.schema)
    try:
        yield saver, other
    finally:
        asyncio.run(saver.aclose())
        asyncio.run(other.aclose())


class _Reads:
    """Counts a checkpointer's ``get`` calls (the reads an update makes), or those of
    ``method`` (``aget_for_write``: the reads of a past checkpoint it builds on)."""

    def __init__(self, saver: Checkpointer, method: str = "aget") -> None:
        self.count = 0
        original = getattr(saver, method)

        async def counted(*args: Any, **kwargs: Any) -> Checkpoint | None:
            self.count += 1
            result: Checkpoint | None = await original(*args, **kwargs)
            return result

        setattr(saver, method, counted)


def _ends(saver: Checkpointer) -> CompiledGraph:
    """``a`` then the end: an update may count as ``a``'s (its successors are known)."""
    return (
        Graph(schema()).add_node("a", lambda s: {"log": ["a"]}).add_edge(START, "a").add_edge("a", END).compile(saver)
    )


def _remembers(saver: Checkpointer) -> bool:
    return isinstance(saver, SqliteCheckpointer) or type(saver).__name__ == "PostgresCheckpointer"


def test_updates_on_the_head_this_process_wrote_read_nothing(backend: tuple[Checkpointer, Steal]) -> None:
    saver = backend[0]
    app = _ends(saver)
    app.invoke({}, thread_id="t")
    reads = _Reads(saver)
    app.bulk_update_state("t", [{"log": ["u1"]}, {"log": ["u2"]}])
    app.update_state("t", {"log": ["u3"]}, as_node="a")
    assert reads.count == (0 if _remembers(saver) else 3)
    state = app.get_state("t")
    assert state.values["log"] == ["a", "u1", "u2", "u3"]
    assert _sources(app, "t")[:3] == ["update"] * 3
    known = saver.known_head("t")
    if _remembers(saver):
        head = asyncio.run(saver.aget("t"))
        assert known is not None and head is not None
        for field in Checkpoint.__slots__:  # the record is what a read returns, field by field
            if field == "values":
                assert canonical(dict(known.values)) == canonical(dict(head.values))
            else:
                assert getattr(known, field) == getattr(head, field), field
    else:
        assert known is None


def test_an_update_on_a_remembered_head_keeps_writes_another_process_saved_on_it(
    twins: tuple[Checkpointer, Checkpointer],
) -> None:
    """A run in another process saved a task result on the head (and died): the head this
    process remembers does not have it, so the update must not land on it blind."""
    saver, other = twins
    app = _counter(saver)
    app.invoke({}, thread_id="t")
    head = app.get_state("t")
    assert (saver.known_head("t") is not None) == _remembers(saver)
    saved = (PendingWrite(task_id="x", kind="effect", key="k", value=1),)
    asyncio.run(other.acommit(writes=[WritesBatch(thread_id="t", checkpoint_id=head.checkpoint_id, writes=saved)]))
    reads = _Reads(saver)
    cid = app.update_state("t", {"log": ["u"]})
    assert reads.count == 1, "the remembered head is refused (it has writes now), then the head is read"
    stored = asyncio.run(saver.aget("t"))
    assert stored is not None and stored.id == cid and stored.parent_id == head.checkpoint_id
    assert [(w.task_id, w.kind, w.key, w.value) for w in stored.pending_writes] == [("x", "effect", "k", 1)]
    assert stored.values["log"] == ["a", "u"]
    assert saver.known_head("t") is None, "a head with pending writes is not offered"


def test_an_update_on_a_remembered_head_lands_after_another_process_moved_it(
    twins: tuple[Checkpointer, Checkpointer],
) -> None:
    saver, other = twins
    app, elsewhere = _counter(saver), _counter(other)
    app.invoke({}, thread_id="t")
    elsewhere.update_state("t", {"log": ["there"]})
    app.update_state("t", {"log": ["here"]})
    assert app.get_state("t").values["log"] == ["a", "there", "here"]
    elsewhere.delete_thread("t")
    app.update_state("t", {"log": ["again"]})  # the remembered head is gone: a new thread starts
    state = app.get_state("t")
    assert state.values["log"] == ["again"] and state.parent_id is None


def test_a_process_forgets_the_head_it_wrote_once_writes_are_saved_on_it(tmp_path: Path) -> None:
    saver = SqliteCheckpointer(tmp_path / "k.db")
    app = _ends(saver)
    app.invoke({}, thread_id="t")
    head = asyncio.run(saver.aget("t"))
    assert head is not None and saver.known_head("t") is not None
    saved = (PendingWrite(task_id="x", kind="effect", key="k", value=1),)
    asyncio.run(saver.acommit(writes=[WritesBatch(thread_id="t", checkpoint_id=head.id, writes=saved)]))
    assert saver.known_head("t") is None
    app.update_state("t", {"log": ["u"]})  # carries the write: its checkpoint is not offered either
    assert saver.known_head("t") is None
    app.update_state("t", {"log": ["v"]}, as_node="a")  # as a node: the writes are not carried
    known = saver.known_head("t")
    assert known is not None and known.values["log"] == ["a", "u", "v"]
    assert saver.known_head("other") is None
    asyncio.run(saver.aclose())


def test_a_migration_whose_lease_was_taken_over_commits_nothing(backend: tuple[Checkpointer, Steal]) -> None:
    """The migrated checkpoint is the run's first commit, fenced by its lease like any step."""
    from plait import Command, interrupt

    saver, steal = backend

    def graph() -> Graph:
        g = Graph(schema()).add_node("ask", lambda s: {"log": [interrupt("ok?")]})
        return g.add_edge(START, "ask").add_edge("ask", END)

    graph().compile(saver).invoke({}, thread_id="t")
    before = [s.checkpoint_id for s in graph().compile(saver).get_state_history("t")]

    def migration(values: dict[str, Any]) -> dict[str, Any]:
        steal()  # another owner takes the thread while the migration runs
        return {"log": [*values.get("log", []), "migrated"]}

    app = graph().compile(saver, version=2, migrations={1: migration})
    with pytest.raises(LeaseLostError):
        app.invoke(Command(resume="yes"), thread_id="t")
    assert [s.checkpoint_id for s in app.get_state_history("t")] == before


# -- updates of a past checkpoint this process remembers (Checkpointer.known_checkpoint) ----


def _remembers_past(saver: Checkpointer) -> bool:
    return _remembers(saver)


def test_updates_of_one_past_checkpoint_read_it_once(twins: tuple[Checkpointer, Checkpointer]) -> None:
    saver = twins[0]
    app = _counter(saver)
    app.invoke({"log": ["in"]}, thread_id="t")
    past = app.get_state_history("t")[-1]  # the input's checkpoint: "a" next
    reads = _Reads(saver, "aget_for_write")
    made = [app.update_state("t", {"log": [f"u{i}"]}, checkpoint_id=past.checkpoint_id) for i in range(3)]
    assert reads.count == (1 if _remembers_past(saver) else 3)
    for i, cid in enumerate(made):  # each a branch of its own from the past checkpoint, as a read gives it
        state = app.get_state("t", cid)
        assert state.parent_id == past.checkpoint_id and state.values["log"] == ["in", f"u{i}"]
        assert state.next == ("a",)
    assert app.invoke(None, thread_id="t")["log"] == ["in", "u2", "a"]


def test_an_update_of_a_remembered_past_checkpoint_keeps_writes_another_process_saved_on_it(
    twins: tuple[Checkpointer, Checkpointer],
) -> None:
    """A run in another process branched from the past checkpoint and saved a task result
    on it (then failed): the past checkpoint this process remembers does not have it, so
    the next update of it must not land without it."""
    saver, other = twins
    app = _counter(saver)
    app.invoke({"log": ["in"]}, thread_id="t")
    past = app.get_state_history("t")[-1].checkpoint_id
    app.update_state("t", {"log": ["u1"]}, checkpoint_id=past)
    saved = (PendingWrite(task_id="x", kind="effect", key="k", value=1),)
    asyncio.run(other.acommit(writes=[WritesBatch(thread_id="t", checkpoint_id=past, writes=saved)]))
    reads = _Reads(saver, "aget_for_write")
    cid = app.update_state("t", {"log": ["u2"]}, checkpoint_id=past)
    assert reads.count == 1, "the remembered checkpoint is refused (it has writes now), then it is read"
    stored = asyncio.run(saver.aget("t", cid))
    assert stored is not None and stored.parent_id == past and stored.values["log"] == ["in", "u2"]
    assert [(w.task_id, w.kind, w.key, w.value) for w in stored.pending_writes] == [("x", "effect", "k", 1)]
    assert saver.known_checkpoint("t", past) is None, "a checkpoint with pending writes is not offered"
    elsewhere = _counter(other)
    elsewhere.delete_thread("t")
    with pytest.raises(CheckpointNotFoundError):  # remembered no more: read, and found gone
        app.update_state("t", {"log": ["u3"]}, checkpoint_id=past)


def test_an_update_of_a_remembered_past_checkpoint_another_process_pruned_away_is_refused(
    twins: tuple[Checkpointer, Checkpointer],
) -> None:
    """The head stays, the past checkpoint this process remembers goes (a prune in another
    process): the update built on it is refused by the store, not stored on a gone parent;
    the past checkpoint is then read, and found gone."""
    saver, other = twins
    app = _counter(saver)
    app.invoke({"log": ["in"]}, thread_id="t")
    past = app.get_state_history("t")[-1].checkpoint_id
    head = app.update_state("t", {"log": ["u1"]}, checkpoint_id=past)
    assert (saver.known_checkpoint("t", past) is not None) == _remembers_past(saver)
    assert asyncio.run(other.aprune("t", keep_last=1, branches=False)) > 0
    assert asyncio.run(other.aget("t", past)) is None
    reads = _Reads(saver, "aget_for_write")
    with pytest.raises(CheckpointNotFoundError):
        app.update_state("t", {"log": ["u2"]}, checkpoint_id=past)
    assert reads.count == 1, "refused on the remembered checkpoint, then read and found gone"
    assert [s.checkpoint_id for s in app.get_state_history("t")] == [head], "the refused update stored nothing"
