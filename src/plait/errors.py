"""Every exception a plait user can hit.

All of them derive from :class:`PlaitError`, so ``except plait.PlaitError`` catches anything
plait raises on purpose. Each carries the structured facts of the failure as attributes
(``channel``, ``node``, ``step``, ``thread_id``, ...) so callers can react without parsing
messages, and each message says what happened, where, and what to do about it.

The tree::

    PlaitError
    ├── SchemaError                  a schema was declared wrongly (duplicate key, bad reducer)
    ├── StateError                   a write or read of run state was refused
    │   ├── UnknownChannelError      a write to a key the schema does not declare
    │   ├── MissingValueError        (also KeyError) state[key] for a key with no value yet
    │   ├── NotSerializableError     (also TypeError) a value that is not JSON data
    │   ├── InvalidUpdateError       a value the channel's reducer cannot take
    │   │   └── MessageNotFoundError a removal marker names a message that is not there
    │   ├── ReducerError             a reducer raised; the cause is chained
    │   ├── ConcurrentWriteError     two tasks wrote one last-write-wins channel in one step
    │   └── ReadOnlyStateError       (also TypeError) an attempt to mutate a stored value
    ├── GraphError                   a graph is built or used wrongly
    │   ├── MissingNodeError         a node name that the graph does not have
    │   ├── GraphChangedError        a thread was checkpointed by an incompatible graph
    │   ├── NodeSignatureError       a node's parameters plait cannot call it with (``config``)
    │   ├── ContextError             a run's ``context=`` that does not fit the graph's context type
    │   └── GraphRequiredError       an action that needs the graph (its reducers, its nodes) got none
    ├── RunError                     a run stopped with a failure
    │   ├── NodeError                a node raised; the cause is chained
    │   │   └── NodeTimeoutError     (also TimeoutError) a node ran past its timeout
    │   ├── RecursionLimitError      a run took more super-steps than allowed
    │   ├── InvalidResumeError       a Command(resume=...) that matches no pending interrupt
    │   └── NoCheckpointerError      a feature that needs a checkpointer was used without one
    ├── CommandLineError             the plait command was used wrongly (it exits with code 2)
    │   ├── ArgumentError            an argument or option value that cannot be used
    │   ├── TargetLoadError          MODULE:GRAPH names nothing that loads as a graph
    │   ├── ExportFormatError        a file for `plait import` that is not a thread export
    │   └── NotConfirmedError        a deletion that was not confirmed
    └── CheckpointError              the checkpoint store refused or failed
        ├── CheckpointNotFoundError  a thread or checkpoint id that is not stored
        ├── CheckpointCorruptError   stored data that cannot be read back
        ├── InvalidIdError           (also ValueError) a thread id, namespace or checkpoint id no store can hold
        ├── InvalidRecordError       (also ValueError) a checkpoint or pending write no store can hold
        ├── ThreadBusyError          another run holds the thread's lease
        ├── LeaseLostError           a run's lease was taken over: it may not write any more
        ├── ConcurrentUpdateError    the thread moved on between reading it and committing
        ├── StoreVersionError        a database schema this version of plait does not know
        ├── StoreAddressError        (also ValueError) a store address that names no store plait can open
        │   └── StoreNotFoundError   a store address naming a file or folder that does not exist
        ├── AmbiguousCheckpointError a checkpoint id prefix that more than one checkpoint has
        └── ThreadExistsError        a thread that must not exist yet (an import, a fork) exists

The signal raised by :func:`plait.interrupt` is deliberately *not* here: it derives from
``BaseException`` (like ``asyncio.CancelledError``) so that a node's ``except Exception``
cannot swallow the pause, and users never need to catch it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = [
    "AmbiguousCheckpointError",
    "ArgumentError",
    "CheckpointCorruptError",
    "CheckpointError",
    "CheckpointNotFoundError",
    "CommandLineError",
    "ConcurrentUpdateError",
    "ConcurrentWriteError",
    "ContextError",
    "ExportFormatError",
    "GraphChangedError",
    "GraphError",
    "GraphRequiredError",
    "InvalidIdError",
    "InvalidRecordError",
    "InvalidResumeError",
    "InvalidUpdateError",
    "LeaseLostError",
    "MessageNotFoundError",
    "MissingNodeError",
    "MissingValueError",
    "NoCheckpointerError",
    "NodeError",
    "NodeSignatureError",
    "NodeTimeoutError",
    "NotConfirmedError",
    "NotSerializableError",
    "PlaitError",
    "ReadOnlyStateError",
    "RecursionLimitError",
    "ReducerError",
    "RunError",
    "SchemaError",
    "StateError",
    "StoreAddressError",
    "StoreNotFoundError",
    "StoreVersionError",
    "TargetLoadError",
    "ThreadBusyError",
    "ThreadExistsError",
    "UnknownChannelError",
]


def _where(node: str | None) -> str:
    return f" (written by node {node!r})" if node else ""


class PlaitError(Exception):
    """Root of every error plait raises on purpose."""


class SchemaError(PlaitError):
    """A state schema was declared wrongly; raised while building it, never mid-run."""


class StateError(PlaitError):
    """A write or read of run state was refused. The state is left exactly as it was."""


class UnknownChannelError(StateError):
    """A write named a key that the schema does not declare."""

    def __init__(self, channel: str, known: Sequence[str], node: str | None = None) -> None:
        self.channel = channel
        self.known = tuple(known)
        self.node = node
        listed = ", ".join(repr(k) for k in self.known) or "(none)"
        super().__init__(
            f"unknown channel {channel!r}{_where(node)}; the schema declares: {listed}. "
            "Add the channel to the StateSchema or write to one of the declared keys."
        )


class MissingValueError(StateError, KeyError):
    """``state[key]`` for a key with no value (also a ``KeyError``): a channel not written yet
    (``declared``), or a key that is not a channel of the schema at all (a typo, most often;
    the message then names the schema's ``channels``)."""

    def __init__(
        self,
        key: str,
        present: Sequence[str],
        writers: Sequence[str] = (),
        *,
        declared: bool = True,
        channels: Sequence[str] = (),
    ) -> None:
        self.key = key
        self.present = tuple(present)
        self.writers = tuple(writers)
        self.declared = declared
        self.channels = tuple(channels)
        if not declared:
            known = ", ".join(repr(k) for k in self.channels) or "(none given)"
            message = (
                f"{key!r} is not a channel of this schema; its channels are {known}. "
                "Check the key's spelling, or declare the channel in the schema."
            )
        else:
            have = ", ".join(repr(k) for k in self.present) or "(none)"
            why = f"channel {key!r} has no value yet"
            if self.writers:
                why += " (it is written by " + ", ".join(repr(w) for w in self.writers) + ")"
            message = (
                f"{why}; keys with a value: {have}. Use state.get({key!r}, default) where the "
                "value is optional, or give the channel a default in the schema."
            )
        super().__init__(message)

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0])


