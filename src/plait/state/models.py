"""Pydantic models and dataclasses as the state: their fields are the channels.

``Graph(State)`` with a Pydantic v2 ``BaseModel``, a Pydantic dataclass or a plain
``@dataclass`` declares one channel per field (reducers from ``Annotated[T, reducer]``, as a
TypedDict does). The state stays JSON data in the run and in the store; this module is the
bridge between that JSON and the user's class:

- **Writes are validated** (the input, every node's update, every ``update_state``), each
  against its field, with the model's own validators, and stored as the field's JSON form
  (``model_dump(mode="json")``). A refused write raises
  :class:`~plait.errors.StateValidationError` naming the writer and the field, before
  anything is stored. Plain dataclass fields are checked as JSON data only.
- **Reads are not validated again.** A node gets an instance of the class built from the
  stored JSON by a copy of the model's validator with the user's own validators taken out
  (``@field_validator``, ``@model_validator``, ``AfterValidator`` and friends): the types are
  still parsed (a UUID comes back a ``UUID``), but a validator that transforms a value
  ("John" -> "Validated John") runs once, when the value is written, never on read back.

Pydantic is imported only here, and only when a schema is a Pydantic class: the user has
imported it already. Nothing in this module imports the rest of ``plait.state``.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import typing
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any, Literal, get_args, get_type_hints

from plait._codec import encode, freeze
from plait._frozen import thaw
from plait.errors import SchemaError, StateValidationError
from plait.state.reducers import NO_DEFAULT

__all__ = ["Dumped", "ModelField", "ModelState", "is_state_class"]

_MISSING: Any = dataclasses.MISSING
_USER_VALIDATORS = frozenset({"AfterValidator", "BeforeValidator", "WrapValidator"})
_STRIPPED = frozenset({"function-after", "function-before", "function-wrap"})


def is_state_class(cls: object) -> bool:
    """Whether ``cls`` is a class whose fields can be the channels: a Pydantic model, a
    Pydantic dataclass or a plain dataclass."""
    return isinstance(cls, type) and (dataclasses.is_dataclass(cls) or _is_pydantic(cls))


def first_param_model(fn: Callable[..., Any]) -> ModelState | None:
    """The bridge to the Pydantic model or dataclass that ``fn``'s first parameter is
    annotated with (``def write_joke(job: Job)``); None when it names none, or a class
    that cannot be a state (its fields are then not JSON data: the node gets the dict)."""
    try:
        params = [
            p
            for p in inspect.signature(fn).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
        hint = get_type_hints(fn).get(params[0].name) if params else None
    except Exception:  # no signature, or an annotation that does not resolve: nothing to build
        return None
    if not is_state_class(hint):
        return None
    assert isinstance(hint, type)
    try:
        return ModelState.of(hint)
    except SchemaError:
        return None


def _is_pydantic(cls: type) -> bool:
    return hasattr(cls, "__pydantic_validator__") and hasattr(cls, "__pydantic_serializer__")


class Dumped(dict[str, Any]):
    """An instance of the state's class given as an input or an update, as the JSON data of
    the fields it sets: validated already when it was built, so its values are type-checked
    and never validated again (a transforming validator would run twice)."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ModelField:
    """One field of the class, as the schema builder needs it."""

    key: str
    hint: Any
    """The declared type, ``Annotated[...]`` metadata included (where a reducer is named)."""
    default: Any = NO_DEFAULT
    """The field's default as JSON data, or ``NO_DEFAULT`` (none, or a default factory)."""


