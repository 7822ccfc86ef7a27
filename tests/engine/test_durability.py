"""Which checkpoints the engine marks as already checked, in every durability mode: a run's
step checkpoints and hand updates built on a stored checkpoint, never a thread's first
write, so that the commit rule still sees every id a caller introduces (see
``CheckpointWrite.checked``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from plait import END, START, Graph, StateSchema
from plait.checkpoint import CheckpointWrite, Fence, MemoryCheckpointer, WritesBatch
from plait.errors import InvalidIdError, NodeError
from plait.types import Durability

MODES: tuple[Durability, ...] = ("sync", "async", "exit")


class Recording(MemoryCheckpointer):
    """A memory store that remembers every checkpoint it was asked to commit."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[CheckpointWrite] = []

    async def acommit(
        self,
        *,
        checkpoints: Sequence[CheckpointWrite] = (),
        writes: Sequence[WritesBatch] = (),
        fence: Fence | None = None,
        memory: Any = (),
    ) -> None:
        self.seen.extend(checkpoints)
        await super().acommit(checkpoints=checkpoints, writes=writes, fence=fence, memory=memory)


def _counter() -> Graph:
    g = Graph(StateSchema.builder().add_lww("n").build())
    g.add_node("inc", lambda s: {"n": s["n"] + 1})
    g.add_edge(START, "inc")
    g.add_conditional_edges("inc", lambda s: "inc" if s["n"] < 3 else END)
    return g


@pytest.mark.parametrize("durability", MODES)
def test_only_steps_and_updates_of_stored_heads_are_marked_checked(durability: Durability) -> None:
    store = Recording()
    app = _counter().compile(checkpointer=store)
    app.update_state("fresh", {"n": 5})  # a thread's first write: its ids are the caller's
    with pytest.raises(InvalidIdError):
        app.update_state("bad\x00id", {"n": 5})
    assert [cw.checked for cw in store.seen] == [False]
    store.seen.clear()
    app.invoke({"n": 0}, thread_id="t", durability=durability)
    app.update_state("t", {"n": 0})
    app.invoke(None, thread_id="t", durability=durability)
    first = app.get_state_history("t")[-1].checkpoint_id
    app.invoke(None, thread_id="t", checkpoint_id=first, durability=durability)  # a replay
    app.fork_state("t", first, "u")
    assert store.seen
    by_source: dict[str, set[bool]] = {}
    for cw in store.seen:
        by_source.setdefault(cw.checkpoint.metadata["source"], set()).add(cw.checked)
    assert {source for source, marks in by_source.items() if True in marks} <= {"loop", "update"}
    assert by_source["update"] == {True}
    assert by_source["fork"] == {False}
    if durability != "exit":  # exit stores only a run's last checkpoint, through its own path, unmarked
        assert by_source["input"] == by_source["replay"] == {False}
        assert by_source["loop"] == {True}


@pytest.mark.parametrize("durability", MODES)
def test_a_subgraph_namespace_that_breaks_the_id_rule_is_refused_before_it_is_written(
    durability: Durability,
) -> None:
    schema = StateSchema.builder().add_lww("n").build()
    inner = Graph(schema)
    inner.add_node("a", lambda s: {"n": s["n"] + 1})
    inner.add_node("b", lambda s: {"n": s["n"] + 1})
    inner.add_edge(START, "a")
    inner.add_edge("a", "b")
    inner.add_edge("b", END)
    outer = Graph(schema)
    outer.add_node("sub\x00x", inner.compile())
    outer.add_edge(START, "sub\x00x")
    outer.add_edge("sub\x00x", END)
    store = MemoryCheckpointer()
    app = outer.compile(checkpointer=store)
    with pytest.raises(NodeError) as caught:
        app.invoke({"n": 0}, thread_id="t", durability=durability)
    assert isinstance(caught.value.__cause__, InvalidIdError)
    assert {cp.namespace for cp in store.history("t")} == {""}
