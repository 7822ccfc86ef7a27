"""The records a checkpointer stores and returns: checkpoints, their tasks and pending writes,
the fence a commit carries, leases and thread listings, and the ids of checkpoints.

Plain frozen data with no I/O: the engine builds them, every backend stores and returns
them, and :mod:`plait.checkpoint.base` declares what a backend does with them.
"""

from __future__ import annotations

import base64
import enum
import functools
import hashlib
import json
import os
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal, NamedTuple, cast, get_args

from plait._codec import freeze_trusted
from plait._fast_init import positional_maker
from plait.checkpoint._match import check_metadata
from plait.checkpoint.holder import Holder
from plait.types import Interrupt

__all__ = [
    "ANY_HEAD",
    "STATUSES",
    "AnyHead",
    "Checkpoint",
    "CheckpointWrite",
    "Fence",
    "HeadCondition",
    "Lease",
    "PendingWrite",
    "RestStatus",
    "Status",
    "Task",
    "ThreadInfo",
    "WRITE_KINDS",
    "WriteKind",
    "WritesBatch",
    "check_listing",
    "decode_cursor",
    "encode_cursor",
    "fence_targets",
    "make_checkpoint",
    "make_checkpoint_write",
    "make_task",
    "new_checkpoint_id",
    "quiet_parent",
    "task_from_json",
    "task_id",
    "waiting_interrupts",
]

WriteKind = Literal["result", "effect", "resume", "interrupt", "breakpoint", "error"]
WRITE_KINDS: Final = frozenset(get_args(WriteKind))
"""Every kind of pending write a store may hold; a stored write of any other kind is corrupt."""
_WRITE_KINDS: Final = WRITE_KINDS

Status = Literal["idle", "busy", "interrupted", "error", "ready", "stale"]
"""How a thread stands: ``idle`` (finished, nothing next), ``busy`` (a run holds a live
lease on it), ``interrupted`` (waiting for input), ``error`` (a task failed; the error is
stored), ``ready`` (work to do that no run has started: a fork, an update, a run stopped
or cancelled at a step boundary; a run continues it), ``stale`` (a run held the thread and
died without giving it back: its lease lapsed or its process is gone; a resume continues
it)."""
RestStatus = Literal["idle", "interrupted", "error", "ready", "stale"]
"""How a thread stands when no run holds it."""
STATUSES: Final[tuple[Status, ...]] = ("idle", "busy", "interrupted", "error", "ready", "stale")


def _brief(data: Any) -> str:
    """``data`` shown in a message about its shape, cut short."""
    text = repr(data)
    return text if len(text) <= 80 else text[:77] + "..."


@dataclass(frozen=True, slots=True, kw_only=True)
class Task:
    """A task planned for a super-step: one node call."""

    id: str
    """Deterministic: a hash of the checkpoint it starts from, the node and its Send index."""
    node: str
    send: bool = False
    """True when the task came from a ``Send``; its input is then ``arg``, not the state."""
    arg: Any = None

    def to_json(self) -> list[Any]:
        return [self.id, self.node, self.send, self.arg] if self.send else [self.id, self.node]

    @classmethod
    def from_json(cls, data: Sequence[Any]) -> Task:
        """The task :meth:`to_json` made: ``[id, node]`` or ``[id, node, send, arg]`` (see
        :func:`task_from_json`)."""
        return task_from_json(data)


_new_object = object.__new__
_set_id = Task.__dict__["id"].__set__
_set_node = Task.__dict__["node"].__set__
_set_send = Task.__dict__["send"].__set__
_set_arg = Task.__dict__["arg"].__set__


@functools.lru_cache(maxsize=256)
def task_id(checkpoint_id: str, node: str, index: int) -> str:
    """Deterministic id of the ``index``-th task of ``node`` planned from ``checkpoint_id``.

    The engine plans with it; a stored body names a planned task whose id is
    ``task_id(checkpoint, node, 0)`` by its node alone (see ``_records.encode_body``), so
    the commit that follows the planning asks for the same ids again: cached, the check
    costs the commit 0.1 µs a task instead of a hash (0.4 µs).
    """
    return hashlib.blake2b(f"{checkpoint_id}|{node}|{index}".encode(), digest_size=8).hexdigest()