class NotSerializableError(StateError, TypeError):
    """A value that is not JSON data was written; nothing is pickled, ever."""

    def __init__(self, channel: str, path: str, type_name: str, node: str | None = None) -> None:
        self.channel = channel
        self.path = path
        self.type_name = type_name
        self.node = node
        super().__init__(
            f"{path}: {type_name} is not JSON data{_where(node)}. State values must be "
            "dict (str keys), list, str, int, float (finite), bool or None; convert it "
            "(for example datetime.isoformat(), enum.value, dataclasses.asdict()) before writing."
        )


class InvalidUpdateError(StateError):
    """A value the channel's reducer cannot take (wrong shape for that reducer)."""

    def __init__(self, channel: str, reason: str, node: str | None = None) -> None:
        self.channel = channel
        self.reason = reason
        self.node = node
        super().__init__(f"invalid write to channel {channel!r}{_where(node)}: {reason}")

    def at_node(self, node: str | None) -> InvalidUpdateError:
        """Name the node that wrote (reducers do not know it; the state that runs them does)."""
        if node and self.node is None:
            self.node = node
            self.args = (f"invalid write to channel {self.channel!r}{_where(node)}: {self.reason}",)
        return self


class MessageNotFoundError(InvalidUpdateError):
    """A removal marker named a message id that the channel does not hold."""

    def __init__(self, channel: str, message_id: str, node: str | None = None) -> None:
        self.message_id = message_id
        super().__init__(
            channel,
            f"cannot remove message {message_id!r}: no message with that id is in the channel. "
            "Read the channel to see the ids it holds.",
            node,
        )


class ReducerError(StateError):
    """A reducer raised while folding a write; the original exception is the ``__cause__``."""

    def __init__(self, channel: str, reducer: str, cause: BaseException, node: str | None = None) -> None:
        self.channel = channel
        self.reducer = reducer
        self.node = node
        super().__init__(
            f"reducer {reducer} of channel {channel!r} raised {type(cause).__name__}: {cause}"
            f"{_where(node)}. The write was not applied; fix the reducer or the value written."
        )


