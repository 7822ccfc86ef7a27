"""Leases of runs: one thread renews the leases of every run in the process; a run takes its
lease with its first read and gives it back with its last commit where the backend can."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from plait import END, START, AppendList, Graph, Lease, MemoryCheckpointer, NodeError, SqliteCheckpointer, StateSchema
from plait._sync import run_sync
from plait.checkpoint import RestStatus
from plait.errors import CheckpointCorruptError, CheckpointNotFoundError, ThreadBusyError
from plait.testing import ManualClock


def renewal_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "plait-lease-renewal"]


class _Renewals:
    """Counts the renewals each thread's lease gets, and lets a test wait for more."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self._cond = threading.Condition()

    def saw(self, thread_id: str) -> None:
        with self._cond:
            self.counts[thread_id] += 1
            self._cond.notify_all()

    def wait_for(self, wanted: dict[str, int], timeout: float = 30.0) -> None:
        with self._cond:
            ok = self._cond.wait_for(lambda: all(self.counts[t] >= n for t, n in wanted.items()), timeout)
        assert ok, f"renewals seen {dict(self.counts)}, waited for {wanted}"


class _CountingSqlite(SqliteCheckpointer):
    def __init__(self, path: Path, renewals: _Renewals, **kwargs: Any) -> None:
        super().__init__(path, **kwargs)
        self.renewals = renewals

    async def arenew_lease(self, lease: Lease, *, ttl: float | None = None) -> Lease:
        renewed = await super().arenew_lease(lease, ttl=ttl)
        self.renewals.saw(lease.thread_id)
        return renewed


