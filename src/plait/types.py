"""The small shared vocabulary: START, END, Send, Command, RetryPolicy, CachePolicy and Interrupt."""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final, Literal

__all__ = ["END", "START", "CachePolicy", "Command", "Durability", "Interrupt", "RetryPolicy", "Send"]

START: Final = "__start__"
"""The virtual node a run begins at: ``add_edge(START, "first")``."""
END: Final = "__end__"
"""The virtual node a run ends at: ``add_edge("last", END)`` or a router returning END."""

Durability = Literal["sync", "async", "exit"]


@dataclass(frozen=True, slots=True)
class Send:
    """Run ``node`` in the next super-step with ``arg`` as its input (one task per Send).

    Returned by a router or in ``Command(goto=...)``; the map step of map-reduce.
    """

    node: str
    arg: Any = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Command:
    """Write and route from inside a node, or resume an interrupted run.

    As a node's return value: ``update`` is written like a returned mapping and ``goto``
    (a node name, a list of names, Sends, or END) adds what runs next, on top of the node's
    static edges (as a conditional edge would; a node that routes only by Command has no
    edges of its own). As the input of ``invoke``: ``resume`` is the value ``interrupt()``
    returns (a mapping of interrupt id to value when several are pending), and ``update``
    is folded into the state before the run continues.

    ``graph=Command.PARENT`` (returned by a node of a subgraph) hands the command to the
    graph that runs the subgraph, as LangGraph's does (a supervisor's or a swarm's
    handoff): the subgraph stops there, and the parent's task that ran it writes
    ``update`` through the parent's channels and goes to ``goto``, a node of the parent.
    """

    PARENT: ClassVar[str] = "__parent__"
    """``Command(graph=Command.PARENT, ...)``: the command is for the enclosing graph."""

    update: Mapping[str, Any] | Sequence[tuple[str, Any]] | None = None
    goto: str | Send | Sequence[str | Send] = ()
    resume: Any = None
    graph: str | None = None
    """None: this graph; ``Command.PARENT``: the graph that runs this one as a subgraph."""
    has_resume: bool = field(default=False, repr=False)

    def __init__(
        self,
        *,
        update: Mapping[str, Any] | Sequence[tuple[str, Any]] | None = None,
        goto: str | Send | Sequence[str | Send] = (),
        resume: Any = ...,
        graph: str | None = None,
    ) -> None:
        if graph is not None and graph != Command.PARENT:
            raise ValueError(
                f"Command(graph={graph!r}): graph is None (this graph) or Command.PARENT (the graph that runs "
                "this one as a subgraph); to reach a graph further up, hand the command up one level at a time"
            )
        object.__setattr__(self, "update", update)
        object.__setattr__(self, "goto", goto)
        object.__setattr__(self, "has_resume", resume is not ...)
        object.__setattr__(self, "resume", None if resume is ... else resume)
        object.__setattr__(self, "graph", graph)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Command:
        """The Command a JSON document describes, as the LangGraph API sends one:
        ``{"update": ..., "goto": ..., "resume": ...}`` (each optional; a ``goto`` is a node
        name, a list of them, or ``{"node": ..., "input": ...}`` for a Send).

        Raises:
            ValueError: a ``goto`` of another shape.
        """

        def target(value: Any) -> Any:
            if isinstance(value, str):
                return value
            if isinstance(value, Mapping) and isinstance(value.get("node"), str):
                return Send(value["node"], value.get("input"))
            if isinstance(value, list):
                return [target(v) for v in value]
            raise ValueError(f"a command's goto is a node name, a list of them or {{node, input}}, not {value!r}")

        goto = data.get("goto")
        return cls(
            update=data.get("update"),
            goto=() if goto is None else target(goto),
            resume=data.get("resume", ...),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryPolicy:
    """How a failing node is retried before the run fails.

    The n-th retry waits ``min(initial_interval * backoff ** (n - 1), max_interval)``
    seconds, times a random factor in ``[1, 1 + jitter]``.
    """

    max_attempts: int = 3
    """Total attempts, the first included (1 means no retry)."""
    initial_interval: float = 0.5
    backoff: float = 2.0
    max_interval: float = 30.0
    jitter: float = 0.1
    retry_on: type[BaseException] | tuple[type[BaseException], ...] | Callable[[BaseException], bool] = Exception
    """Exception types to retry, or a predicate on the exception.

    The exception is what the node raised, or, when the node ran past its ``timeout``, a
    :class:`~plait.errors.NodeTimeoutError`, which is also a ``TimeoutError``: so
    ``retry_on=NodeTimeoutError`` retries only plait's timeouts, and ``retry_on=TimeoutError``
    (or ``asyncio.TimeoutError``, the same class) retries those and the timeouts the node
    raises itself. The default, ``Exception``, retries both."""

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("RetryPolicy.max_attempts must be at least 1")

    def should_retry(self, exc: BaseException) -> bool:
        on = self.retry_on
        if isinstance(on, type | tuple):
            return isinstance(exc, on)
        return bool(on(exc))

    def delay(self, retry_number: int) -> float:
        base = min(self.initial_interval * self.backoff ** (retry_number - 1), self.max_interval)
        return base * (1 + random.random() * self.jitter)


@dataclass(frozen=True, slots=True, kw_only=True)
class CachePolicy:
    """Cache a node's result by its input: ``add_node(..., cache_policy=CachePolicy(ttl=60))``
    with ``compile(cache=...)``. A node whose key is cached returns the stored writes
    without running (see docs/howto.md, "Cache a node's result").

    The cache holds JSON text only, never a pickle: what it reads back cannot run code.
    """

    key_func: Callable[..., str | bytes] | None = None
    """The key of a node's input (``key_func(input) -> str | bytes``; a task's is called
    with the task's arguments; hashed before it is stored). None: a hash of the input's
    canonical JSON (the state a node receives, a ``Send``'s argument), so equal inputs share
    an entry in every process."""
    ttl: float | None = None
    """Seconds an entry lasts, by the cache's clock (None: until cleared)."""

    def __post_init__(self) -> None:
        if self.ttl is not None and not self.ttl > 0:
            raise ValueError(f"CachePolicy.ttl is a number of seconds above 0 (or None), not {self.ttl!r}")
        if self.key_func is not None and not callable(self.key_func):
            raise TypeError(f"CachePolicy.key_func is a function of the node's input, not {self.key_func!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Interrupt:
    """A pause requested by ``interrupt(value)`` inside a node, waiting for a resume."""

    id: str
    """Stable id; pass ``Command(resume={id: value})`` when several are pending."""
    value: Any
    """The payload given to ``interrupt()``: what the human is asked."""
    node: str
    task_id: str
    index: int = 0
    """Which ``interrupt()`` call of the node this is (0 for the first)."""

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "value": self.value, "node": self.node, "task_id": self.task_id, "index": self.index}
