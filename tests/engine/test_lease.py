"""Lease renewal: one thread renews the leases of every run in the process."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

from plait import START, AppendList, Graph, SqliteCheckpointer, StateSchema
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
