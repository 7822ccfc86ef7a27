"""Errors of the checkpoint store: refusals, damage, leases, addresses and versions."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from plait.errors._base import PlaitError, utc_text

__all__ = [
    "AmbiguousCheckpointError",
    "CheckpointCorruptError",
    "CheckpointError",
    "CheckpointNotFoundError",
    "ConcurrentUpdateError",
    "InvalidIdError",
    "InvalidRecordError",
    "LeaseLostError",
    "MAX_ID_BYTES",
    "RetentionError",
    "RunRejectedError",
    "STORE_ADDRESS_FORMS",
    "StoreAddressError",
    "StoreNotFoundError",
    "StoreVersionError",
    "ThreadBusyError",
    "ThreadExistsError",
]


class CheckpointError(PlaitError):
    """The checkpoint store refused a request or failed."""


class CheckpointNotFoundError(CheckpointError):
    """A thread or checkpoint id that is not stored."""

    def __init__(self, thread_id: str, checkpoint_id: str | None = None, namespace: str = "") -> None:
        self.thread_id = thread_id
        self.checkpoint_id = checkpoint_id
        self.namespace = namespace
        what = f"checkpoint {checkpoint_id!r} of thread {thread_id!r}" if checkpoint_id else f"thread {thread_id!r}"
        ns = f" in namespace {namespace!r}" if namespace else ""
        super().__init__(
            f"no {what}{ns} is stored; list what exists with list_threads() / get_state_history() or `plait threads`."
        )


class CheckpointCorruptError(CheckpointError):
    """Stored data that cannot be read back; other threads stay readable."""

    def __init__(self, thread_id: str, checkpoint_id: str | None, reason: str) -> None:
        self.thread_id = thread_id
        self.checkpoint_id = checkpoint_id
        self.reason = reason
        where = f"checkpoint {checkpoint_id!r} of thread {thread_id!r}" if checkpoint_id else f"thread {thread_id!r}"
        super().__init__(
            f"{where} cannot be read: {reason}. The data was not written by this version of "
            "plait or was damaged; fork from an earlier checkpoint or delete the thread."
        )


MAX_ID_BYTES = 512
"""The longest thread id, namespace or checkpoint id, in bytes of UTF-8.

Why this figure: PostgreSQL keys its tables by these ids, and a b-tree entry holds at most
2704 bytes (a third of a page) after compression, which random ids such as hashes do not get.
The longest key is a pending write's: namespace, thread id, checkpoint id, task id, kind and
write key. Two ids of 512 bytes leave about 1600 bytes for a task id and a write key (the
name given to ``ctx.once``); with 1 KiB ids they would have had about 600. And 512 bytes is
far longer than any id people or hash functions make (a UUID is 36), so the limit stops only
data that is not an id."""


class InvalidIdError(CheckpointError, ValueError):
    """A thread id, namespace or checkpoint id that breaks the rule every backend holds ids to.

    The rule: a ``str``, encodable as UTF-8 (no lone surrogates such as ``"\\ud800"``),
    without NUL (PostgreSQL text cannot hold it), at most :data:`MAX_ID_BYTES` bytes in UTF-8.
    One rule for all backends, checked before anything is written, locked or read, so that an
    id one store takes is an id every store takes, and a bad one fails the same way everywhere
    instead of as an encoding error in one backend and a stray file in another. Also a
    ``ValueError``, as it is a bad argument.
    """

    def __init__(self, what: str, value: object, reason: str) -> None:
        self.what = what
        """Which id: ``"thread id"``, ``"namespace"``, ``"checkpoint id"``, ``"parent id"``."""
        self.value = value
        self.reason = reason
        shown = repr(value)
        if len(shown) > 80:
            shown = shown[:60] + f"... ({len(value) if isinstance(value, str) else '?'} characters)"
        super().__init__(
            f"{what} {shown} is refused: {reason}. Thread ids, namespaces and checkpoint ids must be "
            f"str, valid Unicode text (encodable as UTF-8), without NUL, and at most {MAX_ID_BYTES} bytes "
            "in UTF-8 (a thread id also more than whitespace); derive a shorter or cleaner one (for "
            "example hashlib.sha256(raw).hexdigest())."
        )


class InvalidRecordError(CheckpointError, ValueError):
    """A commit holding a field no store can hold back: refused before anything is stored.

    Raised for a pending write of a kind plait does not know, a task, version or barrier that
    is not of its type, or metadata whose plait keys (``source``, ``step``, ``writes``,
    ``reducers``) are not of theirs. Stored, such a record would be refused as corrupt by
    every read after it (or crash a resume), so it is refused at the door instead.
    """

    def __init__(self, what: str, reason: str) -> None:
        self.what = what
        self.reason = reason
        super().__init__(
            f"{what} cannot be stored: {reason}. Nothing of this commit was stored; "
            "build the record with the types the Checkpoint, Task and PendingWrite fields declare."
        )


class ThreadBusyError(CheckpointError):
    """Another run holds the thread's lease: one run per thread at a time."""

    def __init__(
        self,
        thread_id: str,
        owner: str,
        expires_in: float,
        *,
        namespace: str = "",
        holder: Any = None,
        alive: bool | None = None,
        token: int | None = None,
    ) -> None:
        self.thread_id = thread_id
        self.owner = owner
        self.token = token
        """The generation of the live lease (when the store says)."""
        self.expires_in = expires_in
        """Seconds until the lease ends unless its holder renews it."""
        self.namespace = namespace
        self.holder = holder
        """The :class:`~plait.checkpoint.holder.Holder` that took the lease, when known."""
        self.alive = alive
        """Whether the holder is alive: True or False when it runs on this machine, None when
        it runs elsewhere (or cannot be checked) and its lease must be waited out."""
        where = ""
        if holder is not None:
            what = {True: "alive on this machine", False: "gone", None: "on another machine"}[alive]
            where = f", {holder.describe()}, {what}"
        ns = f" in namespace {namespace!r}" if namespace else ""
        super().__init__(
            f"thread {thread_id!r}{ns} is being run by {owner}{where}; its lease ends in {expires_in:.1f}s "
            "unless renewed. Wait for that run to finish (invoke(..., wait=SECONDS), or "
            "`plait resume --wait SECONDS`), or use another thread_id."
        )


