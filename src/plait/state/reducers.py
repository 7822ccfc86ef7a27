"""Reducers: how writes to a channel fold into its value.

A reducer is ``reduce(current, incoming) -> new``: pure, deterministic and associative
(folding ``a`` then ``b`` equals folding their combination), but not necessarily commutative,
which is why plait always folds a super-step's writes in planned task order.

Values reaching a reducer are already checked JSON data and frozen; a reducer returns a new
value and never changes ``current``. A reducer whose writes are small next to the value
(appends, map updates) declares ``incremental = True``: folding a batch of writes equals
folding them one by one, and the checkpoint store may then keep what each step added instead
of the whole value. A custom reducer that sets ``incremental`` promises exactly that law.

Any two-argument callable is a reducer too (``operator.add``, ``lambda a, b: a + b``); it is
wrapped in :class:`CallableReducer`.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final

from plait._codec import INT_MAX, INT_MIN
from plait._frozen import FrozenDict, FrozenList
from plait.errors import InvalidUpdateError, MessageNotFoundError
from plait.state.messages import written_message

__all__ = [
    "NO_DEFAULT",
    "AppendList",
    "AppendMessages",
    "CallableReducer",
    "LastWriteWins",
    "MaxByTimestamp",
    "MergeMap",
    "Reducer",
    "Sum",
    "as_reducer",
    "message_id",
    "remove_message",
]


class _NoDefault:
    """Marker: the channel has no value until it is first written."""

    _instance: _NoDefault | None = None

    def __new__(cls) -> _NoDefault:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "NO_DEFAULT"

    def __bool__(self) -> bool:
        return False


def _kind(value: Any) -> str:
    """The type a user wrote, for messages: ``list``/``dict`` for frozen containers too."""
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return "dict"
    return type(value).__name__


NO_DEFAULT: Final = _NoDefault()
REMOVE_KEY: Final = "$remove"
OVERWRITE_KEY: Final = "$overwrite"
REMOVE_ALL: Final = "__remove_all__"
"""The id a :func:`remove_all_messages` marker names: every message (LangGraph's spelling)."""


class Reducer:
    """Base class of reducers.

    Subclasses implement :meth:`reduce`. ``name`` identifies the reducer in schema and graph
    fingerprints (a changed name on resume is a changed reducer). :meth:`default` is the value
    a channel starts with when the schema gives none; :meth:`first` takes the first write to
    a channel that has no value yet.
    """

    name: str = "Reducer"
    incremental: bool = False
    #: True for plait's own reducers, whose results are frozen JSON by construction; the
    #: results of any other reducer are checked and frozen like any write.
    trusted: bool = False
    #: True for a reducer whose items are keyed by an ``id`` (AppendMessages): plait gives
    #: the items written without one an id (:meth:`assign_ids`) before the reducer sees them.
    assigns_ids: bool = False

    def reduce(self, current: Any, incoming: Any, channel: str) -> Any:
        """Fold one write into the current value; ``channel`` is for error messages only."""
        raise NotImplementedError

    def default(self) -> Any:
        """The channel's starting value when the schema declares none (NO_DEFAULT: absent)."""
        return NO_DEFAULT

    def first(self, incoming: Any, channel: str) -> Any:
        """The value of a channel written for the first time (no current value)."""
        return incoming

    def spec(self) -> str:
        """A stable description (name and options) for fingerprints."""
        return self.name

    def normalize(self, value: Any, channel: str) -> Any:
        """A starting value (a schema default, a restored value) in the form :meth:`reduce`
        expects, or :class:`~plait.errors.InvalidUpdateError` if the reducer cannot take it."""
        return value

    def assign_ids(self, incoming: Any, seed: str | Callable[[], str], position: int) -> tuple[Any, int]:
        """``incoming`` (a frozen write) with an id for each item that has none, and the
        position after its items (for a reducer that :attr:`assigns_ids`).

        The ``n``-th item of the write is at ``position + n``; an item without an id gets
        :func:`message_id` of ``seed`` (the name of the write, or a function giving it,
        called only if an item needs an id) and its position. Items are never named by their
        content. The base reducer keys nothing by id: the write is returned as it is.
        """
        return incoming, position

    def __repr__(self) -> str:
        return f"{self.spec()}()" if "(" not in self.spec() else self.spec()


class LastWriteWins(Reducer):
    """The newest write replaces the value. Two writers in one super-step is an error."""

    name = "LastWriteWins"
    trusted = True

    def reduce(self, current: Any, incoming: Any, channel: str) -> Any:
        return incoming


class AppendList(Reducer):
    """Appends to a list: a list (or tuple) write extends it, any other value is one item.

    To append a list as a single item, wrap it: ``[[1, 2]]``.
    """

    name = "AppendList"
    trusted = True
    incremental = True

    def reduce(self, current: Any, incoming: Any, channel: str) -> Any:
        return self.extend_all(current, (incoming,))

    def extend_all(self, current: Any, incoming: Iterable[Any]) -> Any:
        """:meth:`reduce` of each write in turn, copying ``current`` once instead of once per
        write (the engine folds a wide super-step's appends with this)."""
        out = FrozenList(current)
        for item in incoming:
            if isinstance(item, list):
                list.extend(out, item)
            else:
                list.append(out, item)
        return out

    def default(self) -> Any:
        return FrozenList()


def message_id(seed: str, position: int) -> str:
    """The id plait gives a message written without one: the message at ``position`` of the
    write named ``seed``.

    In a graph, ``seed`` names the task that wrote the message: its namespace, thread id
    and task id joined by NUL characters (``NodeContext.message_seed``; a fork copies its
    source's planned tasks with their ids, and the thread keeps the two branches' messages
    apart); for an ``invoke`` input, ``update_state`` or a fork's edits, it is the id of
    the checkpoint the write creates. ``position`` counts the messages the task wrote, from
    0. A task that runs again (a resume after a crash or after a failure of its step, a
    retry) has the same seed, so it gives its messages the same ids: the state a resumed
    run ends with does not depend on how often a task ran. The content never enters the
    id, so a user saying "yes" twice is two messages. Outside a graph,
    :meth:`RunState.merge_writes` names a write by the channel's value before it.
    """
    return "msg-" + hashlib.blake2b(f"{seed}|{position}".encode(), digest_size=8).hexdigest()


def remove_message(message_id: str) -> dict[str, str]:
    """A marker that, written to an :class:`AppendMessages` channel, deletes that message."""
    if not isinstance(message_id, str) or not message_id:
        raise TypeError("remove_message() takes the id (a non-empty str) of the message to remove")
    return {REMOVE_KEY: message_id}


def remove_all_messages() -> dict[str, str]:
    """A marker that, written to an :class:`AppendMessages` channel, deletes every message
    before it; messages written after it in the same update are kept (a summary replacing
    the history: ``[remove_all_messages(), summary]``)."""
    return {REMOVE_KEY: REMOVE_ALL}


def Overwrite(value: Any) -> dict[str, Any]:  # LangGraph's name for it
    """A write that replaces a channel's value with ``value``, past its reducer:
    ``{"log": Overwrite([])}`` empties an :class:`AppendList` channel, ``{"total":
    Overwrite(0)}`` resets a :class:`Sum`. A marker of JSON data (``{"$overwrite": value}``),
    so it is stored like any write; the value must suit the channel (a list for a list
    channel)."""
    return {OVERWRITE_KEY: value}


def is_overwrite(value: Any) -> bool:
    """Whether a frozen write is an :func:`Overwrite` marker."""
    return isinstance(value, dict) and len(value) == 1 and OVERWRITE_KEY in value


def overwritten(reducer: Reducer, marker: Any, channel: str) -> Any:
    """The value an :func:`Overwrite` marker sets, checked by the reducer.

    Raises:
        InvalidUpdateError: a value of another kind than the channel holds (a dict for a list).
    """
    value = marker[OVERWRITE_KEY]
    empty = reducer.default()
    for kind in (list, dict):
        if isinstance(empty, kind) and not isinstance(value, kind):
            raise InvalidUpdateError(
                channel, f"Overwrite() of a {kind.__name__} channel takes a {kind.__name__}, got {_kind(value)}"
            )
    return reducer.normalize(value, channel)


_START: Final = "start"
"""The name of a starting history's write: its messages without an id are named by position."""


def _removal_target(msg: dict[str, Any], channel: str) -> str | None:
    """The id a removal names: plait's marker (``{"$remove": id}``) or LangChain's
    ``RemoveMessage`` serialized (``{"type": "remove", "id": id}``); None for a message."""
    if REMOVE_KEY in msg:
        target = msg[REMOVE_KEY]
        if len(msg) != 1 or not isinstance(target, str):
            raise InvalidUpdateError(channel, "a removal marker is exactly {'$remove': <id>}")
        return target
    if msg.get("type") != "remove":
        return None
    target = msg.get("id")
    if not isinstance(target, str) or not target:
        raise InvalidUpdateError(channel, "a {'type': 'remove'} message names its target by 'id'")
    return target


class AppendMessages(Reducer):
    """Chat history keyed by message id.

    A write is one message (a dict) or a list of them. A message whose ``id`` is already in
    the channel replaces it in place; a new id is appended; a :func:`remove_message` marker
    (or LangChain's ``RemoveMessage`` serialized, ``{"type": "remove", "id": ...}``) deletes
    the message with that id.

    Messages are kept as they are written, in whichever shape: OpenAI's (``{"role":
    "user" | "assistant" | "tool" | "system", ...}``) or LangChain's serialized one
    (``{"type": "human" | "ai" | "tool" | "system", ...}``), content a string or a list of
    content blocks; the reducer reads only ``id``, so the two shapes mix in one history.

    A message written without an ``id`` (or with ``"id": None``) gets a new one where the
    write is made (see :func:`message_id`), before this reducer sees it, so two identical
    messages are two messages; one that reaches :meth:`reduce` without an id is refused.
    """

    name = "AppendMessages"
    trusted = True
    incremental = True
    assigns_ids = True

    def _items(self, incoming: Any, channel: str) -> Iterable[Any]:
        if isinstance(incoming, dict):
            return (incoming,)
        if isinstance(incoming, list):
            return incoming
        raise InvalidUpdateError(
            channel,
            f"AppendMessages takes a message (a dict) or a list of them, got {_kind(incoming)}",
        )

    def reduce(self, current: Any, incoming: Any, channel: str) -> Any:
        out = list(current)
        index: dict[str, int] | None = None
        for i, item in enumerate(self._items(incoming, channel)):
            msg = item
            if not isinstance(msg, dict):
                raise InvalidUpdateError(channel, f"item {i} is a {_kind(msg)}, not a message (a dict)")
            if index is None:
                index = {m["id"]: j for j, m in enumerate(out)}
            target = _removal_target(msg, channel)
            if target is not None:
                if target == REMOVE_ALL:
                    out, index = [], None
                    continue
                if target not in index:
                    raise MessageNotFoundError(channel, target)
                del out[index[target]]
                index = None  # positions moved
                continue
            mid = msg.get("id")
            if mid is None:
                raise InvalidUpdateError(
                    channel,
                    f"message {i} has no id. plait gives one to a message written without it where "
                    "the write is made (a node, an input, update_state, RunState.merge_writes); a "
                    "write folded by the reducer itself must carry its ids",
                )
            if not isinstance(mid, str) or not mid:
                raise InvalidUpdateError(channel, f"message {i} has id {mid!r}; an id is a non-empty str")
            at = index.get(mid)
            if at is None:
                index[mid] = len(out)
                out.append(msg)
            else:
                out[at] = msg
        return FrozenList(out)

    def assign_ids(self, incoming: Any, seed: str | Callable[[], str], position: int) -> tuple[Any, int]:
        incoming = _written(incoming)
        one = isinstance(incoming, dict)
        if not one and not isinstance(incoming, list):
            return incoming, position  # reduce() refuses it, saying why
        items: Sequence[Any] = (incoming,) if one else incoming
        name = seed if isinstance(seed, str) else None
        out: list[Any] | None = None
        for i, msg in enumerate(items):
            # A frozen message without an id (a removal marker needs none; what is not a
            # message is left for reduce() to refuse).
            if (
                type(msg) is FrozenDict
                and msg.get("id") is None
                and REMOVE_KEY not in msg
                and msg.get("type") != "remove"
            ):
                if name is None:
                    name = seed() if callable(seed) else seed
                if out is None:
                    out = list(items[:i])
                out.append(FrozenDict({**msg, "id": message_id(name, position + i)}))
            elif out is not None:
                out.append(msg)
        after = position + len(items)
        if out is None:
            return incoming, after
        return (out[0] if one else FrozenList(out)), after

    def normalize(self, value: Any, channel: str) -> Any:
        # A starting history (a schema default, values given to RunState) whose messages lack
        # ids gets them now, by position: reduce() indexes the current messages by id.
        if not isinstance(value, list):
            raise InvalidUpdateError(channel, f"an AppendMessages value is a list of messages, got {_kind(value)}")
        if all(isinstance(m, dict) and isinstance(m.get("id"), str) and m["id"] for m in value):
            return value
        return self.reduce(FrozenList(), self.assign_ids(value, _START, 0)[0], channel)

    def default(self) -> Any:
        return FrozenList()


def _written(incoming: Any) -> Any:
    """A messages write with LangGraph's other spellings of a message (a ``(role, content)``
    tuple, alone or in the list; LangChain's ``dumpd`` dict) read as messages (see
    :func:`~plait.state.messages.written_message`); the write itself when it has none."""
    if isinstance(incoming, dict):
        return written_message(incoming)
    if not isinstance(incoming, list):
        return incoming
    alone = written_message(incoming)  # ("user", "hi") written without a list around it
    if alone is not incoming:
        return alone
    read = [written_message(m) for m in incoming]
    return incoming if all(a is b for a, b in zip(read, incoming, strict=True)) else FrozenList(read)


class MergeMap(Reducer):
    """Merges dicts: incoming keys replace current ones (recursively for nested dicts when
    ``deep=True``).

    The shallow merge is associative. The deep merge is associative as long as a key path
    does not switch between a dict and a non-dict value: a non-dict replaces the whole
    subtree below it, so ``{"a": {"x": 1}}``, then ``{"a": None}``, then ``{"a": {}}`` gives
    ``{"a": {}}`` folded left to right but ``{"a": {"x": 1}}`` if the last two are combined
    first. plait always folds in one fixed order, so results stay deterministic either way;
    keep a path's kind stable if you rely on grouping writes.
    """

    name = "MergeMap"
    trusted = True
    incremental = True

    def __init__(self, *, deep: bool = False) -> None:
        self.deep = deep

    def spec(self) -> str:
        return "MergeMap(deep=True)" if self.deep else "MergeMap"

    def reduce(self, current: Any, incoming: Any, channel: str) -> Any:
        if not isinstance(incoming, dict):
            raise InvalidUpdateError(channel, f"MergeMap takes a dict of keys to merge, got {_kind(incoming)}")
        if not self.deep:
            return FrozenDict({**current, **incoming})
        return _deep_merge(current, incoming)

    def default(self) -> Any:
        return FrozenDict()


def _deep_merge(current: dict[str, Any], incoming: dict[str, Any]) -> FrozenDict:
    out = dict(current)
    for k, v in incoming.items():
        old = out.get(k)
        out[k] = _deep_merge(old, v) if isinstance(old, dict) and isinstance(v, dict) else v
    return FrozenDict(out)


class MaxByTimestamp(Reducer):
    """Keeps the record with the newest timestamp (``field``, default ``ts_ms``).

    On equal timestamps the later write wins, which keeps the reducer associative.
    """

    name = "MaxByTimestamp"
    trusted = True

    def __init__(self, field: str = "ts_ms") -> None:
        self.field = field

    def spec(self) -> str:
        return f"MaxByTimestamp(field={self.field!r})"

    def _ts(self, value: Any, channel: str) -> float:
        if not isinstance(value, dict):
            raise InvalidUpdateError(
                channel, f"MaxByTimestamp takes a dict with a {self.field!r} field, got {_kind(value)}"
            )
        ts = value.get(self.field)
        if isinstance(ts, bool) or not isinstance(ts, int | float):
            raise InvalidUpdateError(channel, f"the record has no numeric {self.field!r} field (got {ts!r})")
        return ts

    def first(self, incoming: Any, channel: str) -> Any:
        self._ts(incoming, channel)
        return incoming

    def normalize(self, value: Any, channel: str) -> Any:
        self._ts(value, channel)
        return value

    def reduce(self, current: Any, incoming: Any, channel: str) -> Any:
        return incoming if self._ts(incoming, channel) >= self._ts(current, channel) else current


class Sum(Reducer):
    """Adds numbers. Its natural starting value is 0."""

    name = "Sum"
    trusted = True

    def _num(self, value: Any, channel: str) -> Any:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise InvalidUpdateError(channel, f"Sum takes numbers, got {_kind(value)}")
        return value

    def first(self, incoming: Any, channel: str) -> Any:
        return self._num(incoming, channel)

    def reduce(self, current: Any, incoming: Any, channel: str) -> Any:
        total = current + self._num(incoming, channel)
        # The sum of two JSON numbers need not be one: check it like any written value.
        if type(total) is float and not math.isfinite(total):
            raise InvalidUpdateError(channel, f"Sum overflowed: {current!r} + {incoming!r} is {total!r}")
        if type(total) is int and not INT_MIN <= total <= INT_MAX:
            raise InvalidUpdateError(channel, f"Sum overflowed: {current!r} + {incoming!r} is outside the 64-bit range")
        return total

    def default(self) -> Any:
        return 0


class CallableReducer(Reducer):
    """Adapts a plain two-argument function ``fn(current, incoming) -> new``.

    ``fn`` sees every write, the channel's first included: ``current`` is then the channel's
    default, or None when it has none (``.add(key, fn)`` gives no default; a TypedDict's
    ``Annotated[list, fn]`` starts from ``[]``), so a function that filters, sorts or caps
    what it is given does so from the first write on. Write ``fn`` to accept None, or give the channel a default.
    """

    def __init__(self, fn: Callable[[Any, Any], Any]) -> None:
        self.fn = fn
        module = getattr(fn, "__module__", None) or "?"
        self.name = f"{module}.{getattr(fn, '__qualname__', type(fn).__name__)}"

    def reduce(self, current: Any, incoming: Any, channel: str) -> Any:
        return self.fn(current, incoming)

    def first(self, incoming: Any, channel: str) -> Any:
        return self.fn(None, incoming)

    def __repr__(self) -> str:
        return f"CallableReducer({self.name})"


def as_reducer(obj: Any) -> Reducer:
    """A :class:`Reducer` from a reducer instance, a reducer class, or a two-argument callable."""
    if isinstance(obj, Reducer):
        return obj
    if isinstance(obj, type) and issubclass(obj, Reducer):
        return obj()
    if callable(obj):
        return CallableReducer(obj)
    raise TypeError(f"{obj!r} is not a reducer: pass a Reducer or a function (current, incoming) -> new")
