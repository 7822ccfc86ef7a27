"""A model's answer streamed through ``ctx.stream_message`` is a ``chat`` span under its
task attempt, with OpenTelemetry's GenAI attributes read off the chunks (model, provider,
finish reason, token counts); none when the run is not traced."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated, Any, TypedDict

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from plait import END, START, AppendMessages, Graph, MemoryCheckpointer, NodeContext

from ._tree import Tree

CHUNKS: list[Any] = [
    {"content": "Hel"},
    {"content": "lo", "tool_call_chunks": [{"name": "search", "args": '{"q": "x"}', "id": "c1", "index": 0}]},
    {
        "content": "",
        "response_metadata": {"model_name": "gpt-test", "model_provider": "openai", "finish_reason": "tool_calls"},
        "usage_metadata": {"input_tokens": 12, "output_tokens": 5, "total_tokens": 17},
    },
]


class S(TypedDict):
    messages: Annotated[list[Any], AppendMessages]


def _answer(state: Any, ctx: NodeContext) -> Any:
    return {"messages": [ctx.stream_message(CHUNKS)]}


async def _aanswer(state: Any, ctx: NodeContext) -> Any:
    async def chunks() -> AsyncIterator[Any]:
        for chunk in CHUNKS:
            yield chunk

    return {"messages": [await ctx.astream_message(chunks())]}


def _app(node: Any) -> Any:
    g = Graph(S).add_node("model", node).add_edge(START, "model").add_edge("model", END)
    return g.compile(MemoryCheckpointer(), name="chat")


@pytest.mark.parametrize("node", [_answer, _aanswer], ids=["sync", "async"])
def test_a_streamed_answer_is_a_chat_span_with_gen_ai_attributes(exporter: InMemorySpanExporter, node: Any) -> None:
    out = _app(node).invoke({"messages": [{"role": "user", "content": "hi"}]}, thread_id="t")
    message = out["messages"][-1]
    tree = Tree(exporter.get_finished_spans())
    chat = tree.one("chat gpt-test")
    assert tree.parent(chat).name == "plait.task model" and chat.kind is SpanKind.CLIENT
    attrs = dict(chat.attributes or {})
    assert attrs["gen_ai.operation.name"] == "chat" and attrs["gen_ai.response.model"] == "gpt-test"
    assert attrs["gen_ai.provider.name"] == "openai"
    assert attrs["gen_ai.response.finish_reasons"] == ("tool_calls",)
    assert attrs["gen_ai.usage.input_tokens"] == 12 and attrs["gen_ai.usage.output_tokens"] == 5
    assert attrs["plait.message_id"] == message["id"] and attrs["plait.tool_calls"] == ("search",)
    assert attrs["plait.node"] == "model"


def test_a_bad_chunk_fails_the_chat_span(exporter: InMemorySpanExporter) -> None:
    def broken(state: Any, ctx: NodeContext) -> Any:
        return {"messages": [ctx.stream_message(["ok", 42])]}

    with pytest.raises(Exception, match="chunk"):
        _app(broken).invoke({"messages": []}, thread_id="t")
    chat = Tree(exporter.get_finished_spans()).one("chat")  # no model named: the plain name
    assert chat.status.status_code is StatusCode.ERROR


def test_no_chat_span_when_the_run_is_not_traced(quiet: InMemorySpanExporter) -> None:
    out = _app(_answer).invoke({"messages": []}, thread_id="t")
    assert out["messages"][-1]["content"] == "Hello"
    assert quiet.get_finished_spans() == ()
