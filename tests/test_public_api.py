"""The public surface is exactly plait.__all__; everything else is private."""

import plait

EXPECTED = sorted(
    [
        "AppendList",
        "AppendMessages",
        "Channel",
        "CheckpointCorruptError",
        "CheckpointError",
        "CheckpointNotFoundError",
        "ConcurrentWriteError",
        "GraphChangedError",
        "GraphError",
        "InvalidResumeError",
        "InvalidUpdateError",
        "LastWriteWins",
        "MaxByTimestamp",
        "MergeMap",
        "MessageNotFoundError",
        "MissingNodeError",
        "MissingValueError",
        "NoCheckpointerError",
        "NodeError",
        "NodeTimeoutError",
        "NotSerializableError",
        "PlaitError",
        "ReadOnlyStateError",
        "RecursionLimitError",
        "Reducer",
        "ReducerError",
        "RunError",
        "RunState",
        "SchemaError",
        "StateDiff",
        "StateError",
        "StateSchema",
        "StateSnapshot",
        "StateUpdated",
        "StoreVersionError",
        "Sum",
        "ThreadBusyError",
        "UnknownChannelError",
        "__version__",
        "diff",
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

    heavy = "('psycopg', 'fastapi', 'uvicorn', 'typer', 'rich')"
    code = f"import sys, plait; print([m for m in {heavy} if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
