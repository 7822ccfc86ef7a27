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
    │   ├── StateValidationError     (also ValueError) a write a Pydantic/dataclass state refused
    │   ├── InvalidUpdateError       a value the channel's reducer cannot take
    │   │   └── MessageNotFoundError a removal marker names a message that is not there
    │   ├── MessageChunkError        (also TypeError) a chunk ctx.stream_message cannot read
    │   ├── ReducerError             a reducer raised; the cause is chained
    │   ├── TaskResultError          (also TypeError) a task returned something that is not JSON data
    │   ├── ConcurrentWriteError     two tasks wrote one last-write-wins channel in one step
    │   └── ReadOnlyStateError       (also TypeError) an attempt to mutate a stored value
    ├── GraphError                   a graph is built or used wrongly
    │   ├── MissingNodeError         a node name that the graph does not have
    │   ├── GraphChangedError        a thread was checkpointed by an incompatible graph
    │   ├── GraphMigrationError      a migration of a thread to the graph's version raised
    │   ├── NodeSignatureError       a node's parameters plait cannot call it with (``config``)
    │   ├── EntrypointSignatureError (also TypeError) a function @plait.entrypoint cannot call
    │   ├── TaskOutsideRunError      (also RuntimeError) a task called outside an entrypoint or node
    │   ├── ContextError             a run's ``context=`` that does not fit the graph's context type
    │   ├── NoParentGraphError       a ``Command(graph=Command.PARENT)`` in a graph no other graph runs
    │   └── GraphRequiredError       an action that needs the graph (its reducers, its nodes) got none
    ├── RunError                     a run stopped with a failure
    │   ├── NodeError                a node raised; the cause is chained
    │   │   └── NodeTimeoutError     (also TimeoutError) a node ran past its timeout
    │   ├── RecursionLimitError      a run took more super-steps than allowed
    │   ├── InvalidResumeError       a Command(resume=...) that matches no pending interrupt
    │   ├── NoCheckpointerError      a feature that needs a checkpointer was used without one
    │   ├── SyncCallOnLoopError      ctx.once / ctx.stream_message called in an async node
    │   │   └── TaskWaitOnLoopError  future.result() of an unfinished task on the event loop (await it)
    │   └── TaskReplayError          a resumed entrypoint called its tasks in another order than recorded
    ├── TracingUnavailableError      (also ImportError) plait.instrument() or --otel without OpenTelemetry installed
    ├── DrawingUnavailableError      (also ImportError) get_graph().draw_png() without cairosvg installed
    ├── TraceContextError            (also ValueError) a TRACEPARENT / trace_context that is not W3C trace context
    ├── TraceUrlError                (also ValueError) a Studio trace link template (--trace-url) it cannot link with
    ├── CommandLineError             the plait command was used wrongly (it exits with code 2)
    │   ├── ArgumentError            an argument or option value that cannot be used
    │   ├── TargetLoadError          MODULE:GRAPH names nothing that loads as a graph
    │   ├── ExportFormatError        a file for `plait import` that is not a thread export
    │   └── NotConfirmedError        a deletion that was not confirmed
    ├── RunsError                    the run queue (plait.runs: runs, workers, schedules) refused or failed
    │   ├── RunNotFoundError         a run id that is not stored
    │   ├── ScheduleNotFoundError    a schedule id that is not stored
    │   ├── UnknownGraphError        a run of a graph the worker was not given
    │   ├── RunWaitTimeoutError      (also TimeoutError) wait() ran out before the run ended
    │   ├── QueueSchemaError         the runs or job-queue schema is missing or not the version plait knows
    │   └── NoRunQueueError          the Studio's store has no run queue (not PostgreSQL, or not set up)
    ├── ServeError                   `plait serve` (the LangGraph-compatible API) refused a request or cannot start
    │   ├── AssistantNotFoundError   an assistant id that names no served graph
    │   ├── ThreadNotFoundError      a thread the server has no record of
    │   ├── CheckpointMetadataReadOnlyError  a checkpoint's metadata a client asked to edit
    │   ├── ServeRequestError        (also ValueError) a request body or parameter it cannot act on
    │   └── ServeConfigError         a config file, graph or address it cannot serve
    ├── MemoryStoreError             the long-term memory store (plait.Store) refused or failed
    │   ├── InvalidNamespaceError    (also ValueError) a namespace that is not a tuple of plain labels
    │   ├── InvalidMemoryError       (also ValueError) a key, value, ttl or index a put cannot store
    │   ├── MemoryFilterError        (also ValueError) a search filter the store cannot run
    │   ├── NoStoreError             ctx.store in a graph compiled without a store
    │   ├── StoreUnsupportedError    a memory store asked of a backend that keeps none (file)
    │   └── EmbeddingError           the index's embed function failed or returned the wrong shape
    ├── CacheError                   the node cache (CachePolicy, MemoryCache, Cache) refused
    │   ├── CacheKeyError            (also TypeError) a cache key that cannot be made (input not JSON, bad key_func)
    │   ├── CacheValueError          (also TypeError) a result to cache that is not JSON data (never pickled)
    │   ├── NoCacheError             clear_cache() on a graph compiled without a cache
    │   └── CacheUnsupportedError    plait.Cache(checkpointer) on a backend that keeps no cache
    └── CheckpointError              the checkpoint store refused or failed
        ├── CheckpointNotFoundError  a thread or checkpoint id that is not stored
        ├── CheckpointCorruptError   stored data that cannot be read back
        ├── InvalidIdError           (also ValueError) a thread id, namespace or checkpoint id no store can hold
        ├── InvalidRecordError       (also ValueError) a checkpoint or pending write no store can hold
        ├── ThreadBusyError          another run holds the thread's lease
        │   └── RunRejectedError     submit(multitask="reject") on a thread with an active run
        ├── LeaseLostError           a run's lease was taken over: it may not write any more
        ├── ConcurrentUpdateError    the thread moved on between reading it and committing
        ├── StoreVersionError        a database schema this version of plait does not know
        ├── StoreAddressError        (also ValueError) a store address that names no store plait can open
        │   └── StoreNotFoundError   a store address naming a file or folder that does not exist
        ├── AmbiguousCheckpointError a checkpoint id prefix that more than one checkpoint has
        ├── RetentionError           (also ValueError) a retention policy that cannot be applied
        └── ThreadExistsError        a thread that must not exist yet (an import, a fork) exists

