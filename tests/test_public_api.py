"""The public surface is exactly plait.__all__; everything else is private."""

import plait

EXPECTED = sorted(
    [
        "AppendList",
        "QueueSchemaError",
        "RunNotFoundError",
        "RunRejectedError",
        "RunWaitTimeoutError",
        "RunsError",
        "ScheduleNotFoundError",
        "UnknownGraphError",
        "AppendMessages",
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
        "CustomEvent",
        "Dag",
        "Durability",
        "END",
        "FileCheckpointer",
        "Graph",
        "GraphChangedError",
        "GraphError",
        "Interrupt",
        "Interrupted",
        "InvalidIdError",
        "MAX_ID_BYTES",
        "InvalidRecordError",
        "InvalidResumeError",
        "InvalidUpdateError",
        "LastWriteWins",
        "Lease",
        "LeaseLostError",
        "MaxByTimestamp",
        "MemoryCheckpointer",
        "MergeMap",
        "MessageNotFoundError",
        "MissingNodeError",
        "MissingValueError",
        "NoCheckpointerError",
        "NodeContext",
        "NodeError",
        "NodeFailed",
        "NodeFinished",
        "NodeStarted",
        "NodeTimeoutError",
        "NotSerializableError",
        "PlaitError",
        "PostgresCheckpointer",
        "ReadOnlyStateError",
        "RecursionLimitError",
        "Reducer",
        "ReducerError",
        "RetryPolicy",
        "RunError",
        "RunFinished",
        "RunState",
        "START",
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
        "AmbiguousCheckpointError",
        "ArgumentError",
        "CommandLineError",
        "ExportFormatError",
        "NotConfirmedError",
        "TargetLoadError",
        "ThreadExistsError",
        "Sum",
        "ThreadBusyError",
        "ThreadDiff",
        "Task",
        "WritesBatch",
        "PendingWrite",
        "Fence",
        "CheckpointWrite",
        "ANY_HEAD",
        "ThreadInfo",
        "ThreadState",
        "UnknownChannelError",
        "__version__",
        "diff",
        "event_json",
        "interrupt",
        "message_id",
        "remove_message",
        "thaw",
    ]
)


def test_all_is_pinned() -> None:
    assert sorted(plait.__all__) == EXPECTED


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
