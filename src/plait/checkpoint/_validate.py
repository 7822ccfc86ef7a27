"""The rule every backend holds ids to, checked before anything is stored.

One rule, in one place, so that an id one backend takes every backend takes, and an id one
refuses every backend refuses the same way, before it writes, locks, creates a file or sends
a statement: :func:`check_id` (and :func:`check_thread`) for thread ids, namespaces and
checkpoint ids, on every call that names one (commits, leases, reads, deletes), and
:func:`check_commit` for every id of a commit. See :class:`~plait.errors.InvalidIdError` for
the rule and :data:`~plait.errors.MAX_ID_BYTES` for why its length.
"""

from __future__ import annotations

from collections.abc import Sequence

from plait.checkpoint.base import CheckpointWrite, WritesBatch
from plait.errors import MAX_ID_BYTES, InvalidIdError

__all__ = ["check_commit", "check_id", "check_thread", "id_problem"]


def id_problem(value: object) -> str | None:
    """Why ``value`` is not a valid id (see :class:`~plait.errors.InvalidIdError`), or None."""
    if type(value) is not str:
        if not isinstance(value, str):
            return f"it is a {type(value).__name__}, not a str"
        value = str.__str__(value)  # a str subclass: judged by its text
    if value.isascii():  # the usual id: one C scan, no encoding
        size = len(value)
    else:
        try:
            size = len(value.encode("utf-8"))
        except UnicodeEncodeError as exc:
            bad = value[exc.start]
            return f"it holds {bad!r} at index {exc.start}, a lone surrogate, which is not valid Unicode text"
    if "\x00" in value:
        return f"it holds a NUL character at index {value.index(chr(0))}, which PostgreSQL text cannot store"
    if size > MAX_ID_BYTES:
        return f"it is {size} bytes long in UTF-8, more than the {MAX_ID_BYTES} allowed"
    return None


def check_id(value: object, what: str) -> None:
    """Raise :class:`~plait.errors.InvalidIdError` if ``value`` is not a valid id.

    Args:
        what: which id it is, for the message (``"thread id"``, ``"namespace"``, ...).
    """
    if type(value) is str and len(value) <= MAX_ID_BYTES and value.isascii() and "\x00" not in value:
        return  # the usual id: four C-level tests
    reason = id_problem(value)
    if reason is not None:
        raise InvalidIdError(what, value, reason)


def check_thread(thread_id: object, namespace: object, checkpoint_id: object = None, *, what: str = "") -> None:
    """Check a thread's key, and ``checkpoint_id`` when it is not None (``what`` names it:
    ``"checkpoint id"`` by default, ``"before"`` for a history's bound)."""
    check_id(thread_id, "thread id")
    check_id(namespace, "namespace")
    if checkpoint_id is not None:
        check_id(checkpoint_id, what or "checkpoint id")


def check_commit(checkpoints: Sequence[CheckpointWrite], writes: Sequence[WritesBatch]) -> None:
    """Check every id of a commit, before anything is stored.

    Raises:
        InvalidIdError: an id breaks the id rule.
    """
    for cw in checkpoints:
        cp = cw.checkpoint
        check_thread(cp.thread_id, cp.namespace, cp.id)
        if cp.parent_id is not None:
            check_id(cp.parent_id, "parent id")
    for batch in writes:
        check_thread(batch.thread_id, batch.namespace, batch.checkpoint_id)
