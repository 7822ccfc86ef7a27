"""The subgraph runs behind a step, for the thread page's links to them.

A subgraph's steps are stored as a thread of the same id in a child namespace
(``node:task_id``, nested ``a:t1|b:t2``): the thread page of the parent shows one checkpoint
and its state, and without a link a user had to know the namespace to find what the subgraph
did. Two kinds of children matter for a selected checkpoint: the runs of the step that wrote
it (planned on its parent) and the runs of the step after it (planned on it: a subgraph paused
on an interrupt, or running now, is one of these)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from plait.checkpoint.base import Checkpointer
from plait.checkpoint.model import Checkpoint
from plait.engine.subgraph import stored_children

__all__ = ["PROBED_TASKS", "SubgraphLink", "subgraph_links"]

PROBED_TASKS = 16
"""The tasks of a step looked at for subgraph runs (two reads each): a fan-out of a thousand
``Send`` tasks must not cost the page two thousand reads."""


@dataclass(frozen=True, slots=True)
class SubgraphLink:
    """One subgraph run to link to."""

    node: str
    """The parent's node that ran it."""
    namespace: str
    """Its namespace (the link's ``namespace=``)."""
    step: int
    """Its head's step: how far it got."""
    when: Literal["wrote", "next"]
    """``wrote``: the step that wrote the selected checkpoint ran it; ``next``: the step after
    it runs (or ran) it."""


def _probed(cp: Checkpoint) -> Checkpoint:
    return cp if len(cp.next_tasks) <= PROBED_TASKS else replace(cp, next_tasks=cp.next_tasks[:PROBED_TASKS])


def _node_of(namespace: str) -> str:
    last = namespace.rsplit("|", 1)[-1]
    return last.split(":", 1)[0]


async def subgraph_links(checkpointer: Checkpointer, selected: Checkpoint) -> list[SubgraphLink]:
    """The subgraph runs of the step that wrote ``selected`` and of the step after it (of
    their first :data:`PROBED_TASKS` tasks)."""
    links: list[SubgraphLink] = []
    if selected.parent_id is not None:
        parent = await checkpointer.aget(selected.thread_id, selected.parent_id, namespace=selected.namespace)
        if parent is not None:
            for child in await stored_children(checkpointer, _probed(parent)):
                links.append(SubgraphLink(_node_of(child.namespace), child.namespace, child.step, "wrote"))
    for child in await stored_children(checkpointer, _probed(selected)):
        links.append(SubgraphLink(_node_of(child.namespace), child.namespace, child.step, "next"))
    return links
