"""``Command(graph=Command.PARENT, ...)``: a subgraph's node hands control to the graph that
runs the subgraph (supervisor and swarm handoffs). Ported from LangGraph's
``tests/test_parent_command.py`` and ``test_pregel.py`` (``test_parent_command``,
``test_parent_command_goto``, ``test_parent_command_goto_deeply_nested``,
``test_node_destinations``, ``test_timeout_with_parent_command``), on every backend."""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Annotated, Any, TypedDict

import pytest

from plait import (
    END,
    START,
    AppendMessages,
    Checkpointer,
    Command,
    CompiledGraph,
    Graph,
    MessagesState,
    NodeContext,
    NoParentGraphError,
    interrupt,
)


class Dialog(TypedDict):
    dialog_state: Annotated[list[str], operator.add]


def _goto_parent_graph(checkpointer: Checkpointer | None) -> CompiledGraph:
    def node_a_child(state: Any) -> Any:
        return {"dialog_state": ["a_child_state"]}

    def node_b_child(state: Any) -> Any:
        return Command(graph=Command.PARENT, goto="node_b_parent", update={"dialog_state": ["b_child_state"]})

    sub = Graph(Dialog).add_node(node_a_child).add_node(node_b_child)
    sub.add_edge(START, "node_a_child").add_edge("node_a_child", "node_b_child")

    def node_b_parent(state: Any) -> Any:
        return {"dialog_state": ["node_b_parent"]}

    main = Graph(Dialog).add_node(node_b_parent)
    main.add_node("subgraph_node", sub.compile(), destinations=("node_b_parent",))
    main.add_edge(START, "subgraph_node")
    return main.compile(checkpointer=checkpointer)


def test_parent_command_goto(make_saver: Callable[..., Checkpointer]) -> None:
    app = _goto_parent_graph(make_saver())
    # LangGraph's numbers: the subgraph stops at the command, so its node_a_child write is
    # not handed back; the command's update and goto are the parent task's.
    assert app.invoke({"dialog_state": ["init_state"]}, thread_id="t") == {
        "dialog_state": ["init_state", "b_child_state", "node_b_parent"]
    }
    state = app.get_state("t")
    assert state.next == () and state.status == "idle"
    steps = [h.metadata.get("writes") for h in reversed(app.get_state_history("t"))]
    assert steps == [
        {"input": ["dialog_state"]},
        {"subgraph_node": ["dialog_state"]},
        {"node_b_parent": ["dialog_state"]},
    ]


def test_parent_command_goto_without_a_checkpointer() -> None:
    assert _goto_parent_graph(None).invoke({"dialog_state": ["init_state"]}) == {
        "dialog_state": ["init_state", "b_child_state", "node_b_parent"]
    }


def test_parent_command_update_writes_a_channel_only_the_parent_has(make_saver: Callable[..., Checkpointer]) -> None:
    def get_user_name(state: Any) -> Any:
        return Command(update={"user_name": "Meow"}, graph=Command.PARENT)

    sub = Graph(MessagesState).add_node("tool", get_user_name).add_edge(START, "tool").compile()

    class Parent(TypedDict):
        messages: Annotated[list[dict[str, Any]], AppendMessages()]
        user_name: str

    app = Graph(Parent).add_node("alice", sub).add_edge(START, "alice").compile(checkpointer=make_saver())
    out = app.invoke({"messages": [{"role": "user", "content": "get user name"}]}, thread_id="t", durability="exit")
    assert out["user_name"] == "Meow" and [m["content"] for m in out["messages"]] == ["get user name"]
    assert app.get_state("t").values["user_name"] == "Meow" and app.get_state("t").next == ()


def test_parent_command_goto_deeply_nested(make_saver: Callable[..., Checkpointer]) -> None:
    """Command.PARENT goes one level up: from the innermost graph to the middle one."""

    def sub_sub_child(state: Any) -> Any:
        return Command(graph=Command.PARENT, goto="sub_child_3", update={"dialog_state": ["sub_sub_child"]})

    innermost = Graph(Dialog).add_node("sub_sub_child", sub_sub_child).add_edge(START, "sub_sub_child")

    middle = Graph(Dialog)
    middle.add_node("sub_child_1", lambda s: {"dialog_state": ["sub_child_1"]})
    middle.add_node("sub_child_2", innermost.compile(), destinations=("sub_child_3",))
    middle.add_node("sub_child_3", lambda s: {"dialog_state": ["sub_child_3"]})
    middle.add_edge(START, "sub_child_1").add_edge("sub_child_1", "sub_child_2")

    main = Graph(Dialog).add_node("child_1", lambda s: {"dialog_state": ["child_1"]})
    main.add_node("child_2", middle.compile()).add_edge(START, "child_1").add_edge("child_1", "child_2")
    app = main.compile(checkpointer=make_saver())
    # LangGraph's list repeats "init" and "child_1" (its subgraph writes its whole state back
    # through operator.add); plait writes back what the subgraph added, once.
    assert app.invoke({"dialog_state": ["init"]}, thread_id="t") == {
        "dialog_state": ["init", "child_1", "sub_child_1", "sub_sub_child", "sub_child_3"]
    }


