"""The rules every backend holds ids and records to, checked before anything is stored.

One rule per thing, in one place, so that what one backend takes every backend takes, and
what one refuses every backend refuses the same way, before it writes, locks, creates a file
or sends a statement:

* :func:`check_id` (and :func:`check_thread`): thread ids, namespaces and checkpoint ids, on
  every call that names one (commits, leases, reads, deletes); see
  :class:`~plait.errors.InvalidIdError` for the rule and :data:`~plait.errors.MAX_ID_BYTES`
  for why its length.
* :func:`check_commit`: every id of a commit, and each field that a read would otherwise
  refuse as corrupt (a pending write's kind, tasks, versions, barriers, plait's metadata keys),
  so that no commit can store a record that its own backend cannot read back.

The readers use the same shape rules (:func:`metadata_problem`, :data:`WRITE_KINDS`) on what
they decode, so a record is readable exactly when it could have been committed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from plait._frozen import FrozenList
from plait.checkpoint.model import WRITE_KINDS, CheckpointWrite, WritesBatch
from plait.errors import MAX_ID_BYTES, InvalidIdError, InvalidRecordError

__all__ = ["WRITE_KINDS", "check_commit", "check_id", "check_thread", "id_problem", "metadata_problem"]


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
    ``"checkpoint id"`` by default, ``"before"`` for a history's bound).

    A thread id must also hold something besides whitespace: ``""`` or ``"  "`` would be
    stored and then be unreachable from every place an id is typed or shown (a URL, a
    command line, a listing)."""
    check_id(thread_id, "thread id")
    if not thread_id.strip():  # type: ignore[attr-defined]  # (a str: check_id passed)
        raise InvalidIdError(
            "thread id", thread_id, "it is empty or only whitespace; give a name such as 'user-42' or 'ticket/7'"
        )
    check_id(namespace, "namespace")
    if checkpoint_id is not None:
        check_id(checkpoint_id, what or "checkpoint id")


def check_commit(checkpoints: Sequence[CheckpointWrite], writes: Sequence[WritesBatch]) -> None:
    """Check every id of a commit and every field a read would refuse, before anything is stored.

    Every commit of every backend goes through this, so the usual case (ASCII ids, fields
    of the types the engine writes) is tested first, in few calls.

    Raises:
        InvalidIdError: an id breaks the id rule.
        InvalidRecordError: a field is not of the type its record declares.
    """
    for cw in checkpoints:
        if cw.checked:  # a run's step checkpoint: see CheckpointWrite.checked
            continue
        cp = cw.checkpoint
        ids = (cp.thread_id, cp.namespace, cp.id, cp.parent_id or "")
        if (
            not (_STR.issuperset(map(type, ids)) and _plain("".join(ids)))
            or max(map(len, ids)) > MAX_ID_BYTES
            or not cp.thread_id.strip()
        ):
            check_thread(cp.thread_id, cp.namespace, cp.id)
            if cp.parent_id is not None:
                check_id(cp.parent_id, "parent id")
        reason = _checkpoint_problem(cp.versions, cp.next_tasks, cp.barriers, cp.metadata, cp.step)
        if reason is not None:
            raise InvalidRecordError(f"checkpoint {cp.id!r} of thread {cp.thread_id!r}", reason)
    for batch in writes:
        check_thread(batch.thread_id, batch.namespace, batch.checkpoint_id)
        for w in batch.writes:
            kind = w.kind
            if type(kind) is not str or kind not in WRITE_KINDS or type(w.task_id) is not str or type(w.key) is not str:
                raise InvalidRecordError(
                    f"pending write ({w.task_id!r}, {w.kind!r}, {w.key!r}) of thread {batch.thread_id!r}",
                    "its kind must be one of " + ", ".join(sorted(WRITE_KINDS)) + ", its task id and key str",
                )
            if not (w.task_id.isascii() and w.key.isascii()):
                for text in (w.task_id, w.key):
                    try:
                        text.encode("utf-8")
                    except UnicodeEncodeError:
                        raise InvalidRecordError(
                            f"pending write ({w.task_id!r}, {w.kind!r}, {w.key!r}) of thread {batch.thread_id!r}",
                            "its task id and key must be valid Unicode text (a lone surrogate is not)",
                        ) from None


def _plain(text: str) -> bool:
    """ASCII without NUL: ids of this text pass the id rule but for their length."""
    return text.isascii() and "\x00" not in text


def _checkpoint_problem(
    versions: Mapping[str, Any], tasks: Sequence[Any], barriers: Mapping[str, Any], metadata: Any, step: Any
) -> str | None:
    """Why a checkpoint's fields cannot be stored (each as the reader checks it), or None."""
    if type(step) is not int:
        return f"its step is a {type(step).__name__}, not an int"
    if not _INT.issuperset(map(type, versions.values())):
        return "its versions must map channel names to ints"
    for t in tasks:
        if type(t.id) is not str or type(t.node) is not str or type(t.send) is not bool:
            return f"task {t.id!r} must have a str id and node and a bool send"
    for key, arrived in barriers.items():
        if type(key) is not str or not _STR.issuperset(map(type, arrived)):
            return f"barrier {key!r} must map a str to node names"
    if not (isinstance(metadata, dict) or isinstance(metadata, Mapping)):  # noqa: SIM101 - dict first, without the ABC
        return "its metadata must be a mapping"
    return metadata_problem(metadata)


def metadata_problem(meta: Mapping[str, Any]) -> str | None:
    """Why ``meta`` (a checkpoint's metadata: an object) has a plait key of the wrong type, or
    None. Only the keys plait reads back as structures are checked (``source`` and ``step``,
    listed and shown everywhere; ``writes`` and ``reducers``, iterated by resume and the CLI);
    every other key is the user's to fill."""
    get = meta.get
    source, step, written, reducers = get("source"), get("step"), get("writes"), get("reducers")
    if source is not None and type(source) is not str:
        return f"metadata 'source' is a {type(source).__name__}, not a str"
    if step is not None and type(step) is not int:
        return f"metadata 'step' is a {type(step).__name__}, not an int"
    if written is not None and not _names_per_name(written):
        return "metadata 'writes' must map node names to lists of channel names"
    if reducers is not None and not (_is_mapping(reducers) and _STR.issuperset(map(type, reducers.values()))):
        return "metadata 'reducers' must map channel names to reducer names"
    return None


def _names_per_name(value: Any) -> bool:
    """Whether ``value`` maps names to lists of names (``writes``: node -> channels)."""
    if not _is_mapping(value):
        return False
    for names in value.values():  # noqa: SIM110 - a loop: all() of a generator costs twice as much
        if type(names) not in _LISTS or not _STR.issuperset(map(type, names)):
            return False
    return True


def _is_mapping(value: Any) -> bool:
    """``isinstance(value, Mapping)``, a dict (frozen or not) told without the ABC's check."""
    return isinstance(value, dict) or isinstance(value, Mapping)  # noqa: SIM101 - dict first, without the ABC


_STR = frozenset((str,))
_LISTS = frozenset((list, FrozenList, tuple))
_INT = frozenset((int,))
"""``_INT.issuperset(map(type, xs))``: every x is an int (not a bool), tested at C speed."""
