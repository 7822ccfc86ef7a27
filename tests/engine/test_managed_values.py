"""``RemainingSteps`` and ``IsLastStep``: state fields computed for each step, with
LangGraph's numbers (checked against LangGraph 1.x: a node at LangGraph step ``k`` sees
``recursion_limit - k``; ``is_last_step`` when one step is left), never stored. Ported from
LangGraph's ``tests/test_managed_values.py``, plus the numbers and storage on every backend."""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Annotated, Any, NotRequired, Required, TypedDict

import pytest

from plait import (
    START,
    Checkpointer,
    Dag,
    Graph,
    IsLastStep,
    MemoryCheckpointer,
    RecursionLimitError,
    RemainingSteps,
    Send,
)


class StatePlain(TypedDict):
    remaining_steps: RemainingSteps


class StateNotRequired(TypedDict):
    remaining_steps: NotRequired[RemainingSteps]


class StateRequired(TypedDict):
    remaining_steps: Required[RemainingSteps]


@pytest.mark.parametrize("state", [StatePlain, StateNotRequired, StateRequired])
def test_managed_values_recognized(state: type) -> None:
    graph = Graph(state)
    assert graph.managed == {"remaining_steps": "remaining_steps"}
    assert "remaining_steps" not in graph.schema  # no channel: nothing is stored


class Loop(TypedDict):
    seen: Annotated[list[Any], operator.add]
    remaining_steps: RemainingSteps
    is_last_step: IsLastStep


def _looping(checkpointer: Checkpointer | None = None) -> Any:
    g = Graph(Loop).add_node("a", lambda s: {"seen": [[s["remaining_steps"], s["is_last_step"]]]})
    return g.add_edge(START, "a").add_conditional_edges("a", lambda s: "a").compile(checkpointer=checkpointer)


@pytest.mark.parametrize(
    ("limit", "expected"),
    [
        (1, [[0, False]]),
        (2, [[1, True], [0, False]]),
        (3, [[2, False], [1, True], [0, False]]),
        (5, [[4, False], [3, False], [2, False], [1, True], [0, False]]),
    ],
)
def test_the_numbers_are_langgraphs(limit: int, expected: list[Any]) -> None:
    """What LangGraph 1.x gives for the same graph and limits (its START step included)."""
    app = _looping(MemoryCheckpointer())
    with pytest.raises(RecursionLimitError):
        app.invoke({"seen": []}, thread_id="t", recursion_limit=limit)
    assert app.get_state("t").values["seen"] == expected


def test_nothing_is_stored_and_writes_are_dropped(make_saver: Callable[..., Checkpointer]) -> None:
    """Absent from the result and the stored state; an input's value and a node's write are
    dropped, as LangGraph drops them, so a node returning the state it got still works."""

    def echo(state: Any) -> Any:
        return {**state, "seen": [state["remaining_steps"]]}

    app = Graph(Loop).add_node("echo", echo).add_edge(START, "echo").compile(checkpointer=make_saver())
    out = app.invoke({"seen": [], "remaining_steps": 7, "is_last_step": True}, thread_id="t", recursion_limit=10)
    assert out == {"seen": [9]}
    assert app.get_state("t").values == {"seen": [9]}
    for past in app.get_state_history("t"):
        assert "remaining_steps" not in past.values and "is_last_step" not in past.values


def test_a_router_reads_them_to_stop_in_time() -> None:
    """The prebuilt ReAct agent's habit: stop looping while steps remain."""

    def agent(state: Any) -> Any:
        return {"seen": [state["remaining_steps"]]}

    g = Graph(Loop).add_node("agent", agent).add_edge(START, "agent")
    g.add_conditional_edges("agent", lambda s: "__end__" if s["remaining_steps"] <= 2 else "agent")
    assert g.compile().invoke({"seen": []}, recursion_limit=5) == {"seen": [4, 3, 2]}


def test_is_last_step_ends_a_loop_within_the_limit() -> None:
    def agent(state: Any) -> Any:
        return {"seen": ["sorry, out of steps" if state["is_last_step"] else "thinking"]}

    g = Graph(Loop).add_node("agent", agent).add_edge(START, "agent")
    g.add_conditional_edges("agent", lambda s: "__end__" if s["seen"][-1].startswith("sorry") else "agent")
    assert g.compile().invoke({"seen": []}, recursion_limit=4) == {
        "seen": ["thinking", "thinking", "sorry, out of steps"]
    }


