"""Retention: how long a thread is kept once it stops changing, and what a sweep removed.

A store only grows unless something removes what nobody will read again. A
:class:`Retention` policy says when a thread is old enough to go (``after`` seconds since its
last checkpoint was written, by the store's clock) and what goes: the whole thread
(``delete``), or everything but its head and what the head needs to be read and resumed
(``keep_latest``: delta anchors, pending writes, interrupts stay; older checkpoints and
time-travel branches go). A thread can carry its own policy in its metadata under
``"retention"`` (a policy as JSON, or ``"never"``), which wins over the store's.

The sweep itself is :meth:`Checkpointer.asweep <plait.checkpoint.base.Checkpointer.asweep>`
(see :mod:`plait.checkpoint._sweep`); this module holds its records and the rules it reads
threads by, so that every backend sweeps the same way.

A subgraph's checkpoints live in namespaces of their own under its parent's thread id
(``parent_ns|node:task_id``, see :func:`plait.engine.subgraph.child_namespace`). Those
namespaces belong to the parent thread: :func:`parent_namespaces` reads a namespace's
possible owners, and a sweep treats a thread and the namespaces it owns as one.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, get_args

from plait.checkpoint.model import ThreadInfo
from plait.errors import RetentionError

__all__ = [
    "NEVER",
    "RETENTION_KEY",
    "Retention",
    "RetentionAction",
    "SweepReport",
    "ThreadKey",
    "group_threads",
    "parent_namespaces",
    "thread_policy",
]

RetentionAction = Literal["delete", "keep_latest"]
"""What a policy does to a thread idle past ``after``: remove it, or keep only its head."""

RETENTION_KEY: Final = "retention"
"""The metadata key a thread's own policy is stored under (on its head checkpoint; each new
checkpoint carries it on from the one it follows, so a policy given once lasts)."""

NEVER: Final = "never"
"""A thread's own policy that keeps it whatever the store's policy says."""

ThreadKey = tuple[str, str]
"""A thread as ``(namespace, thread_id)``."""

_ACTIONS: Final = get_args(RetentionAction)
_SEGMENT: Final = re.compile(r"[^|]*:[0-9a-f]{16}(?:#[0-9]+)?")
"""The last segment of a subgraph's namespace: ``node:task_id`` (a task id is 16 hex
digits), with ``#n`` for the n-th subgraph a task called explicitly."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Retention:
    """How long a thread is kept after its last checkpoint, and what then goes.

    Example::

        store = SqliteCheckpointer("app.db", retention=Retention(after=30 * 86400, action="keep_latest"))
        report = store.sweep()

    Raises:
        RetentionError: ``after`` is not a positive number of seconds, ``action`` is not
            ``"delete"`` or ``"keep_latest"``, or ``keep_interrupted`` is not a bool.
    """

    after: float
    """Seconds since a thread's last checkpoint was written (by the store's clock) after
    which the thread is swept."""
    action: RetentionAction = "delete"
    """``delete``: the thread goes, with its subgraphs' namespaces. ``keep_latest``: its head
    and what the head needs stay; older checkpoints and time-travel branches go."""
    keep_interrupted: bool = True
    """Keep a thread that waits on an interrupt whole, however old. False: it is reduced to
    what still resumes it (as ``keep_latest``), never deleted."""

    def __post_init__(self) -> None:
        after = self.after
        if isinstance(after, bool) or not isinstance(after, int | float) or not math.isfinite(after) or after <= 0:
            raise RetentionError("Retention(...)", f"after={after!r} is not a positive number of seconds")
        if self.action not in _ACTIONS:
            raise RetentionError("Retention(...)", f"action={self.action!r} is not 'delete' or 'keep_latest'")
        if not isinstance(self.keep_interrupted, bool):
            raise RetentionError("Retention(...)", f"keep_interrupted={self.keep_interrupted!r} is not True or False")

    def to_json(self) -> dict[str, Any]:
        """The policy as JSON data (what a thread's ``"retention"`` metadata holds)."""
        return {"after": self.after, "action": self.action, "keep_interrupted": self.keep_interrupted}

    @classmethod
    def from_json(cls, data: Any, *, where: str = "a retention policy") -> Retention:
        """A policy from :meth:`to_json`'s form; ``action`` and ``keep_interrupted`` may be left out.

        Raises:
            RetentionError: ``data`` is not such an object (``where`` names it in the message).
        """
        if not isinstance(data, Mapping):
            raise RetentionError(where, f"{data!r} is not an object with 'after' (seconds) or 'never'")
        unknown = sorted(str(k) for k in data if k not in ("after", "action", "keep_interrupted"))
        if unknown:
            raise RetentionError(where, f"it has keys {unknown} that a policy does not know")
        if "after" not in data:
            raise RetentionError(where, "it has no 'after' (seconds of idleness before the thread is swept)")
        try:
            return cls(
                after=data["after"],
                action=data.get("action", "delete"),
                keep_interrupted=data.get("keep_interrupted", True),
            )
        except RetentionError as exc:
            raise RetentionError(where, exc.reason) from None


