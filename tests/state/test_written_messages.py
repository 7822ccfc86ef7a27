"""Messages written the ways LangGraph code writes them: a ``(role, content)`` tuple (alone
or in a list, as ``add_messages`` reads one) and LangChain's ``dumpd`` dict, stored as a
message of one of plait's two shapes, with an id, like any message; on every backend."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from plait import END, START, AppendMessages, Checkpointer, Graph, InvalidUpdateError, MessagesState
from plait.state.messages import written_message


def _dumpd(cls: str, **kwargs: Any) -> dict[str, Any]:
    """What ``langchain_core.load.dumpd(message)`` gives."""
    return {"lc": 1, "type": "constructor", "id": ["langchain", "schema", "messages", cls], "kwargs": kwargs}


@pytest.mark.parametrize(
    ("written", "kept"),
    [
        (["user", "hi"], {"role": "user", "content": "hi"}),
        (["assistant", "hello"], {"role": "assistant", "content": "hello"}),
        (["human", "hi"], {"type": "human", "content": "hi"}),
        (["ai", [{"type": "text", "text": "hello"}]], {"type": "ai", "content": [{"type": "text", "text": "hello"}]}),
        (_dumpd("HumanMessage", content="hi", type="human"), {"type": "human", "content": "hi"}),
        (_dumpd("AIMessageChunk", content="x", tool_calls=[]), {"type": "ai", "content": "x", "tool_calls": []}),
        ({"role": "user", "content": "as is"}, {"role": "user", "content": "as is"}),
        (["stranger", "hi"], ["stranger", "hi"]),
    ],
)
def test_a_written_message_is_read_in_a_kept_shape(written: Any, kept: Any) -> None:
    assert written_message(written) == kept


def test_tuples_and_dumpd_dicts_from_an_input_and_a_node(make_saver: Callable[..., Checkpointer]) -> None:
    def answer(state: Any) -> Any:
        return {"messages": [("ai", "hello"), _dumpd("AIMessage", content="more", id="fixed")]}

    app = Graph(MessagesState).add_node("answer", answer).add_edge(START, "answer").add_edge("answer", END)
    compiled = app.compile(checkpointer=make_saver())
    out = compiled.invoke({"messages": ("user", "hi")}, thread_id="t")
    shapes = [{k: v for k, v in m.items() if k != "id"} for m in out["messages"]]
    assert shapes == [
        {"role": "user", "content": "hi"},
        {"type": "ai", "content": "hello"},
        {"type": "ai", "content": "more"},
    ]
    assert all(m["id"] for m in out["messages"]) and out["messages"][2]["id"] == "fixed"
    compiled.update_state("t", {"messages": [("user", "again")]})
    assert compiled.get_state("t").values["messages"][-1]["content"] == "again"


def test_a_bare_string_is_still_refused() -> None:
    """LangGraph makes a human message of a string; plait asks for a message, so that a
    string written to the wrong channel is not taken for one."""
    g = Graph(MessagesState).add_node("n", lambda s: {"messages": ["hi"]})
    with pytest.raises(InvalidUpdateError):
        g.add_edge(START, "n").add_edge("n", END).compile().invoke({"messages": []})
    assert AppendMessages().assign_ids(["hi"], "seed", 0)[0] == ["hi"]
