"""Semantic search: the index a store is given, the texts of an item it embeds, the user's
embed function called and checked, and vectors kept at unit length so that cosine
similarity is a dot product wherever it is computed (in Python, or in PostgreSQL).

Embeddings are computed once per put, when the put is made (in a node: when it is staged),
never at read; only a search's query is embedded at read.
"""

from __future__ import annotations

import inspect
import math
import sys
from array import array
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NotRequired, TypedDict

import orjson

from plait.errors import EmbeddingError

__all__ = ["Index", "IndexConfig", "dot", "pack", "texts_of", "unit", "unpack"]

WHOLE = "$"
"""The field that means the whole value, as JSON text (the default)."""


class IndexConfig(TypedDict):
    """``Store(..., index=...)``: how items are embedded for ``search(query=...)``."""

    dims: int
    """How many numbers each vector has."""
    embed: Any
    """A function from a list of texts to a list of vectors (sync or async), or an object
    with ``embed_documents``/``aembed_documents`` (a LangChain ``Embeddings``)."""
    fields: NotRequired[list[str]]
    """Dotted paths into the value whose text is embedded (default: ``["$"]``, the whole
    value as JSON text); an item scores by its best field."""


class Index:
    """An :class:`IndexConfig`, checked."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        if not isinstance(config, Mapping):
            raise EmbeddingError(f"index={config!r}: give a dict with 'dims', 'embed' and optionally 'fields'")
        dims = config.get("dims")
        if isinstance(dims, bool) or not isinstance(dims, int) or dims < 1:
            raise EmbeddingError(f"index dims={dims!r}: give the number of numbers in each vector (a positive int)")
        embed = config.get("embed")
        if embed is None or not (
            callable(embed) or hasattr(embed, "embed_documents") or hasattr(embed, "aembed_documents")
        ):
            raise EmbeddingError(
                f"index embed={embed!r}: give a function from a list of texts to a list of vectors "
                "(sync or async), or a LangChain Embeddings object"
            )
        self.dims = dims
        self.embed = embed
        self.fields = check_fields(config.get("fields"), "index fields")

    async def vectors(self, texts: Sequence[str]) -> list[tuple[float, ...]]:
        """One unit vector per text, from the user's function.

        Raises:
            EmbeddingError: the function failed, or did not return ``len(texts)`` vectors of
                :attr:`dims` finite numbers.
        """
        if not texts:
            return []
        fn = self.embed
        try:
            if hasattr(fn, "aembed_documents"):
                raw: Any = await fn.aembed_documents(list(texts))
            elif hasattr(fn, "embed_documents"):
                raw = fn.embed_documents(list(texts))
            else:
                raw = fn(list(texts))
                if inspect.isawaitable(raw):
                    raw = await raw
        except Exception as exc:
            raise EmbeddingError(f"the index's embed function failed on {len(texts)} text(s): {exc!r}") from exc
        if not isinstance(raw, Sequence) or len(raw) != len(texts):
            got = len(raw) if isinstance(raw, Sequence) else type(raw).__name__
            raise EmbeddingError(f"the index's embed function returned {got} for {len(texts)} text(s): one vector each")
        return [self._checked(v) for v in raw]

    def _checked(self, vector: Any) -> tuple[float, ...]:
        try:
            numbers = tuple(float(x) for x in vector)
        except (TypeError, ValueError):
            raise EmbeddingError(f"the index's embed function returned {vector!r:.60}, not a list of numbers") from None
        if len(numbers) != self.dims:
            raise EmbeddingError(
                f"the index's embed function returned a vector of {len(numbers)} numbers; dims is {self.dims}"
            )
        if not all(math.isfinite(x) for x in numbers):
            raise EmbeddingError("the index's embed function returned a vector holding NaN or infinity")
        return unit(numbers)


def check_fields(fields: Any, what: str) -> tuple[str, ...]:
    if fields is None:
        return (WHOLE,)
    if isinstance(fields, str) or not isinstance(fields, Sequence) or not fields:
        raise EmbeddingError(f"{what}={fields!r}: give a list of dotted paths into the value, such as ['text']")
    for f in fields:
        if type(f) is not str or not f or (f != WHOLE and any(not p for p in f.split("."))):
            raise EmbeddingError(f"{what}: {f!r} is not a dotted path into the value (or '$' for all of it)")
    return tuple(fields)


def texts_of(value: Mapping[str, Any], fields: Sequence[str]) -> list[tuple[str, str]]:
    """``(field, text)`` for every field of ``value`` that exists: text as it is, anything
    else as its JSON text."""
    out: list[tuple[str, str]] = []
    for field in fields:
        if field == WHOLE:
            found: Any = value
        else:
            found = value
            for part in field.split("."):
                if isinstance(found, Mapping) and part in found:
                    found = found[part]
                else:
                    found = None
                    break
            if found is None:
                continue
        out.append((field, found if type(found) is str else orjson.dumps(found, option=orjson.OPT_SORT_KEYS).decode()))
    return out


def unit(vector: Sequence[float]) -> tuple[float, ...]:
    """``vector`` scaled to length 1 (a zero vector stays zero: it scores 0 against anything)."""
    norm = math.sqrt(math.fsum(x * x for x in vector))
    if norm == 0.0:
        return tuple(float(x) for x in vector)
    return tuple(x / norm for x in vector)


_mul: Callable[[float, float], float] = float.__mul__


def _dot(a: Sequence[float], b: Sequence[float]) -> float:
    return sum(map(_mul, a, b))


dot: Callable[[Sequence[float], Sequence[float]], float] = getattr(math, "sumprod", _dot)
"""The cosine similarity of two unit vectors (``math.sumprod`` from Python 3.12: one C loop)."""


def pack(vector: Sequence[float]) -> bytes:
    """Four bytes a number (float32, this machine's byte order made little-endian)."""
    arr = array("f", vector)
    if arr.itemsize != 4:  # pragma: no cover - every platform Python runs on has 4-byte floats
        raise EmbeddingError("this platform has no 4-byte float")
    if sys.byteorder != "little":  # pragma: no cover - big-endian machines
        arr.byteswap()
    return arr.tobytes()


def unpack(data: bytes) -> array[float]:
    """The vector :func:`pack` made."""
    arr = array("f")
    arr.frombytes(data)
    if sys.byteorder != "little":  # pragma: no cover - big-endian machines
        arr.byteswap()
    return arr
