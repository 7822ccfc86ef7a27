"""interrupt() and the static breakpoints: pausing for a human and resuming."""

from __future__ import annotations

from typing import Any

import pytest

from plait import (
    END,
    START,
    AppendList,
    Command,
    Graph,
    Interrupt,
    InvalidResumeError,
    MemoryCheckpointer,
    NoCheckpointerError,
    Send,
    StateSchema,
    interrupt,
)


def schema() -> StateSchema:
    return StateSchema.builder().add("log", AppendList()).add_lww("answer").build()


def chain(*nodes: tuple[str, Any]) -> Graph:
    g = Graph(schema())
    for name, fn in nodes:
        g.add_node(name, fn)
    names = [n for n, _ in nodes]
    g.add_edge(START, names[0])
    for a, b in zip(names, names[1:], strict=False):
        g.add_edge(a, b)
    return g.add_edge(names[-1], END)


def logger(name: str) -> Any:
    return lambda state: {"log": [name]}


def test_interrupt_needs_a_checkpointer() -> None:
    app = chain(("ask", lambda s: {"answer": interrupt("question?")})).compile()
    with pytest.raises(NoCheckpointerError, match="checkpointer"):
        app.invoke({})


def test_the_payload_is_returned_and_stored_and_a_resume_answers_it() -> None:
    calls = [0]

    def ask(state: Any) -> Any:
        calls[0] += 1
        reply = interrupt({"question": "ship it?"})
        return {"answer": reply, "log": ["ask"]}

    app = chain(("before", logger("before")), ("ask", ask), ("after", logger("after"))).compile(MemoryCheckpointer())
    out = app.invoke({}, thread_id="t")
    [pending] = out["__interrupt__"]
    assert isinstance(pending, Interrupt)
    assert (pending.value, pending.node, pending.index) == ({"question": "ship it?"}, "ask", 0)
    assert out["log"] == ["before"]
    state = app.get_state("t")
    assert state.interrupts == (pending,)
    assert state.next == ("ask",)

    out = app.invoke(Command(resume="yes"), thread_id="t")
    assert calls[0] == 2, "the node runs again from its start"
    assert out["answer"] == "yes"
    assert out["log"] == ["before", "ask", "after"]
    assert "__interrupt__" not in out
    assert app.get_state("t").interrupts == ()


def test_two_interrupts_in_one_node_are_resumed_one_after_the_other() -> None:
    def ask(state: Any) -> Any:
        first = interrupt("first?")
        second = interrupt("second?")
        return {"answer": f"{first}+{second}"}

    app = chain(("ask", ask)).compile(MemoryCheckpointer())
    out = app.invoke({}, thread_id="t")
    assert [i.value for i in out["__interrupt__"]] == ["first?"]
    out = app.invoke(Command(resume="A"), thread_id="t")
    assert [(i.value, i.index) for i in out["__interrupt__"]] == [("second?", 1)]
    out = app.invoke(Command(resume="B"), thread_id="t")
    assert out["answer"] == "A+B"
    assert "__interrupt__" not in out


def parallel_askers() -> Graph:
    def asker(name: str) -> Any:
        def node(state: Any) -> Any:
            return {"log": [f"{name}={interrupt(name + '?')}"]}

        return node

    g = Graph(schema()).add_node("x", asker("x")).add_node("y", asker("y")).add_node("done", logger("done"))
    g.add_edge(START, "x").add_edge(START, "y").add_edge(["x", "y"], "done")
    return g


def test_several_pending_interrupts_are_resumed_by_id() -> None:
    app = parallel_askers().compile(MemoryCheckpointer())
    out = app.invoke({}, thread_id="t")
    by_node = {i.node: i for i in out["__interrupt__"]}
    assert set(by_node) == {"x", "y"}
    assert {i.value for i in app.get_state("t").interrupts} == {"x?", "y?"}

    with pytest.raises(InvalidResumeError, match="several interrupts"):
        app.invoke(Command(resume="bare"), thread_id="t")

    out = app.invoke(Command(resume={by_node["x"].id: 1, by_node["y"].id: 2}), thread_id="t")
    assert out["log"] == ["x=1", "y=2", "done"]


def test_resuming_one_of_several_interrupts_leaves_the_other_pending() -> None:
    app = parallel_askers().compile(MemoryCheckpointer())
    out = app.invoke({}, thread_id="t")
    by_node = {i.node: i for i in out["__interrupt__"]}
    out = app.invoke(Command(resume={by_node["y"].id: "later"}), thread_id="t")
    assert [i.id for i in out["__interrupt__"]] == [by_node["x"].id]
    out = app.invoke(Command(resume={by_node["x"].id: "now"}), thread_id="t")
    assert out["log"] == ["x=now", "y=later", "done"]


def test_a_resume_without_a_pending_interrupt_is_invalid() -> None:
    app = chain(("a", logger("a"))).compile(MemoryCheckpointer())
    app.invoke({}, thread_id="t")
    with pytest.raises(InvalidResumeError):
        app.invoke(Command(resume="x"), thread_id="t")
    with pytest.raises(InvalidResumeError):
        app.invoke(Command(resume="x"), thread_id="never-ran")


