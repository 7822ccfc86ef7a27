"""LangGraph builder habits plait accepts: a join to END, a list mixing Commands and updates,
add_sequence, add_node(fn), set_finish_point, and a clear error for a dataclass state."""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any, TypedDict

import pytest

from plait import END, START, AppendList, Command, Graph, GraphError, NodeError, SchemaError


class State(TypedDict):
    log: Annotated[list[Any], AppendList()]
    note: str


def log(name: str) -> Any:
    return lambda state: {"log": [name]}


def test_a_join_may_go_to_end() -> None:
    g = Graph(State).add_node("a", log("a")).add_node("b", log("b")).add_node("slow", log("slow"))
    g.add_node("slower", log("slower"))
    g.add_edge(START, "a").add_edge(START, "slow").add_edge("slow", "slower").add_edge("a", "b")
    g.add_edge(["b", "slower"], END)
    app = g.compile()
    assert sorted(app.invoke({})["log"]) == ["a", "b", "slow", "slower"]
    assert "slower" in app.draw_mermaid() and app.draw_ascii()


def test_a_node_may_return_commands_beside_updates() -> None:
    def decide(state: Any) -> list[Any]:
        return [Command(goto="x", update={"note": "picked"}), {"log": ["decide"]}, ("log", ["pair"]), Command(goto="y")]

    g = Graph(State).add_node("decide", decide, destinations=["x", "y"])
    g.add_node("x", log("x")).add_node("y", log("y")).add_edge(START, "decide")
    out = g.compile().invoke({})
    assert out["note"] == "picked"
    assert out["log"] == ["decide", "pair", "x", "y"]


def test_a_list_with_something_else_beside_commands_fails_the_node() -> None:
    g = Graph(State).add_node("bad", lambda s: [Command(goto=END), 42]).add_edge(START, "bad")
    with pytest.raises(NodeError, match="beside Commands"):
        g.compile().invoke({})


def first(state: Any) -> dict[str, Any]:
    return {"log": ["first"]}


def second(state: Any) -> dict[str, Any]:
    return {"log": ["second"]}


def test_add_sequence_add_node_by_function_and_set_finish_point() -> None:
    g = Graph(State).add_sequence([first, second, ("third", log("third"))]).add_node(_last)
    g.add_edge("third", "_last").set_entry_point("first").set_finish_point("_last")
    assert set(g.spec().nodes) == {"first", "second", "third", "_last"}
    assert g.compile().invoke({})["log"] == ["first", "second", "third", "last"]


def _last(state: Any) -> dict[str, Any]:
    return {"log": ["last"]}


def test_a_lambda_needs_a_name_and_a_sequence_needs_nodes() -> None:
    with pytest.raises(GraphError, match="give it a name"):
        Graph(State).add_node(lambda s: None)
    with pytest.raises(GraphError, match="at least one"):
        Graph(State).add_sequence([])


@dataclasses.dataclass
class DataState:
    log: list[str]


def test_a_plain_class_as_state_points_to_typeddict_and_models() -> None:
    with pytest.raises(SchemaError, match=r"is a class.*TypedDict.*Pydantic model.*StateSchema\.builder"):
        Graph(int)


def test_a_dataclass_or_a_pydantic_model_declares_the_channels() -> None:
    from pydantic import BaseModel

    class Model(BaseModel):
        log: list[str] = []

    assert Graph(DataState).schema.keys == ("log",)
    assert Graph(Model).schema.keys == ("log",)