@pytest.mark.parametrize("how", ["node", "ainvoke in a node"])
def test_node_destinations(how: str) -> None:
    def node_a(state: Any) -> Any:
        return Command(
            update={"foo": state["foo"]}, goto="node_b" if state["foo"] == "a" else "node_c", graph=Command.PARENT
        )

    class Foo(TypedDict):
        foo: Annotated[str, operator.add]

    subgraph = Graph(Foo).add_node(node_a).add_edge(START, "node_a").compile()

    async def call_subgraph(state: Any) -> Any:
        return await subgraph.ainvoke(dict(state))

    b = Graph(Foo).add_node("child", subgraph if how == "node" else call_subgraph, destinations=("node_b", "node_c"))
    b.add_node("node_b", lambda s: {"foo": "b"}).add_node("node_c", lambda s: {"foo": "c"})
    b.add_edge(START, "child").add_edge("node_b", END).add_edge("node_c", END)
    app = b.compile()
    assert app.invoke({"foo": ""}) == {"foo": "c"}
    assert app.invoke({"foo": "a"}) == {"foo": "aab"}
    mermaid = app.draw_mermaid()
    assert 'child -.->|"goto"| node_b' in mermaid and 'child -.->|"goto"| node_c' in mermaid


def test_parent_command_from_subgraphs_called_in_a_node() -> None:
    """LangGraph's test_parent_command_from_nested_subgraph: the command leaves the calling
    node at the call, so nothing after it runs."""

    class Parent(TypedDict):
        jump_from_idx: int

    class Child(TypedDict):
        jump: bool

    def child_node(state: Any) -> Any:
        if state["jump"]:
            return Command(graph=Command.PARENT, goto="parent_second")
        return {"jump": state["jump"]}

    child_0 = Graph(Child).add_node("node", child_node).add_edge(START, "node").compile()
    child_1 = Graph(Child).add_node("node", child_node).add_edge(START, "node").compile()
    after: list[int] = []

    async def parent_first(state: Any, ctx: NodeContext) -> Any:
        await child_0.ainvoke({"jump": state["jump_from_idx"] == 1})
        after.append(0)
        await ctx.subgraph(child_1, {"jump": state["jump_from_idx"] == 2})
        after.append(1)
        return {}

    g = Graph(Parent).add_node("parent_first", parent_first, destinations=("parent_second",))
    g.add_node("parent_second", lambda s: {}).add_edge(START, "parent_first").add_edge("parent_second", END)
    app = g.compile()
    assert app.invoke({"jump_from_idx": 1}) == {"jump_from_idx": 1} and after == []
    assert app.invoke({"jump_from_idx": 2}) == {"jump_from_idx": 2} and after == [0]


def test_parent_command_is_not_swallowed_by_except_exception() -> None:
    sub = Graph(Dialog).add_node(
        "n", lambda s: Command(graph=Command.PARENT, goto="done", update={"dialog_state": ["handed"]})
    )
    inner = sub.add_edge(START, "n").compile()

    async def careful(state: Any) -> Any:
        try:
            await inner.ainvoke(dict(state))
        except Exception:  # the hand-off is no failure of the call
            return {"dialog_state": ["swallowed"]}
        return {"dialog_state": ["not reached"]}

    g = Graph(Dialog).add_node("careful", careful, destinations=("done",))
    g.add_node("done", lambda s: {"dialog_state": ["done"]}).add_edge(START, "careful")
    assert g.compile().invoke({"dialog_state": []}) == {"dialog_state": ["handed", "done"]}


def test_parent_command_at_the_top_is_an_error_that_names_the_node(make_saver: Callable[..., Checkpointer]) -> None:
    """LangGraph raises its internal ParentCommand out of invoke; plait says what is wrong,
    and stores it as the node's failure."""
    g = Graph(Dialog).add_node("parent_cmd", lambda s: Command(graph=Command.PARENT, goto="test_cmd"))
    app = g.add_edge(START, "parent_cmd").compile(checkpointer=make_saver())
    with pytest.raises(NoParentGraphError, match="'parent_cmd'.*no parent graph") as caught:
        app.invoke({"dialog_state": []}, thread_id="t")
    assert caught.value.node == "parent_cmd" and caught.value.step == 0
    state = app.get_state("t")
    assert state.status == "error" and state.next == ("parent_cmd",)


def test_a_handoff_after_an_interrupt_in_the_subgraph(make_saver: Callable[..., Checkpointer]) -> None:
    """A swarm's handoff after asking the human: the resumed subgraph hands control up."""

    def ask(state: Any) -> Any:
        answer = interrupt("who next?")
        return Command(graph=Command.PARENT, goto=answer, update={"dialog_state": [f"to {answer}"]})

    agent = Graph(Dialog).add_node("ask", ask).add_edge(START, "ask").compile()
    g = Graph(Dialog).add_node("agent", agent, destinations=("billing", "support"))
    g.add_node("billing", lambda s: {"dialog_state": ["billing"]})
    g.add_node("support", lambda s: {"dialog_state": ["support"]})
    app = g.add_edge(START, "agent").compile(checkpointer=make_saver())
    paused = app.invoke({"dialog_state": []}, thread_id="t")
    assert paused["__interrupt__"][0].value == "who next?"
    assert app.invoke(Command(resume="billing"), thread_id="t") == {"dialog_state": ["to billing", "billing"]}


def test_command_graph_takes_only_parent() -> None:
    with pytest.raises(ValueError, match="Command.PARENT"):
        Command(graph="some_graph", goto="x")
    assert Command(graph=Command.PARENT).graph == "__parent__" == Command.PARENT
