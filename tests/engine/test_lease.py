"""Leases of runs: one thread renews the leases of every run in the process; a run takes its
lease with its first read and gives it back with its last commit where the backend can."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from plait import END, START, AppendList, Graph, MemoryCheckpointer, NodeError, SqliteCheckpointer, StateSchema
from plait._sync import run_sync
from plait.errors import CheckpointCorruptError, CheckpointNotFoundError, ThreadBusyError


def renewal_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "plait-lease-renewal"]


def test_concurrent_runs_all_keep_their_leases_with_one_renewal_thread(tmp_path: Path) -> None:
    saver = SqliteCheckpointer(tmp_path / "leases.db")
    saver.lease_ttl = 0.15
    schema = StateSchema.builder().add("log", AppendList()).build()
    seen: dict[str, str] = {}

    async def slow(state: Any) -> Any:
        await asyncio.sleep(0.45)  # three lease lives: each run must be renewed meanwhile
        return {"log": ["slow"]}

    app = Graph(schema).add_node("slow", slow).add_edge(START, "slow").compile(saver)

    async def intruder(thread: str) -> None:
        await asyncio.sleep(0.3)  # past the first lease's life: only a renewal keeps it
        try:
            await saver.atake_lease(thread, "intruder")
        except ThreadBusyError as busy:
            seen[thread] = busy.owner
        else:
            seen[thread] = "intruder"

    async def main() -> list[Any]:
        threads = [f"t{i}" for i in range(12)]
        runs = [app.ainvoke({}, thread_id=t) for t in threads]
        return list(await asyncio.gather(*runs, *(intruder(t) for t in threads)))

    try:
        results = asyncio.run(main())
    finally:
        saver.close()
    assert [r["log"] for r in results[:12]] == [["slow"]] * 12
    assert sorted(seen) == sorted(f"t{i}" for i in range(12))
    assert "intruder" not in seen.values(), "every run's lease was still held by its run"
    assert len(renewal_threads()) == 1, "one renewal thread for all runs, not one per run"


def test_a_run_with_a_short_lease_is_renewed_while_a_long_lease_sleeps_in_the_queue() -> None:
    """The renewal thread sleeps until its earliest renewal and is woken only for an
    earlier one: a short lease added behind a long one must still be renewed in time."""
    long_saver, short_saver = MemoryCheckpointer(), MemoryCheckpointer()
    long_saver.lease_ttl = 30.0  # first renewal due in 10 s
    short_saver.lease_ttl = 0.15  # renewals every 0.05 s
    schema = StateSchema.builder().add("log", AppendList()).build()

    async def slow(state: Any) -> Any:
        await asyncio.sleep(0.45)
        return {"log": ["slow"]}

    graph = Graph(schema).add_node("slow", slow).add_edge(START, "slow")
    long_app, short_app = graph.compile(long_saver), graph.compile(short_saver)
    seen: list[str] = []

    async def later_short_run() -> Any:
        await asyncio.sleep(0.05)  # the long run's renewal is queued first
        return await short_app.ainvoke({}, thread_id="short")

    async def intruder() -> None:
        await asyncio.sleep(0.35)  # past the short lease's first life: only renewals keep it
        try:
            await short_saver.atake_lease("short", "intruder")
        except ThreadBusyError as busy:
            seen.append(busy.owner)
        else:
            seen.append("intruder")

    async def main() -> list[Any]:
        return list(await asyncio.gather(long_app.ainvoke({}, thread_id="long"), later_short_run(), intruder()))

    results = asyncio.run(main())
    assert [r["log"] for r in results[:2]] == [["slow"], ["slow"]]
    assert len(seen) == 1 and seen[0] != "intruder", "the short lease was renewed"


class _SlowRenewals(MemoryCheckpointer):
    """Renewals from the renewal thread take long: one is in flight when the run ends."""

    def __init__(self) -> None:
        super().__init__()
        self.renewal_started = threading.Event()
        self.renewal_done = threading.Event()

    def take_lease(self, thread_id: str, owner: str, *, namespace: str = "", ttl: float | None = None) -> None:
        if threading.current_thread().name != "plait-lease-renewal":
            super().take_lease(thread_id, owner, namespace=namespace, ttl=ttl)
            return
        self.renewal_started.set()
        time.sleep(0.3)
        super().take_lease(thread_id, owner, namespace=namespace, ttl=ttl)
        self.renewal_done.set()


def test_a_renewal_in_flight_when_the_run_ends_does_not_outlive_the_release() -> None:
    saver = _SlowRenewals()
    saver.lease_ttl = 0.6  # renewals every 0.2 s; a re-taken lease would hold for 0.6 s
    schema = StateSchema.builder().add("log", AppendList()).build()

    def waits_for_a_renewal(state: Any) -> Any:
        assert saver.renewal_started.wait(5)
        return {"log": ["done"]}

    app = Graph(schema).add_node("n", waits_for_a_renewal).add_edge(START, "n").compile(saver)
    assert app.invoke({}, thread_id="t")["log"] == ["done"]
    assert saver.renewal_done.wait(5)
    saver.take_lease("t", "next run")  # the finished run's lease is gone: no ThreadBusyError


class _Counting(SqliteCheckpointer):
    """A real SQLite store that counts the lease calls a run makes."""

    def __init__(self, path: Path, *, releases_with_commit: bool = True, broken_read: bool = False) -> None:
        super().__init__(path)
        self.releases_with_commit = releases_with_commit
        self.calls: Counter[str] = Counter()
        if broken_read:  # every read of a checkpoint fails, the one after taking the lease too

            def damaged(*args: Any, **kwargs: Any) -> Any:
                raise CheckpointCorruptError("t", "?", "damaged on purpose")

            self._core.get = damaged  # type: ignore[method-assign]

    async def atake_lease_and_get(self, *args: Any, **kwargs: Any) -> Any:
        self.calls["acquire_lease_and_get"] += 1
        return await super().atake_lease_and_get(*args, **kwargs)

    async def arelease_lease(self, thread_id: str, owner: str, *, namespace: str = "") -> None:
        self.calls["release_lease"] += 1
        await super().arelease_lease(thread_id, owner, namespace=namespace)


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
        run_sync(saver.atake_lease(thread_id, "the next run", ttl=60))
    except ThreadBusyError:
        return False
    run_sync(saver.arelease_lease(thread_id, "the next run"))
    return True


def test_a_sync_run_reads_with_its_lease_and_gives_it_back_with_its_last_commit(tmp_path: Path) -> None:
    saver = _Counting(tmp_path / "plait.db")
    try:
        app = _counter_app(saver)
        assert app.invoke({"n": 0}, thread_id="t", durability="sync") == {"n": 3}
        assert saver.calls == {"acquire_lease_and_get": 1}, "one call to start, none to end"
        assert _lease_is_free(saver, "t")
        assert app.invoke(None, thread_id="t", durability="sync") == {"n": 3}  # resumable: nothing to do
        assert _lease_is_free(saver, "t")
    finally:
        saver.close()


def test_every_durability_mode_gives_the_lease_back_with_the_last_checkpoint(tmp_path: Path) -> None:
    """Where the backend cannot (releases_with_commit False), the run releases after it."""
    for durability in ("sync", "async", "exit"):
        for releases in (True, False):
            saver = _Counting(tmp_path / f"{durability}-{releases}.db", releases_with_commit=releases)
            try:
                assert _counter_app(saver).invoke({"n": 0}, thread_id="t", durability=durability) == {"n": 3}
                assert saver.calls["release_lease"] == (0 if releases else 1), (durability, releases)
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
        assert broken.calls["release_lease"] == 1
        assert _lease_is_free(broken, "t"), "a read that failed after the lease was taken gave it back"
    finally:
        broken.close()
