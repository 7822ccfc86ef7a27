"""Running a compiled graph: ``invoke`` and ``stream``, sync and async.

The public keywords are spelled out here, in the signatures users read, and become one
:class:`~plait.engine.options.RunOptions` record before anything runs; the engine's driver
and every subgraph of the run take that record.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any, Literal, get_args, overload

from plait._aliases import either, with_config
from plait._sync import iterate_sync, run_sync
from plait.engine.context import current_node
from plait.engine.emitter import INTERRUPT_KEY, queue_sink
from plait.engine.loop import Driver
from plait.engine.options import RunOptions, RunResult
from plait.engine.runtime import coerce_context
from plait.engine.spec import GraphSpec
from plait.errors import GraphError, NoCheckpointerError
from plait.graph.bound import BoundGraph
from plait.graph.subgraph import call_subgraph
from plait.state.models import Dumped
from plait.types import Command, Durability

__all__ = ["Running", "StreamMode"]


StreamMode = Literal["values", "updates", "events", "custom", "messages"]
"""What ``stream(mode=...)`` yields (see :meth:`CompiledGraph.astream`)."""

_MODES = frozenset(get_args(StreamMode))


class Running(BoundGraph):
    """Running the graph: every call is a run of its own (thread-safe to share)."""

    async def _run(
        self, input: Any, options: RunOptions, *, sink: Any = None, modes: frozenset[str] = frozenset()
    ) -> RunResult:
        options = replace(options, context=coerce_context(self.spec.context_schema, options.context))
        input = _given(self.spec, input)
        if self.checkpointer is not None:
            await self._ready_checkpointer()
            if options.thread_id is None:
                raise GraphError(
                    "this graph has a checkpointer, so invoke() needs a thread_id: the key its "
                    "checkpoints are stored and resumed under (any string, e.g. a conversation id)"
                )
        elif input is None or options.checkpoint_id is not None or isinstance(input, Command):
            raise NoCheckpointerError("resuming a run")
        driver = Driver(self.spec, self.fingerprint, self.binding, options, sink=sink, modes=modes, name=self.name)
        return await driver.execute(input)

    @overload
    async def ainvoke(
        self,
        input: Any,
        config: Mapping[str, Any] | None = None,
        *,
        thread_id: str | None = None,
        checkpoint_id: str | None = None,
        recursion_limit: int = 10_000,
        durability: Durability = "sync",
        wait: float | None = None,
        owner: str | None = None,
        context: Any = None,
        metadata: Mapping[str, Any] | None = None,
        max_concurrency: int | None = None,
        output_model: Literal[False] = False,
    ) -> dict[str, Any]: ...
    @overload
    async def ainvoke(
        self,
        input: Any,
        config: Mapping[str, Any] | None = None,
        *,
        thread_id: str | None = None,
        checkpoint_id: str | None = None,
        recursion_limit: int = 10_000,
        durability: Durability = "sync",
        wait: float | None = None,
        owner: str | None = None,
        context: Any = None,
        metadata: Mapping[str, Any] | None = None,
        max_concurrency: int | None = None,
        output_model: Literal[True],
    ) -> Any: ...
    async def ainvoke(
        self,
        input: Any,
        config: Mapping[str, Any] | None = None,
        *,
        thread_id: str | None = None,
        checkpoint_id: str | None = None,
        recursion_limit: int = 10_000,
        durability: Durability = "sync",
        wait: float | None = None,
        owner: str | None = None,
        context: Any = None,
        metadata: Mapping[str, Any] | None = None,
        max_concurrency: int | None = None,
        output_model: bool = False,
    ) -> Any:
        """Run the graph to the end (or to an interrupt) and return the final values.

        Args:
            input: a mapping of channel values to start a run with; None to continue the
                thread from its latest checkpoint (after a failure, a crash, a breakpoint)
                or from ``checkpoint_id`` (time travel: a new branch); a
                ``Command(resume=...)`` to answer an ``interrupt()``; a
                ``Command(goto=node, update=...)`` to run ``node`` next instead.
            config: LangGraph's spelling of the keywords, for ported code:
                ``{"configurable": {"thread_id": t, "checkpoint_id": c}, "recursion_limit": n,
                "metadata": {...}, "max_concurrency": n}``; any other key is a ``TypeError``
                that says what to write instead (``context=`` for a per-run value).
            thread_id: required with a checkpointer; the thread's checkpoints are stored
                and resumed under it.
            durability: ``"sync"`` commits each super-step before the next starts;
                ``"async"`` overlaps commits with the next steps (group commit), and is
                durable when this returns; ``"exit"`` stores only at the end, an
                interrupt or an error.
            wait: seconds to wait for another run that holds the thread (polling until its
                lease is given back or ends) before raising ``ThreadBusyError``; None (the
                default) raises at once. A holder that died on this machine is taken over
                at once, without waiting.
            owner: the name the thread's lease is taken under (a worker passes its claim,
                so an operator sees which worker holds the thread); None mints one from the
                host and the run id.
            context: per-run values for the nodes (``ctx.context``): a model name, a user
                id, a client. Made into the graph's context type when it declares one
                (``Graph(State, context=Ctx)``); never checkpointed, so pass it again on a
                resume.
            metadata: JSON data recorded on every checkpoint this run writes (plait's own
                keys, such as ``source`` and ``step``, win); ``get_state_history(thread,
                filter={...})`` finds them.
            max_concurrency: at most this many tasks of a super-step run at once (a wide
                ``Send`` fan-out against a rate-limited API); None runs them all at once.
            output_model: with a Pydantic or dataclass state (or output schema), return an
                instance of it instead of the dict.

        Returns:
            The channel values as JSON data (only the output schema's, when the graph has
            one); when the run paused on ``interrupt()``, the pending interrupts are under
            ``"__interrupt__"``.
        """
        given = with_config(locals(), config, "invoke")
        if given["thread_id"] is None and self.checkpointer is None and (ctx := current_node.get()) is not None:
            # Called inside a node: a subgraph of that node's run (see plait.graph.subgraph).
            return await call_subgraph(ctx, self, input)
        options = _options(given)
        return _output(await self._run(input, options), self.spec, output_model)

    @overload
    def invoke(
        self,
        input: Any,
        config: Mapping[str, Any] | None = None,
        *,
        thread_id: str | None = None,
        checkpoint_id: str | None = None,
        recursion_limit: int = 10_000,
        durability: Durability = "sync",
        wait: float | None = None,
        owner: str | None = None,
        context: Any = None,
        metadata: Mapping[str, Any] | None = None,
        max_concurrency: int | None = None,
        output_model: Literal[False] = False,
    ) -> dict[str, Any]: ...
    @overload
    def invoke(
        self,
        input: Any,
        config: Mapping[str, Any] | None = None,
        *,
        thread_id: str | None = None,
        checkpoint_id: str | None = None,
        recursion_limit: int = 10_000,
        durability: Durability = "sync",
        wait: float | None = None,
        owner: str | None = None,
        context: Any = None,
        metadata: Mapping[str, Any] | None = None,
        max_concurrency: int | None = None,
        output_model: Literal[True],
    ) -> Any: ...
    def invoke(
        self,
        input: Any,
        config: Mapping[str, Any] | None = None,
        *,
        thread_id: str | None = None,
        checkpoint_id: str | None = None,
        recursion_limit: int = 10_000,
        durability: Durability = "sync",
        wait: float | None = None,
        owner: str | None = None,
        context: Any = None,
        metadata: Mapping[str, Any] | None = None,
        max_concurrency: int | None = None,
        output_model: bool = False,
    ) -> Any:
        """Sync :meth:`ainvoke`."""
        return run_sync(
            self.ainvoke(  # type: ignore[call-overload, misc]
                input,
                config,
                thread_id=thread_id,
                checkpoint_id=checkpoint_id,
                recursion_limit=recursion_limit,
                durability=durability,
                wait=wait,
                owner=owner,
                context=context,
                metadata=metadata,
                max_concurrency=max_concurrency,
                output_model=output_model,
            )
        )

    async def astream(
        self,
        input: Any,
        config: Mapping[str, Any] | None = None,
        *,
        mode: StreamMode | Sequence[StreamMode] | None = None,
        stream_mode: StreamMode | Sequence[StreamMode] | None = None,
        thread_id: str | None = None,
        checkpoint_id: str | None = None,
        recursion_limit: int = 10_000,
        durability: Durability = "sync",
        wait: float | None = None,
        owner: str | None = None,
        subgraphs: bool = False,
        context: Any = None,
        metadata: Mapping[str, Any] | None = None,
        max_concurrency: int | None = None,
    ) -> AsyncIterator[Any]:
        """Run the graph and yield what happens as it happens.

        Modes (``mode=``, default ``"values"``): ``"values"`` (the state after the input and after each super-step),
        ``"updates"`` (``{node: writes}`` as each task finishes), ``"events"`` (event
        records: node started / finished / failed, state updated, checkpoint saved,
        interrupted, run finished), ``"custom"`` (what nodes pass to ``ctx.emit``),
        ``"messages"`` (``(chunk, metadata)`` pairs as LangGraph's: each chunk a node streams
        with ``ctx.stream_message``, and each message a node writes to a messages channel
        without streaming it, whole; see docs/howto.md). With a list of modes, items come as
        ``(mode, item)`` pairs. ``stream_mode=`` is LangGraph's spelling of ``mode=`` (both:
        a ``TypeError`` unless they agree). When the run pauses, ``"values"`` and
        ``"updates"`` yield ``{"__interrupt__": (Interrupt, ...)}`` last (an empty tuple at a
        breakpoint).

        An ``"updates"`` item's writes are ``{key: value, ...}`` when the task wrote each key
        once; when it wrote a key more than once (a list of pairs, a ``Command`` update with
        repeats), a list of one-key dicts, one per write in the order written, so that no
        write the state got is missing from the item.

        With ``subgraphs=True`` the subgraphs' items come too, each item as ``(namespace,
        item)`` (``(namespace, mode, item)`` with a list of modes): ``namespace`` is ``()``
        for this graph and a tuple of ``"node:task_id"`` segments for a subgraph, as in
        LangGraph.
        """
        mode = either("mode", mode, "stream_mode", stream_mode) or "values"
        modes = (mode,) if isinstance(mode, str) else tuple(mode)
        for m in modes:
            if m not in _MODES:
                raise ValueError(
                    f"unknown stream mode {m!r}: use 'values', 'updates', 'events', 'custom' or 'messages'"
                )
        queue: asyncio.Queue[tuple[str, Any] | None] = asyncio.Queue()
        single = isinstance(mode, str)

        sink = queue_sink(queue.put_nowait, subgraphs=subgraphs, single=single)

        options = _options(with_config(locals(), config, "stream"))

        async def drive() -> RunResult:
            try:
                return await self._run(input, options, sink=sink, modes=frozenset(modes))
            finally:
                queue.put_nowait(None)

        task = asyncio.get_running_loop().create_task(drive())
        try:
            while (item := await queue.get()) is not None:
                yield item[1] if single or subgraphs else item
            await task
        finally:
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task

    def stream(
        self,
        input: Any,
        config: Mapping[str, Any] | None = None,
        *,
        mode: StreamMode | Sequence[StreamMode] | None = None,
        stream_mode: StreamMode | Sequence[StreamMode] | None = None,
        thread_id: str | None = None,
        checkpoint_id: str | None = None,
        recursion_limit: int = 10_000,
        durability: Durability = "sync",
        wait: float | None = None,
        owner: str | None = None,
        subgraphs: bool = False,
        context: Any = None,
        metadata: Mapping[str, Any] | None = None,
        max_concurrency: int | None = None,
    ) -> Iterator[Any]:
        """Sync :meth:`astream`: items are yielded as the run produces them."""
        yield from iterate_sync(
            self.astream(
                input,
                config,
                mode=mode,
                stream_mode=stream_mode,
                thread_id=thread_id,
                checkpoint_id=checkpoint_id,
                recursion_limit=recursion_limit,
                durability=durability,
                wait=wait,
                owner=owner,
                subgraphs=subgraphs,
                context=context,
                metadata=metadata,
                max_concurrency=max_concurrency,
            )
        )


def _output(result: RunResult, spec: GraphSpec, as_model: bool) -> Any:
    schema = spec.output_schema or spec.schema
    values = result.values
    if schema.model is not None or spec.output_schema is not None:  # the model's field order
        values = {k: result.values[k] for k in schema.keys if k in result.values}
    if as_model:
        if schema.model is None:
            raise GraphError(
                "invoke(..., output_model=True) returns the state as its model, and this graph's "
                f"{'output schema' if spec.output_schema else 'state'} is not a Pydantic model or a dataclass: "
                "drop output_model=True (the dict has the same values)"
            )
        return schema.model.instance(values)
    out = dict(values)
    if result.interrupts:
        out[INTERRUPT_KEY] = list(result.interrupts)
    return out


def _given(spec: GraphSpec, input: Any) -> Any:
    """A run's input as the engine takes it: an instance of the state's (or the input
    schema's) model as the JSON data of its fields, and only the input schema's keys."""
    io = spec.input_schema
    for schema in (io, spec.schema):
        if schema is not None and schema.model is not None and schema.model.owns(input):
            input = Dumped(schema.model.set_fields(input, {}))
            break
    if io is not None and isinstance(input, Mapping) and not isinstance(input, Command):
        kept = {k: v for k, v in input.items() if k in io}
        input = Dumped(kept) if isinstance(input, Dumped) else kept
    return input


_OPTION_FIELDS = frozenset(f.name for f in dataclasses.fields(RunOptions))


def _options(given: Mapping[str, Any]) -> RunOptions:
    """The run's options from the keywords of ``ainvoke``/``astream`` (their ``locals()``):
    one place turns the public keywords into the record, so no keyword can be dropped on
    the way to the engine."""
    return RunOptions(**{k: v for k, v in given.items() if k in _OPTION_FIELDS})
