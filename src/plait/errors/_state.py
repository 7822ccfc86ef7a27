"""Errors of state: a schema declared wrongly, a write or a read refused."""

from __future__ import annotations

from collections.abc import Sequence

from plait.errors._base import PlaitError, at_node

__all__ = [
    "ConcurrentWriteError",
    "InvalidUpdateError",
    "MessageChunkError",
    "MessageNotFoundError",
    "MissingValueError",
    "NotSerializableError",
    "ReadOnlyStateError",
    "ReducerError",
    "SchemaError",
    "StateError",
    "UnknownChannelError",
]


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
            f"unknown channel {channel!r}{at_node(node)}; the schema declares: {listed}. "
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
            f"{path}: {type_name} is not JSON data{at_node(node)}. State values must be "
            "dict (str keys), list, str, int, float (finite), bool or None; convert it "
            "(for example datetime.isoformat(), enum.value, dataclasses.asdict()) before writing."
        )


_WRITERS = {"": "a write", "input": "the input", "update": "update_state", "fork": "a fork's edits"}


class StateValidationError(StateError, ValueError):
    """A write a Pydantic (or dataclass) state refused: the value does not fit the field's
    type or a validator of the model raised. Nothing of the write was stored."""

    def __init__(self, field: str, reason: str, node: str | None = None, model: str = "") -> None:
        self.field = field
        self.channel = field
        self.reason = reason
        self.node = node
        self.model = model
        who = _WRITERS.get(node or "", f"node {node!r}")
        if node and node.startswith("Send("):  # the argument of a Send, named with its sender
            who = f"the argument of {node}"
        where = f"{model}.{field}" if model else repr(field)
        super().__init__(
            f"{who} wrote an invalid value to {where}: {reason}. Nothing was written; write a "
            f"value that {where} accepts (see the model's field type and validators)."
        )


class InvalidUpdateError(StateError):
    """A value the channel's reducer cannot take (wrong shape for that reducer)."""

    def __init__(self, channel: str, reason: str, node: str | None = None) -> None:
        self.channel = channel
        self.reason = reason
        self.node = node
        super().__init__(f"invalid write to channel {channel!r}{at_node(node)}: {reason}")

    def at_node(self, node: str | None) -> InvalidUpdateError:
        """Name the node that wrote (reducers do not know it; the state that runs them does)."""
        if node and self.node is None:
            self.node = node
            self.args = (f"invalid write to channel {self.channel!r}{at_node(node)}: {self.reason}",)
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
            f"{at_node(node)}. The write was not applied; fix the reducer or the value written."
        )


class ConcurrentWriteError(StateError):
    """Two tasks of one super-step wrote the same last-write-wins channel."""

    def __init__(self, channel: str, nodes: Sequence[str], step: int | None = None) -> None:
        self.channel = channel
        self.nodes = tuple(nodes)
        self.step = step
        at = f" in step {step + 1}" if step is not None else ""  # the step the writes were for
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


class MessageChunkError(StateError, TypeError):
    """``ctx.stream_message`` was given a chunk it cannot read as part of a message.

    Also a ``TypeError``: the chunk is of a kind no message is made of.
    """

    def __init__(self, index: int, reason: str, node: str | None = None) -> None:
        self.index = index
        self.reason = reason
        self.node = node
        super().__init__(
            f"chunk {index} of a streamed message{at_node(node)} {reason}: a chunk is a str (a text "
            "delta), a dict in LangChain's shape ({'content': ..., 'tool_call_chunks': [...]}) or an "
            "object with a .content attribute (a LangChain AIMessageChunk)"
        )