class _CountingMemory(MemoryCheckpointer):
    def __init__(self, renewals: _Renewals, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.renewals = renewals

    def renew_lease(self, lease: Lease, *, ttl: float | None = None) -> Lease:
        renewed = super().renew_lease(lease, ttl=ttl)
        self.renewals.saw(lease.thread_id)
        return renewed


def _held_by_its_run(saver: Any, thread_id: str) -> bool:
    try:
        run_sync(saver.atake_lease(thread_id, "intruder"))
    except ThreadBusyError as busy:
        return busy.owner != "intruder"
    return False


def test_concurrent_runs_all_keep_their_leases_with_one_renewal_thread(tmp_path: Path) -> None:
    """Each run's lease outlives its first life only by renewals, all made by one thread. The
    lease clock moves by hand, so no step depends on how fast a loaded machine renews."""
    clock, renewals = ManualClock(), _Renewals()
    saver = _CountingSqlite(tmp_path / "leases.db", renewals, lease_ttl=0.3, clock=clock)
    schema = StateSchema.builder().add("log", AppendList()).build()
    go = asyncio.Event()

    async def slow(state: Any) -> Any:
        await go.wait()
        return {"log": ["slow"]}

    app = Graph(schema).add_node("slow", slow).add_edge(START, "slow").compile(saver)
    threads = [f"t{i}" for i in range(12)]

    async def main() -> list[Any]:
        runs = [asyncio.ensure_future(app.ainvoke({}, thread_id=t)) for t in threads]
        await asyncio.to_thread(renewals.wait_for, dict.fromkeys(threads, 1))
        for _ in range(2):  # twice 0.9 lease lives: past the first life, held only by renewals
            seen = dict(renewals.counts)
            clock.advance(0.27)
            await asyncio.to_thread(renewals.wait_for, {t: seen[t] + 1 for t in threads})
        held = [await asyncio.to_thread(_held_by_its_run, saver, t) for t in threads]
        go.set()
        assert held == [True] * 12, "every run's lease was renewed past its first life"
        return list(await asyncio.gather(*runs))

    try:
        results = asyncio.run(main())
    finally:
        saver.close()
    assert [r["log"] for r in results] == [["slow"]] * 12
    assert len(renewal_threads()) == 1, "one renewal thread for all runs, not one per run"


def test_a_run_with_a_short_lease_is_renewed_while_a_long_lease_sleeps_in_the_queue() -> None:
    """The renewal thread sleeps until its earliest renewal and is woken only for an
    earlier one: a short lease added behind a long one must still be renewed, long before
    the long one's first renewal (10 s away)."""
    renewals = _Renewals()
    long_saver = _CountingMemory(renewals, lease_ttl=30.0)  # first renewal due in 10 s
    short_saver = _CountingMemory(renewals, lease_ttl=0.15, clock=ManualClock())  # every 0.05 s
    schema = StateSchema.builder().add("log", AppendList()).build()
    go = asyncio.Event()

    async def slow(state: Any) -> Any:
        await go.wait()
        return {"log": ["slow"]}

    graph = Graph(schema).add_node("slow", slow).add_edge(START, "slow")
    long_app, short_app = graph.compile(long_saver), graph.compile(short_saver)

    async def main() -> list[Any]:
        long_run = asyncio.ensure_future(long_app.ainvoke({}, thread_id="long"))
        await asyncio.sleep(0)  # the long run's renewal is queued first
        short_run = asyncio.ensure_future(short_app.ainvoke({}, thread_id="short"))
        await asyncio.to_thread(renewals.wait_for, {"short": 3}, 5.0)
        go.set()
        return [await long_run, await short_run]

    results = asyncio.run(main())
    assert [r["log"] for r in results] == [["slow"], ["slow"]]
    assert renewals.counts["long"] == 0, "the long lease was not due"


class _SlowRenewals(MemoryCheckpointer):
    """Renewals from the renewal thread take long: one is in flight when the run ends."""

    def __init__(self) -> None:
        super().__init__(lease_ttl=0.6)  # renewals every 0.2 s
        self.renewal_started = threading.Event()
        self.finish_renewal = threading.Event()
        self.renewal_done = threading.Event()

    def renew_lease(self, lease: Lease, *, ttl: float | None = None) -> Lease:
        self.renewal_started.set()
        assert self.finish_renewal.wait(10)
        try:
            return super().renew_lease(lease, ttl=ttl)
        finally:
            self.renewal_done.set()


def test_a_renewal_in_flight_when_the_run_ends_does_not_outlive_the_release() -> None:
    saver = _SlowRenewals()
    schema = StateSchema.builder().add("log", AppendList()).build()

    def waits_for_a_renewal(state: Any) -> Any:
        assert saver.renewal_started.wait(10)
        threading.Timer(0.05, saver.finish_renewal.set).start()  # the run ends while it is in flight
        return {"log": ["done"]}

    app = Graph(schema).add_node("n", waits_for_a_renewal).add_edge(START, "n").compile(saver)
    assert app.invoke({}, thread_id="t")["log"] == ["done"]
    assert saver.renewal_done.wait(10)
    info = saver.get_thread("t")
    assert info is not None and info.lease is None and info.status == "idle", info
    saver.take_lease("t", "next run")  # the finished run's lease is gone: no ThreadBusyError


class _Counting(SqliteCheckpointer):
    """A real SQLite store that counts the lease calls a run makes."""

    def __init__(self, path: Path, *, broken_read: bool = False) -> None:
        super().__init__(path)
        self.calls: Counter[str] = Counter()
        if broken_read:  # every read of a checkpoint fails, the one after taking the lease too

            def damaged(*args: Any, **kwargs: Any) -> Any:
                raise CheckpointCorruptError("t", "?", "damaged on purpose")

            self._core.read.get = damaged  # type: ignore[method-assign]

    async def atake_lease_and_get(self, *args: Any, **kwargs: Any) -> Any:
        self.calls["take_lease_and_get"] += 1
        return await super().atake_lease_and_get(*args, **kwargs)

    async def arelease_lease(self, lease: Lease, *, status: RestStatus | None = None) -> None:
        self.calls["release_lease"] += 1
        await super().arelease_lease(lease, status=status)


def _counter_app(saver: SqliteCheckpointer, fail_at: int | None = None) -> Any:
    schema = StateSchema.builder().add_lww("n").build()

    def inc(state: Any) -> Any:
        if state["n"] == fail_at:
            raise RuntimeError("failing on purpose")
        return {"n": state["n"] + 1}

    graph = Graph(schema).add_node("inc", inc).add_edge(START, "inc")
    graph.add_conditional_edges("inc", lambda s: "inc" if s["n"] < 3 else END)
    return graph.compile(saver)


def _lease_is_free(saver: SqliteCheckpointer, thread_id: str) -> bool:
    try:
        lease = run_sync(saver.atake_lease(thread_id, "the next run", ttl=60))
    except ThreadBusyError:
        return False
    run_sync(saver.arelease_lease(lease))
    return True


def test_a_sync_run_reads_with_its_lease_and_gives_it_back_with_its_last_commit(tmp_path: Path) -> None:
    saver = _Counting(tmp_path / "plait.db")
    try:
        app = _counter_app(saver)
        assert app.invoke({"n": 0}, thread_id="t", durability="sync") == {"n": 3}
        assert saver.calls == {"take_lease_and_get": 1}, "one call to start, none to end"
        assert _lease_is_free(saver, "t")
        assert app.invoke(None, thread_id="t", durability="sync") == {"n": 3}  # resumable: nothing to do
        assert _lease_is_free(saver, "t")
    finally:
        saver.close()


def test_every_durability_mode_gives_the_lease_back_with_the_last_checkpoint(tmp_path: Path) -> None:
    for durability in ("sync", "async", "exit"):
        saver = _Counting(tmp_path / f"{durability}.db")
        try:
            assert _counter_app(saver).invoke({"n": 0}, thread_id="t", durability=durability) == {"n": 3}
            assert saver.calls["release_lease"] == 0, durability
            assert _lease_is_free(saver, "t")
            assert _counter_app(saver).get_state("t").values == {"n": 3}  # the last checkpoint is stored
        finally:
            saver.close()


def test_a_run_that_fails_or_cannot_start_gives_its_lease_back(tmp_path: Path) -> None:
    saver = _Counting(tmp_path / "plait.db")
    try:
        with pytest.raises(NodeError):
            _counter_app(saver, fail_at=2).invoke({"n": 0}, thread_id="t", durability="sync")
        assert _lease_is_free(saver, "t")
        with pytest.raises(CheckpointNotFoundError):
            _counter_app(saver).invoke(None, thread_id="t", checkpoint_id="no-such-id")
        assert _lease_is_free(saver, "t")
    finally:
        saver.close()
    broken = _Counting(tmp_path / "broken.db", broken_read=True)
    try:
        with pytest.raises(CheckpointCorruptError):
            _counter_app(broken).invoke({"n": 0}, thread_id="t")
        # SQLite reads in the lease's own transaction: the failed read rolled the lease back
        # with it, so nothing was left to give back
        assert broken.calls["release_lease"] == 0
        assert _lease_is_free(broken, "t"), "a read that failed after the lease was taken left no lease"
    finally:
        broken.close()


class _BrokenReadMemory(MemoryCheckpointer):
    """A store that takes leases in one call and reads in another (the protocol's default
    ``atake_lease_and_get``), and whose every read fails."""

    def __init__(self) -> None:
        super().__init__()
        self.released = 0

    async def aget(self, thread_id: str, checkpoint_id: str | None = None, *, namespace: str = "") -> Any:
        raise CheckpointCorruptError(thread_id, "?", "damaged on purpose")

    async def arelease_lease(self, lease: Lease, *, status: RestStatus | None = None) -> None:
        self.released += 1
        await super().arelease_lease(lease, status=status)


def test_a_read_that_fails_after_a_separate_lease_call_gives_the_lease_back() -> None:
    saver = _BrokenReadMemory()
    with pytest.raises(CheckpointCorruptError):
        run_sync(saver.atake_lease_and_get("t", "a run"))
    assert saver.released == 1
    lease = run_sync(saver.atake_lease("t", "the next run"))  # free: not ThreadBusyError
    assert lease.owner == "the next run"


# -- a run whose thread was taken over stops, and repeats no effect ---------------------------


def test_a_run_whose_thread_was_taken_over_runs_no_effect_and_no_further_node() -> None:
    """The lease is checked with the store right before an effect: the run that stalled
    past its lease stops there (LeaseLostError) instead of charging the card again."""
    from plait import LeaseLostError, NodeContext

    from ._intruder import try_to_take_lease

    clock = ManualClock()
    saver = MemoryCheckpointer(clock=clock)
    charged: list[str] = []
    later: list[str] = []

    def pay(state: Any, ctx: NodeContext) -> Any:
        clock.advance(saver.lease_ttl + 1)  # this run stalls past its lease...
        assert try_to_take_lease(saver, "t") == "taken"  # ...and another takes the thread

        def charge() -> str:
            charged.append("card")
            return "charged"

        ctx.once("charge", charge)
        return {"log": ["paid"]}

    def ship(state: Any) -> dict[str, Any]:
        later.append("ship")
        return {}

    schema = StateSchema.builder().add("log", AppendList()).build()
    g = Graph(schema).add_node("pay", pay).add_node("ship", ship)
    app = g.add_edge(START, "pay").add_edge("pay", "ship").compile(saver)
    with pytest.raises(LeaseLostError) as info:
        app.invoke({}, thread_id="t")
    assert info.value.taken_by == "intruder"
    assert charged == [] and later == [], "no effect and no node after the takeover"
    head = saver.get("t")
    assert head is not None and head.step == 0 and head.pending_writes == ()


# -- waiting for a live holder ----------------------------------------------------------------


def test_a_run_asked_to_wait_starts_once_the_holder_gives_the_thread_back() -> None:
    import logging

    saver = MemoryCheckpointer()
    schema = StateSchema.builder().add("log", AppendList()).build()
    app = Graph(schema).add_node("a", lambda s: {"log": ["a"]}).add_edge(START, "a").compile(saver)
    holder = saver.take_lease("t", "another run")
    waiting = threading.Event()

    class Seen(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "waiting for thread" in record.getMessage():
                waiting.set()

    handler = Seen()
    logger = logging.getLogger("plait.run")
    logger.addHandler(handler)
    old_level = logger.level
    logger.setLevel(logging.INFO)
    result: list[Any] = []
    try:
        runner = threading.Thread(target=lambda: result.append(app.invoke({}, thread_id="t", wait=60)))
        runner.start()
        assert waiting.wait(30), "the run did not wait"
        saver.release_lease(holder)
        runner.join(60)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
    assert result == [{"log": ["a"]}]


def test_a_run_that_waited_in_vain_says_who_holds_the_thread() -> None:
    saver = MemoryCheckpointer()
    schema = StateSchema.builder().add("log", AppendList()).build()
    app = Graph(schema).add_node("a", lambda s: {"log": ["a"]}).add_edge(START, "a").compile(saver)
    saver.take_lease("t", "another run")
    with pytest.raises(ThreadBusyError) as info:
        app.invoke({}, thread_id="t", wait=0.2)
    assert info.value.owner == "another run" and info.value.alive is True
    assert "alive on this machine" in str(info.value) and "--wait" in str(info.value)
    with pytest.raises(ValueError, match="wait"):
        app.invoke({}, thread_id="t", wait=-1)


@pytest.mark.parametrize("continued", ["while the taker runs", "after the taker finished"])
def test_a_stalled_run_on_memory_whose_thread_was_taken_over_writes_nothing_more(continued: str) -> None:
    """The memory backend's takeover, with two event loops in one process: run A stalls
    inside a node past its lease (the clock moves on), run B takes the thread over, then A
    goes on while B runs or after B finished. A stops with LeaseLostError, commits nothing,
    runs no effect; B's run is the thread's."""
    from plait import LeaseLostError, NodeContext

    clock = ManualClock()
    saver = MemoryCheckpointer(clock=clock)
    a_stalled, a_go, b_inside, b_go = (threading.Event() for _ in range(4))
    charged: list[str] = []
    first = {"pay": True}

    def pay(state: Any, ctx: NodeContext) -> Any:
        if first["pay"]:  # run A: stalls here, before its effect
            first["pay"] = False
            a_stalled.set()
            assert a_go.wait(30)
        elif continued == "while the taker runs":  # run B: holds the thread while A goes on
            b_inside.set()
            assert b_go.wait(30)

        def charge() -> str:
            charged.append(ctx.task_id)
            return "ok"

        ctx.once("charge", charge)
        return {"log": ["paid"]}

    schema = StateSchema.builder().add("log", AppendList()).build()
    g = Graph(schema).add_node("prep", lambda s: {"log": ["prep"]}).add_node("pay", pay)
    app = g.add_edge(START, "prep").add_edge("prep", "pay").add_edge("pay", END).compile(saver)
    outcome: dict[str, Any] = {}

    def run(name: str, input: Any) -> None:
        try:
            outcome[name] = app.invoke(input, thread_id="t")
        except BaseException as exc:
            outcome[name] = exc

    a = threading.Thread(target=run, args=("a", {}))
    a.start()
    assert a_stalled.wait(30)
    a_token = saver._rows[("", "t")].gen
    clock.advance(saver.lease_ttl + 1)  # A's lease lapsed while it stalled
    b = threading.Thread(target=run, args=("b", None))
    b.start()
    if continued == "while the taker runs":
        assert b_inside.wait(30)
        a_go.set()
        a.join(30)
        b_go.set()
        b.join(30)
    else:
        b.join(30)
        a_go.set()
        a.join(30)
    assert isinstance(outcome["a"], LeaseLostError) and outcome["a"].token == a_token, outcome
    assert outcome["b"] == {"log": ["prep", "paid"]}
    assert len(charged) == 1, f"the card was charged {len(charged)} times"
    history = saver.history("t")
    assert [h.metadata["source"] for h in history] == ["loop", "loop", "input"]
    assert len({h.metadata["run_id"] for h in history[:1]}) == 1
    assert history[0].metadata["run_id"] != history[-1].metadata["run_id"], "the last step is B's"
    info = saver.get_thread("t")
    assert info is not None and info.status == "idle" and info.lease is None
