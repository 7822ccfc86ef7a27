"""A thread listing's metadata filter as SQL: the head's metadata tested in the database.

A part of :class:`plait.checkpoint.sql._threads.SqlThreads`. The filter's rule is
:mod:`plait.checkpoint._match`'s; this module writes one condition per leaf of it over the
listing's head row ``h`` (see ``{head_join}`` in :mod:`plait.checkpoint.sql._schema`), so
that a search reads the heads' metadata in the database and returns only the page.

Metadata is stored as JSON bytes (BLOB / BYTEA). SQLite reads it with its JSON functions
after a cast to text (3.45 would take a BLOB for its binary JSONB), each value at a path
found once through the JSON parse cache; a row whose metadata is not JSON (foreign data)
matches nothing instead of failing the query. PostgreSQL converts it once per head (a
subquery kept from being inlined by ``OFFSET 0``) to ``json`` for a filter of one or two
leaves (only checked, not rebuilt: a search over 10,000 heads took 38 ms in the database
instead of 99 ms as ``jsonb``), else to ``jsonb``, which each further ``#>`` does not parse
again; the values found are compared as jsonb, whose equality already is the rule's for
scalars (``1`` equals ``1.0``, ``true`` does not equal ``1``).

No index serves the search: the metadata searched is the head's, which changes with every
step, and neither store keeps it apart from its checkpoint, so an index would be over every
checkpoint and paid on every commit. A search costs a head lookup per thread the other
filters keep (most of its time on PostgreSQL at 10,000 threads) and a byte search of each
head; keeping the head's metadata on the thread row (jsonb with a GIN index) would make a
search that matches few threads an index lookup, for an update of that row at every step.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from plait.checkpoint._match import Leaf
from plait.checkpoint.sql._base import Dialect

__all__ = ["metadata_clause"]

_JSON_LEAVES = 2
"""PostgreSQL reads a filter of at most this many leaves from ``json`` (checked, not
rebuilt, but parsed again by each ``#>``), a longer one from ``jsonb`` (built once)."""

_SQLITE_TYPES = {
    "string": "('text')",
    "number": "('integer', 'real')",
    "true": "('true')",
    "false": "('false')",
    "null": "('null')",
    "object": "('object')",
    "array": "('array')",
}


def metadata_clause(dialect: Dialect, conditions: list[Leaf]) -> tuple[str, list[Any]]:
    """A WHERE condition (with its parameters, in order) that holds when the head ``h``'s
    metadata meets every one of ``conditions``.

    Before any JSON is read, the stored bytes must hold each plain key and plain string the
    filter names, quoted (a byte search, see :func:`needles`): a necessary condition that
    turns most heads away for the cost of a ``memmem``, so a search that matches few heads
    parses few (PostgreSQL: 40 ms of parsing for 10,000 heads, against 7 ms of searching)."""
    found = needles(conditions)
    search = "position(?::bytea in h.metadata) > 0" if dialect.jsonb else "instr(h.metadata, ?) > 0"
    exact, params = _postgres(conditions) if dialect.jsonb else _sqlite(conditions)
    return " AND ".join([*(search for _ in found), exact]), [*found, *params]


_PLAIN = re.compile(r"[A-Za-z0-9 _.:@,+=-]+")
"""Text every JSON encoder writes as itself between quotes: no quote, backslash, slash,
control or non-ASCII character, which one may escape (``\\u00e9``, ``\\/``) and another not."""


def needles(conditions: list[Leaf]) -> list[bytes]:
    """The quoted keys and strings of ``conditions`` that the stored JSON of a matching
    head must hold byte for byte: those of plain text (see :data:`_PLAIN`) only."""
    out: dict[bytes, None] = {}
    for leaf in conditions:
        texts = [p for p in leaf.path if isinstance(p, str)]
        if leaf.kind == "string":
            texts.append(leaf.value)
        for text in texts:
            if _PLAIN.fullmatch(text):
                out[b'"' + text.encode() + b'"'] = None
    return list(out)


def _postgres(conditions: list[Leaf]) -> tuple[str, list[Any]]:
    j = "json" if len(conditions) <= _JSON_LEAVES else "jsonb"
    parts: list[str] = []
    params: list[Any] = []
    for leaf in conditions:
        path = [str(p) for p in leaf.path]
        if leaf.kind == "object":
            parts.append(f"{j}_typeof(s.m #> ?::text[]) = 'object'")
            params.append(path)
        elif leaf.kind == "array":
            # CASE, not AND: PostgreSQL does not promise to test the type first.
            parts.append(
                f"CASE WHEN {j}_typeof(s.m #> ?::text[]) = 'array' THEN {j}_array_length(s.m #> ?::text[]) END = ?"
            )
            params += [path, path, leaf.value]
        else:
            literal = leaf.kind if leaf.kind in ("true", "false", "null") else orjson.dumps(leaf.value).decode()
            parts.append("(s.m #> ?::text[])::jsonb = ?::jsonb")
            params += [path, literal]
    sub = f"(SELECT convert_from(h.metadata, 'UTF8')::{j} AS m OFFSET 0) s"
    return f"EXISTS (SELECT 1 FROM {sub} WHERE {' AND '.join(parts) or 'true'})", params


def _sqlite(conditions: list[Leaf]) -> tuple[str, list[Any]]:
    # CASE, not AND, wherever a test must come first: SQLite does not promise the order of
    # AND's terms, and json_array_length of a text, or any function of text that is not
    # JSON, is an error rather than false.
    parts: list[str] = []
    params: list[Any] = []
    # An object's own type test is needed only when nothing is asked of its keys: a path
    # below it finds nothing in any other type (``$."0"`` does not step into a list).
    parents = {leaf.path[:i] for leaf in conditions for i in range(len(leaf.path))}
    for leaf in conditions:
        if leaf.kind == "object" and leaf.path in parents:
            continue
        (kind_sql, kind_params), (value_sql, value_params) = _sqlite_at(leaf.path)
        if leaf.kind == "array":
            parts.append(f"CASE WHEN {kind_sql} = 'array' THEN json_array_length({value_sql}) END = ?")
            params += [*kind_params, *value_params, leaf.value]
            continue
        parts.append(f"{kind_sql} IN {_SQLITE_TYPES[leaf.kind]}")
        params += kind_params
        if leaf.kind in ("string", "number"):
            parts.append(f"{value_sql} = ?")
            params += [*value_params, _bindable(leaf.value)]
    test = " AND ".join(parts) or "1"
    return (
        f"EXISTS (SELECT 1 FROM (SELECT CAST(h.metadata AS TEXT) AS m) s "
        f"WHERE CASE WHEN json_valid(s.m) THEN {test} ELSE 0 END)",
        params,
    )


_Sql = tuple[str, list[Any]]


def _sqlite_at(path: tuple[str | int, ...]) -> tuple[_Sql, _Sql]:
    """The JSON type and the value at ``path`` of ``s.m``: by a JSON path when every key
    can be written in one (SQLite's paths have no escape for a ``"`` in a key), else step by
    step through ``json_each``."""
    if all(isinstance(p, int) or (p and '"' not in p) for p in path):
        text = "$" + "".join(f"[{p}]" if isinstance(p, int) else f'."{p}"' for p in path)
        return ("json_type(s.m, ?)", [text]), ("json_extract(s.m, ?)", [text])
    parent: str = "s.m"
    params: list[Any] = []
    for step in path[:-1]:
        parent = f"(SELECT value FROM json_each({parent}) WHERE key = ? AND type IN ('object', 'array'))"
        params = [*params, step]
    last = path[-1]
    kind = (f"(SELECT type FROM json_each({parent}) WHERE key = ?)", [*params, last])
    value = (f"(SELECT value FROM json_each({parent}) WHERE key = ?)", [*params, last])
    return kind, value


def _bindable(value: Any) -> Any:
    """A number SQLite can bind (an integer past 64 bits is compared as a float, as SQLite
    reads such a number from JSON)."""
    if isinstance(value, int) and not -(2**63) <= value < 2**63:
        return float(value)
    return value
