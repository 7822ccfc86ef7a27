"""The public surface is exactly plait.__all__; everything else is private."""

import plait

EXPECTED = [
    "AmbiguousCheckpointError",
    "AppendList",
    "AppendMessages",
    "ArgumentError",
    "Channel",
    "Checkpoint",
    "CheckpointCorruptError",
    "CheckpointError",
    "CheckpointNotFoundError",
    "CheckpointSaved",
    "Checkpointer",
    "Command",
    "CommandLineError",
    "CompiledGraph",
    "ConcurrentUpdateError",
    "ConcurrentWriteError",
    "ContextError",
    "CustomEvent",
    "Dag",
    "Default",
    "Durability",
    "END",
    "ExportFormatError",
    "FileCheckpointer",
    "Graph",
    "GraphChangedError",
    "GraphError",
    "GraphRequiredError",
    "Interrupt",
    "Interrupted",
    "InvalidIdError",
    "InvalidRecordError",
    "InvalidResumeError",
    "InvalidUpdateError",
    "LastWriteWins",
    "Lease",
    "LeaseLostError",
    "MAX_ID_BYTES",
    "MaxByTimestamp",
    "MemoryCheckpointer",
    "MergeMap",
    "MessageNotFoundError",
    "MessagesState",
    "MissingNodeError",
    "MissingValueError",
    "NoCheckpointerError",
    "NoRunQueueError",
    "NodeContext",
    "NodeError",
    "NodeFailed",
    "NodeFinished",
    "NodeSignatureError",
    "NodeStarted",
    "NodeTimeoutError",
    "NotConfirmedError",
    "NotSerializableError",
    "Overwrite",
    "PlaitError",
    "PostgresCheckpointer",
    "QueueSchemaError",
    "ReadOnlyStateError",
    "RecursionLimitError",
    "Reducer",
    "ReducerError",
    "RetryPolicy",
    "RunError",
    "RunFinished",
    "RunNotFoundError",
    "RunRejectedError",
    "RunState",
    "RunWaitTimeoutError",
    "RunsError",
    "START",
    "ScheduleNotFoundError",
    "SchemaError",
    "Send",
    "SqliteCheckpointer",
    "StateDiff",
    "StateError",
    "StateSchema",
    "StateSnapshot",
    "StateUpdated",
    "Status",
    "StoreAddressError",
    "StoreNotFoundError",
    "StoreVersionError",
    "Sum",
    "TargetLoadError",
    "TaskState",
    "ThreadBusyError",
    "ThreadDiff",
    "ThreadExistsError",
    "ThreadInfo",
    "ThreadState",
    "UnknownChannelError",
    "UnknownGraphError",
    "__version__",
    "diff",
    "event_json",
    "interrupt",
    "message_id",
    "remove_all_messages",
    "remove_message",
    "thaw",
    "tool_node",
    "tools_condition",
]
"""plait.__all__, exactly and in this (sorted) order: a new public name is a decision."""


def test_all_is_pinned_and_sorted() -> None:
    assert plait.__all__ == EXPECTED


def test_the_backend_authors_names_live_in_plait_checkpoint_not_plait() -> None:
    import plait.checkpoint

    names = ("ANY_HEAD", "CheckpointWrite", "Fence", "PendingWrite", "Task", "WritesBatch", "Capabilities")
    for name in (*names, "ChangeFeed", "ThreadChange"):
        assert name in plait.checkpoint.__all__ and not hasattr(plait, name), name


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
