"""plait.prebuilt: MessagesState, tools_condition and tool_node, in a real graph on a real store."""

from __future__ import annotations

import json
from typing import Annotated, Any

import pytest

from plait import (
    END,
    START,
    Graph,
    MemoryCheckpointer,
    MessagesState,
    NodeContext,
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


# -- LangChain's shape, and OpenAI's wire shape of a tool call ---------------------------------


def langchain_model(state: Any, ctx: NodeContext) -> dict[str, Any]:
    """Asks for tools in LangChain's shape (streamed), then answers from the tool messages."""
    if state["turns"] == 0:
        chunks = [
            {"content": "", "tool_call_chunks": [{"name": "add", "args": '{"a": 2, ', "id": "c1", "index": 0}]},
            {"content": "", "tool_call_chunks": [{"args": '"b": 3}', "index": 0}]},
            {"content": "", "tool_call_chunks": [{"name": "charge", "args": '{"amount": 1}', "id": "c2", "index": 1}]},
        ]
        return {"messages": [ctx.stream_message(chunks)], "turns": 1}
    results = [m["content"] for m in state["messages"] if m.get("type") == "tool"]
    return {"messages": [{"type": "ai", "content": f"done: {results}"}], "turns": 1}


def test_tools_condition_and_tool_node_take_langchains_shape_and_answer_in_it() -> None:
    CALLS.clear()
    graph = Graph(State)
    graph.add_node("model", langchain_model).add_node("tools", tool_node([add, charge]))
    graph.add_edge(START, "model").add_conditional_edges("model", tools_condition, {"tools": "tools", END: END})
    graph.add_edge("tools", "model")
    out = graph.compile(checkpointer=MemoryCheckpointer()).invoke(
        {"messages": [{"type": "human", "content": [{"type": "text", "text": "go"}]}]}, thread_id="t"
    )
    tools = [m for m in out["messages"] if m.get("type") == "tool"]
    assert [(m["tool_call_id"], m["name"]) for m in tools] == [("c1", "add"), ("c2", "charge")]
    assert tools[0]["content"] == "5", "LangChain's tool content is text: JSON results as JSON text"
    assert json.loads(tools[1]["content"])["charged"] == 1
    assert all("role" not in m for m in tools) and all(m["id"] for m in out["messages"])
    assert out["messages"][-1]["content"].startswith("done: ['5', ")


def test_tool_calls_in_openais_wire_shape_run_and_bad_arguments_are_answered() -> None:
    CALLS.clear()

    def model(state: Any) -> dict[str, Any]:
        calls = [
            {"id": "o1", "type": "function", "function": {"name": "add", "arguments": '{"a": 1, "b": 1}'}},
            {"id": "o2", "type": "function", "function": {"name": "add", "arguments": "{not json"}},
        ]
        return {"messages": [{"role": "assistant", "content": None, "tool_calls": calls}]}

    graph = Graph(State).add_node("model", model).add_node("tools", tool_node([add]))
    graph.add_edge(START, "model").add_conditional_edges("model", tools_condition, {"tools": "tools", END: END})
    out = graph.add_edge("tools", END).compile().invoke({"messages": []})
    answers = [m for m in out["messages"] if m.get("role") == "tool"]
    assert answers[0]["content"] == 2 and CALLS == ["add 1 1"]
    assert "not a JSON object" in answers[1]["content"] and "{not json" in answers[1]["content"]


@pytest.mark.parametrize(
    "message",
    [
        {"type": "ai", "content": "", "tool_calls": [{"name": "f", "args": {}, "id": "x", "type": "tool_call"}]},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "x", "function": {"name": "f", "arguments": ""}}]},
    ],
)
def test_tools_condition_routes_a_call_in_any_shape_to_the_tools(message: dict[str, Any]) -> None:
    assert tools_condition({"messages": [message]}) == "tools"
    assert tools_condition({"messages": [{**message, "tool_calls": []}]}) == END
