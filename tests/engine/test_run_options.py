"""A run's options are one record: checked when built, and inherited whole by a subgraph's run
(context, metadata, the concurrency cap, durability), which before saw ``ctx.context`` as None."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from typing import Annotated, Any, TypedDict

import pytest

from plait import END, START, AppendList, Checkpointer, Graph, NodeContext, Send
from plait.engine.options import RunOptions
from plait.engine.subgraph import child_namespace


class Inner(TypedDict):
    notes: Annotated[list[str], AppendList]
    item: str


class Outer(TypedDict):
    notes: Annotated[list[str], AppendList]


@dataclasses.dataclass
class Ctx:
    user: str


def _outer(inner: Graph) -> Graph:
    return Graph(Outer, context=Ctx).add_node("sub", inner).add_edge(START, "sub").add_edge("sub", END)


def test_a_subgraphs_nodes_see_the_runs_context(make_saver: Callable[..., Checkpointer]) -> None:
    def a(s: Any, ctx: NodeContext) -> Any:
        return {"notes": [f"a for {ctx.context.user}"]}

    inner = Graph(Inner, context=Ctx).add_node("a", a).add_edge(START, "a").add_edge("a", END)
    app = _outer(inner).compile(checkpointer=make_saver())
    out = app.invoke({"notes": []}, thread_id="t", context=Ctx(user="ada"))
    assert out["notes"] == ["a for ada"]


def test_a_subgraphs_checkpoints_carry_the_runs_metadata(make_saver: Callable[..., Checkpointer]) -> None:
    saver = make_saver()
    inner = Graph(Inner).add_node("a", lambda s: {"notes": ["a"]}).add_edge(START, "a").add_edge("a", END)
    app = _outer(inner).compile(checkpointer=saver)
    app.invoke({"notes": []}, thread_id="t", context=Ctx(user="ada"), metadata={"tenant": "acme"})
    head = app.get_state("t")
    tasks = [task for cp in saver.history("t") for task in cp.next_tasks if task.node == "sub"]
    namespaces = {child_namespace("", task.node, task.id) for task in tasks}
    children = [cp for ns in namespaces for cp in saver.history("t", namespace=ns)]
    assert children, "the subgraph stored its steps in a child namespace"
    assert all(cp.metadata.get("tenant") == "acme" for cp in children), [cp.metadata for cp in children]
    assert head.metadata.get("tenant") == "acme"


def test_a_subgraphs_fan_out_keeps_the_runs_concurrency_cap(make_saver: Callable[..., Checkpointer]) -> None:
    running = 0
    most = 0

    async def work(s: Any) -> Any:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await asyncio.sleep(0.01)
        running -= 1
        return {"notes": [s["item"]]}

    inner = Graph(Inner).add_node("fan", lambda s: {}).add_node("work", work)
    inner.add_edge(START, "fan")
    inner.add_conditional_edges("fan", lambda s: [Send("work", {"item": str(i)}) for i in range(6)])
    inner.add_edge("work", END)
    app = _outer(inner).compile(checkpointer=make_saver())
    out = app.invoke({"notes": []}, thread_id="t", context=Ctx(user="x"), max_concurrency=2)
    assert sorted(out["notes"]) == [str(i) for i in range(6)]
    assert most == 2


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("durability", "later", "durability must be"),
        ("recursion_limit", 0, "recursion_limit must be at least 1"),
        ("wait", -1.0, "wait must be a number of seconds"),
        ("max_concurrency", 0, "max_concurrency must be at least 1"),
    ],
)
def test_options_are_checked_when_built(field: str, value: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RunOptions(**{field: value})


def test_options_are_frozen_and_keep_their_own_copy_of_the_metadata() -> None:
    given = {"tenant": "acme"}
    options = RunOptions(metadata=given)
    given["tenant"] = "changed"
    assert options.metadata == {"tenant": "acme"}
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.durability = "exit"  # type: ignore[misc]