class ConcurrentWriteError(StateError):
    """Two tasks of one super-step wrote the same last-write-wins channel."""

    def __init__(self, channel: str, nodes: Sequence[str], step: int | None = None) -> None:
        self.channel = channel
        self.nodes = tuple(nodes)
        self.step = step
        at = f" in super-step {step}" if step is not None else ""
        super().__init__(
            f"nodes {' and '.join(repr(n) for n in self.nodes)} both wrote last-write-wins "
            f"channel {channel!r}{at}; which one wins would depend on timing. Give the channel "
            "a reducer that combines writes (AppendList, MergeMap, ...) or let one node write it."
        )


class ReadOnlyStateError(StateError, TypeError):
    """An attempt to mutate a value that belongs to plait state."""

    def __init__(self, type_name: str, operation: str) -> None:
        self.type_name = type_name
        self.operation = operation
        super().__init__(
            f"cannot {operation} a {type_name} read from plait state: stored values are "
            "read-only so that no caller can change a checkpoint behind plait's back. Copy it "
            "(plait.thaw(value), list(value), dict(value)) and write the copy back instead."
        )


class GraphError(PlaitError):
    """A graph was built or used wrongly. Compile-time checks raise this, naming the culprit."""


class MissingNodeError(GraphError):
    """A node name that the graph does not have."""

    def __init__(self, node: str, known: Sequence[str]) -> None:
        self.node = node
        self.known = tuple(known)
        super().__init__(
            f"the graph has no node {node!r}; its nodes are: " + (", ".join(repr(k) for k in self.known) or "(none)")
        )


class GraphChangedError(GraphError):
    """A thread's checkpoint was written by a graph that this graph cannot safely continue."""

    def __init__(self, thread_id: str, changes: Sequence[str]) -> None:
        self.thread_id = thread_id
        self.changes = tuple(changes)
        super().__init__(
            f"thread {thread_id!r} was checkpointed by an incompatible version of this graph: "
            + "; ".join(self.changes)
            + ". Resume it with the graph that wrote it, fork it and fix the state with "
            "update_state, or start a new thread."
        )


class NodeSignatureError(GraphError):
    """A node (or router) whose parameters plait cannot call it with, such as LangGraph's
    ``def node(state, config)``: plait passes a :class:`~plait.NodeContext`, not a config."""

    def __init__(self, node: str, param: str) -> None:
        self.node = node
        self.param = param
        super().__init__(
            f"node {node!r} takes a second parameter named {param!r} (LangGraph's RunnableConfig): plait "
            "passes a NodeContext there instead. Rename it `ctx` and read per-run values from "
            "`ctx.context` (given by invoke(..., context=...)), the thread id from `ctx.thread_id`"
        )


class ContextError(GraphError):
    """A run's ``context=`` that does not fit the context type the graph declares
    (``Graph(State, context=Ctx)``): a missing or unknown field, or a value of another type."""

    def __init__(self, declared: str, problem: str) -> None:
        self.declared = declared
        self.problem = problem
        super().__init__(
            f"invoke(..., context=...) does not fit the graph's context type {declared}: {problem}. "
            f"Pass a {declared} or a dict with its fields"
        )


class GraphRequiredError(GraphError):
    """An action that folds values through reducers or runs nodes (an edit, a fork with edits,
    an answer to an interrupt, a continued run) was asked of a tool that was given no graph,
    or no graph that fits the thread. Nothing was written."""

    def __init__(self, action: str, advice: str) -> None:
        self.action = action
        super().__init__(f"{action} needs the thread's graph: {advice}")


class RunError(PlaitError):
    """A run stopped with a failure; the thread stays resumable from its last checkpoint."""


class NodeError(RunError):
    """A node raised. Its siblings finished and their writes were kept; the cause is chained."""

    def __init__(self, node: str, step: int, thread_id: str | None, cause: BaseException) -> None:
        self.node = node
        self.step = step
        self.thread_id = thread_id
        where = f" of thread {thread_id!r}" if thread_id else ""
        resume = (
            f" The thread is resumable: invoke(None, thread_id={thread_id!r}) re-runs only the "
            "tasks that did not finish."
            if thread_id
            else ""
        )
        super().__init__(f"node {node!r} failed in super-step {step}{where}: {type(cause).__name__}: {cause}.{resume}")


