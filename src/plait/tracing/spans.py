"""The OpenTelemetry side of tracing: the spans of a run, its steps, its tasks' attempts and
their effects, nested as they happened.

A run's span is the current span while it runs, so that a subgraph's run (which runs inside
its parent's task) and the spans a node makes itself nest under it; a task attempt's span is
current while its node runs, for the same reason. The step spans are parented explicitly:
a step is never current, so nothing can outlive it by mistake.

Each invocation is a trace of its own unless the caller made a span current; the run that
resumes a paused thread links to the run that paused it, through the ``trace`` metadata of
the thread's checkpoints.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from opentelemetry import context, trace
from opentelemetry.trace import Link, Span, SpanContext, SpanKind, Status, StatusCode, TraceFlags

from plait._version import __version__
from plait.errors import LeaseLostError

if TYPE_CHECKING:
    from plait.tracing.hooks import RunInfo

__all__ = ["OtelTracer", "link_from", "stamp_of"]

_T = TypeVar("_T")


def stamp_of(span: Span) -> dict[str, str]:
    """How a checkpoint names the span of the run that made it (hex, as W3C trace context)."""
    ctx = span.get_span_context()
    return {"trace_id": format(ctx.trace_id, "032x"), "span_id": format(ctx.span_id, "016x")}


def link_from(stamp: Any, why: str = "resumes") -> Link | None:
    """The link to the span a checkpoint's ``trace`` metadata names, or an earlier attempt's
    (None: none, or unreadable); ``why`` is its ``plait.link`` attribute."""
    if not isinstance(stamp, Mapping):
        return None
    try:
        ctx = SpanContext(
            trace_id=int(stamp["trace_id"], 16),
            span_id=int(stamp["span_id"], 16),
            is_remote=True,
            trace_flags=TraceFlags(TraceFlags.SAMPLED),
        )
    except (KeyError, TypeError, ValueError):
        return None
    return Link(ctx, {"plait.link": why}) if ctx.is_valid else None


def _describe_answer(span: Span, message: Mapping[str, Any]) -> None:
    """The GenAI attributes of a finished answer, from what LangChain's chunks carry
    (``response_metadata``: ``model_name``/``model``, ``finish_reason``/``stop_reason``,
    ``model_provider``; ``usage_metadata``: ``input_tokens``, ``output_tokens``)."""
    meta = message.get("response_metadata") or {}
    model = meta.get("model_name") or meta.get("model")
    if isinstance(model, str) and model:
        span.set_attribute("gen_ai.response.model", model)
        span.update_name(f"chat {model}")
    provider = meta.get("model_provider")
    if isinstance(provider, str) and provider:
        span.set_attribute("gen_ai.provider.name", provider)
    reason = meta.get("finish_reason") or meta.get("stop_reason")
    if isinstance(reason, str) and reason:
        span.set_attribute("gen_ai.response.finish_reasons", [reason])
    usage = message.get("usage_metadata") or {}
    for key in ("input_tokens", "output_tokens"):
        count = usage.get(key)
        if isinstance(count, int) and not isinstance(count, bool):
            span.set_attribute(f"gen_ai.usage.{key}", count)
    calls = message.get("tool_calls") or ()
    if calls:
        span.set_attribute("plait.tool_calls", [str(c.get("name")) for c in calls])


def _fail(span: Span, error: BaseException) -> None:
    span.record_exception(error)
    span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))


class OtelTracer:
    """What :func:`plait.instrument` installs: makes a :class:`RunSpans` per run."""

    def __init__(self, provider: Any = None) -> None:
        self.tracer = trace.get_tracer("plait", __version__, tracer_provider=provider)

    def run(self, info: RunInfo) -> RunSpans:
        attributes: dict[str, Any] = {"plait.run_id": info.run_id, "plait.namespace": info.namespace}
        attributes["plait.durability"] = info.durability
        if info.graph:
            attributes["plait.graph.name"] = info.graph
        if info.version is not None:
            attributes["plait.graph.version"] = info.version
        if info.thread_id is not None:
            attributes["plait.thread_id"] = info.thread_id
        links = [link for link in (link_from(s, "retries") for s in info.retries) if link is not None]
        found = link_from(info.link) if info.top else None
        if found is not None and all(found.context.span_id != link.context.span_id for link in links):
            links.append(found)  # (an attempt that goes on from its dead predecessor links to it once)
        span = self.tracer.start_span("plait.run", attributes=attributes, links=links or None)
        if info.lease is not None:
            span.add_event("plait.lease", {"plait.lease.owner": info.lease[0], "plait.lease.token": info.lease[1]})
        if info.start_from is not None:
            span.add_event("plait.replay" if info.replay else "plait.branch", {"plait.checkpoint_id": info.start_from})
        if info.resumed:
            span.add_event("plait.resume", {"plait.linked": found is not None})
        return RunSpans(self.tracer, span, info)

    @contextlib.contextmanager
    def operation(self, name: str, attributes: Mapping[str, Any]) -> Iterator[Callable[[str], None]]:
        """A change to a thread outside any run: a span of its own, current while it runs."""
        with self.tracer.start_as_current_span(name, attributes=attributes) as span:
            yield functools.partial(span.set_attribute, "plait.checkpoint_id")


class RunSpans:
    """The spans of one run (see :class:`plait.tracing.hooks.RunTrace`)."""

    def __init__(self, tracer: trace.Tracer, span: Span, info: RunInfo) -> None:
        self.tracer = tracer
        self.span = span
        self.benign = info.benign
        self.thread_id = info.thread_id
        self.stamp: Mapping[str, str] | None = stamp_of(span) if info.top and info.thread_id is not None else None
        self.context = trace.set_span_in_context(span)
        self.open_step: Span | None = None
        self.token = context.attach(self.context)

    async def step(self, step: int, checkpoint_id: str, work: Awaitable[_T]) -> _T:
        span = self.tracer.start_span(
            "plait.step", self.context, attributes={"plait.step": step, "plait.checkpoint_id": checkpoint_id}
        )
        self.open_step = span
        try:
            return await work
        except BaseException as error:
            if not isinstance(error, self.benign):
                _fail(span, error)
            raise
        finally:
            self.open_step = None
            span.end()

    def task(self, node: str, task_id: str, step: int) -> TaskSpans:
        parent = self.open_step
        where = trace.set_span_in_context(parent) if parent is not None else self.context
        return TaskSpans(self.tracer, where, node, task_id, step, self.thread_id)

    def committed(self, checkpoints: Sequence[Any]) -> None:
        """The committer's report (``CheckpointWrite`` records): an event per checkpoint, on the
        step running when it reached the store (on the run's span outside any step)."""
        span = self.open_step or self.span
        for cw in checkpoints:
            cp = cw.checkpoint
            span.add_event(
                "plait.checkpoint",
                {"plait.checkpoint_id": cp.id, "plait.step": cp.step, "plait.source": str(cp.metadata.get("source"))},
            )

    def interrupted(self, interrupts: Sequence[Any], checkpoint_id: str) -> None:
        attributes: dict[str, Any] = {"plait.checkpoint_id": checkpoint_id}
        attributes["plait.interrupt_ids"] = [i.id for i in interrupts]
        attributes["plait.breakpoint"] = not interrupts
        self.span.add_event("plait.interrupt", attributes)

    @contextlib.contextmanager
    def effect(self, name: str, node: str) -> Iterator[Span]:
        """A ``ctx.once`` effect: under the current span (its task attempt's, in the node)."""
        with self.tracer.start_as_current_span(
            "plait.once", attributes={"plait.once": name, "plait.node": node}
        ) as span:
            yield span

    @contextlib.contextmanager
    def chat(self, node: str, message_id: str) -> Iterator[Callable[[Mapping[str, Any]], None]]:
        """A model's answer streamed by ``ctx.stream_message``: a ``chat`` span under the
        task attempt, in OpenTelemetry's GenAI conventions, named ``chat <model>`` once the
        answer says which model gave it."""
        attributes = {"gen_ai.operation.name": "chat", "plait.node": node, "plait.message_id": message_id}
        with self.tracer.start_as_current_span("chat", kind=SpanKind.CLIENT, attributes=attributes) as span:
            yield functools.partial(_describe_answer, span)

    def finished(self, status: str, checkpoint_id: str | None, step: int) -> None:
        if checkpoint_id is not None:
            self.span.set_attribute("plait.checkpoint_id", checkpoint_id)
        self.span.set_attribute("plait.step", step)
        self._end(status)

    def failed(self, error: BaseException) -> None:
        if isinstance(error, LeaseLostError):
            self.span.add_event("plait.lease_lost", {"plait.taken_by": str(error.taken_by or "")})
        _fail(self.span, error)
        self._end("failed")

    def _end(self, status: str) -> None:
        self.span.set_attribute("plait.status", status)
        with contextlib.suppress(ValueError):  # ended in another context than it began: nothing to undo
            context.detach(self.token)
        self.span.end()


class TaskSpans:
    """The spans of one task: a ``plait.task <node>`` span per attempt, siblings under the
    step, each current while its attempt runs (see :class:`plait.tracing.hooks.TaskTrace`)."""

    def __init__(
        self, tracer: trace.Tracer, parent: context.Context, node: str, task_id: str, step: int, thread: str | None
    ) -> None:
        self.tracer = tracer
        self.parent = parent
        self.attributes: dict[str, Any] = {"plait.node": node, "plait.task_id": task_id, "plait.step": step}
        if thread is not None:
            self.attributes["plait.thread_id"] = thread
        self.name = f"plait.task {node}"
        self.span: Span | None = None
        self.token: object = None

    def attempt(self, attempt: int) -> None:
        self._close(None)  # (a retry always reports its failure first; this is a safety net)
        span = self.tracer.start_span(self.name, self.parent, attributes={**self.attributes, "plait.attempt": attempt})
        self.span = span
        self.token = context.attach(trace.set_span_in_context(span))

    def chain(
        self, other: Callable[[int, BaseException, bool], None] | None
    ) -> Callable[[int, BaseException, bool], None]:
        """The task's retry callback: this attempt's span ends failed, then ``other`` hears it."""

        def failed(attempt: int, error: BaseException, will_retry: bool) -> None:
            if self.span is not None:
                self.span.set_attribute("plait.will_retry", will_retry)
            self._close(error)
            if other is not None:
                other(attempt, error, will_retry)

        return failed

    async def run(self, outcome: Awaitable[_T]) -> _T:
        """Await the task (its ``TaskOutcome``) and end its last attempt's span as it ended."""
        try:
            out = await outcome
        except BaseException as error:
            self._close(error)
            raise
        interrupt = getattr(out, "interrupt", None)
        if interrupt is not None and self.span is not None:
            self.span.add_event("plait.interrupt", {"plait.interrupt_id": interrupt.id})
        self._close(getattr(out, "error", None))
        return out

    def _close(self, error: BaseException | None) -> None:
        span, self.span = self.span, None
        if span is None:
            return
        if error is not None:
            _fail(span, error)
        with contextlib.suppress(ValueError):
            context.detach(self.token)  # type: ignore[arg-type]
        span.end()
