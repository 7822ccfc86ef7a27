"""Lease renewal: one thread renews the leases of every run in the process."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

from plait import START, AppendList, Graph, MemoryCheckpointer, SqliteCheckpointer, StateSchema
from plait.errors import ThreadBusyError


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
            await saver.acquire_lease(thread, "intruder")
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
