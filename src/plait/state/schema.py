"""The state schema: an ordered registry of channels, the source of truth for state keys."""

from __future__ import annotations

import typing
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, get_args, get_origin, get_type_hints

from plait._codec import fingerprint, freeze
from plait._frozen import FrozenDict
from plait.errors import InvalidUpdateError, MissingValueError, SchemaError, UnknownChannelError
from plait.state.models import Dumped, ModelState, is_state_class
from plait.state.reducers import NO_DEFAULT, OVERWRITE_KEY, LastWriteWins, Reducer, as_reducer, is_overwrite

__all__ = ["Channel", "Default", "SchemaBuilder", "StateSchema"]

#: TypedDict field qualifiers that may wrap an ``Annotated[T, reducer]`` hint.
_QUALIFIERS = tuple(q for q in (typing.Required, typing.NotRequired, getattr(typing, "ReadOnly", None)) if q)


@dataclass(frozen=True, slots=True, kw_only=True)
class Channel:
    """One named slot of state."""

    key: str
    """The channel's name, the key nodes read and write."""
    reducer: Reducer
    """How writes fold into the value."""
    default: Any = NO_DEFAULT
    """The frozen starting value, or ``NO_DEFAULT`` for a channel absent until written."""


@dataclass(frozen=True, slots=True)
class Default:
    """A TypedDict field's starting value, declared beside its reducer:
    ``phase: Annotated[str, LastWriteWins(), Default("plan")]``.

    The same as ``.add(key, reducer, default=value)`` on the builder: the value is
    normalised by the reducer and frozen when the schema is built, so a mutable default (a
    list, a dict) is never shared between runs. A field without one starts with its reducer's
    natural value (``[]`` for an append, absent for last-write-wins).
    """

    value: Any
    """The JSON value a fresh run starts with."""


