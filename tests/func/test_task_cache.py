"""``@task(cache_policy=...)``: a task call whose arguments are kept in the run's cache
returns the kept result without running, from a sync or an async entrypoint and from a
graph's node, in the process's memory or in the checkpointer's database (a new process's
view of it included); LangGraph's own example of its functional cache, ported."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from plait import (
    END,
    START,
    Cache,
    CachePolicy,
    Checkpointer,
    Graph,
    MemoryCache,
    StateSchema,
    entrypoint,
    task,
)


def test_langgraphs_example_a_kept_call_does_not_run() -> None:
    """LangGraph's docs: ``slow_add`` with ``CachePolicy(ttl=120)`` under an
    ``InMemoryCache``; the second run of the same input reuses the first result."""
    calls: list[int] = []

    @task(cache_policy=CachePolicy(ttl=120))
    def slow_add(x: int) -> int:
        calls.append(x)
        return x * 2

    @entrypoint(cache=MemoryCache())
    def main(inputs: dict[str, int]) -> dict[str, int]:
        return {"result": slow_add(inputs["x"]).result()}

    assert main.invoke({"x": 5}) == {"result": 10}
    assert main.invoke({"x": 5}) == {"result": 10}
    assert main.invoke({"x": 6}) == {"result": 12}
    assert calls == [5, 6]


def test_async_tasks_key_by_their_arguments_and_key_func() -> None:
    calls: list[str] = []

    @task(cache_policy=CachePolicy(key_func=lambda q, *, lang="en": q.lower()))
    async def search(q: str, *, lang: str = "en") -> str:
        calls.append(q)
        return f"results for {q.lower()}"

    @task(cache_policy=CachePolicy())
    async def shout(text: str) -> str:
        calls.append(f"shout {text}")
        return text.upper()

    @entrypoint(cache=MemoryCache())
    async def main(q: str) -> list[str]:
        found = await search(q)
        return [found, await shout(found)]

    async def both() -> tuple[Any, Any]:
        return await main.ainvoke("Cats"), await main.ainvoke("CATS")

    first, second = asyncio.run(both())
    assert first == second == ["results for cats", "RESULTS FOR CATS"]
    assert calls == ["Cats", "shout results for cats"]


def test_without_a_cache_the_policy_is_ignored_and_a_task_without_a_policy_always_runs() -> None:
    calls: list[str] = []

    @task(cache_policy=CachePolicy())
    def kept(x: str) -> str:
        calls.append(f"kept {x}")
        return x

    @task
    def plain(x: str) -> str:
        calls.append(f"plain {x}")
        return x

    @entrypoint()
    def uncached(x: str) -> str:
        return kept(x).result() + plain(x).result()

    @entrypoint(cache=MemoryCache())
    def cached(x: str) -> str:
        return kept(x).result() + plain(x).result()

    uncached.invoke("a")
    uncached.invoke("a")
    cached.invoke("b")
    cached.invoke("b")
    assert calls == ["kept a", "plain a", "kept a", "plain a", "kept b", "plain b", "plain b"]


def test_the_ttl_runs_by_the_caches_clock() -> None:
    now = [1000.0]
    calls: list[int] = []

    @task(cache_policy=CachePolicy(ttl=60))
    def double(x: int) -> int:
        calls.append(x)
        return 2 * x

    @entrypoint(cache=MemoryCache(clock=lambda: now[0]))
    def main(x: int) -> int:
        return int(double(x).result())

    main.invoke(1)
    now[0] += 59
    main.invoke(1)
    now[0] += 2
    main.invoke(1)
    assert calls == [1, 1]


def test_the_checkpointers_cache_keeps_results_across_checkpointers(
    make_saver: Callable[..., Checkpointer],
) -> None:
    """On SQLite and PostgreSQL the entries are rows of the store's database: a second
    checkpointer over it (another process's view) finds them; tasks called from a graph's
    node are cached as well."""
    calls: list[str] = []

    @task(cache_policy=CachePolicy())
    def fetch(url: str) -> str:
        calls.append(url)
        return f"<page {url}>"

    def read(state: Any) -> dict[str, Any]:
        return {"page": fetch(state["url"]).result()}

    schema = StateSchema.builder().add_lww("url").add_lww("page").build()
    g = Graph(schema).add_node("read", read).add_edge(START, "read").add_edge("read", END)
    saver = make_saver()
    assert g.compile(saver, cache=True).invoke({"url": "a"}, thread_id="t1")["page"] == "<page a>"
    again = make_saver() if saver.capabilities.kind in ("sqlite", "postgres") else saver
    assert g.compile(again, cache=Cache(again)).invoke({"url": "a"}, thread_id="t2")["page"] == "<page a>"
    assert calls == ["a"]


def test_a_result_that_is_not_json_fails_the_call_and_nothing_is_kept() -> None:
    @task(cache_policy=CachePolicy())
    def opaque(x: int) -> Any:
        return {1, 2}

    @entrypoint(cache=MemoryCache())
    def main(x: int) -> Any:
        return opaque(x).result()

    with pytest.raises(Exception, match="JSON"):
        main.invoke(1)
