"""JSON data: validation at write time, encoding, canonical form and fingerprints.

State values are JSON data and nothing else, so that any checkpoint can be read by any
process, any language and any future version without running code. :func:`freeze` is the
single gate a value passes on its way into state: it checks the value is JSON data (naming
the channel and the path inside the value when it is not), normalises tuples to lists, and
returns it frozen (see :mod:`plait._frozen`; plait's own read-only containers, the state
view a node receives included, are JSON data and pass). Encoding uses orjson; the
canonical form (sorted keys, no whitespace) feeds fingerprints, so equal state has an
equal fingerprint in every process and on every machine.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from typing import Any

import orjson

from plait._frozen import FrozenDict, FrozenList, FrozenView
from plait.errors import NotSerializableError

__all__ = [
    "canonical",
    "decode",
    "decode_frozen",
    "encode",
    "fingerprint",
    "freeze",
    "freeze_decoded",
    "freeze_send_arg",
    "freeze_trusted",
]

INT_MIN = -(2**63)
INT_MAX = 2**64 - 1
#: orjson refuses to encode data nested deeper than 254 levels; checkpoints wrap a value in a
#: few levels of their own, so a value may nest this deep and no deeper. The limit also turns a
#: cyclic value into a clear error instead of a RecursionError.
MAX_DEPTH = 200


class _Reject(Exception):
    """Internal: carries the path (built while unwinding) to the first non-JSON part."""

    def __init__(self, type_name: str, reason: str = "") -> None:
        self.type_name = type_name
        self.reason = reason
        self.parts: list[str] = []


def _utf8(text: str) -> bool:
    """False for a str orjson cannot encode: one holding a lone surrogate (``"\\ud800"``)."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


_SURROGATE = "a lone surrogate, which is not valid UTF-8"


def _freeze(value: Any, depth: int = 0) -> Any:  # noqa: PLR0912 - one pass over every shape a JSON value can take; a call per shape would cost on every write
    t = type(value)
    if t is str:
        if _utf8(value):
            return value
        raise _Reject("str", f"contains {_SURROGATE}")
    if t is bool or value is None:
        return value
    if t is int:
        if INT_MIN <= value <= INT_MAX:
            return value
        raise _Reject("int", "outside the 64-bit range")
    if t is float:
        if math.isfinite(value):
            return value
        raise _Reject("float", f"{value!r}")
    if t is FrozenList or t is FrozenDict:
        return value  # frozen values were checked when they were frozen
    if depth >= MAX_DEPTH and (t is list or t is tuple or isinstance(value, dict)):
        raise _Reject(t.__name__, f"nested deeper than {MAX_DEPTH} levels, or cyclic")
    if t is list or t is tuple:
        out: list[Any] = []
        for i, item in enumerate(value):
            ti = type(item)  # the common leaves (str, int) inline, without a call of their own
            if (ti is str and item.isascii()) or (ti is int and INT_MIN <= item <= INT_MAX):
                out.append(item)
                continue
            try:
                out.append(_freeze(item, depth + 1))
            except _Reject as bad:
                bad.parts.append(f"[{i}]")
                raise
        return FrozenList(out)
    if t is dict:
        frozen: dict[str, Any] = {}
        for k, item in value.items():
            if type(k) is not str:
                raise _Reject(type(k).__name__, "used as a dict key (keys must be str)")
            if not (k.isascii() or _utf8(k)):
                raise _Reject("str", f"dict key {k!r} contains {_SURROGATE}")
            ti = type(item)
            if (ti is str and item.isascii()) or (ti is int and INT_MIN <= item <= INT_MAX):
                frozen[k] = item
                continue
            try:
                frozen[k] = _freeze(item, depth + 1)
            except _Reject as bad:
                bad.parts.append(f".{k}" if k.isidentifier() else f"[{k!r}]")
                raise
        return FrozenDict(frozen)
    if isinstance(value, dict) and not isinstance(value, FrozenDict):
        return _freeze(dict(value), depth)  # OrderedDict, defaultdict: plain data underneath
    if isinstance(value, FrozenView):
        # A node's state (Send("worker", state), {"snapshot": state}): its values are frozen
        # already, so this costs a shallow copy, and the copy keeps the values the view
        # showed when written even after the run's table moves on.
        return value.snapshot()
    raise _Reject(t.__name__)