class StateSchema:
    """An ordered, immutable registry of channels.

    Build one with :meth:`builder` or :meth:`from_typed_dict`; both give the same object.
    Defaults are frozen when the schema is built, so a run can never change the default
    another run starts from, and mutating the object passed as ``default`` afterwards does
    not reach the schema.
    """

    __slots__ = ("_channels", "_fingerprint", "_id_keys", "_keys", "model")

    def __init__(self, channels: Mapping[str, Channel], model: ModelState | None = None) -> None:
        self._channels: dict[str, Channel] = dict(channels)
        self.model = model
        """The Pydantic model or dataclass the schema was declared with (None: a TypedDict
        or a builder): writes are validated by it and nodes read the state as one."""
        self._keys = tuple(self._channels)
        self._id_keys = frozenset(c.key for c in self._channels.values() if c.reducer.assigns_ids)
        # [key, reducer] for a channel without a default, [key, reducer, default] otherwise: a
        # default of None is a different schema from no default.
        self._fingerprint = fingerprint(
            [
                [c.key, c.reducer.spec()] if c.default is NO_DEFAULT else [c.key, c.reducer.spec(), c.default]
                for c in self._channels.values()
            ]
        )

    @staticmethod
    def builder() -> SchemaBuilder:
        """A fluent builder: ``StateSchema.builder().add("log", AppendList()).add_lww("phase").build()``."""
        return SchemaBuilder()

    @classmethod
    def from_typed_dict(cls, typed_dict: type) -> StateSchema:
        """A schema from a ``TypedDict`` whose fields are ``Annotated[T, reducer]``, and
        ``Annotated[T, reducer, Default(value)]`` for a field that starts with a value.

        A field without a reducer annotation is last-write-wins. Field order is kept. A
        field whose reducer is a plain function (``Annotated[list, operator.add]``) starts
        from its type's empty value (``[]``, ``{}``, ``0``, ``""``) as in LangGraph, unless it
        declares a ``Default``; plait's own reducers keep their natural starting values.
        """
        if not typing.is_typeddict(typed_dict):
            raise SchemaError(f"{typed_dict!r} is not a TypedDict")
        try:
            hints = get_type_hints(typed_dict, include_extras=True)
        except NameError as exc:
            raise SchemaError(
                f"cannot resolve the annotations of {typed_dict.__qualname__}: {exc}. Define the "
                "TypedDict at module level (or without `from __future__ import annotations`)."
            ) from exc
        builder = SchemaBuilder()
        for key, declared in hints.items():
            reducer, default = _reducer_and_default(typed_dict.__qualname__, key, declared)
            builder.add(key, reducer, default=default)
        return builder.build()

    @classmethod
    def from_class(cls, state: type) -> StateSchema:
        """A schema from a Pydantic model, a Pydantic dataclass or a plain dataclass: a
        channel per field, reducers from ``Annotated[T, reducer]`` as in a TypedDict, the
        field's default as the channel's starting value (a default factory runs when a
        thread starts). See :mod:`plait.state.models` for how writes are validated."""
        model = ModelState.of(state)
        builder = SchemaBuilder()
        for f in model.fields:
            reducer, default = _reducer_and_default(state.__qualname__, f.key, f.hint, f.default)
            builder.add(f.key, reducer, default=default)
        if not builder._channels:
            raise SchemaError(f"{state.__qualname__} has no fields; a state needs at least one")
        return StateSchema(builder._channels, model)

    @classmethod
    def coerce(cls, schema: StateSchema | type) -> StateSchema:
        """Accept a schema, a ``TypedDict``, a Pydantic model or a dataclass wherever a
        schema is expected."""
        if isinstance(schema, StateSchema):
            return schema
        if is_state_class(schema):
            assert isinstance(schema, type)
            return cls.from_class(schema)
        if isinstance(schema, type) and not typing.is_typeddict(schema):
            raise SchemaError(_not_a_typed_dict(schema))
        return cls.from_typed_dict(schema)

    @property
    def keys(self) -> tuple[str, ...]:
        """Channel keys in declaration order."""
        return self._keys

    @property
    def channels(self) -> Mapping[str, Channel]:
        return self._channels

    @property
    def fingerprint(self) -> str:
        """A stable hash of the keys, the reducers (name and options) and the defaults."""
        return self._fingerprint

    def channel(self, key: str, node: str | None = None) -> Channel:
        """The channel named ``key``; :class:`UnknownChannelError` if the schema lacks it."""
        try:
            return self._channels[key]
        except KeyError:
            raise UnknownChannelError(key, self._keys, node) from None

    def with_ids(self, writes: list[tuple[str, Any]], seed: str) -> list[tuple[str, Any]]:
        """``writes`` (frozen) with an id for every message written without one, named by
        ``seed`` and the message's position among the messages of ``writes``.

        ``seed`` names the whole batch: the id of the task that made the writes, or of the
        checkpoint an input, an update or a fork's edits create. Positions run across the
        batch, so a task writing one channel twice still gives each message its own id. See
        :func:`~plait.state.reducers.message_id`.
        """
        if not self._id_keys:
            return writes
        out = []
        position = 0
        for key, value in writes:
            if key in self._id_keys and is_overwrite(value):  # name the messages it sets
                named, position = self._channels[key].reducer.assign_ids(value[OVERWRITE_KEY], seed, position)
                out.append((key, FrozenDict({OVERWRITE_KEY: named})))
            elif key in self._id_keys:
                named, position = self._channels[key].reducer.assign_ids(value, seed, position)
                out.append((key, named))
            else:
                out.append((key, value))
        return out

    def prepare(
        self, update: Any, who: str, seed: str, current: Mapping[str, Any] | None = None
    ) -> list[tuple[str, Any]]:
        """An update (a mapping, ``(key, value)`` pairs, or an instance of the state's model)
        as frozen writes, its messages named by ``seed`` (:meth:`with_ids`); ``who``
        (``"input"``, ``"update"``, a node) is named by the error for a value that is not
        JSON data, or that the state's model refuses (validated on ``current``)."""
        return self.with_ids(self.checked(update, who, current or {}), seed)

    def checked(self, update: Any, who: str, current: Mapping[str, Any]) -> list[tuple[str, Any]]:
        """:meth:`prepare` without naming messages: each write checked against its channel
        (an unknown key refused) and frozen; with a model, validated by it on top of
        ``current``, the state the writer saw.

        Raises:
            UnknownChannelError, NotSerializableError, StateValidationError.
        """
        model = self.model
        if model is not None and model.owns(update):
            pairs, trusted = model.set_fields(update, current), True
        elif isinstance(update, Dumped):
            pairs, trusted = list(update.items()), True
        else:
            pairs = list(update.items() if isinstance(update, Mapping) else update)
            trusted = False
        if model is None:
            return [(k, freeze(v, k, who)) for k, v in pairs]
        for k, _ in pairs:
            self.channel(k, who)
        checker = model.checker(current)
        if checker is None:  # a required field has no value yet: the whole state is validated
            return model.check_input(pairs, who, current, trusted=trusted)
        out = []
        for k, v in pairs:
            accumulates = not isinstance(self._channels[k].reducer, LastWriteWins)
            if is_overwrite(v):
                inner = checker.check(k, v[OVERWRITE_KEY], who, trusted=trusted)
                out.append((k, FrozenDict({OVERWRITE_KEY: inner})))
            else:
                out.append((k, checker.check(k, v, who, one_item=accumulates, trusted=trusted)))
        return out

    def missing(self, key: str, present: Iterable[str], writers: Mapping[str, Sequence[str]]) -> MissingValueError:
        """The error for reading ``key`` from a state whose keys with a value are ``present``:
        a channel with no value yet (naming its known ``writers``), or a key that is not a
        channel (naming the channels)."""
        return MissingValueError(
            key, tuple(present), writers.get(key, ()), declared=key in self._channels, channels=self._keys
        )

    def __contains__(self, key: object) -> bool:
        return key in self._channels

    def __iter__(self) -> Iterator[Channel]:
        return iter(self._channels.values())

    def __len__(self) -> int:
        return len(self._channels)

    def initial_values(self) -> dict[str, Any]:
        """The values a fresh run starts with: every channel that has a default."""
        return {c.key: c.default for c in self._channels.values() if c.default is not NO_DEFAULT}

    def describe(self) -> list[dict[str, Any]]:
        """JSON data describing the channels (for drawings, the CLI and the Studio)."""
        return [
            {"key": c.key, "reducer": c.reducer.spec(), "incremental": c.reducer.incremental}
            for c in self._channels.values()
        ]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StateSchema) and other._fingerprint == self._fingerprint

    def __hash__(self) -> int:
        return hash(self._fingerprint)

    def __repr__(self) -> str:
        inner = ", ".join(f"{c.key}: {c.reducer!r}" for c in self._channels.values())
        return f"StateSchema({inner})"