def test_except_exception_in_a_node_does_not_swallow_the_interrupt() -> None:
    swallowed: list[BaseException] = []

    def ask(state: Any) -> Any:
        try:
            reply = interrupt("really?")
        except Exception as exc:
            swallowed.append(exc)
            reply = "swallowed"
        return {"answer": reply}

    app = chain(("ask", ask)).compile(MemoryCheckpointer())
    out = app.invoke({}, thread_id="t")
    assert swallowed == []
    assert "__interrupt__" in out
    assert "answer" not in out
    assert app.invoke(Command(resume="ok"), thread_id="t")["answer"] == "ok"


def test_interrupt_before_pauses_and_none_continues_past_it_once() -> None:
    calls = {"a": 0, "b": 0, "c": 0}

    def counted(name: str) -> Any:
        def node(state: Any) -> Any:
            calls[name] += 1
            return {"log": [name]}

        return node

    g = chain(("a", counted("a")), ("b", counted("b")), ("c", counted("c")))
    app = g.compile(MemoryCheckpointer(), interrupt_before=["b"])
    out = app.invoke({}, thread_id="t")
    assert out["log"] == ["a"]
    assert calls == {"a": 1, "b": 0, "c": 0}
    assert app.get_state("t").next == ("b",)

    out = app.invoke(None, thread_id="t")
    assert out["log"] == ["a", "b", "c"]
    assert calls == {"a": 1, "b": 1, "c": 1}
    assert app.get_state("t").next == ()


def test_interrupt_after_pauses_and_none_continues_past_it_once() -> None:
    calls = {"a": 0, "b": 0, "c": 0}

    def counted(name: str) -> Any:
        def node(state: Any) -> Any:
            calls[name] += 1
            return {"log": [name]}

        return node

    g = chain(("a", counted("a")), ("b", counted("b")), ("c", counted("c")))
    app = g.compile(MemoryCheckpointer(), interrupt_after=["a"])
    out = app.invoke({}, thread_id="t")
    assert out["log"] == ["a"], "a ran and its writes are in"
    assert calls == {"a": 1, "b": 0, "c": 0}
    assert app.get_state("t").next == ("b",)

    out = app.invoke(None, thread_id="t")
    assert out["log"] == ["a", "b", "c"]
    assert calls == {"a": 1, "b": 1, "c": 1}


def test_a_breakpoint_in_a_loop_pauses_on_every_pass() -> None:
    g = Graph(schema()).add_node("tick", logger("tick")).add_edge(START, "tick")
    g.add_conditional_edges("tick", lambda s: END if len(s["log"]) >= 3 else "tick")
    app = g.compile(MemoryCheckpointer(), interrupt_before=["tick"])
    lengths = [len(app.invoke({}, thread_id="t")["log"])]
    for _ in range(3):
        lengths.append(len(app.invoke(None, thread_id="t")["log"]))
    assert lengths == [0, 1, 2, 3]


def test_breakpoints_need_a_checkpointer() -> None:
    with pytest.raises(NoCheckpointerError):
        chain(("a", logger("a"))).compile(interrupt_before=["a"])


def test_a_resume_does_not_rerun_siblings_that_finished_and_can_carry_an_update() -> None:
    calls = {"ask": 0, "sib": 0}

    async def ask(state: Any) -> Any:
        calls["ask"] += 1
        return {"answer": interrupt("q")}

    def sib(state: Any) -> Any:
        calls["sib"] += 1
        return {"log": ["sib"]}

    g = Graph(schema()).add_node("ask", ask).add_node("sib", sib).add_edge(START, "ask").add_edge(START, "sib")
    app = g.compile(MemoryCheckpointer())
    assert app.invoke({}, thread_id="t")["log"] == []
    out = app.invoke(Command(resume="r", update={"log": ["edited"]}), thread_id="t")
    assert calls == {"ask": 2, "sib": 1}
    assert out["answer"] == "r"
    assert out["log"] == ["edited", "sib"]


def test_interrupts_in_send_tasks_are_resumed_by_id() -> None:
    def work(arg: Any) -> Any:
        return {"log": [f"{arg}:{interrupt(arg)}"]}

    g = Graph(schema()).add_node("split", logger("split")).add_node("work", work).add_edge(START, "split")
    g.add_conditional_edges("split", lambda s: [Send("work", "p"), Send("work", "q")])
    app = g.compile(MemoryCheckpointer())
    out = app.invoke({}, thread_id="t")
    ids = {i.value: i.id for i in out["__interrupt__"]}
    assert set(ids) == {"p", "q"}
    assert len(set(ids.values())) == 2
    out = app.invoke(Command(resume={ids["q"]: 2, ids["p"]: 1}), thread_id="t")
    assert out["log"] == ["split", "p:1", "q:2"]