def freeze(value: Any, channel: str, node: str | None = None) -> Any:
    """Check ``value`` is JSON data and return it frozen; parts already frozen are reused.

    Raises:
        NotSerializableError: naming the channel, the node and the path, e.g.
            ``messages[3].meta.when: datetime is not JSON data``.
            Data nested deeper than :data:`MAX_DEPTH` levels (or cyclic) is refused too.
    """
    try:
        return _freeze(value)
    except _Reject as bad:
        raise _refused(bad, channel, node) from None


def freeze_send_arg(value: Any, target: str, node: str | None) -> Any:
    """:func:`freeze` for the argument of a ``Send`` to ``target``; the label an error gives
    it (``Send('target').arg``) is built only when the value is refused (a fan-out freezes
    hundreds of these)."""
    try:
        return _freeze(value)
    except _Reject as bad:
        fields = _instance_fields(value)
        if fields is None:
            raise _refused(bad, f"Send({target!r}).arg", node) from None
    try:  # an instance of a Pydantic model or a dataclass travels as the JSON of its fields
        return _freeze(fields)
    except _Reject as bad:
        raise _refused(bad, f"Send({target!r}).arg", node) from None


def _instance_fields(value: Any) -> Any:
    """The JSON form of a Pydantic model's or a dataclass's instance (read by duck typing:
    this module imports neither pydantic nor the state layer); None for anything else."""
    serializer = getattr(type(value), "__pydantic_serializer__", None)
    if serializer is not None and not isinstance(value, type):
        return serializer.to_python(value, mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return None


def _refused(bad: _Reject, channel: str, node: str | None) -> NotSerializableError:
    path = channel + "".join(reversed(bad.parts))
    name = bad.type_name + (f" ({bad.reason})" if bad.reason else "")
    return NotSerializableError(channel, path, name, node)


def freeze_trusted(value: Any) -> Any:
    """Freeze a value known to be JSON data (just decoded); no checks, no path tracking."""
    t = type(value)
    if t is list:
        return FrozenList([freeze_trusted(v) for v in value])
    if t is dict:
        return FrozenDict({k: freeze_trusted(v) for k, v in value.items()})
    return value


def freeze_decoded(value: Any) -> Any:
    """:func:`freeze_trusted` for a value this caller just decoded and owns: its containers
    are reused as the work space (a nested container is replaced by its frozen copy in
    place) instead of being copied into new ones first, which makes freezing small records
    (checkpoint metadata) about a third cheaper. ``value`` must not be used afterwards."""
    t = type(value)
    if t is dict:
        for k, v in value.items():
            tv = type(v)
            if tv is dict or tv is list:
                value[k] = freeze_decoded(v)  # replacing a key's value keeps the dict's size
        return FrozenDict(value)
    if t is list:
        for i, v in enumerate(value):
            tv = type(v)
            if tv is dict or tv is list:
                value[i] = freeze_decoded(v)
        return FrozenList(value)
    return value


def encode(value: Any) -> bytes:
    """Compact JSON bytes (frozen containers encode as plain arrays and objects)."""
    return orjson.dumps(value)


def canonical(value: Any) -> bytes:
    """The canonical JSON bytes of a value: sorted keys, no whitespace."""
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def decode(data: bytes | str) -> Any:
    """Plain (mutable) Python data from JSON bytes."""
    return orjson.loads(data)


def decode_frozen(data: bytes | str) -> Any:
    """Frozen Python data from JSON bytes: what state and checkpoints hold."""
    return freeze_trusted(orjson.loads(data))


def fingerprint(value: Any) -> str:
    """A stable 32-hex-digit hash of the canonical JSON of ``value``.

    Equal data gives an equal fingerprint in every process and on every machine; it is used
    for state, schemas and graphs alike.
    """
    return hashlib.blake2b(canonical(value), digest_size=16).hexdigest()
