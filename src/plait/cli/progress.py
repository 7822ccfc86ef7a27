"""The lines ``plait run`` and ``plait resume`` print as a run goes, one per event.

A node's line carries the step of the checkpoint its writes land in (as ``plait history``
numbers them), and only that step. A failed attempt that will be retried prints as a retry;
a failure prints its cause alone: what to do next is said once, when the run has stopped
(:mod:`plait.cli.messages`), in ``plait`` commands, never the library's Python advice. A task
from a ``Send`` is named with the item it was given, so that a failing worker says which one.
"""

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from plait.cli.output import to_json_text
from plait.errors import NodeError

if TYPE_CHECKING:
    from plait.checkpoint.base import Checkpointer
    from plait.engine.events import Event

__all__ = ["ITEM_WIDTH", "failure_cause", "item_label", "progress_line", "send_items"]

ITEM_WIDTH = 60
"""Characters of a ``Send`` item shown beside its node (cut with an ellipsis beyond)."""


class _Cut(Exception):
    """A stand-in cause, to find where the library puts the cause in a NodeError's text."""


def failure_cause(error: str, node: str, step: int, thread_id: str | None) -> str:
    """The cause in a node failure's text (``ValueError: bad topic``): the text less what
    :class:`~plait.errors.NodeError` puts around it (where it failed, and how to go on in
    Python), found by making one with a stand-in cause. Any other text is kept whole."""
    marker = "\x00"
    head, _, tail = str(NodeError(node, step, thread_id, _Cut(marker))).partition(f"{_Cut.__name__}: {marker}")
    tail = tail.removeprefix(".")  # the cause is followed by a full stop it does not own
    if error.startswith(head) and error.endswith(tail) and len(error) >= len(head) + len(tail):
        cause = error[len(head) : len(error) - len(tail)] if tail else error[len(head) :]
        return cause.removesuffix(".")
    return error


def item_label(node: str, arg: Any) -> str:
    """``node`` with the ``Send`` item it was given, cut to :data:`ITEM_WIDTH` characters."""
    text = to_json_text(arg, indent=False)
    if len(text) > ITEM_WIDTH:
        text = text[: ITEM_WIDTH - 1] + "…"
    return f"{node} {text}"


def progress_line(ev: "Event", thread_id: str, items: Mapping[str, Any]) -> str | None:
    """The line an event prints, or None for one that prints nothing. ``items``: the
    ``Send`` item of each task id that has one."""
    from plait.engine.events import CheckpointSaved, Interrupted, NodeFailed, NodeFinished

    if isinstance(ev, NodeFinished):
        name = item_label(ev.node, items[ev.task_id]) if ev.task_id in items else ev.node
        return f"  step {ev.step + 1}  {name}  wrote {', '.join(sorted(ev.writes)) or '-'}"
    if isinstance(ev, NodeFailed):
        name = item_label(ev.node, items[ev.task_id]) if ev.task_id in items else ev.node
        cause = failure_cause(ev.error, ev.node, ev.step, thread_id)
        if ev.will_retry:
            return f"  step {ev.step + 1}  {name}  attempt {ev.attempt} failed, retrying: {cause}"
        tries = f" (attempt {ev.attempt})" if ev.attempt > 1 else ""
        return f"  step {ev.step + 1}  {name}  failed{tries}: {cause}"
    if isinstance(ev, CheckpointSaved):
        return f"  step {ev.step}  checkpoint {ev.checkpoint_id} ({ev.source})"
    if isinstance(ev, Interrupted):
        return f"  paused at step {ev.step}"
    return None


async def send_items(
    checkpointer: "Checkpointer", thread_id: str, namespace: str, checkpoint_id: str | None
) -> dict[str, Any]:
    """The ``Send`` item of each task the checkpoint plans (the head when no id is given):
    the events name a task by id only."""
    cp = await checkpointer.aget(thread_id, checkpoint_id, namespace=namespace)
    return {} if cp is None else {t.id: t.arg for t in cp.next_tasks if t.send}
