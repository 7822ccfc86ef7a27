"""Errors of the command line and of the run queue (plait.runs)."""

from __future__ import annotations

from collections.abc import Sequence

from plait.errors._base import PlaitError

__all__ = [
    "ArgumentError",
    "CommandLineError",
    "ExportFormatError",
    "NotConfirmedError",
    "QueueSchemaError",
    "RunNotFoundError",
    "RunWaitTimeoutError",
    "RunsError",
    "ScheduleNotFoundError",
    "TargetLoadError",
    "TraceUrlError",
    "UnknownGraphError",
]


class CommandLineError(PlaitError):
    """The ``plait`` command was given something it cannot use; it exits with code 2.

    Raised by the command line only, before anything is written: the message names the
    argument or option, what was wrong with it, and the command to run instead.
    """


class ArgumentError(CommandLineError):
    """An argument or option whose value cannot be used (JSON that does not parse,
    ``--limit 0``, two options that exclude each other)."""

    def __init__(self, option: str, message: str) -> None:
        self.option = option
        """The option or argument, as written on the command line (``--limit``, ``THREAD``)."""
        super().__init__(message)


class TargetLoadError(CommandLineError):
    """``MODULE:GRAPH`` could not be loaded: no such file or module, an error while importing
    it, no such attribute, or an object that is not a graph."""

    def __init__(self, target: str, reason: str) -> None:
        self.target = target
        self.reason = reason
        super().__init__(f"cannot load {target!r}: {reason}")


class ExportFormatError(CommandLineError):
    """A file given to ``plait import`` that is not a thread export this plait can read."""

    def __init__(self, source: str, line: int, reason: str) -> None:
        self.source = source
        self.line = line
        self.reason = reason
        super().__init__(
            f"{source} line {line}: {reason}; `plait import` reads what `plait export THREAD` writes "
            "(format plait-thread, version 1)"
        )


class NotConfirmedError(CommandLineError):
    """A command that deletes data asked for a confirmation and did not get one."""

    def __init__(self, action: str, *, declined: bool) -> None:
        self.action = action
        self.declined = declined
        """True when the answer was no; False when there was nobody to ask (no input)."""
        why = "declined" if declined else "there was no answer to the question (stdin is closed)"
        super().__init__(f"{action}: not done, {why}; pass --yes to do it without asking")


class TraceUrlError(PlaitError, ValueError):
    """The Studio's trace link template (``plait studio --trace-url``, ``StudioConfig.trace_url``)
    cannot make a link: not an http(s) URL, no ``{trace_id}`` in it, or a placeholder other
    than ``{trace_id}`` and ``{span_id}``. Also a ``ValueError``."""

    def __init__(self, template: str, problem: str) -> None:
        self.template = template
        self.problem = problem
        super().__init__(
            f"--trace-url {template!r}: {problem}; give your tracing UI's trace page with {{trace_id}} "
            "where the id goes, e.g. --trace-url 'http://localhost:16686/trace/{trace_id}' (Jaeger)"
        )


class RunsError(PlaitError):
    """The run queue (:mod:`plait.runs`: runs, workers, schedules) refused a request or failed."""


class RunNotFoundError(RunsError):
    """A run id that is not stored (never submitted, or deleted)."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        super().__init__(f"no run {run_id!r} is stored; list the runs with runs.list() or `plait runs`.")


class ScheduleNotFoundError(RunsError):
    """A schedule id that is not stored (never made, or removed)."""

    def __init__(self, schedule_id: str) -> None:
        self.schedule_id = schedule_id
        super().__init__(
            f"no schedule {schedule_id!r} is stored; list the schedules with runs.schedules() or `plait schedules`."
        )


class UnknownGraphError(RunsError):
    """A worker was handed a run of a graph it was not started with. The run ends ``error``
    with this message, so that it is not retried forever by workers that cannot run it."""

    def __init__(self, graph: str, known: Sequence[str], worker: str) -> None:
        self.graph = graph
        self.known = tuple(known)
        self.worker = worker
        listed = ", ".join(repr(k) for k in self.known) or "(none)"
        super().__init__(
            f"worker {worker} has no graph {graph!r} (it runs {listed}): start the workers of this queue "
            f"with {_graph_option(graph)}, or submit the run under a name they were given."
        )


def _graph_option(graph: str) -> str:
    """The ``plait worker`` option that gives a worker ``graph``: a target is its own name, a
    plain name needs its target."""
    return f"--graph {graph}" if ":" in graph else f"--graph {graph}=MODULE:GRAPH"


class RunWaitTimeoutError(RunsError, TimeoutError):
    """``runs.join(run_id, timeout)`` ran out of time before the run ended. The run goes on;
    wait again, or cancel it. Also a ``TimeoutError``."""

    def __init__(self, run_id: str, timeout: float, status: str) -> None:
        self.run_id = run_id
        self.timeout = timeout
        self.status = status
        """The run's status when the wait gave up (``pending`` or ``running``)."""
        super().__init__(
            f"run {run_id!r} did not end within {timeout:g}s (it is {status}); it goes on: wait again, "
            "or cancel it with runs.cancel() or `plait run-cancel`."
        )


class QueueSchemaError(RunsError):
    """The database has no runs schema, or the job queue's (Procrastinate's) schema is not
    the version this plait was tested with, or the runs schema was written by a newer plait."""

    def __init__(self, store: str, found: str | None, expected: str, advice: str) -> None:
        self.store = store
        self.found = found
        """The version found (None: not set up)."""
        self.expected = expected
        self.advice = advice
        have = "is not set up" if found is None else f"is at version {found}"
        super().__init__(f"{store} {have}, this plait needs {expected}: {advice}")


class NoRunQueueError(RunsError):
    """The Studio's store has no run queue to show: it is not PostgreSQL, the ``runs`` extra
    is not installed, or its database was never set up for runs (``plait db migrate``)."""

    def __init__(self, store: str, reason: str, advice: str) -> None:
        self.store = store
        self.reason = reason
        """Why there is no run queue (the store is SQLite, the run tables are absent, ...)."""
        self.advice = advice
        """How to enable it: the command to run, or the store to use."""
        super().__init__(f"{store} has no run queue: {reason}; {advice}")