class ModelState:
    """The bridge between a class and the run's JSON state; built by :meth:`of`."""

    __slots__ = ("_reader", "_serializer", "_validator", "cls", "factories", "fields", "kind", "name", "required")

    def __init__(self, cls: type, kind: Literal["pydantic", "dataclass"], fields: tuple[ModelField, ...]) -> None:
        self.cls = cls
        self.kind = kind
        self.name = cls.__name__
        self.fields = fields
        self._validator: Any = getattr(cls, "__pydantic_validator__", None)
        self._serializer: Any = getattr(cls, "__pydantic_serializer__", None)
        self._reader: Any = _reader(cls) if kind == "pydantic" else None
        if kind == "pydantic":
            infos = _pydantic_fields(cls)
            self.required = frozenset(k for k, fi in infos.items() if fi.is_required())
            self.factories: dict[str, Callable[[], Any]] = {}
        else:
            dc = {f.name: f for f in dataclasses.fields(cls)}
            self.required = frozenset(
                k for k, f in dc.items() if f.default is _MISSING and f.default_factory is _MISSING and f.init
            )
            self.factories = {k: f.default_factory for k, f in dc.items() if f.default_factory is not _MISSING}  # type: ignore[misc]

    @classmethod
    def of(cls, state: type) -> ModelState:
        """The bridge for ``state`` (see :func:`is_state_class`).

        Raises:
            SchemaError: a field whose type cannot be resolved, a default that is not JSON
                data once dumped, or a secret type (its JSON form hides the value).
        """
        if _is_pydantic(state):
            return cls(state, "pydantic", _pydantic_model_fields(state))
        return cls(state, "dataclass", _dataclass_fields(state))

    def without(self, keys: Collection[str]) -> ModelState:
        """The bridge without the fields ``keys`` as channels: managed values
        (``RemainingSteps``, ``IsLastStep``) are fields of the class, filled in when an
        instance is built for a node, but never written, required or stored."""
        out = copy.copy(self)
        out.fields = tuple(f for f in self.fields if f.key not in keys)
        out.required = self.required - frozenset(keys)
        out.factories = {k: v for k, v in self.factories.items() if k not in keys}
        return out

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(f.key for f in self.fields)

    # -- reading --------------------------------------------------------------------------

    def instance(self, values: Mapping[str, Any]) -> Any:
        """An instance of the class from stored values (the user's validators do not run).

        On a Pydantic model no field counts as set, so that a node returning the state it
        was given (``state.x = 1; return state``) writes only what it assigned."""
        if self.kind == "dataclass":
            init = {f.name for f in dataclasses.fields(self.cls) if f.init}
            return self.cls(**{k: thaw(v) for k, v in values.items() if k in init})
        obj = self._reader.validate_json(encode(values))
        if hasattr(obj, "__pydantic_fields_set__"):
            object.__setattr__(obj, "__pydantic_fields_set__", set())
        return obj

    def sent(self, values: Any, node: str, source: str = "") -> Any:
        """A ``Send``'s argument for ``node`` (stored as JSON) as an instance of the class,
        its field types checked as a read's are, the user's validators not run again (an
        instance sent ran them when it was built, and a transforming one must not run twice).
        Anything but a JSON object is given as it is.

        Raises:
            StateValidationError: the class refuses the argument.
        """
        if not isinstance(values, Mapping):
            return values
        who = f"Send({node!r}) from {source!r}" if source else f"Send({node!r})"
        missing = sorted(k for k in self.required if k not in values) if self.kind == "dataclass" else ()
        if missing:
            raise StateValidationError(missing[0], "Field required", who, self.name)
        try:
            return self.instance(values)
        except Exception as exc:  # a pydantic ValidationError (pydantic is not imported here)
            raise _refused(exc, next(iter(values), ""), who, self.name) from None

    def dump(self, obj: Any) -> dict[str, Any]:
        """An instance as JSON data, every field present."""
        if self.kind == "dataclass":
            return {f.key: thaw(freeze(_plain(getattr(obj, f.key)), f.key)) for f in self.fields if hasattr(obj, f.key)}
        out: dict[str, Any] = self._serializer.to_python(obj, mode="json")
        return out

    # -- writing --------------------------------------------------------------------------

    def owns(self, obj: object) -> bool:
        """Whether ``obj`` is an instance of the class (an update given whole)."""
        return isinstance(obj, self.cls)

    def set_fields(self, obj: Any, current: Mapping[str, Any]) -> list[tuple[str, Any]]:
        """An instance returned as an update, as ``(key, JSON value)`` pairs: a Pydantic
        model's set fields (given to its constructor or assigned), a dataclass's fields whose
        value differs from ``current``. The values are validated already (the instance
        was built); :meth:`checker` only checks their types."""
        dumped = self.dump(obj)
        if self.kind == "pydantic" and hasattr(obj, "model_fields_set"):
            return [(k, dumped[k]) for k in self.keys if k in obj.model_fields_set]
        return [(k, v) for k, v in dumped.items() if k not in current or thaw(current[k]) != v]

    def check_input(
        self, pairs: list[tuple[str, Any]], who: str, current: Mapping[str, Any], *, trusted: bool = False
    ) -> list[tuple[str, Any]]:
        """Writes into a state that lacks a required field (a thread's first input): the
        whole state is validated, so a required field missing is named, default factories
        run, and every field the model set is written."""
        given = dict(pairs)
        if self.kind == "dataclass":
            for key, make in self.factories.items():
                if key not in given and key not in current:
                    given[key] = make()
            missing = sorted(k for k in self.required if k not in given and k not in current)
            if missing:
                raise StateValidationError(missing[0], "Field required", who, self.name)
            return [(k, freeze(_plain(v), k, who)) for k, v in given.items()]
        try:
            if trusted:
                full = self._reader.validate_json(encode({**current, **given}))
            else:
                full = self._validator.validate_python({**thaw(current), **given})
        except Exception as exc:  # a pydantic ValidationError (pydantic is not imported here)
            raise _refused(exc, next(iter(given), ""), who, self.name) from None
        dumped = self._serializer.to_python(full, mode="json")
        return [
            (k, dumped[k])
            for k in self.keys
            if k in dumped and (k in given or k not in current or thaw(current[k]) != dumped[k])
        ]

    def checker(self, current: Mapping[str, Any]) -> Checker | None:
        """A checker for writes on top of ``current``; None when ``current`` lacks a
        required field (use :meth:`check_input`)."""
        if any(k not in current for k in self.required):
            return None
        return Checker(self, current)


