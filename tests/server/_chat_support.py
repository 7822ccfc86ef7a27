"""A chat agent's thread for the chat view's tests: a human question, an AI message calling a
tool (LangChain's shape), the tool's result, an answer in content blocks, and an interrupt
asking whether to send it; ``tone`` is a plain channel a fork edits."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from plait import END, START, AppendMessages, CompiledGraph, Graph, StateSchema, interrupt

QUESTION = "What is the weather in Paris today?"
LONG = "forecast:" + "sunny-and-warm-" * 60
"""A tool result with no space in it: the view must wrap it, not overflow."""
ASK = "Send this answer to the customer?"


def schema() -> StateSchema:
    return (
        StateSchema.builder()
        .add("messages", AppendMessages())
        .add_lww("tone", default="friendly")
        .add_lww("sent")
        .build()
    )


def agent(state: Mapping[str, Any]) -> dict[str, Any]:
    call = {"name": "get_weather", "args": {"city": "Paris", "unit": "C"}, "id": "call-1", "type": "tool_call"}
    return {"messages": [{"type": "ai", "content": "", "tool_calls": [call]}]}


def tools(state: Mapping[str, Any]) -> dict[str, Any]:
    return {"messages": [{"type": "tool", "name": "get_weather", "tool_call_id": "call-1", "content": LONG}]}


def answer(state: Mapping[str, Any]) -> dict[str, Any]:
    text = f"It is sunny in Paris, 24 °C ({state['tone']} tone)."
    return {"messages": [{"type": "ai", "content": [{"type": "text", "text": text}]}]}


def approve(state: Mapping[str, Any]) -> dict[str, Any]:
    said = interrupt({"question": ASK, "draft": state["messages"][-1]["content"][0]["text"]})
    return {"sent": said, "messages": [{"type": "human", "content": f"approved: {said}"}]}


def chat_graph() -> CompiledGraph:
    g = Graph(schema())
    for name, fn in (("agent", agent), ("tools", tools), ("answer", answer), ("approve", approve)):
        g.add_node(name, fn)
    g.add_edge(START, "agent").add_edge("agent", "tools").add_edge("tools", "answer")
    g.add_edge("answer", "approve").add_edge("approve", END)
    return g.compile(name="chat")


def start(saver: Any, thread_id: str, question: str = QUESTION) -> None:
    """Run the chat on ``thread_id`` up to its interrupt."""
    chat_graph().bind(checkpointer=saver).invoke(
        {"messages": [{"type": "human", "content": question}]}, thread_id=thread_id
    )
