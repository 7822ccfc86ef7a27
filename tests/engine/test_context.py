"""plait.engine.context: the context a task's node gets."""

from __future__ import annotations

from typing import Any

from plait.engine.context import NodeContext, node_context


def test_node_context_makes_what_the_constructor_makes() -> None:
    host: Any = object()
    store: Any = object()
    made = node_context("t", "ns", "c1", 3, "n", "x", host, {"k": 1}, [1], {"e": 2}, store)
    built = NodeContext(
        thread_id="t",
        namespace="ns",
        checkpoint_id="c1",
        step=3,
        node="n",
        task_id="x",
        host=host,
        context={"k": 1},
        resume_values=[1],
        effects={"e": 2},
        memory_store=store,
    )
    assert type(made) is NodeContext and vars(made) == vars(built)
    assert list(vars(made)) == list(vars(built)), "set in field order (instances share their dict's keys)"
    assert made.staged is not node_context("t", "", "c", 0, "n", "x", host, None, [], {}, None).staged
