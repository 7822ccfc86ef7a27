"""``max_concurrency=N``: at most N tasks of a super-step run at once, async and sync nodes."""

from __future__ import annotations

import asyncio
import threading
from typing import Annotated, Any, TypedDict

import pytest

from plait import END, START, AppendList, Graph, Send


class State(TypedDict):
    done: Annotated[list[Any], AppendList()]


class Gauge:
    """Counts the tasks running now (under a lock: sync nodes run in worker threads)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running = 0
        self.peak = 0

    def enter(self) -> int:
        with self.lock:
            self.running += 1
            self.peak = max(self.peak, self.running)
            return self.running

    def leave(self) -> None:
        with self.lock:
            self.running -= 1


def fan_out(work: Any) -> Graph:
    g = Graph(State).add_node("split", lambda s: None).add_node("work", work)
    g.add_conditional_edges("split", lambda s: [Send("work", {"i": i}) for i in range(100)])
    return g.add_edge(START, "split").add_edge("work", END)


def async_work(gauge: Gauge, cap: int) -> Any:
    full = asyncio.Event()

    async def work(arg: Any) -> dict[str, Any]:
        if gauge.enter() >= cap:
            full.set()  # the first `cap` tasks wait here until all of them run at once
        await full.wait()
        await asyncio.sleep(0)  # a yield to the loop (no wall clock): an uncapped sibling would start now
        gauge.leave()
        return {"done": [arg["i"]]}

    return work


@pytest.mark.parametrize("cap", [1, 7])
def test_a_100_way_fan_out_never_runs_more_than_max_concurrency(cap: int) -> None:
    gauge = Gauge()
    out = fan_out(async_work(gauge, cap)).compile().invoke({}, max_concurrency=cap)
    assert out["done"] == list(range(100))  # every task ran, in Send order
    assert gauge.peak == cap


def test_without_a_cap_the_fan_out_runs_at_once() -> None:
    gauge = Gauge()
    fan_out(async_work(gauge, 100)).compile().invoke({})
    assert gauge.peak == 100


def test_sync_nodes_are_capped_too() -> None:
    gauge = Gauge()
    together = threading.Barrier(3, timeout=30)  # proves 3 do run at once (a broken barrier fails the node)

    def work(arg: Any) -> dict[str, Any]:
        gauge.enter()
        if arg["i"] < 3:
            together.wait()
        gauge.leave()
        return {"done": [arg["i"]]}

    assert fan_out(work).compile().invoke({}, max_concurrency=3)["done"] == list(range(100))
    assert gauge.peak == 3


def test_max_concurrency_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_concurrency"):
        fan_out(lambda a: None).compile().invoke({}, max_concurrency=0)
