"""Graph-free inspection of a store: threads, history, state, what changed, diffs, copies.

Everything here reads (and, for :func:`copy_checkpoint`, writes) through the public
:class:`~plait.checkpoint.base.Checkpointer` protocol only, so it works on every backend and
needs no graph: checkpoints hold their values whole. The Studio's JSON API, the command
line's ``threads``/``history``/``state``/``diff``/``fork`` and ``CompiledGraph``'s
inspection methods all read through these functions, so a diff or a listing means the same
thing everywhere. What needs the graph (folding an edit through reducers, running a node)
is not here.

Diffs are structured per channel: a list that grew is reported as the items appended (and,
for a list that lost items, the items removed), a list of messages (mappings with an
``id``) by id, a mapping by key, anything else as its value before and after; never as two
whole values to compare by eye.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

from plait._codec import canonical
from plait.checkpoint.base import Checkpointer
from plait.checkpoint.fork import fork_checkpoint
from plait.checkpoint.model import Checkpoint, PendingWrite, Status, ThreadInfo, waiting_interrupts
from plait.errors import CheckpointNotFoundError, ThreadExistsError
from plait.state.diff import StateDiff, diff
from plait.types import Interrupt

__all__ = [
    "ChannelDiff",
    "CheckpointDiff",
    "CheckpointRef",
    "ThreadPage",
    "ThreadDiff",
    "ThreadSummary",
    "changes",
    "copy_checkpoint",
    "diff_channel",
    "diff_checkpoints",
    "diff_threads",
    "get_checkpoint",
    "history",
    "list_threads",
    "parse_ref",
    "thread_summary",
    "waiting_interrupts",
]

ChangeKind = Literal["added", "removed", "changed", "list", "messages", "map"]


# -- records -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ThreadPage:
    """One page of a thread listing."""

    threads: tuple[ThreadInfo, ...]
    next_cursor: str | None
    """Pass as ``before=`` for the next page; None on the last page."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ThreadSummary:
    """How one thread stands, with what its head says it does next."""

    info: ThreadInfo
    head: Checkpoint
    """The newest checkpoint, with its pending writes."""
    next: tuple[str, ...]
    """The nodes that run next (empty: finished)."""
    interrupts: tuple[Interrupt, ...]
    """Interrupts waiting for an answer."""
    errors: tuple[Mapping[str, Any], ...]
    """The stored failures of the head's next step (``node``, ``step``, ``type``, ``message``, ...)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ChannelDiff:
    """How one channel differs from ``a`` to ``b``.

    ``kind`` says which fields are filled: ``added``/``removed`` (a channel with a value on
    one side only: ``after``/``before``), ``changed`` (``before``, ``after``), ``list``
    (``appended``, ``removed_items``: items of ``b`` not in ``a`` and the reverse, counted
    as multisets), ``messages`` (lists of mappings with ``id``: ``appended``,
    ``removed_items``, and ``updated`` as ``[before, after]`` pairs), ``map`` (``added_keys``,
    ``removed_keys``, ``changed_keys`` as ``{key: [before, after]}``).
    """

    key: str
    kind: ChangeKind
    before: Any = None
    after: Any = None
    appended: tuple[Any, ...] = ()
    removed_items: tuple[Any, ...] = ()
    updated: tuple[tuple[Any, Any], ...] = ()
    added_keys: Mapping[str, Any] = field(default_factory=dict)
    removed_keys: Mapping[str, Any] = field(default_factory=dict)
    changed_keys: Mapping[str, tuple[Any, Any]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"key": self.key, "kind": self.kind}
        if self.kind in ("added", "changed"):
            out["after"] = self.after
        if self.kind in ("removed", "changed"):
            out["before"] = self.before
        if self.kind in ("list", "messages"):
            out["appended"] = list(self.appended)
            out["removed"] = list(self.removed_items)
        if self.kind == "messages":
            out["updated"] = [{"before": b, "after": a} for b, a in self.updated]
        if self.kind == "map":
            out["added"] = dict(self.added_keys)
            out["removed"] = dict(self.removed_keys)
            out["changed"] = {k: {"before": b, "after": a} for k, (b, a) in self.changed_keys.items()}
        return out


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckpointDiff:
    """What differs from checkpoint ``a`` to checkpoint ``b`` (``a`` None: ``b`` is a root,
    compared with an empty state; for :func:`changes` of a fork's root, ``a`` is of the
    thread it was forked from)."""

    a: Checkpoint | None
    b: Checkpoint
    channels: tuple[ChannelDiff, ...]
    """One entry per channel that differs, sorted by key."""

    def __bool__(self) -> bool:
        return bool(self.channels)

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(c.key for c in self.channels)


Side = TypeVar("Side")
"""What a :class:`ThreadDiff` holds of each thread: a stored
:class:`~plait.checkpoint.model.Checkpoint` (:func:`diff_threads`, which needs no graph), or
the ``ThreadState`` that ``CompiledGraph.diff_threads`` shows it as."""
Shown = TypeVar("Shown")


@dataclass(frozen=True, slots=True, kw_only=True)
class ThreadDiff(Generic[Side]):
    """Where two threads (or two checkpoints' lineages) part ways, compared step by step along
    their newest lineages."""

    first_step: int | None
    """The first step at which their states differ (None: they never do)."""
    keys: tuple[str, ...]
    """The keys that differ at that step."""
    a: Side | None
    """The first thread's checkpoint at that step (None when they never differ)."""
    b: Side | None
    """The second thread's checkpoint at that step (None when they never differ)."""
    heads: StateDiff
    """The difference between the two heads, as :func:`plait.state.diff.diff` gives it."""
    head_a: Side
    """The first thread's head."""
    head_b: Side
    """The second thread's head."""

    def __bool__(self) -> bool:
        return self.first_step is not None or bool(self.heads)

    def shown(self, show: Callable[[Side], Shown]) -> ThreadDiff[Shown]:
        """The same diff with each checkpoint it holds shown by ``show`` (``CompiledGraph``
        shows the stored ones as ``ThreadState``)."""
        a, b = (None if x is None else show(x) for x in (self.a, self.b))
        return ThreadDiff(
            first_step=self.first_step,
            keys=self.keys,
            a=a,
            b=b,
            heads=self.heads,
            head_a=show(self.head_a),
            head_b=show(self.head_b),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckpointRef:
    """``THREAD`` or ``THREAD@CHECKPOINT``: a thread's head, or one of its checkpoints."""

    thread_id: str
    checkpoint_id: str | None = None
    namespace: str = ""

    def __str__(self) -> str:
        return self.thread_id + (f"@{self.checkpoint_id}" if self.checkpoint_id else "")


def parse_ref(text: str, namespace: str = "") -> CheckpointRef:
    """``THREAD[@CHECKPOINT]`` as a reference (the last ``@`` splits, so thread ids may hold one).

    Raises:
        ValueError: an empty thread id or an empty checkpoint id after ``@``.
    """
    thread, sep, cid = text.rpartition("@") if "@" in text else (text, "", "")
    if not thread:
        raise ValueError(f"{text!r} names no thread: write THREAD or THREAD@CHECKPOINT")
    if sep and not cid:
        raise ValueError(f"{text!r} has an '@' but no checkpoint id after it: write THREAD or THREAD@CHECKPOINT")
    return CheckpointRef(thread_id=thread, checkpoint_id=cid or None, namespace=namespace)


# -- threads -----------------------------------------------------------------------------------


async def list_threads(
    checkpointer: Checkpointer,
    *,
    namespace: str | None = None,
    status: Status | None = None,
    prefix: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    limit: int = 50,
    before: str | None = None,
) -> ThreadPage:
    """Threads most recently active first, at most ``limit``, after the cursor ``before``.

    Every filter is the store's (see :meth:`Checkpointer.alist_threads`): ``namespace``,
    ``status``, ``prefix`` (thread ids starting with it), ``metadata`` (heads whose metadata
    contains it) and the paging, so a page reads a page and one thread more, never every head.

    Raises:
        ValueError: an unknown status, a limit below 1, a ``before`` that is not a cursor, or
            a ``metadata`` that is not a JSON object.
    """
    rows = await checkpointer.alist_threads(
        namespace=namespace, status=status, limit=limit + 1, before=before, prefix=prefix or None, metadata=metadata
    )
    page = rows[:limit]
    return ThreadPage(threads=tuple(page), next_cursor=page[-1].cursor if len(rows) > limit else None)


async def thread_summary(checkpointer: Checkpointer, thread_id: str, *, namespace: str = "") -> ThreadSummary:
    """How ``thread_id`` stands: its listing record, its head, what runs next, what waits.

    Raises:
        CheckpointNotFoundError: the thread has no checkpoint.
    """
    info = await checkpointer.aget_thread(thread_id, namespace=namespace)
    head = await checkpointer.aget(thread_id, namespace=namespace)
    if info is None or head is None:
        raise CheckpointNotFoundError(thread_id, None, namespace)
    return ThreadSummary(
        info=info,
        head=head,
        next=next_nodes(head),
        interrupts=tuple(waiting_interrupts(head.pending_writes)),
        errors=tuple(stored_errors(head.pending_writes)),
    )


def next_nodes(cp: Checkpoint) -> tuple[str, ...]:
    """The nodes of ``cp``'s next tasks, each once, in order."""
    return tuple(dict.fromkeys(t.node for t in cp.next_tasks))


def stored_errors(pending: Sequence[PendingWrite]) -> list[Mapping[str, Any]]:
    """The failures stored among ``pending`` (``error`` writes), as stored."""
    return [
        w.value if isinstance(w.value, Mapping) else {"message": str(w.value)} for w in pending if w.kind == "error"
    ]


# -- history and state -------------------------------------------------------------------------


async def history(
    checkpointer: Checkpointer,
    thread_id: str,
    *,
    namespace: str = "",
    limit: int | None = None,
    before: str | None = None,
) -> tuple[list[Checkpoint], str | None]:
    """A page of the thread's checkpoints newest first (values included: the caller drops
    them for a metadata-only view), and the ``before`` of the next page (None: last page).

    Raises:
        CheckpointNotFoundError: the thread has no checkpoint, or ``before`` is not one of its.
    """
    rows = await checkpointer.ahistory(
        thread_id, namespace=namespace, limit=None if limit is None else limit + 1, before=before
    )
    if not rows:
        if before is not None and await checkpointer.aget(thread_id, before, namespace=namespace) is None:
            raise CheckpointNotFoundError(thread_id, before, namespace)
        if before is None:
            raise CheckpointNotFoundError(thread_id, None, namespace)
    page = rows if limit is None else rows[:limit]
    more = limit is not None and len(rows) > limit
    return page, page[-1].id if more and page else None


async def get_checkpoint(
    checkpointer: Checkpointer, thread_id: str, checkpoint_id: str | None = None, *, namespace: str = ""
) -> Checkpoint:
    """The thread's head (or ``checkpoint_id``), with its pending writes.

    Raises:
        CheckpointNotFoundError: no such thread or checkpoint.
    """
    cp = await checkpointer.aget(thread_id, checkpoint_id, namespace=namespace)
    if cp is None:
        raise CheckpointNotFoundError(thread_id, checkpoint_id, namespace)
    return cp


async def changes(
    checkpointer: Checkpointer, thread_id: str, checkpoint_id: str | None = None, *, namespace: str = ""
) -> CheckpointDiff:
    """What ``checkpoint_id`` (default: the head) changed against its parent; a fork's root
    against the checkpoint it was forked from (so its edits, and nothing else, show), while
    that one is still stored; any other root (an input) against an empty state.

    Raises:
        CheckpointNotFoundError: no such thread or checkpoint.
    """
    cp = await get_checkpoint(checkpointer, thread_id, checkpoint_id, namespace=namespace)
    if cp.parent_id:
        parent = await checkpointer.aget(thread_id, cp.parent_id, namespace=namespace)
    else:
        parent = await _fork_source(checkpointer, cp)
    return CheckpointDiff(a=parent, b=cp, channels=diff_values(parent.values if parent else {}, cp.values))


async def _fork_source(checkpointer: Checkpointer, cp: Checkpoint) -> Checkpoint | None:
    """The checkpoint a fork's root was copied from, as its ``forked_from`` metadata names
    it (None: not a fork, or its source was deleted since)."""
    source = cp.metadata.get("forked_from")
    if not isinstance(source, Mapping):
        return None
    thread, checkpoint = source.get("thread_id"), source.get("checkpoint_id")
    if not isinstance(thread, str) or not isinstance(checkpoint, str):
        return None
    return await checkpointer.aget(thread, checkpoint, namespace=cp.namespace)


async def diff_checkpoints(checkpointer: Checkpointer, a: CheckpointRef, b: CheckpointRef) -> CheckpointDiff:
    """The per-channel difference from ``a`` to ``b``, of one thread or of two.

    Raises:
        CheckpointNotFoundError: either reference names nothing stored.
    """
    ca = await get_checkpoint(checkpointer, a.thread_id, a.checkpoint_id, namespace=a.namespace)
    cb = await get_checkpoint(checkpointer, b.thread_id, b.checkpoint_id, namespace=b.namespace)
    return CheckpointDiff(a=ca, b=cb, channels=diff_values(ca.values, cb.values))


async def diff_threads(checkpointer: Checkpointer, a: str, b: str, *, namespace: str = "") -> ThreadDiff[Checkpoint]:
    """Where two threads part ways: their newest lineages compared step by step from the
    root; the first step whose states differ and the keys that do, and how the heads differ.
    Threads that agree on every shared step but whose heads differ part ways at the later
    head's step.

    Raises:
        CheckpointNotFoundError: either thread has no checkpoint.
    """
    ha = list(reversed(await checkpointer.ahistory(a, namespace=namespace)))
    hb = list(reversed(await checkpointer.ahistory(b, namespace=namespace)))
    if not ha:
        raise CheckpointNotFoundError(a, None, namespace)
    if not hb:
        raise CheckpointNotFoundError(b, None, namespace)
    by_a, by_b = {cp.step: cp for cp in ha}, {cp.step: cp for cp in hb}
    heads = diff(ha[-1].values, hb[-1].values)
    for step in sorted(set(by_a) & set(by_b)):
        d = diff(by_a[step].values, by_b[step].values)
        if d:
            return ThreadDiff(
                first_step=step, keys=d.keys, a=by_a[step], b=by_b[step], head_a=ha[-1], head_b=hb[-1], heads=heads
            )
    if heads:
        step = max(ha[-1].step, hb[-1].step)
        return ThreadDiff(
            first_step=step, keys=heads.keys, a=ha[-1], b=hb[-1], head_a=ha[-1], head_b=hb[-1], heads=heads
        )
    return ThreadDiff(first_step=None, keys=(), a=None, b=None, head_a=ha[-1], head_b=hb[-1], heads=heads)


async def copy_checkpoint(
    checkpointer: Checkpointer, thread_id: str, checkpoint_id: str | None, target: str, *, namespace: str = ""
) -> str:
    """Copy a checkpoint (the head by default) as the root of the new thread ``target``, as
    it is (edits need the graph's reducers: ``CompiledGraph.fork``); returns the new id.

    Raises:
        CheckpointNotFoundError: no such source.
        ThreadExistsError: ``target`` already has checkpoints; nothing is written.
    """
    src = await get_checkpoint(checkpointer, thread_id, checkpoint_id, namespace=namespace)
    if await checkpointer.aget(target, namespace=namespace) is not None:
        raise ThreadExistsError(target, namespace, "Fork into a new thread id, or delete that thread first.")
    return await fork_checkpoint(checkpointer, src, target)


# -- the per-channel diff ------------------------------------------------------------------------


def diff_values(a: Mapping[str, Any], b: Mapping[str, Any]) -> tuple[ChannelDiff, ...]:
    """One :class:`ChannelDiff` per channel that differs from ``a`` to ``b``, sorted by key."""
    out = []
    for key in sorted({*a, *b}):
        d = diff_channel(key, a[key], b[key]) if key in a and key in b else None
        if key not in a:
            d = ChannelDiff(key=key, kind="added", after=b[key])
        elif key not in b:
            d = ChannelDiff(key=key, kind="removed", before=a[key])
        if d is not None:
            out.append(d)
    return tuple(out)


def diff_channel(key: str, before: Any, after: Any) -> ChannelDiff | None:
    """How one channel's value differs (None: it does not)."""
    if not _differ(before, after):
        return None
    if _is_list(before) and _is_list(after):
        if (before or after) and _all_have_ids(before) and _all_have_ids(after):
            return _diff_messages(key, before, after)
        return _diff_list(key, before, after)
    if isinstance(before, Mapping) and isinstance(after, Mapping):
        return ChannelDiff(
            key=key,
            kind="map",
            added_keys={k: after[k] for k in after if k not in before},
            removed_keys={k: before[k] for k in before if k not in after},
            changed_keys={k: (before[k], after[k]) for k in before if k in after and _differ(before[k], after[k])},
        )
    return ChannelDiff(key=key, kind="changed", before=before, after=after)


def _diff_list(key: str, before: Sequence[Any], after: Sequence[Any]) -> ChannelDiff:
    if len(after) >= len(before) and all(not _differ(x, y) for x, y in zip(before, after, strict=False)):
        return ChannelDiff(key=key, kind="list", appended=tuple(after[len(before) :]))
    return ChannelDiff(key=key, kind="list", appended=_missing(after, before), removed_items=_missing(before, after))


def _missing(items: Sequence[Any], other: Sequence[Any]) -> tuple[Any, ...]:
    """The items of ``items`` that ``other`` does not have, counted as multisets, in order."""
    have = Counter(_key(x) for x in other)
    out = []
    for item in items:
        k = _key(item)
        if have[k] > 0:
            have[k] -= 1
        else:
            out.append(item)
    return tuple(out)


def _diff_messages(key: str, before: Sequence[Mapping[str, Any]], after: Sequence[Mapping[str, Any]]) -> ChannelDiff:
    old = {str(m["id"]): m for m in before}
    new = {str(m["id"]): m for m in after}
    return ChannelDiff(
        key=key,
        kind="messages",
        appended=tuple(m for i, m in new.items() if i not in old),
        removed_items=tuple(m for i, m in old.items() if i not in new),
        updated=tuple((old[i], m) for i, m in new.items() if i in old and _differ(old[i], m)),
    )


def _is_list(x: Any) -> bool:
    return isinstance(x, list | tuple)


def _all_have_ids(items: Sequence[Any]) -> bool:
    return all(isinstance(m, Mapping) and isinstance(m.get("id"), str | int) for m in items)


def _key(x: Any) -> bytes:
    try:
        return canonical(x)
    except TypeError:
        return repr(x).encode()


def _differ(x: Any, y: Any) -> bool:
    """JSON inequality (``1`` and ``True`` are equal in Python, not in JSON)."""
    if x is y:
        return False
    return x != y or _key(x) != _key(y)