The signal raised by :func:`plait.interrupt` is deliberately *not* here: it derives from
``BaseException`` (like ``asyncio.CancelledError``) so that a node's ``except Exception``
cannot swallow the pause, and users never need to catch it.
"""

from plait.errors._base import DrawingUnavailableError as DrawingUnavailableError
from plait.errors._base import PlaitError as PlaitError
from plait.errors._base import TraceContextError as TraceContextError
from plait.errors._base import TracingUnavailableError as TracingUnavailableError
from plait.errors._cache import (
    CacheError as CacheError,
)
from plait.errors._cache import (
    CacheKeyError as CacheKeyError,
)
from plait.errors._cache import (
    CacheUnsupportedError as CacheUnsupportedError,
)
from plait.errors._cache import (
    CacheValueError as CacheValueError,
)
from plait.errors._cache import (
    NoCacheError as NoCacheError,
)
from plait.errors._cli import (
    ArgumentError as ArgumentError,
)
from plait.errors._cli import (
    CommandLineError as CommandLineError,
)
from plait.errors._cli import (
    ExportFormatError as ExportFormatError,
)
from plait.errors._cli import (
    NoRunQueueError as NoRunQueueError,
)
from plait.errors._cli import (
    NotConfirmedError as NotConfirmedError,
)
from plait.errors._cli import (
    QueueSchemaError as QueueSchemaError,
)
from plait.errors._cli import (
    RunNotFoundError as RunNotFoundError,
)
from plait.errors._cli import (
    RunsError as RunsError,
)
from plait.errors._cli import (
    RunWaitTimeoutError as RunWaitTimeoutError,
)
from plait.errors._cli import (
    ScheduleNotFoundError as ScheduleNotFoundError,
)
from plait.errors._cli import (
    TargetLoadError as TargetLoadError,
)
from plait.errors._cli import (
    TraceUrlError as TraceUrlError,
)
from plait.errors._cli import (
    UnknownGraphError as UnknownGraphError,
)
from plait.errors._func import EntrypointSignatureError as EntrypointSignatureError
from plait.errors._func import TaskOutsideRunError as TaskOutsideRunError
from plait.errors._func import TaskReplayError as TaskReplayError
from plait.errors._func import TaskResultError as TaskResultError
from plait.errors._func import TaskWaitOnLoopError as TaskWaitOnLoopError
from plait.errors._graph import (
    ContextError as ContextError,
)
from plait.errors._graph import (
    GraphChangedError as GraphChangedError,
)
from plait.errors._graph import (
    GraphError as GraphError,
)
from plait.errors._graph import (
    GraphMigrationError as GraphMigrationError,
)
from plait.errors._graph import (
    GraphRequiredError as GraphRequiredError,
)
from plait.errors._graph import (
    InvalidResumeError as InvalidResumeError,
)
from plait.errors._graph import (
    MissingNodeError as MissingNodeError,
)
from plait.errors._graph import (
    NoCheckpointerError as NoCheckpointerError,
)
from plait.errors._graph import (
    NodeError as NodeError,
)
from plait.errors._graph import (
    NodeSignatureError as NodeSignatureError,
)
from plait.errors._graph import (
    NodeTimeoutError as NodeTimeoutError,
)
from plait.errors._graph import (
    NoParentGraphError as NoParentGraphError,
)
from plait.errors._graph import (
    RecursionLimitError as RecursionLimitError,
)
from plait.errors._graph import (
    RunError as RunError,
)
from plait.errors._graph import (
    SyncCallOnLoopError as SyncCallOnLoopError,
)
from plait.errors._memory import (
    EmbeddingError as EmbeddingError,
)
from plait.errors._memory import (
    InvalidMemoryError as InvalidMemoryError,
)
from plait.errors._memory import (
    InvalidNamespaceError as InvalidNamespaceError,
)
from plait.errors._memory import (
    MemoryFilterError as MemoryFilterError,
)
from plait.errors._memory import (
    MemoryStoreError as MemoryStoreError,
)
from plait.errors._memory import (
    NoStoreError as NoStoreError,
)
from plait.errors._memory import (
    StoreUnsupportedError as StoreUnsupportedError,
)
from plait.errors._serve import (
    AssistantNotFoundError as AssistantNotFoundError,
)
from plait.errors._serve import (
    CheckpointMetadataReadOnlyError as CheckpointMetadataReadOnlyError,
)
from plait.errors._serve import (
    ServeConfigError as ServeConfigError,
)
from plait.errors._serve import (
    ServeError as ServeError,
)
from plait.errors._serve import (
    ServeRequestError as ServeRequestError,
)
from plait.errors._serve import (
    ThreadNotFoundError as ThreadNotFoundError,
)
from plait.errors._state import (
    ConcurrentWriteError as ConcurrentWriteError,
)
from plait.errors._state import (
    InvalidUpdateError as InvalidUpdateError,
)
from plait.errors._state import (
    MessageChunkError as MessageChunkError,
)
from plait.errors._state import (
    MessageNotFoundError as MessageNotFoundError,
)
from plait.errors._state import (
    MissingValueError as MissingValueError,
)
from plait.errors._state import (
    NotSerializableError as NotSerializableError,
)
from plait.errors._state import (
    ReadOnlyStateError as ReadOnlyStateError,
)
from plait.errors._state import (
    ReducerError as ReducerError,
)
from plait.errors._state import (
    SchemaError as SchemaError,
)
from plait.errors._state import (
    StateError as StateError,
)
from plait.errors._state import (
    StateValidationError as StateValidationError,
)
from plait.errors._state import (
    UnknownChannelError as UnknownChannelError,
)
from plait.errors._store import (
    MAX_ID_BYTES as MAX_ID_BYTES,
)
from plait.errors._store import (
    STORE_ADDRESS_FORMS as STORE_ADDRESS_FORMS,
)
from plait.errors._store import (
    AmbiguousCheckpointError as AmbiguousCheckpointError,
)
from plait.errors._store import (
    CheckpointCorruptError as CheckpointCorruptError,
)
from plait.errors._store import (
    CheckpointError as CheckpointError,
)
from plait.errors._store import (
    CheckpointNotFoundError as CheckpointNotFoundError,
)
from plait.errors._store import (
    ConcurrentUpdateError as ConcurrentUpdateError,
)
from plait.errors._store import (
    InvalidIdError as InvalidIdError,
)
from plait.errors._store import (
    InvalidRecordError as InvalidRecordError,
)
from plait.errors._store import (
    LeaseLostError as LeaseLostError,
)
from plait.errors._store import (
    RetentionError as RetentionError,
)
from plait.errors._store import (
    RunRejectedError as RunRejectedError,
)
from plait.errors._store import (
    StoreAddressError as StoreAddressError,
)
from plait.errors._store import (
    StoreNotFoundError as StoreNotFoundError,
)
from plait.errors._store import (
    StoreVersionError as StoreVersionError,
)
from plait.errors._store import (
    ThreadBusyError as ThreadBusyError,
)
from plait.errors._store import (
    ThreadExistsError as ThreadExistsError,
)

__all__ = [
    "AmbiguousCheckpointError",
    "ArgumentError",
    "AssistantNotFoundError",
    "CacheError",
    "CacheKeyError",
    "CacheUnsupportedError",
    "CacheValueError",
    "CheckpointCorruptError",
    "CheckpointError",
    "CheckpointMetadataReadOnlyError",
    "CheckpointNotFoundError",
    "CommandLineError",
    "ConcurrentUpdateError",
    "ConcurrentWriteError",
    "ContextError",
    "DrawingUnavailableError",
    "EmbeddingError",
    "EntrypointSignatureError",
    "ExportFormatError",
    "GraphChangedError",
    "GraphError",
    "GraphMigrationError",
    "GraphRequiredError",
    "InvalidIdError",
    "InvalidMemoryError",
    "InvalidNamespaceError",
    "InvalidRecordError",
    "InvalidResumeError",
    "InvalidUpdateError",
    "LeaseLostError",
    "MemoryFilterError",
    "MemoryStoreError",
    "MessageChunkError",
    "MessageNotFoundError",
    "MissingNodeError",
    "MissingValueError",
    "NoCacheError",
    "NoCheckpointerError",
    "NoParentGraphError",
    "NoRunQueueError",
    "NoStoreError",
    "NodeError",
    "NodeSignatureError",
    "NodeTimeoutError",
    "NotConfirmedError",
    "NotSerializableError",
    "PlaitError",
    "QueueSchemaError",
    "ReadOnlyStateError",
    "RecursionLimitError",
    "ReducerError",
    "RetentionError",
    "RunError",
    "RunNotFoundError",
    "RunRejectedError",
    "RunWaitTimeoutError",
    "RunsError",
    "ScheduleNotFoundError",
    "SchemaError",
    "ServeConfigError",
    "ServeError",
    "ServeRequestError",
    "StateError",
    "StateValidationError",
    "StoreAddressError",
    "StoreNotFoundError",
    "StoreUnsupportedError",
    "StoreVersionError",
    "SyncCallOnLoopError",
    "TargetLoadError",
    "TaskOutsideRunError",
    "TaskReplayError",
    "TaskResultError",
    "TaskWaitOnLoopError",
    "ThreadBusyError",
    "ThreadExistsError",
    "ThreadNotFoundError",
    "TraceContextError",
    "TraceUrlError",
    "TracingUnavailableError",
    "UnknownChannelError",
    "UnknownGraphError",
]

for _name in __all__:  # shown (tracebacks, stored errors) under the module users import them from
    globals()[_name].__module__ = __name__
del _name
