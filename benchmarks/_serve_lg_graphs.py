"""The serve benchmark's graphs written for LangGraph, as ``langgraph dev`` loads them.

Not imported by the benchmark: ``benchmarks.serve_bench`` copies this file into the scratch
folder of a ``langgraph dev`` it starts (from a separate virtual environment) and names its
graphs in a ``langgraph.json`` there. The same shapes as plait's side
(``benchmarks._serve_plait``): ``one`` (one node), ``steps`` (one node looping ten times)
and ``chat`` (a node whose chat model streams :data:`DELTAS`).
"""

from __future__ import annotations

import operator
from collections.abc import AsyncIterator
from typing import Annotated, Any, TypedDict

from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Command

DELTAS = ["The", " answer", " is", " that", " a", " durable", " graph", " keeps", " every", " step", ","]
DELTAS += [" so", " a", " crash", " loses", " nothing", " it", " has", " done", "."]
"""The chat node's answer, twenty deltas (the same list as plait's side)."""


class Count(TypedDict):
    n: Annotated[int, operator.add]


async def _one(state: Count) -> dict[str, Any]:
    return {"n": 1}


async def _step(state: Count) -> Command[Any]:
    return Command(update={"n": 1}, goto=END if state["n"] + 1 >= 10 else "step")


def _one_graph() -> Any:
    g = StateGraph(Count)
    g.add_node("one", _one)
    g.add_edge(START, "one")
    g.add_edge("one", END)
    return g.compile()


def _steps_graph() -> Any:
    g = StateGraph(Count)
    g.add_node("step", _step, destinations=("step", END))
    g.add_edge(START, "step")
    return g.compile()


class Scripted(BaseChatModel):
    """A chat model without a model: it streams :data:`DELTAS` whatever it is asked."""

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content="".join(DELTAS)))])

    async def _astream(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> AsyncIterator[ChatGenerationChunk]:
        for delta in DELTAS:
            chunk = ChatGenerationChunk(message=AIMessageChunk(content=delta))
            if run_manager is not None:
                await run_manager.on_llm_new_token(delta, chunk=chunk)
            yield chunk


class Chat(TypedDict):
    messages: Annotated[list[BaseMessage], add_messages]


_MODEL = Scripted()


async def _reply(state: Chat) -> dict[str, Any]:
    return {"messages": [await _MODEL.ainvoke(state["messages"])]}


def _chat_graph() -> Any:
    g = StateGraph(Chat)
    g.add_node("reply", _reply)
    g.add_edge(START, "reply")
    g.add_edge("reply", END)
    return g.compile()


one = _one_graph()
steps = _steps_graph()
chat = _chat_graph()