class Checker:
    """Validates writes one field at a time on an instance of the current state, so the
    model's validators see the other fields; a write changes the instance, so the next
    write of the same update sees it."""

    __slots__ = ("_current", "_obj", "_state")

    def __init__(self, state: ModelState, current: Mapping[str, Any]) -> None:
        self._state = state
        self._current = current
        self._obj: Any = None

    def check(self, key: str, value: Any, who: str, *, one_item: bool = False, trusted: bool = False) -> Any:
        """``value`` for field ``key`` as JSON data, validated.

        ``one_item``: the field accumulates (a reducer other than last-write-wins), so a
        value that is not a list is taken as one item of it. ``trusted``: the value was
        dumped from an instance of the class; its type is checked, no validator runs.

        Raises:
            StateValidationError: the field's type or a validator refused it.
            NotSerializableError: (a plain dataclass) the value is not JSON data.
        """
        st = self._state
        if st.kind == "dataclass":
            return freeze(_plain(value), key, who)
        if trusted:
            try:
                st._reader.validate_json(encode({**self._current, key: value}))
            except Exception as exc:
                raise _refused(exc, key, who, st.name) from None
            return freeze(value, key, who)
        if self._obj is None:
            self._obj = st.instance(self._current)
        single = one_item and not isinstance(value, list | tuple)
        try:
            st._validator.validate_assignment(self._obj, key, [value] if single else value)
        except Exception as exc:
            raise _refused(exc, key, who, st.name) from None
        dumped = st._serializer.to_python(self._obj, mode="json", include={key})[key]
        return freeze(dumped[0] if single else dumped, key, who)


def _refused(exc: Exception, key: str, who: str, model: str) -> StateValidationError:
    errors = getattr(exc, "errors", None)
    if not callable(errors):
        return StateValidationError(key, f"{type(exc).__name__}: {exc}", who, model)
    parts, field = [], key
    for i, e in enumerate(errors(include_url=False)):
        loc = ".".join(str(p) for p in e.get("loc", ()))
        if i == 0 and e.get("loc"):
            field = str(e["loc"][0])
        parts.append(f"{loc or key}: {e.get('msg', '')}")
    return StateValidationError(field, "; ".join(parts), who, model)


