"""Ready parts for the commonest graph, a chat model that calls tools: a state with a
``messages`` channel, a router that sends a reply with tool calls to the tools, and a node that
runs them.

Messages are JSON data (plait never pickles), in the shape most chat APIs use::

    {"role": "assistant", "content": "...",
     "tool_calls": [{"id": "call_1", "name": "weather", "args": {"city": "Oslo"}}]}
    {"role": "tool", "tool_call_id": "call_1", "name": "weather", "content": "..."}

Turning a provider's reply into such a dict (and back) is the one thing left to the caller: a
few lines around the OpenAI, Anthropic or any other client (see docs/tutorial.md).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
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
    """The tool calls of the last message in ``state[key]`` (none when it has none)."""
    messages = state.get(key) or []
    if not messages:
        return []
    calls = messages[-1].get("tool_calls") if isinstance(messages[-1], Mapping) else None
    return list(calls or [])


def tools_condition(state: Mapping[str, Any]) -> str:
    """A router: ``"tools"`` when the last message asks for tool calls, else ``END``.

    ``graph.add_conditional_edges("agent", tools_condition, {"tools": "tools", END: END})``.
    """
    return "tools" if tool_calls(state) else END


Tool = Callable[..., Any] | Callable[..., Awaitable[Any]]


def tool_node(tools: Sequence[Tool] | Mapping[str, Tool], *, key: str = "messages") -> Callable[..., Any]:
    """A node that runs the tool calls of the last message, each with its ``args`` as
    keyword arguments, and answers each with a ``{"role": "tool"}`` message.

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
        for i, call in enumerate(tool_calls(state, key)):
            call_id = str(call.get("id") or f"call-{i}")
            name = str(call.get("name", ""))
            tool = table.get(name)
            if tool is None:
                content: Any = f"error: there is no tool named {name!r}; the tools are: {names}"
            else:
                args = dict(call.get("args") or {})
                if name in keyed:
                    args["idempotency_key"] = f"{ctx.idempotency_key}:{call_id}"
                content = await ctx.aonce(f"tool:{call_id}", functools.partial(_call, tool, args))
            answers.append({"role": "tool", "tool_call_id": call_id, "name": name, "content": content})
        return {key: answers}

    return tools_


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