def thread_policy(metadata: Mapping[str, Any], *, thread_id: str, namespace: str = "") -> Retention | str | None:
    """A thread's own policy, from its head's metadata: a :class:`Retention`, :data:`NEVER`,
    or None when it has none (the store's applies), ``None`` under the key included: a run
    given ``metadata={"retention": None}`` drops the thread's policy.

    Raises:
        RetentionError: its ``"retention"`` metadata is neither a policy nor ``"never"``.
    """
    found = metadata.get(RETENTION_KEY)
    if found is None:
        return None
    if found == NEVER:
        return NEVER
    where = f"the 'retention' metadata of thread {thread_id!r}" + (f" in namespace {namespace!r}" if namespace else "")
    return Retention.from_json(found, where=where)


def parent_namespaces(namespace: str) -> list[str]:
    """The namespaces whose thread ``namespace`` would be a subgraph's namespace of (the same
    thread id), nearest first; [] for a namespace not shaped as a subgraph's.

    Example: ``"a:0123456789abcdef|b:fedcba9876543210"`` gives
    ``["a:0123456789abcdef", ""]``.
    """
    out: list[str] = []
    rest = namespace
    while True:
        head, sep, segment = rest.rpartition("|")
        if not _SEGMENT.fullmatch(segment):
            return out
        out.append(head)
        if not sep:
            return out
        rest = head


def group_threads(infos: Iterable[ThreadInfo]) -> dict[ThreadKey, list[ThreadInfo]]:
    """Listed threads grouped by the thread that owns them: each top-level thread's key mapped
    to its own entry first, then the entries of its subgraphs' namespaces (outer ones
    first). A subgraph namespace whose owner is not listed is a group of its own."""
    listed = {(i.namespace, i.thread_id): i for i in infos}
    groups: dict[ThreadKey, list[ThreadInfo]] = {}
    owned: list[tuple[ThreadKey, ThreadInfo]] = []
    for key, info in listed.items():
        owners = [p for p in parent_namespaces(key[0]) if (p, key[1]) in listed]
        if owners:
            owned.append(((owners[-1], key[1]), info))
        else:
            groups[key] = [info]
    for root, info in sorted(owned, key=lambda o: len(o[1].namespace)):
        groups[root].append(info)
    return groups


@dataclass(frozen=True, slots=True, kw_only=True)
class SweepReport:
    """What a sweep removed (or, with ``dry_run``, would remove).

    Threads are ``(namespace, thread_id)`` pairs of top-level threads; the namespaces of
    their subgraphs go with them and are counted in ``checkpoints_removed``.
    """

    dry_run: bool = False
    """Nothing was changed: the report says what a sweep would do now."""
    deleted: tuple[ThreadKey, ...] = ()
    """Threads removed whole."""
    reduced: tuple[ThreadKey, ...] = ()
    """Threads reduced to their head and what it needs (``keep_latest``, or an interrupted
    thread under ``keep_interrupted=False``)."""
    checkpoints_removed: int = 0
    """Checkpoints removed in all, subgraph namespaces' included."""
    skipped_busy: tuple[ThreadKey, ...] = ()
    """Threads a run held (the thread or one of its subgraphs) that were old enough but not
    touched."""
    invalid: tuple[ThreadKey, ...] = ()
    """Threads kept because their ``"retention"`` metadata is not a policy (logged)."""
    bytes_freed: int | None = None
    """Bytes the store's files shrank by, where this machine can see them (SQLite, file
    store); None where the backend does not know (PostgreSQL, memory) or on a dry run."""
    held_elsewhere: bool = False
    """Another process was sweeping the same database (PostgreSQL's advisory lock was held),
    so this sweep changed nothing."""
    policy: Retention | None = None
    """The policy applied to threads without one of their own (the checkpointer's, else the
    stored one; None: only threads with their own policy were swept)."""

    def to_json(self) -> dict[str, Any]:
        """The report as JSON data (what ``--json`` prints)."""

        def keys(found: tuple[ThreadKey, ...]) -> list[dict[str, str]]:
            return [{"namespace": ns, "thread_id": tid} for ns, tid in found]

        return {
            "dry_run": self.dry_run,
            "deleted": keys(self.deleted),
            "reduced": keys(self.reduced),
            "checkpoints_removed": self.checkpoints_removed,
            "skipped_busy": keys(self.skipped_busy),
            "invalid": keys(self.invalid),
            "bytes_freed": self.bytes_freed,
            "held_elsewhere": self.held_elsewhere,
            "policy": None if self.policy is None else self.policy.to_json(),
        }