def task_from_json(data: Any) -> Task:
    """The task :meth:`Task.to_json` made: ``[id, node]`` or ``[id, node, send, arg]``, its
    ``arg`` frozen; each decoder of stored tasks calls this one.

    Raises:
        ValueError: any other shape, or an id, node or send of another type (stored data
            from elsewhere: a resume would otherwise crash on it, or run the wrong node).
    """
    if isinstance(data, list | tuple):
        if len(data) == 2:
            tid, node = data
            if type(tid) is str and type(node) is str:
                return make_task(tid, node, False, None)
        elif len(data) == 4:
            tid, node, send, arg = data
            if type(tid) is str and type(node) is str and type(send) is bool:
                return make_task(tid, node, send, freeze_trusted(arg))
    raise ValueError(f"a task must be [id, node] or [id, node, send, arg] (str, str, bool), not {_brief(data)}")


def make_task(id: str, node: str, send: bool, arg: Any) -> Task:
    """``Task(id=id, node=node, send=send, arg=arg)`` at half the cost: it sets the slots
    directly instead of going through the frozen dataclass's ``__init__``. A fan-out plans
    one task per Send and a history read decodes one per planned task, so this is on hot
    paths; a test checks it sets every field."""
    task = _new_object(Task)
    _set_id(task, id)
    _set_node(task, node)
    _set_send(task, send)
    _set_arg(task, arg)
    return task


