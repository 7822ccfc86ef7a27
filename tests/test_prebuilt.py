"""plait.prebuilt: MessagesState, tools_condition and tool_node, in a real graph on a real store."""

from __future__ import annotations

from typing import Annotated, Any

import pytest

from plait import (
    END,
    START,
    Graph,
    MemoryCheckpointer,
    MessagesState,
    NodeError,
    RetryPolicy,
    StateSchema,
    Sum,
    tool_node,
    tools_condition,
)

CALLS: list[str] = []


def add(a: int, b: int) -> int:
    CALLS.append(f"add {a} {b}")
    return a + b


async def shout(text: str) -> str:
    CALLS.append(f"shout {text}")
    return text.upper()


def charge(amount: int, idempotency_key: str) -> dict[str, Any]:
    CALLS.append(f"charge {amount} {idempotency_key}")
    return {"charged": amount, "key": idempotency_key}


class State(MessagesState):
    turns: Annotated[int, Sum()]


def model(state: Any) -> dict[str, Any]:
    """A scripted model: asks for tools on its first turn, answers on its second."""
    if state["turns"] == 0:
        calls = [
            {"id": "c1", "name": "add", "args": {"a": 2, "b": 3}},
            {"id": "c2", "name": "shout", "args": {"text": "hi"}},
            {"id": "c3", "name": "nosuch", "args": {}},
        ]
        return {"messages": [{"role": "assistant", "content": "", "tool_calls": calls}], "turns": 1}
    results = [m["content"] for m in state["messages"] if m["role"] == "tool"]
    return {"messages": [{"role": "assistant", "content": f"done: {results[:2]}"}], "turns": 1}


def agent(tools: Any, **node: Any) -> Graph:
    graph = Graph(State)
    graph.add_node("model", model).add_node("tools", tools, **node)
    graph.add_edge(START, "model").add_conditional_edges("model", tools_condition, {"tools": "tools", END: END})
    graph.add_edge("tools", "model")
    return graph


def test_messages_state_is_a_schema_with_appended_messages() -> None:
    schema = StateSchema.from_typed_dict(State)
    assert schema.keys == ("messages", "turns")
    assert type(schema.channels["messages"].reducer).__name__ == "AppendMessages"


def test_a_tool_calling_loop_runs_each_call_and_answers_it() -> None:
    CALLS.clear()
    app = agent(tool_node([add, shout])).compile(checkpointer=MemoryCheckpointer())
    out = app.invoke({"messages": [{"role": "user", "content": "go"}]}, thread_id="t")
    tools = [m for m in out["messages"] if m["role"] == "tool"]
    assert [(m["tool_call_id"], m["name"], m["content"]) for m in tools[:2]] == [
        ("c1", "add", 5),
        ("c2", "shout", "HI"),
    ]
    assert "no tool named 'nosuch'; the tools are: add, shout" in tools[2]["content"]
    assert out["messages"][-1]["content"] == "done: [5, 'HI']"
    assert all(m.get("id") for m in out["messages"])  # AppendMessages gave each an id
    assert CALLS == ["add 2 3", "shout hi"]


def test_tools_condition_ends_without_tool_calls() -> None:
    assert tools_condition({"messages": []}) == END
    assert tools_condition({"messages": [{"role": "assistant", "content": "hi"}]}) == END
    assert tools_condition({"messages": [{"role": "assistant", "tool_calls": [{"id": "x"}]}]}) == "tools"


def test_a_retried_tool_node_does_not_repeat_finished_calls() -> None:
    CALLS.clear()
    failures = [RuntimeError("the network blinked")]

    def flaky(text: str) -> str:
        if failures:
            raise failures.pop()
        CALLS.append(f"flaky {text}")
        return text

    def first(state: Any) -> dict[str, Any]:
        calls = [
            {"id": "pay", "name": "charge", "args": {"amount": 7}},
            {"id": "f", "name": "flaky", "args": {"text": "x"}},
        ]
        return {"messages": [{"role": "assistant", "tool_calls": calls}]}

    graph = Graph(State)
    graph.add_node("model", first)
    graph.add_node(
        "tools", tool_node({"charge": charge, "flaky": flaky}), retry=RetryPolicy(max_attempts=2, initial_interval=0.01)
    )
    graph.add_edge(START, "model").add_edge("model", "tools").add_edge("tools", END)
    out = graph.compile(checkpointer=MemoryCheckpointer()).invoke({}, thread_id="t")
    charges = [c for c in CALLS if c.startswith("charge")]
    assert len(charges) == 1, CALLS  # the second attempt took the recorded charge from the ledger
    key = out["messages"][1]["content"]["key"]
    assert charges == [f"charge 7 {key}"] and key.endswith(":pay")
    assert out["messages"][2]["content"] == "x"


def test_a_failing_tool_fails_the_node() -> None:
    def broken() -> None:
        raise ValueError("no")

    def ask(state: Any) -> dict[str, Any]:
        return {"messages": [{"role": "assistant", "tool_calls": [{"id": "b", "name": "broken", "args": {}}]}]}

    graph = Graph(State)
    graph.add_node("model", ask).add_node("tools", tool_node([broken]))
    graph.add_edge(START, "model").add_edge("model", "tools").add_edge("tools", END)
    with pytest.raises(NodeError, match="ValueError: no"):
        graph.compile().invoke({})
