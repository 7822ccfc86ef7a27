"""Errors of the functional API (``plait.task`` and ``plait.entrypoint``)."""

from __future__ import annotations

from plait.errors._graph import GraphError, RunError, SyncCallOnLoopError
from plait.errors._state import StateError

__all__ = [
    "EntrypointSignatureError",
    "TaskOutsideRunError",
    "TaskReplayError",
    "TaskResultError",
    "TaskWaitOnLoopError",
]


class TaskResultError(StateError, TypeError):
    """A task returned something that is not JSON data: its result is recorded in the
    checkpoint store so that a resumed run gets it back without running the task again, and
    plait stores JSON data only (nothing is ever pickled)."""

    def __init__(self, task: str, node: str, path: str, type_name: str) -> None:
        self.task = task
        self.node = node
        self.path = path
        self.type_name = type_name
        super().__init__(
            f"task {task!r} (called in {node!r}) returned {path}: {type_name}, which is not JSON data; a "
            "task's result is recorded so that a resume replays it, and only dict (str keys), list, str, "
            "int, float, bool and None can be: convert it in the task (e.g. model.model_dump(mode='json'), "
            "datetime.isoformat())"
        )


class TaskOutsideRunError(GraphError, RuntimeError):
    """A task was called where no run can record it: outside an entrypoint and outside a
    graph's node. Its call would not be durable, so plait refuses it (as LangGraph does)
    rather than run it as a plain function that silently loses that guarantee."""

    def __init__(self, task: str) -> None:
        self.task = task
        super().__init__(
            f"task {task!r} was called outside a running entrypoint or graph node, where its result "
            "cannot be recorded; call it from an @plait.entrypoint function (or a node), or call the "
            f"plain function with {task}.func(...) (in a unit test, for example)"
        )


class TaskReplayError(RunError):
    """A resumed entrypoint (or node) called its tasks in another order than the run that
    recorded their results: replaying them would hand one task's result to another. The
    function must make the same task calls in the same order on every run of the same input
    (keep random choices, clocks and outside reads in tasks, whose results are recorded)."""

    def __init__(self, node: str, call: str, recorded: str, called: str) -> None:
        self.node = node
        self.call = call
        self.recorded = recorded
        self.called = called
        super().__init__(
            f"{node!r} called task {called!r} as its task call #{call}, where the run being resumed "
            f"called {recorded!r}: the function is not deterministic. Make it call the same tasks in "
            "the same order on every run (move random choices, clocks and reads of outside data into "
            "tasks, whose results are recorded), then resume the thread again, or start a new one"
        )


class TaskWaitOnLoopError(SyncCallOnLoopError):
    """A task waited for on the run's event loop, where blocking would stop it from ever
    running: ``future.result()`` of an unfinished task in async code, or an async task called
    by a sync node that runs on the loop."""

    def __init__(self, node: str, task: str, *, inline: bool = False) -> None:
        if inline:
            message = (
                f"{node!r} is a sync node that runs on the event loop, and called async task {task!r}, which "
                "it cannot wait for there; make the node async (and `await` the task), or give it a ctx "
                "parameter (`def node(state, ctx)`) so that it runs in a worker thread"
            )
        else:
            message = (
                f"{node!r} called .result() on task {task!r}'s future before it finished, on the event loop, "
                "where blocking would hold up the task itself; in async code write `await future` instead"
            )
        RunError.__init__(self, message)
        self.node = node
        self.call = "result"
        self.async_call = "await"
        self.task = task


class EntrypointSignatureError(GraphError, TypeError):
    """An entrypoint function plait cannot call: it takes no input parameter, it is a
    generator, or it asks for a parameter plait does not inject."""

    def __init__(self, function: str, reason: str) -> None:
        self.function = function
        self.reason = reason
        super().__init__(
            f"@plait.entrypoint cannot make a workflow of {function!r}: {reason}. An entrypoint takes its "
            "input as its first parameter and may ask, by name, for `previous` (the value the thread saved "
            "last), `ctx` (the NodeContext: context, store, once, emit), `store` and `writer`"
        )