class RunRejectedError(ThreadBusyError):
    """``submit(..., multitask="reject")`` found an active run (pending or running) on the
    thread: the new run was not stored. A :class:`ThreadBusyError`, as the thread is busy."""

    def __init__(self, thread_id: str, active_run: str, status: str, *, namespace: str = "") -> None:
        self.active_run = active_run
        """The id of the run that keeps the thread busy."""
        self.status = status
        self.thread_id = thread_id
        self.namespace = namespace
        self.owner = f"run {active_run}"
        self.token = None
        self.expires_in = 0.0
        self.holder = None
        self.alive = None
        ns = f" in namespace {namespace!r}" if namespace else ""
        CheckpointError.__init__(
            self,
            f"thread {thread_id!r}{ns} has an active run {active_run!r} ({status}), so this run was refused "
            '(multitask="reject"). Wait for it (runs.join), cancel it, or submit with multitask="enqueue" '
            '(run after it), "interrupt" (stop it at its next super-step and go on from there) or "rollback".',
        )


class LeaseLostError(CheckpointError):
    """A run's lease on its thread is no longer the thread's current one: it was taken over
    (the run stalled past its lease and another run took the thread), given back, or revoked
    (a one-off write or a delete found it expired). The run stops at once: the store refuses
    every write made under the old lease, so nothing of it lands after the takeover."""

    def __init__(
        self,
        thread_id: str,
        token: int,
        *,
        namespace: str = "",
        taken_by: str | None = None,
        taken_at: float | None = None,
        holder: Any = None,
        reason: str | None = None,
    ) -> None:
        self.thread_id = thread_id
        self.namespace = namespace
        self.token = token
        """The generation of the lease that was lost."""
        self.taken_by = taken_by
        """Who holds (or last held) the thread's current lease, when it was taken over."""
        self.taken_at = taken_at
        """When the thread was taken over (or the lease given back), in unix seconds."""
        self.holder = holder
        ns = f" in namespace {namespace!r}" if namespace else ""
        if reason is None:
            who = taken_by or "another run"
            if holder is not None:
                who += f" ({holder.describe()})"
            reason = f"the thread was taken over by {who}"
            if taken_at is not None:
                reason += " at " + utc_text(taken_at)
        super().__init__(
            f"this run lost its lease on thread {thread_id!r}{ns} (generation {token}): {reason}. It stopped "
            "without writing anything more. The thread goes on from its stored checkpoints: look at it with "
            "get_state() or `plait state`, and resume it there if it still needs to run."
        )


class ConcurrentUpdateError(CheckpointError):
    """A fenced commit expected the thread's head to be one checkpoint and found another
    (or found it with pending writes it was built without: :attr:`pending_writes`).

    Raised instead of storing a checkpoint built on a head that is no longer the newest
    (another update or fork committed in between), which would leave the other write on a
    side branch, out of the thread's lineage, or on top of task results it would drop.
    Nothing was stored; read the thread again and redo the update (``update_state`` does so
    itself a few times before raising this).
    """

    def __init__(
        self,
        thread_id: str,
        expected: str | None,
        found: str | None,
        *,
        pending_writes: bool = False,
        parent: bool = False,
    ) -> None:
        self.thread_id = thread_id
        self.expected = expected
        self.found = found
        self.pending_writes = pending_writes
        """Whether the head was the expected one but had pending writes the write did not know of."""
        self.parent = parent
        """Whether ``expected`` is the past checkpoint the write built on, not the head
        (:attr:`~plait.checkpoint.Fence.expect_parent_no_writes`): ``found`` is then that
        checkpoint, or None when it is gone."""
        want = f"head {expected!r}" if expected is not None else "no checkpoint yet (a new thread)"
        got = f"head {found!r}" if found is not None else "no checkpoint"
        if pending_writes:
            want, got = f"head {expected!r} with no pending writes", "pending writes on it"
        if parent:
            want = f"checkpoint {expected!r}, which it builds on, with no pending writes"
            got = "pending writes on it" if found is not None else "that checkpoint gone"
        super().__init__(
            f"thread {thread_id!r} changed while this write was prepared: it expected {want} and found {got}, "
            "so nothing was stored. Read the thread again and retry, or write to a new thread id."
        )


