"""What a worker makes of a stored run before it runs it, how it runs it, and what it drops
once it ended."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from plait._frozen import thaw
from plait.engine.emitter import INTERRUPT_KEY
from plait.runs import _store
from plait.runs._events import Events, WireEvents
from plait.tracing import carrier
from plait.tracing import hooks as tracing
from plait.types import Command

if TYPE_CHECKING:
    from plait.checkpoint.base import Checkpointer
    from plait.graph.compiled import CompiledGraph
    from plait.runs._notify import Notifier
    from plait.runs.client import Runs
    from plait.runs.records import Run

__all__ = ["attempt_owner", "drive", "drop_temporary", "prepared", "start_rider", "wants_root"]

_RUN_KEYWORDS = frozenset({"checkpoint_id", "durability", "recursion_limit"})
"""The run options that go to ``ainvoke`` as they are."""


def prepared(
    run: Run,
    graph: CompiledGraph,
    extra: dict[str, Any],
    runs: Runs,
    notifier: Notifier,
    checkpointer: Checkpointer | None,
) -> tuple[Any, CompiledGraph, Events]:
    """The run's input (a ``Command`` when it resumes, updates or goes to a node), its graph
    with the run's own breakpoints, and where its stream goes: plait's items, or the
    LangGraph API's events for a run ``plait serve`` submitted."""
    options = run.options or {}
    input: Any = Command(resume=run.resume) if run.has_resume else run.input
    if "update" in options or "goto" in options:
        given = {k: options[k] for k in ("update", "goto") if k in options}
        input = Command.from_json({**given, **({"resume": run.resume} if run.has_resume else {})})
    if "interrupt_before" in options or "interrupt_after" in options:
        graph = graph.bind(
            interrupt_before=options.get("interrupt_before", graph.interrupt_before),
            interrupt_after=options.get("interrupt_after", graph.interrupt_after),
        )
    if "wire" in options:
        assert checkpointer is not None
        return input, graph, WireEvents(runs, run, notifier, checkpointer)
    return input, graph, Events(runs, run.run_id, extra["stream"], notifier)


def wants_root(run: Run) -> bool:
    """Whether a run ``plait serve`` submitted starts a new thread with its root (see
    :attr:`~plait.engine.options.RunHooks.root`): every one on a thread of its own, none
    on a stateless run's."""
    wire = (run.options or {}).get("wire")
    return isinstance(wire, dict) and not wire.get("temporary")


async def drop_temporary(run: Run, checkpointer: Checkpointer) -> None:
    """Delete the thread of a stateless run of ``plait serve`` (one made without a thread,
    ``on_completion="delete"``) once it ended, as the server's own runs do. Called before its
    end is recorded, so that whoever learns of the end finds the thread gone."""
    wire = (run.options or {}).get("wire") or {}
    if wire.get("temporary"):
        await checkpointer.adelete_thread(run.thread_id, namespace=run.namespace)


def attempt_owner(owner: str, attempts: int) -> str:
    """The lease owner an attempt runs the graph as (a later attempt says which it is)."""
    return f"{owner} (attempt {attempts})" if attempts > 1 else owner


def start_rider(checkpointer: Checkpointer | None, run: Run, owner: str, schema: str | None) -> Callable[[], bool]:
    """Have the attempt's lease record where the run starts (:func:`~plait.runs._store.record_start`'s
    change, in the lease's own statement: see :mod:`plait.checkpoint.postgres._riders`), when
    the checkpointer can; the function returned says, once, whether the lease did."""
    riders = getattr(checkpointer, "lease_riders", None)
    if riders is None:
        return lambda: False
    owner = attempt_owner(owner, run.attempts)
    riders.add(run.thread_id, run.namespace, owner, _store.start_rider(schema, run.run_id))
    return functools.partial(riders.took, run.thread_id, run.namespace, owner)


async def drive(graph: CompiledGraph, run: Run, input: Any, owner: str, events: Events) -> dict[str, Any]:
    """Run the graph (its hooks store the stream items asked for, a batch per super-step,
    and stop it at the next boundary once asked); its output as ``invoke`` returns it,
    as JSON data: a run that paused has its interrupts under ``"__interrupt__"`` (an
    empty list at a breakpoint). A later attempt's owner says which it is (its steps
    record it: the Studio's timeline shows who ran each step). When the run is traced, its
    span continues the trace of whoever submitted it (the context stored with the run)."""
    options = run.options or {}
    chosen = {k: v for k, v in options.items() if k in _RUN_KEYWORDS}
    owner = attempt_owner(owner, run.attempts)
    traced = tracing.active is not None or graph.binding.tracing
    with carrier.continuing(options.get("trace") if traced else None):
        output = thaw(await graph.ainvoke(input, thread_id=run.thread_id, owner=owner, **chosen))
    if INTERRUPT_KEY in output:
        output[INTERRUPT_KEY] = [i.to_json() for i in output[INTERRUPT_KEY]]
    await events.flush()
    return output  # type: ignore[no-any-return]