def test_a_resumed_run_counts_its_own_steps(make_saver: Callable[..., Checkpointer]) -> None:
    """plait's limit is per run, so a resumed run starts from ``recursion_limit - 1`` again
    (LangGraph's resumed run starts one higher, ``recursion_limit + 1``, and may take as
    many more steps: after the current step, the number left is the same in both)."""
    app = _looping(make_saver())
    with pytest.raises(RecursionLimitError):
        app.invoke({"seen": []}, thread_id="t", recursion_limit=2)
    with pytest.raises(RecursionLimitError):
        app.invoke(None, thread_id="t", recursion_limit=3)
    assert app.get_state("t").values["seen"] == [[1, True], [0, False], [2, False], [1, True], [0, False]]


def test_a_subgraph_counts_its_own_steps_and_a_send_gets_only_its_arg() -> None:
    inner = Graph(Loop).add_node("s", lambda s: {"seen": [["sub", s["remaining_steps"]]]}).add_edge(START, "s")

    def fan(state: Any) -> Any:
        return [Send("worker", {"n": 1})]

    def worker(arg: Any) -> Any:
        return {"seen": [sorted(arg)]}

    g = Graph(Loop).add_node("x", lambda s: {"seen": [s["remaining_steps"]]}).add_node("inner", inner.compile())
    g.add_node("worker", worker).add_edge(START, "x").add_edge("x", "inner").add_conditional_edges("inner", fan)
    assert g.compile().invoke({"seen": []}, recursion_limit=10) == {"seen": [9, ["sub", 9], ["n"]]}


def test_a_conditional_entry_sees_them_and_a_dag_declares_them() -> None:
    g = Graph(Loop).add_node("a", lambda s: {"seen": ["a"]})
    g.add_conditional_edges(START, lambda s: "a" if s["remaining_steps"] == 3 else "__end__")
    assert g.compile().invoke({"seen": []}, recursion_limit=3) == {"seen": ["a"]}
    dag = Dag(Loop).step("only", lambda s: {"seen": [s["remaining_steps"], s["is_last_step"]]})
    assert dag.compile().invoke({"seen": []}, recursion_limit=2) == {"seen": [1, True]}


def test_a_model_state_declares_them_as_fields() -> None:
    """LangGraph's Pydantic agent state declares ``remaining_steps: RemainingSteps = 25``:
    the node gets the model with the step's number, the field is no channel, and a node
    returning the whole model (the number included) writes only what it changed."""
    pydantic = pytest.importorskip("pydantic")

    class Agent(pydantic.BaseModel):  # type: ignore[misc, name-defined]
        seen: Annotated[list[Any], operator.add] = []
        remaining_steps: RemainingSteps = 25
        is_last_step: IsLastStep = False

    def agent(state: Agent) -> Any:
        state.seen = [[state.remaining_steps, state.is_last_step]]
        return state

    g = Graph(Agent).add_node("agent", agent).add_edge(START, "agent")
    g.add_conditional_edges("agent", lambda s: "__end__" if s.remaining_steps <= 2 else "agent")
    assert "remaining_steps" not in g.schema and g.managed == {
        "remaining_steps": "remaining_steps", "is_last_step": "is_last_step"
    }  # fmt: skip
    saver = MemoryCheckpointer()
    out = g.compile(checkpointer=saver).invoke({"remaining_steps": 7}, thread_id="t", recursion_limit=5)
    assert out == {"seen": [[4, False], [3, False], [2, False]]}  # the input's 7 dropped
    assert "remaining_steps" not in saver.get("t").values  # type: ignore[union-attr]


def test_a_dataclass_state_declares_them_as_fields() -> None:
    import dataclasses

    @dataclasses.dataclass
    class Steps:
        seen: Annotated[list[Any], operator.add] = dataclasses.field(default_factory=list)
        remaining_steps: RemainingSteps = 0

    g = Graph(Steps).add_node("a", lambda s: {"seen": [s.remaining_steps]}).add_edge(START, "a")
    assert g.compile().invoke({}, recursion_limit=4) == {"seen": [3]}
