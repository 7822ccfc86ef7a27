"""The cache's one way in and out, shared by graph nodes and the functional API's tasks:
:func:`cache_key` names an input, :func:`lookup` reads a result back and :func:`store` keeps
one.

A result is JSON data: :func:`store` checks it (plait's own JSON gate, :func:`plait._codec.freeze`)
and stores its JSON text; :func:`lookup` decodes text and nothing else. An entry that does
not decode (written by something else, damaged) is a miss: the node runs and its result
replaces the entry. A cache is an optimisation, so a backend that fails (a database that is
down) is logged and treated as a miss too; only the caller's own mistakes (a key that
cannot be made, a result that is not JSON) are raised.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from typing import Any, Final

import orjson

from plait._codec import canonical, decode_frozen, encode, freeze
from plait.checkpoint.cache._base import NodeCache
from plait.errors import CacheKeyError, CacheValueError, NotSerializableError
from plait.types import CachePolicy

__all__ = ["MISS", "cache_key", "fn_identity", "input_data", "lookup", "store"]

log = logging.getLogger("plait.cache")


class _Miss:
    def __repr__(self) -> str:
        return "<cache miss>"


MISS: Final = _Miss()
"""What :func:`lookup` returns when nothing usable is stored."""


def fn_identity(fn: Any) -> str:
    """``module.qualname`` of a callable (of its class for a callable instance, of the wrapped
    function for a ``functools.partial``): part of a cache namespace, so that two functions
    of one name in different modules never share entries."""
    fn = getattr(fn, "func", fn)  # functools.partial
    target = fn if hasattr(fn, "__qualname__") else type(fn)
    return f"{getattr(target, '__module__', '?')}.{target.__qualname__}"


def input_data(value: Any) -> Any:
    """``value`` as JSON data for the default key: a Pydantic model as its JSON dump, a
    dataclass as a dict; anything else must be JSON data already (plait's state view is)."""
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return value


def cache_key(policy: CachePolicy, value: Any, who: str, *, spread: bool = False) -> str:
    """The key of input ``value`` under ``policy``: 32 hex digits, a hash of ``key_func(value)``
    or, by default, of the input's canonical JSON (equal inputs, equal keys, in any process).
    With ``spread``, ``value`` is a call's ``(args, kwargs)`` (a task's), given to ``key_func``
    as ``key_func(*args, **kwargs)``, as LangGraph's tasks do.

    Raises:
        CacheKeyError: the input is not JSON data (default key), or ``key_func`` raised or
            returned something other than str or bytes.
    """
    if policy.key_func is None:
        try:
            raw = canonical(freeze(input_data(value), "input", None))
        except NotSerializableError as exc:
            raise CacheKeyError(who, f"its input is not JSON data ({exc})") from None
    else:
        try:
            made = policy.key_func(*value[0], **value[1]) if spread else policy.key_func(value)
        except Exception as exc:
            raise CacheKeyError(who, f"key_func raised {type(exc).__name__}: {exc}") from exc
        if isinstance(made, str):
            raw = made.encode("utf-8", "surrogatepass")
        elif isinstance(made, bytes | bytearray | memoryview):
            raw = bytes(made)
        else:
            raise CacheKeyError(who, f"key_func returned {type(made).__name__}, not str or bytes")
    return hashlib.blake2b(raw, digest_size=16).hexdigest()


async def lookup(cache: NodeCache, namespace: str, key: str) -> Any:
    """The result stored under ``(namespace, key)``, as frozen JSON data, or :data:`MISS`."""
    try:
        text = await cache.aget(namespace, key)
    except Exception:
        log.warning("the node cache %r could not be read (%s): running it", cache, namespace, exc_info=True)
        return MISS
    if text is None:
        return MISS
    try:
        return decode_frozen(text)
    except orjson.JSONDecodeError:
        log.warning("a cache entry of %s is not JSON text: ignored, and replaced by the next result", namespace)
        return MISS


async def store(cache: NodeCache, policy: CachePolicy, namespace: str, key: str, value: Any, who: str) -> None:
    """Keep ``value`` (JSON data) under ``(namespace, key)`` for ``policy.ttl`` seconds.

    Raises:
        CacheValueError: ``value`` is not JSON data (nothing is stored).
    """
    try:
        text = encode(freeze(value, "result", None)).decode("utf-8")
    except NotSerializableError as exc:
        raise CacheValueError(who, str(exc)) from None
    try:
        await cache.aset(namespace, key, text, policy.ttl)
    except Exception:
        log.warning("the node cache %r could not store a result of %s", cache, namespace, exc_info=True)
