"""Runtime context (``invoke(..., context=...)`` read as ``ctx.context``, typed by the graph's
declared context type, never stored), run ``metadata=`` on checkpoints, and the build-time
refusal of LangGraph's ``def node(state, config)``."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Annotated, Any, TypedDict

import pytest

from plait import END, START, Checkpointer, ContextError, Graph, NodeContext, NodeSignatureError, Sum


class State(TypedDict):
    seen: Annotated[int, Sum()]
    who: str


@dataclasses.dataclass
class Ctx:
    user: str
    model: str = "small"


class CtxDict(TypedDict):
    user: str


def graph(context: type | None) -> Graph:
    def node(state: Any, ctx: NodeContext) -> dict[str, Any]:
        c = ctx.context
        who = f"{type(c).__name__}:{c.user}/{c.model}" if isinstance(c, Ctx) else f"{type(c).__name__}:{c!r}"
        return {"who": who, "seen": 1}

    return Graph(State, context=context).add_node("node", node).add_edge(START, "node").add_edge("node", END)


def test_a_dict_becomes_the_declared_dataclass_with_its_defaults() -> None:
    app = graph(Ctx).compile()
    assert app.invoke({}, context={"user": "ann"})["who"] == "Ctx:ann/small"
    assert app.invoke({}, context=Ctx(user="bo", model="big"))["who"] == "Ctx:bo/big"


def test_a_typeddict_context_stays_a_dict() -> None:
    assert graph(CtxDict).compile().invoke({}, context={"user": "ann"})["who"] == "dict:{'user': 'ann'}"


@pytest.mark.parametrize(
    ("declared", "given", "match"),
    [
        (Ctx, {"model": "x"}, "missing 'user'"),
        (Ctx, {"user": "a", "colour": "red"}, "unknown 'colour'"),
        (Ctx, "ann", "got str"),
        (CtxDict, {}, "missing 'user'"),
        (CtxDict, ["user"], "not a mapping"),
    ],
)
def test_a_context_that_does_not_fit_is_refused_before_the_run(declared: type, given: Any, match: str) -> None:
    with pytest.raises(ContextError, match=match):
        graph(declared).compile().invoke({}, context=given)


@dataclasses.dataclass
class Optional_:
    model: str = "small"


class OptionalDict(TypedDict, total=False):
    user: str


@pytest.mark.parametrize(("declared", "missing"), [(Ctx, "'user'"), (CtxDict, "'user'"), (int, "no context")])
def test_no_context_for_a_type_with_required_fields_is_refused_before_the_run(declared: type, missing: str) -> None:
    """A node never meets ``ctx.context = None`` where the declared type promised fields."""
    app = graph(declared).compile()
    with pytest.raises(ContextError, match=missing) as info:
        app.invoke({})
    assert "--context JSON" in str(info.value), "the message says how to give one from the command line"


def test_no_context_for_a_type_whose_fields_all_have_defaults_is_its_defaults() -> None:
    def node(state: Any, ctx: NodeContext) -> dict[str, Any]:
        return {"who": repr(ctx.context), "seen": 1}

    def one(context: type) -> Any:
        return Graph(State, context=context).add_node("n", node).add_edge(START, "n").add_edge("n", END).compile()

    assert one(Optional_).invoke({})["who"] == "Optional_(model='small')"
    assert one(OptionalDict).invoke({})["who"] == "{}"


def test_without_a_declared_type_the_value_passes_as_given() -> None:
    assert graph(None).compile().invoke({}, context=7)["who"] == "int:7"
    assert graph(None).compile().invoke({})["who"] == "NoneType:None"


def test_stream_passes_the_context_too() -> None:
    items = list(graph(Ctx).compile().stream({}, mode="updates", context={"user": "cy"}))
    assert items == [{"node": {"who": "Ctx:cy/small", "seen": 1}}]


def test_the_context_is_never_stored_and_metadata_is_filterable(make_saver: Callable[..., Checkpointer]) -> None:
    app = graph(Ctx).compile(make_saver())
    app.invoke({}, thread_id="t", context={"user": "secret-user"}, metadata={"run": "first", "source": "mine"})
    app.invoke({}, thread_id="t", context={"user": "ann"}, metadata={"run": "second"})
    history = app.get_state_history("t")
    assert "secret-user" not in json.dumps([dict(h.metadata) for h in history])  # only a node stores it
    first = app.get_state_history("t", filter={"run": "first"})
    assert len(first) == 2  # the input checkpoint and the step's
    assert all(h.metadata["source"] in ("input", "loop") for h in first)  # plait's keys win
    assert [h.values["who"] for h in app.get_state_history("t", filter={"run": "second", "source": "loop"})] == [
        "Ctx:ann/small"
    ]


def test_a_langgraph_config_parameter_is_refused_at_build_time() -> None:
    def node(state: Any, config: Any) -> dict[str, Any]:
        return {}

    with pytest.raises(NodeSignatureError, match=r"node 'n'.*'config'.*ctx\.context"):
        Graph(State).add_node("n", node)


def test_a_pydantic_model_context_is_validated() -> None:
    pytest.importorskip("pydantic")
    from pydantic import BaseModel

    class Settings(BaseModel):
        user: str
        model: str = "small"

    def node(state: Any, ctx: NodeContext) -> dict[str, Any]:
        return {"who": f"{ctx.context.user}/{ctx.context.model}", "seen": 1}

    app = Graph(State, context=Settings).add_node("n", node).add_edge(START, "n").add_edge("n", END).compile()
    assert app.invoke({}, context={"user": "ann"})["who"] == "ann/small"
    with pytest.raises(ContextError, match="Settings"):
        app.invoke({}, context={"model": "x"})
    with pytest.raises(ContextError, match="no context was given"):
        app.invoke({})
