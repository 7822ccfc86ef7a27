"""RunState: the versioned working memory of one run.

Every accepted change bumps ``version`` by one and emits a :class:`StateUpdated` to the
subscribers; a refused change (unknown channel, non-JSON value, a reducer that rejects or
raises) leaves values, versions and history exactly as they were, because a batch is folded
into a scratch copy first and applied only when every write in it succeeded.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from plait._codec import fingerprint, freeze
from plait._frozen import FrozenDict, FrozenList, thaw
from plait.errors import InvalidUpdateError, ReducerError
from plait.state.reducers import NO_DEFAULT, OVERWRITE_KEY, AppendList, Reducer, is_overwrite, overwritten
from plait.state.schema import StateSchema

__all__ = ["RunState", "StateSnapshot", "StateUpdated", "Subscriber"]


@dataclass(frozen=True, slots=True, kw_only=True)
class StateUpdated:
    """Emitted once per accepted change (a single write, or one batch)."""

    keys: tuple[str, ...]
    """The channels the change wrote, in the order they were first written."""
    version: int
    """The state's version after the change."""
    super_step: int
    """The super-step the change belongs to."""
    node: str | None = None
    """The node that wrote, when known."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StateSnapshot:
    """An immutable picture of a run's state at one version."""

    version: int
    super_step: int
    label: str
    values: Mapping[str, Any]
    """The channel values, read-only (plait.thaw() gives a mutable copy)."""
    fingerprint: str
    """Hash of the canonical JSON of ``values``: equal state, equal fingerprint."""


Subscriber = Callable[[StateUpdated], None]


