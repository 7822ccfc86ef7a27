"""Errors of graphs and runs: a graph built or used wrongly, a run that failed."""

from __future__ import annotations

from collections.abc import Sequence

from plait.errors._base import PlaitError

__all__ = [
    "ContextError",
    "GraphChangedError",
    "GraphError",
    "GraphMigrationError",
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
    """A thread's checkpoint was written by a graph that this graph cannot safely continue
    (after any migrations the graph has for it: see ``compile(version=..., migrations=...)``)."""

    def __init__(
        self,
        thread_id: str,
        changes: Sequence[str],
        *,
        thread_version: int = 1,
        graph_version: int = 1,
        graph: str | None = None,
    ) -> None:
        self.thread_id = thread_id
        self.changes = tuple(changes)
        self.thread_version = thread_version
        """The version of the graph that wrote the thread (1: written before versions existed)."""
        self.graph_version = graph_version
        """This graph's version (1: compiled without ``version=``)."""
        self.graph = graph
        """This graph's name, when it is versioned."""
        named = f" {graph!r}" if graph else ""
        if thread_version > graph_version:
            advice = (
                f" The thread was written by a newer version of the graph: resume it with version {thread_version}."
            )
        else:
            nxt = graph_version + 1 if thread_version == graph_version else graph_version
            advice = (
                " To carry the thread over, give the graph a new version and a migration for the step that "
                f"changed, e.g. compile(version={nxt}, migrations={{{nxt - 1}: fn}}) with fn(values) -> values "
                "(rename, convert or drop channels), or fn(values, next) -> (values, next) to rename the nodes "
                "the thread waits in. Or resume it with the graph that wrote it, fork it and fix the state with "
                "update_state, or start a new thread."
            )
        super().__init__(
            f"thread {thread_id!r} was checkpointed by version {thread_version} of the graph{named}, which this "
            f"graph (version {graph_version}) cannot continue: " + "; ".join(self.changes) + "." + advice
        )


class GraphMigrationError(GraphError):
    """A migration (``compile(migrations={n: fn})``) raised, or returned something a thread
    cannot hold, while carrying a thread to the graph's version. Nothing was written: the
    thread is as it was. The migration's exception is chained."""

    def __init__(
        self, thread_id: str, thread_version: int, graph_version: int, step: int, cause: BaseException
    ) -> None:
        self.thread_id = thread_id
        self.thread_version = thread_version
        """The version the thread was written by."""
        self.graph_version = graph_version
        """The version the graph is (the migration's target)."""
        self.step = step
        """The migration that failed: ``migrations[step]``, from version ``step`` to ``step + 1``."""
        self.cause = cause
        super().__init__(
            f"migrating thread {thread_id!r} from version {thread_version} to {graph_version} failed: the "
            f"migration from version {step} to {step + 1} raised {type(cause).__name__}: "
            f"{str(cause).rstrip('.')}. The thread is unchanged; fix the migration and resume it again "
            "(or resume it with the graph version that wrote it)"
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


class NoParentGraphError(GraphError):
    """A node returned ``Command(graph=Command.PARENT)`` in a graph that no other graph runs."""

    def __init__(self, node: str, step: int, thread_id: str | None) -> None:
        self.node = node
        self.step = step
        self.thread_id = thread_id
        where = f" of thread {thread_id!r}" if thread_id else ""
        super().__init__(
            f"node {node!r} returned Command(graph=Command.PARENT) in step {step + 1}{where}, but its graph runs "
            "at the top, not as a subgraph: there is no parent graph to hand the command to. Drop graph= to "
            "route in this graph, or run this graph as a node of another (add_node(name, compiled_graph))."
        )


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
