"""stream(mode="messages"): a node streams a model's answer with ctx.stream_message (sync) or
ctx.astream_message (async); callers get LangGraph's (chunk, metadata) pairs as the node yields
them, the node gets the finished message, and its id is the same when the task runs again."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

from plait import (
    END,
    START,
    Checkpointer,
    Command,
    Graph,
    MemoryCheckpointer,
    MessageChunkError,
    MessagesState,
    NodeContext,
    NodeError,
    RetryPolicy,
    SyncCallOnLoopError,
    interrupt,
)
from plait.checkpoint.model import Checkpoint
from plait.engine.options import RunHooks

ASK = {"messages": [{"role": "user", "content": "hi"}]}
WORDS = ["The ", "answer ", "is ", "42."]


def sync_chat(state: Any, ctx: NodeContext) -> dict[str, Any]:
    return {"messages": [ctx.stream_message(iter(WORDS))]}


async def async_chat(state: Any, ctx: NodeContext) -> dict[str, Any]:
    async def model() -> AsyncIterator[str]:
        for word in WORDS:
            await asyncio.sleep(0)
            yield word

    return {"messages": [await ctx.astream_message(model())]}


def chat_graph(node: Callable[..., Any]) -> Graph:
    return Graph(MessagesState).add_node("chat", node).add_edge(START, "chat").add_edge("chat", END)


@pytest.mark.parametrize("node", [sync_chat, async_chat], ids=["sync", "async"])
def test_messages_mode_yields_each_chunk_with_langgraphs_metadata(node: Callable[..., Any]) -> None:
    app = chat_graph(node).compile(checkpointer=MemoryCheckpointer())
    items = list(app.stream(ASK, mode="messages", thread_id="t", metadata={"run": "r1"}))
    assert [chunk["content"] for chunk, _ in items] == WORDS
    ids = {chunk["id"] for chunk, _ in items}
    (stored,) = [m for m in app.get_state("t").values["messages"] if m.get("type") == "ai"]
    assert ids == {stored["id"]}, "every chunk carries the id of the message the node returned"
    assert stored["content"] == "".join(WORDS)
    chunk, meta = items[0]
    assert chunk["type"] == "AIMessageChunk" and chunk["tool_call_chunks"] == []
    task_id = meta["plait_task_id"]
    assert meta == {
        "run": "r1",
        "thread_id": "t",
        "langgraph_node": "chat",
        "langgraph_step": 0,
        "langgraph_checkpoint_ns": f"chat:{task_id}",
        "plait_task_id": task_id,
        "plait_namespace": "",
    }


@pytest.mark.parametrize("node", [sync_chat, async_chat], ids=["sync", "async"])
def test_async_stream_yields_the_same_pairs(node: Callable[..., Any]) -> None:
    async def main() -> list[Any]:
        return [item async for item in chat_graph(node).compile().astream(ASK, stream_mode="messages")]

    assert [chunk["content"] for chunk, _ in asyncio.run(main())] == WORDS


def test_with_several_modes_items_are_mode_pairs_and_chunks_come_before_the_update() -> None:
    items = list(chat_graph(sync_chat).compile().stream(ASK, mode=["messages", "updates"]))
    assert [mode for mode, _ in items] == ["messages"] * 4 + ["updates"]
    assert items[-1][1]["chat"]["messages"][0]["content"] == "".join(WORDS)


def test_stream_mode_is_langgraphs_spelling_of_mode_and_one_of_them_is_enough() -> None:
    app = chat_graph(sync_chat).compile()
    assert len(list(app.stream(ASK, stream_mode="messages"))) == 4
    with pytest.raises(TypeError, match="mode= or stream_mode="):
        list(app.stream(ASK, mode="updates", stream_mode="messages"))
    with pytest.raises(ValueError, match="'messages'"):
        list(app.stream(ASK, mode="tokens"))  # type: ignore[arg-type]


def test_a_chunk_reaches_the_caller_while_the_node_still_runs() -> None:
    """The caller sees each chunk as it is yielded, not when the node returns."""
    seen = threading.Event()

    def slow(state: Any, ctx: NodeContext) -> dict[str, Any]:
        def model() -> Iterator[str]:
            yield "first"
            assert seen.wait(5), "the caller never got the first chunk while the node ran"
            yield " second"

        return {"messages": [ctx.stream_message(model())]}

    got = []
    for chunk, _ in chat_graph(slow).compile().stream(ASK, mode="messages"):
        got.append(chunk["content"])
        seen.set()
    assert got == ["first", " second"]


def test_tool_call_chunks_stream_and_the_message_has_the_parsed_call() -> None:
    def model(state: Any, ctx: NodeContext) -> dict[str, Any]:
        chunks = [
            {"content": "", "tool_call_chunks": [{"name": "add", "args": '{"a": 2,', "id": "c1", "index": 0}]},
            {"content": "", "tool_call_chunks": [{"args": ' "b": 3}', "index": 0}]},
        ]
        return {"messages": [ctx.stream_message(chunks)]}

    app = chat_graph(model).compile()
    items = list(app.stream(ASK, mode=["messages", "values"]))
    chunks = [item[0] for mode, item in items if mode == "messages"]
    assert [c["tool_call_chunks"][0]["args"] for c in chunks] == ['{"a": 2,', ' "b": 3}']
    final = [item for mode, item in items if mode == "values"][-1]["messages"][-1]
    assert final["tool_calls"] == [{"name": "add", "args": {"a": 2, "b": 3}, "id": "c1", "type": "tool_call"}]


def test_messages_a_node_writes_without_streaming_come_whole_in_langchains_shape() -> None:
    def answer(state: Any) -> dict[str, Any]:
        return {"messages": [{"role": "assistant", "content": "whole"}, {"type": "tool", "content": "t"}]}

    items = list(chat_graph(answer).compile().stream(ASK, mode="messages"))
    assert [(m["type"], m["content"]) for m, _ in items] == [("ai", "whole"), ("tool", "t")]
    assert all(m["id"].startswith("msg-") for m, _ in items), "with the ids the channel keeps"
    assert items[0][1]["langgraph_node"] == "chat"


def test_a_streamed_message_is_not_repeated_whole_when_the_node_writes_it() -> None:
    items = list(chat_graph(sync_chat).compile().stream(ASK, mode="messages"))
    assert [m["type"] for m, _ in items] == ["AIMessageChunk"] * 4


def test_the_caller_id_wins_and_a_second_message_of_a_task_gets_an_id_of_its_own() -> None:
    def two(state: Any, ctx: NodeContext) -> dict[str, Any]:
        return {"messages": [ctx.stream_message(["a"], id="mine"), ctx.stream_message(["b"]), ctx.stream_message("c")]}

    items = list(chat_graph(two).compile().stream(ASK, mode="messages"))
    ids = [m["id"] for m, _ in items]
    assert ids[0] == "mine" and len(set(ids)) == 3


def test_subgraph_messages_come_with_subgraphs_true_under_their_namespace() -> None:
    inner = chat_graph(sync_chat).compile()
    outer = Graph(MessagesState).add_node("research", inner).add_edge(START, "research").add_edge("research", END)
    app = outer.compile()
    items = list(app.stream(ASK, mode="messages", subgraphs=True))
    assert [item[0]["content"] for _, item in items] == WORDS, "streamed inside, not sent whole again by the parent"
    ns, (_, meta) = items[0]
    assert len(ns) == 1 and ns[0].startswith("research:") and {n for n, _ in items} == {ns}
    assert meta["langgraph_checkpoint_ns"] == f"{ns[0]}|chat:{meta['plait_task_id']}"
    assert meta["plait_namespace"] == ns[0] and meta["langgraph_node"] == "chat"
    several = list(app.stream(ASK, mode=["messages", "updates"], subgraphs=True))
    assert [(len(n), mode) for n, mode, _ in several] == [(1, "messages")] * 4 + [(1, "updates"), (0, "updates")]


def test_without_subgraphs_the_parent_sends_a_subgraphs_answer_whole() -> None:
    inner = chat_graph(sync_chat).compile()
    outer = Graph(MessagesState).add_node("research", inner).add_edge(START, "research").add_edge("research", END)
    ((message, meta),) = list(outer.compile().stream(ASK, mode="messages"))
    assert (message["type"], message["content"], meta["langgraph_node"]) == ("ai", "".join(WORDS), "research")


def test_the_id_is_the_same_when_the_task_runs_again_after_an_interrupt(
    make_saver: Callable[..., Checkpointer],
) -> None:
    def ask_first(state: Any, ctx: NodeContext) -> dict[str, Any]:
        message = ctx.stream_message(["draft"])
        return {"messages": [message, {"role": "user", "content": interrupt("ok?")}]}

    app = chat_graph(ask_first).compile(make_saver())
    before = [m["id"] for m, _ in app.stream(ASK, mode="messages", thread_id="t") if m.get("type")]
    after = [m["id"] for m, _ in app.stream(Command(resume="yes"), mode="messages", thread_id="t")]
    assert before and after[0] == before[0]
    stored = app.get_state("t").values["messages"]
    assert [m["id"] for m in stored if m.get("type") == "ai"] == before


def test_the_id_is_the_same_on_a_retry_and_the_stream_restarts_with_it() -> None:
    attempts = []

    def flaky(state: Any, ctx: NodeContext) -> dict[str, Any]:
        message = ctx.stream_message(["try"])
        attempts.append(message["id"])
        if len(attempts) == 1:
            raise ConnectionError("the model's connection dropped")
        return {"messages": [message]}

    graph = Graph(MessagesState).add_node("chat", flaky, retry=RetryPolicy(max_attempts=2, initial_interval=0.001))
    app = graph.add_edge(START, "chat").compile(checkpointer=MemoryCheckpointer())
    items = list(app.stream(ASK, mode="messages", thread_id="t"))
    assert attempts[0] == attempts[1] and [m["id"] for m, _ in items] == attempts
    assert app.get_state("t").values["messages"][-1]["id"] == attempts[0]


def test_the_id_is_the_same_when_a_failed_run_is_resumed(make_saver: Callable[..., Checkpointer]) -> None:
    failures = [RuntimeError("crash")]
    ids = []

    def crashy(state: Any, ctx: NodeContext) -> dict[str, Any]:
        message = ctx.stream_message(["x"])
        ids.append(message["id"])
        if failures:
            raise failures.pop()
        return {"messages": [message]}

    app = chat_graph(crashy).compile(make_saver())
    with pytest.raises(NodeError):
        app.invoke(ASK, thread_id="t")
    app.invoke(None, thread_id="t")
    assert ids[0] == ids[1] == app.get_state("t").values["messages"][-1]["id"]


def test_hooks_that_ask_for_messages_get_the_pairs() -> None:
    class Hooks(RunHooks):
        modes = frozenset({"messages"})

        def __init__(self) -> None:
            self.items: list[tuple[str, Any]] = []

        def on_item(self, mode: str, item: Any) -> None:
            self.items.append((mode, item))

        async def at_step(self, checkpoint: Checkpoint) -> bool:
            return False

    hooks = Hooks()
    app = chat_graph(sync_chat).compile(checkpointer=MemoryCheckpointer()).bind(hooks=hooks)
    assert list(app.stream(ASK, mode="updates", thread_id="t"))  # the caller's own mode only
    assert [(mode, chunk["content"]) for mode, (chunk, _) in hooks.items] == [("messages", w) for w in WORDS]
    assert hooks.items[0][1][1]["langgraph_node"] == "chat"


def test_without_a_consumer_a_streamed_message_is_only_added_up() -> None:
    out = chat_graph(sync_chat).compile().invoke(ASK)
    assert out["messages"][-1]["content"] == "".join(WORDS)


def test_the_sync_form_on_the_event_loop_says_to_use_the_async_one() -> None:
    async def wrong(state: Any, ctx: NodeContext) -> dict[str, Any]:
        return {"messages": [ctx.stream_message(["x"])]}

    with pytest.raises(NodeError) as info:
        chat_graph(wrong).compile().invoke(ASK)
    cause = info.value.__cause__
    assert isinstance(cause, SyncCallOnLoopError) and "await ctx.astream_message(" in str(cause)


def test_a_chunk_of_no_known_kind_fails_the_node_saying_what_a_chunk_is() -> None:
    def bad(state: Any, ctx: NodeContext) -> dict[str, Any]:
        return {"messages": [ctx.stream_message(["ok", 7])]}

    with pytest.raises(MessageChunkError, match=r"chunk 1 of a streamed message \(written by node 'chat'\) is a int"):
        chat_graph(bad).compile().invoke(ASK)


def test_langchain_chunk_objects_stream_and_add_up() -> None:
    messages = pytest.importorskip("langchain_core.messages")

    async def model(state: Any, ctx: NodeContext) -> dict[str, Any]:
        async def stream() -> AsyncIterator[Any]:
            yield messages.AIMessageChunk(content="Hel", id="run-x")
            yield messages.AIMessageChunk(
                content="lo", id="run-x", tool_call_chunks=[{"name": "f", "args": '{"q": 1}', "id": "c", "index": 0}]
            )

        return {"messages": [await ctx.astream_message(stream())]}

    app = chat_graph(model).compile()
    items = list(app.stream(ASK, mode=["messages", "values"]))
    chunks = [item[0] for mode, item in items if mode == "messages"]
    assert [c["content"] for c in chunks] == ["Hel", "lo"]
    assert chunks[0]["id"] != "run-x", "plait's stable id, not the chunk's per-call one"
    final = [item for mode, item in items if mode == "values"][-1]["messages"][-1]
    rebuilt = messages.AIMessage(**{k: v for k, v in final.items() if k != "type"})
    assert rebuilt.content == "Hello" and rebuilt.tool_calls[0]["args"] == {"q": 1}
    client_side = messages.AIMessageChunk(**{k: v for k, v in chunks[0].items() if k != "type"})
    assert client_side.content == "Hel", "a client can rebuild LangChain's chunk from an item"


def test_a_steps_chunks_reach_the_reader_before_the_steps_commit_starts() -> None:
    """A node that yields its whole answer without awaiting: the reader of the stream still
    gets the first chunk before the step's checkpoint is committed (an API server stores the
    chunk then, instead of waiting behind the commit for the store's file)."""
    order: list[str] = []

    class Watched(MemoryCheckpointer):
        async def acommit(self, **kwargs: Any) -> None:
            if any(w.checkpoint.step == 1 for w in kwargs.get("checkpoints") or ()):
                order.append("commit")
            await super().acommit(**kwargs)

    async def burst(state: Any, ctx: NodeContext) -> dict[str, Any]:
        return {"messages": [await ctx.astream_message(WORDS)]}

    async def go() -> None:
        app = chat_graph(burst).compile(checkpointer=Watched())
        async for _chunk, _meta in app.astream(ASK, mode="messages", thread_id="t"):
            order.append("chunk")

    asyncio.run(go())
    assert order[0] == "chunk" and order.count("commit") == 1, order
