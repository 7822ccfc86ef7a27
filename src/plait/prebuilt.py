"""Ready parts for the commonest graph, a chat model that calls tools: a state with a
``messages`` channel, a router that sends a reply with tool calls to the tools, and a node that
runs them.

Messages are JSON data (plait never pickles), in either of the shapes chat code uses: the
one most chat APIs use, and LangChain's serialized one (what ``ctx.stream_message`` returns)::

    {"role": "assistant", "content": "...",
     "tool_calls": [{"id": "call_1", "name": "weather", "args": {"city": "Oslo"}}]}
    {"role": "tool", "tool_call_id": "call_1", "name": "weather", "content": "..."}

    {"type": "ai", "content": "...", "tool_calls": [{"id": "call_1", "name": "weather", "args": {...}}]}
    {"type": "tool", "tool_call_id": "call_1", "name": "weather", "content": "..."}

A tool call may also be in OpenAI's wire shape (``{"id", "function": {"name", "arguments":
"<JSON>"}}``). Turning a provider's reply into such a dict (and back) is the one thing left to
the caller: a few lines around the OpenAI, Anthropic or any other client (see
docs/tutorial.md), or ``ctx.stream_message`` around a LangChain model's stream.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Annotated, Any, TypedDict

from plait.engine.context import NodeContext
from plait.state.reducers import AppendMessages
from plait.types import END

__all__ = ["MessagesState", "tool_node", "tools_condition"]


class MessagesState(TypedDict):
    """A state with one channel, ``messages``, merged by :class:`~plait.AppendMessages`: new
    messages are appended, a message whose ``id`` is already there replaces it, and a message
    without one gets a new id (stable when its task re-runs). Subclass it to add channels::

        class State(MessagesState):
            turns: Annotated[int, Sum()]
    """

    messages: Annotated[list[dict[str, Any]], AppendMessages()]


def tool_calls(state: Mapping[str, Any], key: str = "messages") -> list[Mapping[str, Any]]:
    """The tool calls of the last message in ``state[key]`` (none when it has none), each as
    ``{"id", "name", "args"}``, whichever shape the message and its calls are in. A call in
    OpenAI's wire shape whose ``arguments`` are not a JSON object keeps them as they came, a
    string (the tool node answers it with an error the model can correct)."""
    messages = state.get(key) or []
    if not messages:
        return []
    calls = messages[-1].get("tool_calls") if isinstance(messages[-1], Mapping) else None
    return [_call_of(c) for c in calls or () if isinstance(c, Mapping)]


def _call_of(call: Mapping[str, Any]) -> Mapping[str, Any]:
    function = call.get("function")
    if not isinstance(function, Mapping) or "name" in call:
        return call
    raw = function.get("arguments") or "{}"
    try:
        args = json.loads(raw)
    except (TypeError, ValueError):
        args = None
    return {"id": call.get("id"), "name": function.get("name"), "args": args if isinstance(args, dict) else str(raw)}


def tools_condition(state: Mapping[str, Any]) -> str:
    """A router: ``"tools"`` when the last message asks for tool calls, else ``END``.

    ``graph.add_conditional_edges("agent", tools_condition, {"tools": "tools", END: END})``.
    """
    return "tools" if tool_calls(state) else END


Tool = Callable[..., Any] | Callable[..., Awaitable[Any]]


def tool_node(tools: Sequence[Tool] | Mapping[str, Tool], *, key: str = "messages") -> Callable[..., Any]:
    """A node that runs the tool calls of the last message, each with its ``args`` as
    keyword arguments, and answers each with a tool message in the shape of the message that
    asked: ``{"role": "tool", ...}`` for one with a ``role``, LangChain's ``{"type": "tool",
    ...}`` for one with a ``type`` (whose content is a string, or a list of content blocks:
    a tool's other JSON results are given to it as JSON text, as LangGraph's ``ToolNode`` does).

    Each call runs through the effects ledger (``ctx.aonce``, named by the call's id): when
    the node runs again (one call of several failed and is retried, the process crashed
    after some calls), a call whose result was recorded is not made again. A call cut off by
    a crash before its result was recorded runs again, as every effect does: a tool that
    changes the outside world should pass an idempotency key to it (a tool that takes a
    keyword argument ``idempotency_key`` is given one, stable for that call).

    A call of a tool that is not in ``tools`` is answered with an error message that lists
    the tools, so that the model can correct itself; an exception raised by a tool fails the
    node (and is retried by its ``RetryPolicy``).

    Async tools run on the run's event loop, sync ones on a worker thread, one call after
    another in the order the model asked for them.

    Args:
        tools: functions (named by ``__name__``) or a mapping of name to function; sync or
            async; each returns JSON data (a string is the message content as is).
        key: the channel of the messages.
    """
    table: dict[str, Tool] = dict(tools) if isinstance(tools, Mapping) else {t.__name__: t for t in tools}
    names = ", ".join(sorted(table)) or "(none)"
    keyed = {name for name, tool in table.items() if _takes_key(tool)}

    async def tools_(state: Mapping[str, Any], ctx: NodeContext) -> dict[str, Any]:
        answers = []
        langchain = _asked_in_langchain_shape(state, key)
        for i, call in enumerate(tool_calls(state, key)):
            call_id = str(call.get("id") or f"call-{i}")
            name = str(call.get("name", ""))
            tool = table.get(name)
            if tool is None:
                content: Any = f"error: there is no tool named {name!r}; the tools are: {names}"
            elif not isinstance(call.get("args") or {}, Mapping):
                content = f"error: the arguments of the call of {name!r} are not a JSON object: {call['args']!r}"
            else:
                args = dict(call.get("args") or {})
                if name in keyed:
                    args["idempotency_key"] = f"{ctx.idempotency_key}:{call_id}"
                content = await ctx.aonce(f"tool:{call_id}", functools.partial(_call, tool, args))
            if langchain:
                text = content if isinstance(content, str | list) else json.dumps(content, ensure_ascii=False)
                answers.append({"type": "tool", "tool_call_id": call_id, "name": name, "content": text})
            else:
                answers.append({"role": "tool", "tool_call_id": call_id, "name": name, "content": content})
        return {key: answers}

    return tools_


def _asked_in_langchain_shape(state: Mapping[str, Any], key: str) -> bool:
    last = (state.get(key) or [None])[-1]
    return isinstance(last, Mapping) and "role" not in last and isinstance(last.get("type"), str)


async def _call(tool: Tool, args: dict[str, Any]) -> Any:
    """Call a tool: an async one on the run's loop, a sync one on a worker thread (a blocking
    HTTP call must not hold up the other tasks of the step)."""
    if inspect.iscoroutinefunction(tool):
        return await tool(**args)
    return await asyncio.to_thread(tool, **args)


def _takes_key(fn: Tool) -> bool:
    try:
        return "idempotency_key" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