class RunState:
    """The state of one run: channel values folded through the schema's reducers.

    Example:
        >>> schema = StateSchema.builder().add("log", AppendList()).add_lww("phase").build()
        >>> state = RunState(schema)
        >>> state.merge_writes([("log", "start"), ("phase", "plan")])
        >>> state["log"], state.version
        (['start'], 1)
    """

    __slots__ = (
        "_fp",
        "_history",
        "_subscribers",
        "_values",
        "_versions",
        "schema",
        "super_step",
        "version",
        "writers",
    )

    def __init__(
        self, schema: StateSchema | type, values: Mapping[str, Any] | None = None, super_step: int = 0
    ) -> None:
        self.schema = StateSchema.coerce(schema)
        self._values: dict[str, Any] = self.schema.initial_values()
        if values:
            for key, value in values.items():
                channel = self.schema.channel(key)
                self._values[key] = channel.reducer.normalize(freeze(value, key), key)
        self._versions: dict[str, int] = {}
        self.version = 0
        self.super_step = super_step
        self._history: list[StateSnapshot] = []
        self._subscribers: list[Subscriber] = []
        self._fp: tuple[int, str] | None = None
        self.writers: Mapping[str, Sequence[str]] = {}
        """Which nodes write each channel (set by the graph), for friendlier KeyErrors."""

    @classmethod
    def from_snapshot(cls, schema: StateSchema | type, values: Mapping[str, Any], super_step: int) -> RunState:
        """A run state holding ``values`` at ``super_step`` (channels missing from ``values``
        start from their defaults). Round-trips :meth:`snapshot`: equal values, equal
        fingerprint, equal super-step."""
        return cls(schema, values, super_step)

    @classmethod
    def restored(
        cls,
        schema: StateSchema,
        values: Mapping[str, Any],
        versions: Mapping[str, int],
        *,
        version: int,
        super_step: int,
        defaults: bool = True,
    ) -> RunState:
        """The run state a checkpoint holds, as stored: ``values`` are already frozen and
        reduced (they are not folded again); channels without one start from their defaults
        (unless ``defaults`` is False: a fork copies exactly what was stored). The one way a
        run, an update and a fork rebuild state from a checkpoint."""
        state = cls(schema, None, super_step)
        if not defaults:
            state._values = {}
        state._values.update(values)
        state._versions = dict(versions)
        state.version = version
        return state

    # -- reading -------------------------------------------------------------------------

    def __getitem__(self, key: str) -> Any:
        try:
            return self._values[key]
        except KeyError:
            raise self.schema.missing(key, self._values, self.writers) from None

    read = __getitem__

    def get(self, key: str, default: Any = None) -> Any:
        """The value of ``key``, or ``default`` when it has none (or is not a channel)."""
        return self._values.get(key, default)

    def __contains__(self, key: object) -> bool:
        return key in self._values

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def keys(self) -> list[str]:
        """Keys that currently have a value, in the order they got one."""
        return list(self._values)

    @property
    def values(self) -> Mapping[str, Any]:
        """The channel values, read-only: a frozen mapping of frozen values (no deep copy)."""
        return FrozenDict(self._values)

    def channel_version(self, key: str) -> int:
        """The state version at which ``key`` last changed (0 if it never has)."""
        self.schema.channel(key)
        return self._versions.get(key, 0)

    @property
    def channel_versions(self) -> Mapping[str, int]:
        """The version at which each written channel last changed (a copy)."""
        return dict(self._versions)

    @property
    def fingerprint(self) -> str:
        """Hash of the canonical JSON of the values (cached per version)."""
        if self._fp is None or self._fp[0] != self.version:
            self._fp = (self.version, fingerprint(self._values))
        return self._fp[1]

    def to_dict(self) -> dict[str, Any]:
        """A deep, mutable copy of the values: yours to change."""
        return thaw(self._values)  # type: ignore[no-any-return]

    # -- writing -------------------------------------------------------------------------

    def write(self, key: str, value: Any, *, node: str | None = None) -> None:
        """Fold one write into ``key`` through its reducer (one change, one version)."""
        self.merge_writes(((key, value),), node=node)

    def merge_writes(self, writes: Iterable[tuple[str, Any]], *, node: str | None = None) -> None:
        """Fold a batch of writes in the given order, as one change.

        All or nothing: if any write is refused, no value, version or history changes.

        A message written without an id gets one (see :func:`~plait.state.reducers.message_id`)
        named by the channel's value before that write (its fingerprint) and the message's
        position in the write: never by its content, so writing the same message twice
        gives two messages, and the same writes give the same ids in every process. (In a
        graph the task that writes names its messages instead.)
        """
        changed = self.fold(self._values, writes, node, name_messages=True)
        if changed:
            self.apply(changed, node)

    def fold(
        self,
        base: Mapping[str, Any],
        writes: Iterable[tuple[str, Any]],
        node: str | None,
        *,
        name_messages: bool = False,
    ) -> dict[str, Any]:
        """Fold ``writes`` on top of ``base`` and return only the new values (pure: no state
        is touched). The engine uses this to merge a super-step and to let routers see a
        node's own writes; its writes come with their messages named
        (:meth:`StateSchema.with_ids`). With ``name_messages``, messages without an id are
        named as :meth:`merge_writes` says."""
        out: dict[str, Any] = {}
        schema = self.schema
        for key, raw in writes:
            reducer = schema.channel(key, node).reducer
            current = out[key] if key in out else base.get(key, NO_DEFAULT)
            incoming = freeze(raw, key, node)
            if name_messages and reducer.assigns_ids:
                before = None if current is NO_DEFAULT else current
                incoming = reducer.assign_ids(incoming, partial(fingerprint, before), 0)[0]
            out[key] = _fold_one(reducer, key, current, incoming, node)
        return out

    def fold_many(
        self, base: Mapping[str, Any], batches: Iterable[tuple[Sequence[tuple[str, Any]], str | None]]
    ) -> dict[str, Any]:
        """Fold several nodes' writes (``(writes, node)`` in merge order) on top of ``base``;
        return only the new values.

        The result equals folding the batches one after another: a channel's writes are
        folded in the order given, and channels do not see each other. Grouping them by
        channel first is what makes a wide super-step cheap: an :class:`AppendList` that
        a hundred nodes wrote to is extended once, not copied a hundred times.
        """
        groups: dict[str, list[tuple[Any, str | None]]] = {}
        for writes, node in batches:
            for key, raw in writes:
                group = groups.get(key)
                if group is None:
                    groups[key] = [(raw, node)]
                else:
                    group.append((raw, node))
        out: dict[str, Any] = {}
        schema = self.schema
        for key, group in groups.items():
            reducer = schema.channel(key, group[0][1]).reducer
            current = base.get(key, NO_DEFAULT)
            if (
                len(group) > 1
                and type(reducer) is AppendList
                and current is not NO_DEFAULT
                and not any(type(raw) is not FrozenList and is_overwrite(raw) for raw, _ in group)
            ):  # (a frozen list, what a node's write is by now, is no Overwrite and needs no second look)
                frozen = [raw if type(raw) is FrozenList else freeze(raw, key, node) for raw, node in group]
                out[key] = reducer.extend_all(current, frozen)
                continue
            for raw, node in group:
                current = _fold_one(reducer, key, current, freeze(raw, key, node), node)
            out[key] = current
        return out

    @property
    def table(self) -> Mapping[str, Any]:
        """The live table of values (no copy): what a step reads while its tasks run, since
        nothing changes it until :meth:`apply`. Never mutate it; keep :attr:`values` for
        anything that outlives the step."""
        return self._values

    def apply(self, changed: Mapping[str, Any], node: str | None) -> None:
        """Store the values a fold returned (:meth:`fold`, :meth:`fold_many`) as one new
        state version, and tell the subscribers."""
        self._values.update(changed)
        self.version += 1
        version = self.version
        for key in changed:
            self._versions[key] = version
        if self._subscribers:
            event = StateUpdated(keys=tuple(changed), version=version, super_step=self.super_step, node=node)
            for callback in tuple(self._subscribers):
                callback(event)

    def advance(self) -> int:
        """Move to the next super-step and return its number."""
        self.super_step += 1
        return self.super_step

    # -- snapshots and events ------------------------------------------------------------

    def snapshot(self, label: str = "") -> StateSnapshot:
        """Record an immutable snapshot (kept in :attr:`history`) and return it."""
        snap = StateSnapshot(
            version=self.version,
            super_step=self.super_step,
            label=label,
            values=FrozenDict(self._values),
            fingerprint=self.fingerprint,
        )
        self._history.append(snap)
        return snap

    @property
    def history(self) -> tuple[StateSnapshot, ...]:
        """The snapshots taken so far, oldest first."""
        return tuple(self._history)

    def subscribe(self, callback: Subscriber) -> Callable[[], None]:
        """Call ``callback`` with a :class:`StateUpdated` after every change; returns an
        unsubscribe function."""
        self._subscribers.append(callback)

        def unsubscribe() -> None:
            if callback in self._subscribers:
                self._subscribers.remove(callback)

        return unsubscribe

    def __repr__(self) -> str:
        return f"RunState(version={self.version}, super_step={self.super_step}, keys={list(self._values)})"


def _fold_one(reducer: Reducer, key: str, current: Any, incoming: Any, node: str | None) -> Any:
    """One frozen write folded into ``current`` (NO_DEFAULT: the channel has no value yet)."""
    try:
        if isinstance(incoming, dict) and len(incoming) == 1 and OVERWRITE_KEY in incoming:  # is_overwrite, inline
            new = overwritten(reducer, incoming, key)
        elif current is NO_DEFAULT:
            new = reducer.first(incoming, key)
        else:
            new = reducer.reduce(current, incoming, key)
    except InvalidUpdateError as exc:  # the reducer refused the value
        raise exc.at_node(node)
    except Exception as exc:  # a bug in the reducer, or one that mutated its input
        raise ReducerError(key, reducer.spec(), exc, node) from exc
    return new if reducer.trusted else freeze(new, key, node)
