"""The public surface is exactly plait.__all__; everything else is private."""

import plait

EXPECTED = [
    "AmbiguousCheckpointError",
    "AppendList",
    "AppendMessages",
    "Cache",
    "CacheError",
    "CacheKeyError",
    "CachePolicy",
    "CacheUnsupportedError",
    "CacheValueError",
    "Channel",
    "Checkpoint",
    "CheckpointCorruptError",
    "CheckpointError",
    "CheckpointNotFoundError",
    "CheckpointSaved",
    "Checkpointer",
    "Command",
    "CompiledGraph",
    "ConcurrentUpdateError",
    "ConcurrentWriteError",
    "ContextError",
    "CustomEvent",
    "Dag",
    "DeadSpace",
    "Default",
    "DrawingUnavailableError",
    "Durability",
    "END",
    "EmbeddingError",
    "Entrypoint",
    "EntrypointSignatureError",
    "FileCheckpointer",
    "GetOp",
    "Graph",
    "GraphChangedError",
    "GraphDrawing",
    "GraphError",
    "GraphMigrationError",
    "Interrupt",
    "Interrupted",
    "InvalidIdError",
    "InvalidMemoryError",
    "InvalidNamespaceError",
    "InvalidRecordError",
    "InvalidResumeError",
    "InvalidUpdateError",
    "IsLastStep",
    "Item",
    "LastWriteWins",
    "Lease",
    "LeaseLostError",
    "ListNamespacesOp",
    "MAX_ID_BYTES",
    "MatchCondition",
    "MaxByTimestamp",
    "MemoryCache",
    "MemoryCheckpointer",
    "MemoryFilterError",
    "MemoryStoreError",
    "MergeMap",
    "MessageChunkError",
    "MessageNotFoundError",
    "MessagesState",
    "MigrationResult",
    "MissingNodeError",
    "MissingValueError",
    "NOT_GIVEN",
    "NoCacheError",
    "NoCheckpointerError",
    "NoParentGraphError",
    "NoStoreError",
    "NodeContext",
    "NodeError",
    "NodeExecutor",
    "NodeFailed",
    "NodeFinished",
    "NodeSignatureError",
    "NodeStarted",
    "NodeTimeoutError",
    "NotSerializableError",
    "Overwrite",
    "PlaitError",
    "PostgresCheckpointer",
    "PutOp",
    "ReadOnlyStateError",
    "RecursionLimitError",
    "Reducer",
    "ReducerError",
    "RemainingSteps",
    "Retention",
    "RetentionError",
    "RetryPolicy",
    "RunError",
    "RunFinished",
    "RunHooks",
    "RunResult",
    "RunState",
    "START",
    "SchemaError",
    "SearchItem",
    "SearchOp",
    "Send",
    "SqliteCheckpointer",
    "StateDiff",
    "StateError",
    "StateSchema",
    "StateSnapshot",
    "StateUpdated",
    "StateValidationError",
    "Status",
    "Store",
    "StoreAddressError",
    "StoreNotFoundError",
    "StoreSpace",
    "StoreUnsupportedError",
    "StoreVersionError",
    "StreamMode",
    "Sum",
    "SweepReport",
    "SyncCallOnLoopError",
    "TaskFunction",
    "TaskFuture",
    "TaskOutsideRunError",
    "TaskReplayError",
    "TaskResultError",
    "TaskState",
    "TaskWaitOnLoopError",
    "ThreadBusyError",
    "ThreadDiff",
    "ThreadExistsError",
    "ThreadInfo",
    "ThreadSpace",
    "ThreadState",
    "UnknownChannelError",
    "__version__",
    "diff",
    "entrypoint",
    "event_json",
    "instrument",
    "interrupt",
    "message_id",
    "remove_all_messages",
    "remove_message",
    "task",
    "thaw",
    "tool_node",
    "tools_condition",
    "uninstrument",
]
"""plait.__all__, exactly and in this (sorted) order: a new public name is a decision."""


def test_all_is_pinned_and_sorted() -> None:
    assert plait.__all__ == EXPECTED


def test_the_backend_authors_names_live_in_plait_checkpoint_not_plait() -> None:
    import plait.checkpoint

    names = ("ANY_HEAD", "CheckpointWrite", "Fence", "PendingWrite", "Task", "WritesBatch", "Capabilities")
    for name in (*names, "ChangeFeed", "ThreadChange"):
        assert name in plait.checkpoint.__all__ and not hasattr(plait, name), name


def test_the_command_line_queue_and_studio_errors_live_in_their_own_packages() -> None:
    """``plait`` exports what a library user catches; the CLI's, the run queue's and the
    Studio's errors stay in ``plait.errors`` (and ``plait.runs`` exports the queue's)."""
    import plait.errors
    import plait.runs

    queue: tuple[str, ...] = ("RunsError", "RunNotFoundError", "ScheduleNotFoundError", "UnknownGraphError")
    queue += ("RunWaitTimeoutError", "QueueSchemaError", "NoRunQueueError", "RunRejectedError")
    others = ("CommandLineError", "ArgumentError", "TargetLoadError", "ExportFormatError", "NotConfirmedError")
    for name in (*queue, *others, "GraphRequiredError"):
        assert name in plait.errors.__all__ and name not in plait.__all__, name
    for name in queue:
        assert name in plait.runs.__all__, name


def test_every_public_name_imports() -> None:
    for name in plait.__all__:
        assert hasattr(plait, name), name


def test_every_error_is_a_plait_error() -> None:
    import plait.errors as errors

    for name in errors.__all__:
        assert issubclass(getattr(errors, name), plait.PlaitError), name


def test_core_import_pulls_in_no_server_or_postgres_packages() -> None:
    import subprocess
    import sys

    heavy = "('psycopg', 'fastapi', 'uvicorn', 'typer', 'rich', 'procrastinate', 'croniter')"
    code = f"import sys, plait; print([m for m in {heavy} if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
