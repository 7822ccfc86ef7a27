"""A traced entrypoint's task calls are spans under the attempt of the task that calls them,
as ``ctx.once`` effects are (``plait.once``, named by the task); a replayed call has none."""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from plait import Command, MemoryCheckpointer, entrypoint, interrupt, task

from ._tree import Tree


def test_each_task_call_that_runs_is_a_span_under_its_entrypoints_attempt(exporter: InMemorySpanExporter) -> None:
    @task
    def fetch(x: int) -> int:
        return x

    @task
    async def score(x: int) -> int:
        return x * 2

    @entrypoint(checkpointer=MemoryCheckpointer())
    def flow(_: Any) -> list[Any]:
        got = [fetch(1).result(), score(2).result()]
        return [*got, interrupt("ok?")]

    flow.invoke({}, thread_id="t")
    tree = Tree(exporter.get_finished_spans())
    calls = tree.named("plait.once")
    assert sorted(str(c.attributes["plait.once"]) for c in calls if c.attributes) == ["fetch", "score"]
    for call in calls:
        assert tree.parent(call).name == "plait.task flow"
    exporter.clear()
    assert flow.invoke(Command(resume="yes"), thread_id="t") == [1, 4, "yes"]
    assert Tree(exporter.get_finished_spans()).named("plait.once") == [], "replayed calls run nothing"
