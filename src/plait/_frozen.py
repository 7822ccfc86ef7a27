"""Read-only JSON containers: how plait keeps callers from changing stored state.

Every value in plait state is JSON data held in :class:`FrozenList` and :class:`FrozenDict`,
subclasses of ``list`` and ``dict`` whose mutating methods raise
:class:`~plait.errors.ReadOnlyStateError`. They behave as lists and dicts for every read
(``isinstance``, indexing, iteration, ``==``, ``+``, ``|``, orjson and json encoding), so
reading state is free: no copy is made per read, per node or per snapshot. Values are frozen
once, when they are written (the same walk that checks they are JSON data), and a frozen
value is shared by the run state, its snapshots and the in-memory checkpointer without risk.

Why not copy on read: a node that reads a 500-message history would pay a deep copy per
read, per node and per super-step; freezing pays once per write, proportional to what was
written (already-frozen parts are reused as they are). To change a value, copy it with
:func:`thaw` (or ``list(v)`` / ``dict(v)``), change the copy and write it back.

:class:`FrozenView` is the third read-only container: a mapping over frozen values that is
not itself a dict (the state a node receives reads the run's live table through one, so
that no copy is made per task). It is JSON data like a FrozenDict: a value written into
state or passed to ``Send`` may be one, or hold one.
"""

from __future__ import annotations

from collections.abc import ItemsView, Iterator, KeysView, Mapping, ValuesView
from typing import Any, NoReturn, SupportsIndex

from plait.errors import ReadOnlyStateError

__all__ = ["FrozenDict", "FrozenList", "FrozenView", "thaw"]


class FrozenList(list[Any]):
    """A ``list`` that refuses mutation. Copies made with ``list()``/``copy()`` are mutable."""

    __slots__ = ()

    def _refuse(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise ReadOnlyStateError("list", "modify")

    __setitem__ = _refuse
    __delitem__ = _refuse
    append = _refuse
    extend = _refuse
    insert = _refuse
    pop = _refuse
    remove = _refuse
    clear = _refuse
    sort = _refuse
    reverse = _refuse

    def __iadd__(self, other: Any) -> NoReturn:  # type: ignore[misc]
        raise ReadOnlyStateError("list", "extend (+=)")

    def __imul__(self, other: SupportsIndex) -> NoReturn:
        raise ReadOnlyStateError("list", "repeat (*=)")

    def copy(self) -> list[Any]:
        return list(self)

    def __copy__(self) -> list[Any]:
        return list(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> list[Any]:
        return thaw(self)  # type: ignore[no-any-return]

    def __reduce__(self) -> tuple[Any, ...]:
        return (list, (list(self),))

    def __repr__(self) -> str:
        return list.__repr__(self)


class FrozenDict(dict[str, Any]):
    """A ``dict`` that refuses mutation. Copies made with ``dict()``/``copy()`` are mutable."""

    __slots__ = ()

    def _refuse(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise ReadOnlyStateError("dict", "modify")

    __setitem__ = _refuse
    __delitem__ = _refuse
    clear = _refuse
    pop = _refuse
    popitem = _refuse
    setdefault = _refuse
    update = _refuse

    def __ior__(self, other: Any) -> NoReturn:  # type: ignore[misc]
        raise ReadOnlyStateError("dict", "update (|=)")

    def copy(self) -> dict[str, Any]:
        return dict(self)

    def __copy__(self) -> dict[str, Any]:
        return dict(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[str, Any]:
        return thaw(self)  # type: ignore[no-any-return]

    def __reduce__(self) -> tuple[Any, ...]:
        return (dict, (dict(self),))

    def __repr__(self) -> str:
        return dict.__repr__(self)


class FrozenView(Mapping[str, Any]):
    """A read-only mapping over ``values``, a mapping whose values are all frozen.

    The view is not a copy: it shows ``values`` as they are when read. :meth:`snapshot`
    (which :func:`plait._codec.freeze` uses) takes a FrozenDict of the values at that moment,
    a shallow copy since the values are frozen already; :func:`thaw` gives a plain dict.
    """

    __slots__ = ("_values",)

    def __init__(self, values: Mapping[str, Any]) -> None:
        self._values = values

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self._values.get(key, default)

    def __contains__(self, key: object) -> bool:
        return key in self._values

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def keys(self) -> KeysView[str]:
        return self._values.keys()

    def values(self) -> ValuesView[Any]:
        return self._values.values()

    def items(self) -> ItemsView[str, Any]:
        return self._values.items()

    def snapshot(self) -> FrozenDict:
        """The values as they are now, as a FrozenDict (the values themselves are shared)."""
        return FrozenDict(self._values)

    def __copy__(self) -> dict[str, Any]:
        return dict(self._values)

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[str, Any]:
        return thaw(self)  # type: ignore[no-any-return]


_SCALARS = frozenset({str, int, float, bool, type(None)})


def thaw(value: Any) -> Any:
    """A deep, mutable copy of a JSON value (frozen or not, a :class:`FrozenView` included):
    plain lists and dicts throughout."""
    if type(value) in _SCALARS:
        return value
    if isinstance(value, dict):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [thaw(v) for v in value]
    if isinstance(value, FrozenView):
        return {k: thaw(v) for k, v in value.items()}
    return value