class NodeTimeoutError(NodeError, TimeoutError):
    """A node ran past its ``timeout``.

    Also a ``TimeoutError`` (which ``asyncio.TimeoutError`` is), so code that treats every
    timeout alike, a ``RetryPolicy(retry_on=TimeoutError)`` included, treats this one so too.
    """

    def __init__(self, node: str, step: int, thread_id: str | None, timeout: float) -> None:
        self.timeout = timeout
        super().__init__(node, step, thread_id, TimeoutError(f"did not finish within {timeout:g}s"))


class RecursionLimitError(RunError):
    """A run took more super-steps than ``recursion_limit`` allows."""

    def __init__(self, limit: int, thread_id: str | None) -> None:
        self.limit = limit
        self.thread_id = thread_id
        super().__init__(
            f"the run reached the recursion limit of {limit} super-steps without finishing. "
            "If the graph is meant to loop that long, pass a larger recursion_limit to "
            "invoke()/stream(); otherwise check the conditions that end its loops."
        )


class InvalidResumeError(RunError):
    """``Command(resume=...)`` that does not match the thread's pending interrupts."""

    def __init__(self, thread_id: str | None, reason: str) -> None:
        self.thread_id = thread_id
        super().__init__(f"cannot resume thread {thread_id!r}: {reason}")


class NoCheckpointerError(RunError):
    """A feature that needs a checkpointer (interrupts, threads, history) was used without one."""

    def __init__(self, feature: str) -> None:
        self.feature = feature
        super().__init__(
            f"{feature} needs a checkpointer: compile the graph with "
            "checkpointer=MemoryCheckpointer() or checkpointer='plait.db' (SQLite), and pass a "
            "thread_id when you invoke it."
        )


class CommandLineError(PlaitError):
    """The ``plait`` command was given something it cannot use; it exits with code 2.

    Raised by the command line only, before anything is written: the message names the
    argument or option, what was wrong with it, and the command to run instead.
    """


class ArgumentError(CommandLineError):
    """An argument or option whose value cannot be used (JSON that does not parse,
    ``--limit 0``, two options that exclude each other)."""

    def __init__(self, option: str, message: str) -> None:
        self.option = option
        """The option or argument, as written on the command line (``--limit``, ``THREAD``)."""
        super().__init__(message)


class TargetLoadError(CommandLineError):
    """``MODULE:GRAPH`` could not be loaded: no such file or module, an error while importing
    it, no such attribute, or an object that is not a graph."""

    def __init__(self, target: str, reason: str) -> None:
        self.target = target
        self.reason = reason
        super().__init__(f"cannot load {target!r}: {reason}")


class ExportFormatError(CommandLineError):
    """A file given to ``plait import`` that is not a thread export this plait can read."""

    def __init__(self, source: str, line: int, reason: str) -> None:
        self.source = source
        self.line = line
        self.reason = reason
        super().__init__(
            f"{source} line {line}: {reason}; `plait import` reads what `plait export THREAD` writes "
            "(format plait-thread, version 1)"
        )


class NotConfirmedError(CommandLineError):
    """A command that deletes data asked for a confirmation and did not get one."""

    def __init__(self, action: str, *, declined: bool) -> None:
        self.action = action
        self.declined = declined
        """True when the answer was no; False when there was nobody to ask (no input)."""
        why = "declined" if declined else "there was no answer to the question (stdin is closed)"
        super().__init__(f"{action}: not done, {why}; pass --yes to do it without asking")


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
            "in UTF-8; derive a shorter or cleaner one (for example hashlib.sha256(raw).hexdigest())."
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
                reason += " at " + _utc(taken_at)
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
        self, thread_id: str, expected: str | None, found: str | None, *, pending_writes: bool = False
    ) -> None:
        self.thread_id = thread_id
        self.expected = expected
        self.found = found
        self.pending_writes = pending_writes
        """Whether the head was the expected one but had pending writes the write did not know of."""
        want = f"head {expected!r}" if expected is not None else "no checkpoint yet (a new thread)"
        got = f"head {found!r}" if found is not None else "no checkpoint"
        if pending_writes:
            want, got = f"head {expected!r} with no pending writes", "pending writes on it"
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


def _utc(seconds: float) -> str:
    import datetime

    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).isoformat(timespec="milliseconds")


def describe(value: Any) -> str:
    """A short type name for messages (``datetime``, ``MyClass``)."""
    return type(value).__name__