_EMPTY: dict[Any, Any] = {list: [], tuple: [], dict: {}, int: 0, float: 0.0, str: ""}
"""The starting value of a channel declared ``Annotated[T, fn]`` with a plain function
reducer, by ``T``: LangGraph's binary-operator channels start from ``T()``, so that
``state["items"]`` works in a first node and ``operator.add`` has a left side."""


def _not_a_typed_dict(cls: type) -> str:
    """Why a class is not a state type, and what to write instead."""
    return (
        f"Graph({cls.__name__}): {cls.__name__} is a class, and plait's state is a TypedDict, a Pydantic "
        "model, a dataclass or a StateSchema (channels of JSON data). Declare "
        f"`class {cls.__name__}(TypedDict)` (or a Pydantic model) with its fields (reducers as "
        "Annotated[T, reducer]), or build one with StateSchema.builder().add(...)"
    )


def _reducer_and_default(owner: str, key: str, declared: Any, default: Any = NO_DEFAULT) -> tuple[Any, Any]:
    """A field's reducer (last-write-wins when it names none) and starting value, from its
    declared type: ``Annotated[T, reducer, Default(value)]``, ``NotRequired[...]`` around it."""
    reducer: Any = None
    hint = declared
    while get_origin(hint) in _QUALIFIERS:  # NotRequired[Annotated[T, reducer]]
        hint = get_args(hint)[0]
    if get_origin(hint) is Annotated:
        for meta in get_args(hint)[1:]:
            if isinstance(meta, Default):
                if default is not NO_DEFAULT:
                    raise SchemaError(f"field {key!r} of {owner} has two Default(...)s")
                default = meta.value
            elif reducer is None and (
                isinstance(meta, Reducer) or (isinstance(meta, type) and issubclass(meta, Reducer)) or callable(meta)
            ):
                reducer = meta
    if default is NO_DEFAULT and _is_function_reducer(reducer):
        default = _empty_of(get_args(hint)[0] if get_origin(hint) is Annotated else hint)
    return (LastWriteWins() if reducer is None else reducer), default


def _is_function_reducer(reducer: Any) -> bool:
    return reducer is not None and not (
        isinstance(reducer, Reducer) or (isinstance(reducer, type) and issubclass(reducer, Reducer))
    )


def _empty_of(declared: Any) -> Any:
    """``T()`` as JSON data for the types that have one (``list[int]`` -> ``[]``), else no default."""
    return _EMPTY.get(get_origin(declared) or declared, NO_DEFAULT)


@dataclass(slots=True)
class SchemaBuilder:
    """Collects channels in order; :meth:`build` returns the immutable :class:`StateSchema`."""

    _channels: dict[str, Channel] = field(default_factory=dict)

    def add(self, key: str, reducer: Any = None, *, default: Any = NO_DEFAULT) -> SchemaBuilder:
        """Declare channel ``key`` with ``reducer`` (last-write-wins when None).

        Without ``default`` the channel starts with the reducer's natural value (``[]`` for
        the append reducers, ``{}`` for MergeMap, ``0`` for Sum) or, for the others, has no
        value until first written.
        """
        if not isinstance(key, str) or not key:
            raise SchemaError(f"a channel key is a non-empty str, got {key!r}")
        if key.startswith("__"):
            raise SchemaError(f"channel key {key!r}: keys starting with '__' are reserved for plait")
        if key in self._channels:
            raise SchemaError(f"channel {key!r} is declared twice; each key is declared once")
        try:
            red = as_reducer(LastWriteWins() if reducer is None else reducer)
        except TypeError as exc:
            raise SchemaError(f"channel {key!r}: {exc}") from None
        if default is NO_DEFAULT:
            start = red.default()
        else:
            try:
                start = red.normalize(freeze(default, key), key)
            except InvalidUpdateError as exc:
                raise SchemaError(f"channel {key!r}: the default does not suit {red!r}: {exc.reason}") from None
        self._channels[key] = Channel(key=key, reducer=red, default=start)
        return self

    def add_lww(self, key: str, *, default: Any = NO_DEFAULT) -> SchemaBuilder:
        """Shorthand for ``add(key, LastWriteWins(), default=...)``."""
        return self.add(key, LastWriteWins(), default=default)

    def build(self) -> StateSchema:
        if not self._channels:
            raise SchemaError("a schema needs at least one channel")
        return StateSchema(self._channels)