class StoreVersionError(CheckpointError):
    """A database whose schema version this version of plait does not understand."""

    def __init__(self, store: str, found: int, known: int) -> None:
        self.store = store
        self.found = found
        self.known = known
        if found > known:
            advice = "it was written by a newer plait; upgrade plait to read it"
        else:
            advice = "run `plait db migrate` (or call setup()) to upgrade it"
        super().__init__(f"{store} has schema version {found}, this plait knows version {known}: {advice}.")


STORE_ADDRESS_FORMS = (
    "a SQLite file (plait.db, sqlite:///relative/path.db, sqlite:////absolute/path.db), "
    "a PostgreSQL DSN (postgresql://user@host:5432/dbname or postgres://...), "
    "a folder for the file store (file:///absolute/folder) or memory:"
)
"""What a store address can be, for messages (the command line says the same of ``--db``)."""


class StoreAddressError(CheckpointError, ValueError):
    """A store address (a path or URL given to :func:`plait.checkpoint.open`, or ``--db``)
    that names no store plait can open: an unknown scheme, a directory where a SQLite file
    was expected, a file that is not a SQLite database, a path that cannot be opened.

    Also a ``ValueError``: the address is a bad value, and code that validates its inputs
    with ``except ValueError`` catches it.
    """

    def __init__(self, address: str, reason: str, advice: str = "") -> None:
        self.address = address
        """The address as given, with any password replaced by ``***``."""
        self.reason = reason
        """What is wrong with it, without the address."""
        self.advice = advice
        """What to do instead (may be empty; the forms an address can take are added)."""
        todo = f" {advice}" if advice else ""
        super().__init__(
            f"cannot open the store {address!r}: {reason}.{todo} A store address is {STORE_ADDRESS_FORMS}."
        )


class StoreNotFoundError(StoreAddressError):
    """A store address naming a SQLite file or a file-store folder that does not exist, when
    asked not to create it (``open(..., create=False)``; the inspection commands of ``plait``)."""

    def __init__(self, address: str, what: str) -> None:
        self.what = what
        super().__init__(
            address,
            f"no {what} exists there",
            "Check the path (relative paths start in the current folder), or create the store first.",
        )


class AmbiguousCheckpointError(CheckpointError):
    """A shortened checkpoint id that more than one checkpoint of the thread starts with."""

    def __init__(self, thread_id: str, prefix: str, candidates: Sequence[tuple[str, int]]) -> None:
        self.thread_id = thread_id
        self.prefix = prefix
        self.candidates = tuple(candidates)
        """``(checkpoint id, step)`` of every checkpoint that starts with ``prefix``."""
        listed = ", ".join(f"{cid} (step {step})" for cid, step in self.candidates)
        super().__init__(
            f"checkpoint id {prefix!r} of thread {thread_id!r} is ambiguous: {len(self.candidates)} "
            f"checkpoints start with it: {listed}. Give more of the id, or the step."
        )


class ThreadExistsError(CheckpointError):
    """A thread that must not exist yet already has checkpoints (an import without
    ``--replace``, a fork into an existing thread id). Nothing was written."""

    def __init__(self, thread_id: str, namespace: str = "", advice: str = "Choose a new thread id.") -> None:
        self.thread_id = thread_id
        self.namespace = namespace
        ns = f" in namespace {namespace!r}" if namespace else ""
        super().__init__(f"thread {thread_id!r}{ns} already exists, so nothing was written. {advice}")


class RetentionError(CheckpointError, ValueError):
    """A retention policy that cannot be applied: a :class:`plait.Retention` built with a
    value it cannot take, or a thread's ``"retention"`` metadata that is not a policy.

    Also a ``ValueError``: the policy is a bad value.
    """

    def __init__(self, where: str, reason: str) -> None:
        self.where = where
        """Which policy: ``Retention(...)``, or the thread whose metadata holds it."""
        self.reason = reason
        """What is wrong with it."""
        super().__init__(
            f"{where}: {reason}. A retention policy is Retention(after=SECONDS, action='delete' or "
            "'keep_latest', keep_interrupted=True), or in a thread's metadata under 'retention' "
            "{'after': SECONDS, 'action': ..., 'keep_interrupted': ...} or 'never'"
        )