@dataclass(frozen=True, slots=True, kw_only=True)
class PendingWrite:
    """Something a task of the next super-step produced, saved before the step completes.

    Unique per ``(task_id, kind, key)``: saving it again replaces it.

    kinds:
      * ``result``: the task finished; ``value`` is ``{"writes": [[channel, value], ...],
        "routes": [...]}``.
      * ``effect``: the recorded result of ``ctx.once(key, fn)``.
      * ``resume``: ``value`` is the list of resume values given to the task's interrupts.
      * ``interrupt``: the task paused; ``value`` is :meth:`plait.types.Interrupt.to_json`.
      * ``breakpoint``: an ``interrupt_before`` pause was taken (task id ``""``; key
        ``"after"`` for an ``interrupt_after`` pause).
      * ``error``: the task failed (task id ``""`` for a failure of the step itself, such as
        a merge); ``value`` is ``{"node", "step", "type", "message", "traceback"}``. Never
        read by a resume, which runs the task again; kept so the thread can say why it
        stopped.
    """

    task_id: str
    kind: WriteKind
    key: str = ""
    value: Any = None

    def to_json(self) -> list[Any]:
        return [self.task_id, self.kind, self.key, self.value]

    @classmethod
    def from_json(cls, data: Sequence[Any]) -> PendingWrite:
        """The pending write :meth:`to_json` made: ``[task_id, kind, key, value]``.

        Raises:
            ValueError: any other shape, a task id or key that is not a str, or a kind plait
                does not know (the engine would not see such a write, and would run a task
                that already finished again).
        """
        if isinstance(data, list | tuple) and len(data) == 4:
            task_id, kind, key, value = data
            if type(task_id) is str and type(kind) is str and kind in _WRITE_KINDS and type(key) is str:
                return cls(task_id=task_id, kind=cast(WriteKind, kind), key=key, value=value)
        raise ValueError(f"a pending write must be [task id, kind, key, value] of a known kind, not {_brief(data)}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Checkpoint:
    """One checkpoint of a thread, as read back from a backend."""

    thread_id: str
    namespace: str = ""
    id: str
    """Time-ordered: a later checkpoint of a thread has a greater id."""
    parent_id: str | None
    step: int
    """Super-steps along this checkpoint's lineage (the input checkpoint of a first run is 0)."""
    values: Mapping[str, Any]
    """Channel values (frozen JSON data)."""
    versions: Mapping[str, int] = field(default_factory=dict)
    """The state version at which each channel last changed."""
    next_tasks: tuple[Task, ...] = ()
    """The tasks of the next super-step; empty when the run is finished."""
    barriers: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Join barriers: join id -> the predecessors that have arrived so far."""
    metadata: Mapping[str, Any] = field(default_factory=dict)
    """JSON data: ``source`` (input, loop, update, fork, replay, migrate), ``step``,
    ``writes`` (node -> channel keys it wrote), ``graph`` (fingerprint), ``graph_name`` and
    ``graph_version`` (a versioned graph's), ``migrated_from``/``migrated_to`` (a
    ``migrate`` checkpoint's versions), ``run_id``, ``label``, user keys."""
    created_at: float = 0.0
    """Unix time in seconds."""
    pending_writes: tuple[PendingWrite, ...] = ()

    @property
    def version(self) -> int:
        """The state version (the greatest channel version)."""
        return max(self.versions.values(), default=0)


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckpointWrite:
    """A new checkpoint to store, with what a backend needs to store it compactly."""

    checkpoint: Checkpoint
    changed: frozenset[str]
    """Channels whose value differs from the parent's; only these need storing. The rest
    are the parent's values (a backend may still store them in full, e.g. for a fork)."""
    folds_parent_writes: bool = False
    """Delete the parent's pending writes in the same transaction: this checkpoint is the
    completed super-step they belonged to."""
    checked: bool = False
    """Whether the record's ids and fields are known to pass the rules a commit checks, so
    that a backend need not check them again. The engine sets it on two kinds only, whose
    every field it made itself (ids, versions, tasks, plait's metadata keys): a run's step
    checkpoints, whose thread and namespace are the run's, checked when it took its lease or
    stored its first checkpoint; and a hand update (``update_state``) built on a stored
    checkpoint, whose thread, namespace and id were checked when that one was stored.
    Anything else (a thread's first write, a fork, an import) leaves it False."""


make_checkpoint = positional_maker(Checkpoint)
"""``Checkpoint(...)`` with every field given in field order, at under half the cost (see
:mod:`plait._fast_init`): a run makes one a super-step."""
make_checkpoint_write = positional_maker(CheckpointWrite)
"""``CheckpointWrite(...)`` with every field given in field order (one a super-step too)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class WritesBatch:
    """Pending writes for one checkpoint of one thread."""

    thread_id: str
    namespace: str = ""
    checkpoint_id: str
    writes: tuple[PendingWrite, ...]


class AnyHead(enum.Enum):
    """The type of :data:`ANY_HEAD`."""

    ANY_HEAD = "any head"


ANY_HEAD: Final = AnyHead.ANY_HEAD
"""``Fence.expect_head`` when the head is not checked (``None`` would mean "no head yet")."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Fence:
    """Conditions a commit must meet, checked atomically with it inside its transaction.

    Why: checking a lease (or a head) in one call and committing in the next leaves a gap
    in which another worker can take the thread over; a stalled run whose lease expired
    would then write on top of the new owner's work. Checked inside the commit itself, the
    conditions and the write are one atomic step, so a run that lost its lease cannot
    commit, and a one-off write (``update_state``, a fork) needs no lease round trips of
    its own: it states the head it built on instead, and retries when another write got
    there first.

    A commit with a fence is refused as a whole, writing nothing:

    * with :class:`~plait.errors.LeaseLostError` when ``token`` is given and, on a thread it
      touches (through its checkpoints or its writes), the lease of that generation is no
      longer the current one or was given back;
    * with :class:`~plait.errors.ThreadBusyError` when ``token`` is None and a thread it
      touches has a live lease (held and unexpired); an expired lease is revoked by the
      commit, so that the stalled run that held it can never write after it;
    * with :class:`~plait.errors.ConcurrentUpdateError` when ``expect_head`` is given and
      the thread of the commit's first checkpoint does not have that head (its newest
      checkpoint id; ``None``: the thread must have no checkpoint yet), or when
      ``expect_no_writes`` is set too and that head has pending writes, or when
      ``expect_parent_no_writes`` is set and the parent of its first checkpoint is gone or
      has pending writes.
    """

    owner: str
    """The lease owner the commit acts for: a run's owner, or for a one-off write a fresh
    name that no lease holds, so that any unexpired lease refuses it."""
    token: int | None = None
    """The generation of the lease the commit is made under (a run's commits): refused with
    :class:`~plait.errors.LeaseLostError` unless that lease is still the thread's current one
    and held, expired or not. None for a one-off write, which holds no lease: then any live
    lease refuses it, and an expired one is revoked by it."""
    expect_head: str | AnyHead | None = ANY_HEAD
    """The head the commit was built on (None: an empty thread); not checked by default."""
    expect_no_writes: bool = False
    """With ``expect_head``: the head must also have no pending writes. For a commit built
    on a head the caller remembers (:meth:`Checkpointer.known_head`) instead of one it just
    read: another process may have committed pending writes on that head since (a run that
    then crashed), which the commit would otherwise silently drop."""
    expect_parent_no_writes: bool = False
    """The parent of the commit's first checkpoint must still be stored and have no pending
    writes: for a commit built on a past checkpoint the caller remembers
    (:meth:`Checkpointer.known_checkpoint`) instead of one it just read, which another
    process may have deleted, or saved task results on (a run branching from it that then
    failed), since. Refused with :class:`~plait.errors.ConcurrentUpdateError` (``parent``)."""
    release: bool = False
    """Give the lease of generation ``token`` back in the same transaction, once the commit is
    written: a run's last commit, which then needs no release of its own (a round trip fewer
    per run). A refused commit releases nothing."""
    status: RestStatus | None = None
    """With ``release``: how the run leaves the thread (None: as it was)."""
    lease_namespace: str | None = None
    """The namespace whose lease ``token`` names, when it is not the namespace written: a
    subgraph's run writes its checkpoints in a child namespace of its parent's thread, under
    the parent run's lease (none of its own), so its commits are checked against the lease
    of ``(lease_namespace, thread_id)``; a parent that lost its lease cannot write its
    subgraphs' checkpoints either. None: each thread written is checked against its own."""

    def __post_init__(self) -> None:
        if not isinstance(self.owner, str):
            raise TypeError(f"Fence.owner must be a str, not {type(self.owner).__name__}")
        if self.release and self.token is None:
            raise ValueError("Fence.release gives back the lease of Fence.token: a release needs a token")
        if self.lease_namespace is not None and (self.token is None or self.release):
            raise ValueError(
                "Fence.lease_namespace fences a subgraph's commits by its parent's lease: "
                "it needs a token and no release"
            )


@dataclass(frozen=True, slots=True, kw_only=True)
class Lease:
    """A lease a run holds on a thread: what every write made under it carries."""

    thread_id: str
    namespace: str = ""
    owner: str
    """Who took it, for people: a run's owner names its host, pid and run id."""
    token: int
    """The lease's generation: greater than every earlier lease's on this thread."""
    taken_at: float
    """When it was taken (unix seconds, on the store's clock)."""
    expires_at: float
    """When it ends unless renewed (unix seconds, on the store's clock)."""
    holder: Holder | None = None
    """The process that took it (None when the store does not know)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ThreadInfo:
    """A thread as listed by :meth:`Checkpointer.alist_threads`."""

    thread_id: str
    namespace: str
    status: Status
    """How the thread stands (see :data:`Status`)."""
    head_id: str
    """The id of the thread's newest checkpoint."""
    step: int
    created_at: float
    """When the head was written (unix seconds)."""
    updated_at: float
    """When the thread last came to rest or was taken by a run (unix seconds): lists are
    ordered by it, newest first."""
    source: str
    """The head's metadata ``source``."""
    checkpoints: int
    """How many checkpoints the thread has."""
    lease: Lease | None = None
    """The lease held on the thread, if any (expired or not)."""

    @property
    def cursor(self) -> str:
        """Where a listing that ended with this thread goes on: pass it as ``before=``."""
        return encode_cursor(self.updated_at, self.namespace, self.thread_id)


def encode_cursor(updated_at: float, namespace: str, thread_id: str) -> str:
    """An opaque, URL-safe cursor for :attr:`ThreadInfo.cursor`."""
    raw = json.dumps([updated_at, namespace, thread_id], ensure_ascii=False).encode("utf-8", "surrogatepass")
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def decode_cursor(cursor: str) -> tuple[float, str, str]:
    """The ``(updated_at, namespace, thread_id)`` of a cursor.

    Raises:
        ValueError: not a cursor that :attr:`ThreadInfo.cursor` made.
    """
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        updated_at, namespace, thread_id = json.loads(raw.decode("utf-8", "surrogatepass"))
        if isinstance(updated_at, bool) or not isinstance(updated_at, int | float):
            raise TypeError("not a time")
        if not isinstance(namespace, str) or not isinstance(thread_id, str):
            raise TypeError("not names")
    except (ValueError, TypeError, UnicodeDecodeError) as exc:
        raise ValueError(f"before={cursor!r} is not a thread cursor: pass the .cursor of a listed thread") from exc
    return float(updated_at), namespace, thread_id


def _encodes(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def check_listing(
    status: Status | None, limit: int | None, prefix: str | None = None, metadata: Mapping[str, Any] | None = None
) -> None:
    """Refuse a ``status``, ``limit``, ``prefix`` or ``metadata`` that
    :meth:`Checkpointer.alist_threads` cannot take."""
    check_metadata(metadata)
    if prefix is not None and (not isinstance(prefix, str) or "\x00" in prefix or not _encodes(prefix)):
        raise ValueError(f"prefix={prefix!r}: give the start of a thread id (text), or None for all")
    if status is not None and status not in STATUSES:
        raise ValueError(f"status={status!r} is not a thread status; use one of {', '.join(STATUSES)}")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ValueError(f"limit={limit!r}: give a positive number of threads, or None for all")


def fence_targets(
    checkpoints: Sequence[CheckpointWrite], writes: Sequence[WritesBatch], fence: Fence
) -> tuple[list[tuple[str, str]], HeadCondition | None]:
    """What a backend checks for ``fence``: every ``(namespace, thread_id)`` the commit
    touches (with :attr:`Fence.lease_namespace`: that namespace's thread of each thread id
    touched, whose lease fences the commit), sorted (one lock order for every caller, so
    two fenced commits cannot wait on each other), and the head condition, or None when the head is not checked.

    Raises:
        ValueError: ``expect_head`` is given but the commit stores no checkpoint.
    """
    if fence.lease_namespace is not None:  # a subgraph's commit: the parent's lease fences it
        lease_ns = fence.lease_namespace
        touched = {cw.checkpoint.thread_id for cw in checkpoints} | {b.thread_id for b in writes}
        return sorted((lease_ns, tid) for tid in touched), None
    expected = fence.expect_head
    if len(checkpoints) == 1 and all(
        (b.namespace, b.thread_id) == (checkpoints[0].checkpoint.namespace, checkpoints[0].checkpoint.thread_id)
        for b in writes
    ):  # the common case (a step, an update, a fork): one thread, one checkpoint
        cp = checkpoints[0].checkpoint
        threads = [(cp.namespace, cp.thread_id)]
        if expected is ANY_HEAD:
            return threads, None
        return threads, HeadCondition(cp.namespace, cp.thread_id, expected, cp.id, fence.expect_no_writes)
    keys = {(cw.checkpoint.namespace, cw.checkpoint.thread_id) for cw in checkpoints}
    keys.update((b.namespace, b.thread_id) for b in writes)
    if expected is ANY_HEAD:
        return sorted(keys), None
    if not checkpoints:
        raise ValueError("Fence.expect_head needs a commit with a checkpoint: it names the head that one builds on")
    first = checkpoints[0].checkpoint
    own = max(
        cw.checkpoint.id
        for cw in checkpoints
        if cw.checkpoint.thread_id == first.thread_id and cw.checkpoint.namespace == first.namespace
    )
    return sorted(keys), HeadCondition(first.namespace, first.thread_id, expected, own, fence.expect_no_writes)


def quiet_parent(checkpoints: Sequence[CheckpointWrite], fence: Fence) -> tuple[str, str, str] | None:
    """What :attr:`Fence.expect_parent_no_writes` asks a backend to check: the namespace,
    thread and id of the parent of the commit's first checkpoint; None when not asked.

    Raises:
        ValueError: asked of a commit whose first checkpoint has no parent (or that has none).
    """
    if not fence.expect_parent_no_writes:
        return None
    cp = checkpoints[0].checkpoint if checkpoints else None
    if cp is None or cp.parent_id is None:
        raise ValueError(
            "Fence.expect_parent_no_writes needs a commit whose first checkpoint has a parent: "
            "it names the checkpoint that one builds on"
        )
    return cp.namespace, cp.thread_id, cp.parent_id


class HeadCondition(NamedTuple):
    """The head a fenced commit requires of its first checkpoint's thread.

    ``own`` (the commit's newest checkpoint id on that thread) is accepted as a head too:
    finding it means this very commit already landed, and a backend retrying a commit whose
    outcome it could not know (the connection dropped during COMMIT) must not refuse it
    then, or the caller would redo a write that is already stored.
    """

    namespace: str
    thread_id: str
    expected: str | None
    own: str
    no_writes: bool = False
    """:attr:`Fence.expect_no_writes`: ``expected``, when found, must have no pending writes."""

    def holds(self, found: str | None) -> bool:
        """Whether ``found`` (the thread's current head) satisfies the condition, pending
        writes aside (see :meth:`needs_quiet`)."""
        return found in (self.expected, self.own)

    def needs_quiet(self, found: str | None) -> bool:
        """Whether the backend must also check that ``found`` has no pending writes: only
        the expected head, when asked (finding ``own`` means this commit already landed)."""
        return self.no_writes and found is not None and found == self.expected and found != self.own


_id_lock = threading.Lock()
_last_id = [0]
_last_text = [""]
"""The last id made (its value is ``_last_id``): a run asks for the one after it each step."""
_process_tag = [os.urandom(3).hex()]


def _new_process_tag() -> None:
    """A forked child draws its own tag, so that its ids cannot collide with the parent's."""
    _process_tag[0] = os.urandom(3).hex()


os.register_at_fork(after_in_child=_new_process_tag)


def new_checkpoint_id(after: str | None = None) -> str:
    """A new time-ordered checkpoint id, greater than every id this process made before and
    greater than ``after`` (the parent), even if the clock went back.

    Layout: 52 bits of microseconds since the epoch and a 12-bit counter (16 hex digits),
    then 6 random hex digits drawn once per process, so ids from different processes do not
    collide (the hot path makes no system call for randomness).
    """
    now = int(time.time() * 1_000_000) << 12
    if after is not None and after is not _last_text[0]:  # (the last id made here is below the next anyway)
        try:
            parent = int(after[:16], 16) + 1
        except ValueError:  # a foreign id: order by our own clock
            parent = 0
        now = max(now, parent)
    with _id_lock:
        value = max(now, _last_id[0] + 1)
        _last_id[0] = value
        _last_text[0] = text = f"{value:016x}{_process_tag[0]}"
    return text


def waiting_interrupts(pending: Sequence[PendingWrite]) -> list[Interrupt]:
    """The interrupts among ``pending`` still waiting for an answer: their task has no result
    yet, and fewer resume values were given to it than the interrupt's index needs."""
    finished = {w.task_id for w in pending if w.kind == "result"}
    answered = {w.task_id: len(w.value) for w in pending if w.kind == "resume" and isinstance(w.value, list)}
    waiting: list[Interrupt] = []
    for w in pending:
        v = w.value
        if w.kind != "interrupt" or w.task_id in finished or not isinstance(v, Mapping):
            continue
        if v.get("index", 0) >= answered.get(w.task_id, 0):
            waiting.append(
                Interrupt(id=v["id"], value=v.get("value"), node=v["node"], task_id=v["task_id"], index=v["index"])
            )
    return waiting
