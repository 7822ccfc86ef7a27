"""The channelled-state layer: reducers, the schema, the versioned run state and diffs."""

from plait.state.diff import Change, StateDiff, diff
from plait.state.reducers import (
    AppendList,
    AppendMessages,
    CallableReducer,
    LastWriteWins,
    MaxByTimestamp,
    MergeMap,
    Overwrite,
    Reducer,
    Sum,
    message_id,
    remove_all_messages,
    remove_message,
)
from plait.state.run_state import RunState, StateSnapshot, StateUpdated
from plait.state.schema import Channel, Default, SchemaBuilder, StateSchema

__all__ = [
    "AppendList",
    "AppendMessages",
    "CallableReducer",
    "Change",
    "Channel",
    "Default",
    "LastWriteWins",
    "MaxByTimestamp",
    "MergeMap",
    "Overwrite",
    "Reducer",
    "RunState",
    "SchemaBuilder",
    "StateDiff",
    "StateSchema",
    "StateSnapshot",
    "StateUpdated",
    "Sum",
    "diff",
    "message_id",
    "remove_all_messages",
    "remove_message",
]