def _plain(value: Any) -> Any:
    """A nested dataclass instance as a dict (a plain dataclass state is JSON data)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return value


def _pydantic_fields(cls: type) -> dict[str, Any]:
    fields = getattr(cls, "__pydantic_fields__", None)
    return dict(fields if fields is not None else cls.model_fields)  # type: ignore[attr-defined]


def _pydantic_model_fields(cls: type) -> tuple[ModelField, ...]:
    from pydantic_core import PydanticUndefined, to_jsonable_python

    out = []
    for key, fi in _pydantic_fields(cls).items():
        _refuse_secret(cls, key, fi.annotation)
        hint = typing.Annotated[(fi.annotation, *fi.metadata)] if fi.metadata else fi.annotation
        default = NO_DEFAULT
        if fi.default is not PydanticUndefined and fi.default_factory is None:
            try:
                default = freeze(to_jsonable_python(fi.default), key)
            except Exception as exc:
                raise SchemaError(f"{cls.__name__}.{key}: its default {fi.default!r} is not JSON data: {exc}") from None
        out.append(ModelField(key=key, hint=hint, default=default))
    return tuple(out)


def _dataclass_fields(cls: type) -> tuple[ModelField, ...]:
    try:
        hints = get_type_hints(cls, include_extras=True)
    except NameError as exc:
        raise SchemaError(
            f"cannot resolve the annotations of {cls.__qualname__}: {exc}. Define the dataclass at module "
            "level (or without `from __future__ import annotations`)."
        ) from None
    out = []
    for f in dataclasses.fields(cls):
        default = NO_DEFAULT
        if f.default is not _MISSING:
            try:
                default = freeze(_plain(f.default), f.name)
            except Exception as exc:
                raise SchemaError(f"{cls.__name__}.{f.name}: its default is not JSON data: {exc}") from None
        out.append(ModelField(key=f.name, hint=hints.get(f.name, f.type), default=default))
    return tuple(out)


def _refuse_secret(cls: type, key: str, hint: Any) -> None:
    """A ``SecretStr`` dumps to ``"**********"`` in JSON: stored so, the secret would be lost."""
    for t in _walk(hint):
        if isinstance(t, type) and any(b.__name__ in ("SecretStr", "SecretBytes", "_SecretBase") for b in t.__mro__):
            raise SchemaError(
                f"{cls.__name__}.{key}: {t.__name__} is stored as its JSON form, '**********', so the secret "
                "would be lost. Keep secrets out of the state (pass them as context=...) or declare the field str."
            )


def _walk(hint: Any) -> Iterable[Any]:
    yield hint
    for arg in get_args(hint):
        yield from _walk(arg)
    meta = getattr(hint, "__metadata__", ())
    yield from meta


# -- the reader: the model's validator without the user's validators ----------------------


def _reader(cls: type) -> Any:
    """A validator for ``cls`` that parses JSON into it but runs none of the user's own
    validators (they ran when the values were written)."""
    from pydantic_core import SchemaValidator

    schema = cls.__pydantic_core_schema__  # type: ignore[attr-defined]
    user = _user_functions(schema)
    return SchemaValidator(_stripped(schema, user))


def _user_functions(schema: Any) -> set[int]:
    """The ids of the validator functions the user declared on every model and dataclass in
    ``schema``: decorators (``@field_validator``, ``@model_validator``, ...) and
    ``Annotated[..., AfterValidator(f)]`` (and Before/Wrap) anywhere in a field's type."""
    found: set[int] = set()
    seen: set[int] = set()

    def visit(node: Any) -> None:
        if isinstance(node, dict):
            owner = node.get("cls")
            if isinstance(owner, type) and id(owner) not in seen:
                seen.add(id(owner))
                decorators = getattr(owner, "__pydantic_decorators__", None)
                if decorators is not None:
                    for group in (
                        decorators.field_validators,
                        decorators.model_validators,
                        decorators.validators,
                        decorators.root_validators,
                    ):
                        found.update(id(_unwrap(d.func)) for d in group.values())
                for fi in (getattr(owner, "__pydantic_fields__", None) or {}).values():
                    for part in (*fi.metadata, fi.annotation):
                        for t in _walk(part):
                            if type(t).__name__ in _USER_VALIDATORS and hasattr(t, "func"):
                                found.add(id(_unwrap(t.func)))
            for v in node.values():
                visit(v)
        elif isinstance(node, list):
            for v in node:
                visit(v)

    visit(schema)
    return found


def _stripped(node: Any, user: set[int]) -> Any:
    """``node`` without the user's validators. A model or dataclass node becomes its fields'
    validator followed by a plain constructor: pydantic-core would otherwise reuse the
    class's own complete validator (validators included) for it."""
    if isinstance(node, dict):
        kind = node.get("type")
        if kind in _STRIPPED:
            fn = node.get("function", {}).get("function")
            if id(_unwrap(fn)) in user:
                return _stripped(node["schema"], user)
        if kind in ("model", "dataclass") and not node.get("root_model"):
            built: dict[str, Any] = {
                "type": "function-after",
                "function": {"type": "no-info", "function": _maker(node["cls"], kind)},
                "schema": _stripped(node["schema"], user),
            }
            if "ref" in node:
                built["ref"] = node["ref"]
            return built
        return {k: _stripped(v, user) for k, v in node.items()}
    if isinstance(node, list):
        return [_stripped(v, user) for v in node]
    return node


def _maker(cls: type, kind: str) -> Callable[[Any], Any]:
    """Builds an instance of ``cls`` from what its fields' validator returned, running no
    validator (as ``model_construct`` does)."""
    if kind == "model":

        def make_model(parts: Any) -> Any:
            fields, extra, fields_set = parts
            obj: Any = object.__new__(cls)
            object.__setattr__(obj, "__dict__", fields)
            object.__setattr__(obj, "__pydantic_extra__", extra)
            object.__setattr__(obj, "__pydantic_fields_set__", set(fields_set))
            private = getattr(cls, "__private_attributes__", None) or {}
            object.__setattr__(
                obj, "__pydantic_private__", {k: a.get_default() for k, a in private.items()} if private else None
            )
            return obj

        return make_model

    def make_dataclass(parts: Any) -> Any:
        fields = parts[0] if isinstance(parts, tuple) else parts
        obj: Any = object.__new__(cls)
        for k, v in fields.items():
            object.__setattr__(obj, k, v)
        return obj

    return make_dataclass


def _unwrap(fn: Any) -> Any:
    return getattr(fn, "__func__", fn)
