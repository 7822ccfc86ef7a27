"""Errors of graphs and runs: a graph built or used wrongly, a run that failed."""

from __future__ import annotations

from collections.abc import Sequence

from plait.errors._base import PlaitError

__all__ = [
    "ContextError",
    "GraphChangedError",
    "GraphError",
    "GraphRequiredError",
    "InvalidResumeError",
    "MissingNodeError",
    "NoCheckpointerError",
    "NodeError",
    "NodeSignatureError",
    "NodeTimeoutError",
    "RecursionLimitError",
    "RunError",
    "SyncCallOnLoopError",
]


class GraphError(PlaitError):
    """A graph was built or used wrongly. Compile-time checks raise this, naming the culprit."""


class MissingNodeError(GraphError):
    """A node name that the graph does not have."""

    def __init__(self, node: str, known: Sequence[str]) -> None:
        self.node = node
        self.known = tuple(known)
        super().__init__(
            f"the graph has no node {node!r}; its nodes are: " + (", ".join(repr(k) for k in self.known) or "(none)")
        )


class GraphChangedError(GraphError):
    """A thread's checkpoint was written by a graph that this graph cannot safely continue."""

    def __init__(self, thread_id: str, changes: Sequence[str]) -> None:
        self.thread_id = thread_id
        self.changes = tuple(changes)
        super().__init__(
            f"thread {thread_id!r} was checkpointed by an incompatible version of this graph: "
            + "; ".join(self.changes)
            + ". Resume it with the graph that wrote it, fork it and fix the state with "
            "update_state, or start a new thread."
        )


class NodeSignatureError(GraphError):
    """A node (or router) whose parameters plait cannot call it with, such as LangGraph's
    ``def node(state, config)``: plait passes a :class:`~plait.NodeContext`, not a config."""

    def __init__(self, node: str, param: str) -> None:
        self.node = node
        self.param = param
        super().__init__(
            f"node {node!r} takes a second parameter named {param!r} (LangGraph's RunnableConfig): plait "
            "passes a NodeContext there instead. Rename it `ctx` and read per-run values from "
            "`ctx.context` (given by invoke(..., context=...)), the thread id from `ctx.thread_id`"
        )


class ContextError(GraphError):
    """A run's ``context=`` that does not fit the context type the graph declares
    (``Graph(State, context=Ctx)``): a missing or unknown field, or a value of another type."""

    def __init__(self, declared: str, problem: str) -> None:
        self.declared = declared
        self.problem = problem
        super().__init__(
            f"invoke(..., context=...) does not fit the graph's context type {declared}: {problem}. "
            f"Pass a {declared} or a dict with its fields (from the command line: --context JSON)"
        )


class GraphRequiredError(GraphError):
    """An action that folds values through reducers or runs nodes (an edit, a fork with edits,
    an answer to an interrupt, a continued run) was asked of a tool that was given no graph,
    or no graph that fits the thread. Nothing was written."""

    def __init__(self, action: str, advice: str) -> None:
        self.action = action
        super().__init__(f"{action} needs the thread's graph: {advice}")


class RunError(PlaitError):
    """A run stopped with a failure; the thread stays resumable from its last checkpoint."""


class NodeError(RunError):
    """A node raised. Its siblings finished and their writes were kept; the cause is chained."""

    def __init__(self, node: str, step: int, thread_id: str | None, cause: BaseException) -> None:
        self.node = node
        self.step = step
        """The step of the checkpoint the task ran from. The message says ``step + 1``, the
        step its writes would have made, which is how ``plait history``, the CLI's progress
        and the Studio number a node's work."""
        self.thread_id = thread_id
        where = f" of thread {thread_id!r}" if thread_id else ""
        resume = (
            f" The thread is resumable: invoke(None, thread_id={thread_id!r}) re-runs only the "
            "tasks that did not finish."
            if thread_id
            else ""
        )
        super().__init__(f"node {node!r} failed in step {step + 1}{where}: {type(cause).__name__}: {cause}.{resume}")


class NodeTimeoutError(NodeError, TimeoutError):
    """A node ran past its ``timeout``.

    Also a ``TimeoutError`` (which ``asyncio.TimeoutError`` is), so code that treats every
    timeout alike, a ``RetryPolicy(retry_on=TimeoutError)`` included, treats this one so too.
    """

    def __init__(self, node: str, step: int, thread_id: str | None, timeout: float) -> None:
        self.timeout = timeout
        super().__init__(node, step, thread_id, TimeoutError(f"did not finish within {timeout:g}s"))


class RecursionLimitError(RunError):
    """A run took more super-steps than ``recursion_limit`` allows."""

    def __init__(self, limit: int, thread_id: str | None) -> None:
        self.limit = limit
        self.thread_id = thread_id
        super().__init__(
            f"the run reached the recursion limit of {limit} super-steps without finishing. "
            "If the graph is meant to loop that long, pass a larger recursion_limit to "
            "invoke()/stream(); otherwise check the conditions that end its loops."
        )


class InvalidResumeError(RunError):
    """``Command(resume=...)`` that does not match the thread's pending interrupts."""

    def __init__(self, thread_id: str | None, reason: str) -> None:
        self.thread_id = thread_id
        self.reason = reason
        super().__init__(f"cannot resume thread {thread_id!r}: {reason}")


class NoCheckpointerError(RunError):
    """A feature that needs a checkpointer (interrupts, threads, history) was used without one."""

    def __init__(self, feature: str) -> None:
        self.feature = feature
        super().__init__(
            f"{feature} needs a checkpointer: compile the graph with "
            "checkpointer=MemoryCheckpointer() or checkpointer='plait.db' (SQLite), and pass a "
            "thread_id when you invoke it."
        )


class SyncCallOnLoopError(RunError):
    """A node called the sync form of a node API (``ctx.once``, ``ctx.stream_message``) on
    the run's event loop: an async node, where a blocking call would hold up every other task
    of the run. Its async form does the same without blocking."""

    def __init__(self, node: str, call: str, async_call: str) -> None:
        self.node = node
        self.call = call
        self.async_call = async_call
        super().__init__(
            f"node {node!r} called ctx.{call}() on the event loop, where it would block every other "
            f"task of the run; in an async node use `await ctx.{async_call}(...)` instead"
        )
