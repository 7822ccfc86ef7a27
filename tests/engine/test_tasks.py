"""plait.engine.tasks: the state view a node reads, and a finished task's outcome."""

from __future__ import annotations

import pytest

from plait import END, START, AppendList, Graph, MissingValueError, StateSchema
from plait.engine.tasks import TaskOutcome, finished

# -- the state view ---------------------------------------------------------------------------


def view_schema() -> StateSchema:
    return StateSchema.builder().add("log", AppendList()).add_lww("draft").add_lww("verdict").build()


def reads(key: str, *, router: bool = False) -> Graph:
    """``writer`` writes the draft (a writer the graph knows: through its output key);
    ``reader`` (or the router after it) reads ``key``."""
    g = Graph(view_schema()).add_node("reader", lambda s: None if router else {"log": [s[key]]})
    g.add_node("writer", lambda s: "d", output_key="draft").add_edge(START, "reader").add_edge("writer", END)
    if router:
        g.add_conditional_edges("reader", lambda s: "writer" if s[key] else END)
    else:
        g.add_edge("reader", "writer")
    return g


@pytest.mark.parametrize("router", [False, True], ids=["node", "router"])
def test_reading_a_key_that_is_not_a_channel_says_so_and_names_the_channels(router: bool) -> None:
    with pytest.raises(MissingValueError) as info:
        reads("verdcit", router=router).compile().invoke({"verdict": "ok"})
    err = info.value
    assert err.key == "verdcit" and not err.declared
    assert err.channels == ("log", "draft", "verdict")
    assert "'verdcit' is not a channel of this schema" in str(err)
    assert "'log', 'draft', 'verdict'" in str(err)


def test_reading_a_channel_without_a_value_names_the_keys_that_have_one_and_its_writers() -> None:
    with pytest.raises(MissingValueError) as info:
        reads("draft").compile().invoke({"verdict": "ok"})
    err = info.value
    assert err.declared and err.writers == ("writer",)
    assert "channel 'draft' has no value yet (it is written by 'writer')" in str(err)
    assert "keys with a value: 'log', 'verdict'" in str(err)


def test_finished_makes_what_the_constructor_makes() -> None:
    made = finished([("n", 1)], ["b"], {"n": 1})
    assert made == TaskOutcome(writes=[("n", 1)], routes=["b"], folded={"n": 1})
    assert made.memory is not finished([], [], None).memory
