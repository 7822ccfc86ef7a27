"""The SQL text of the memory store (:class:`plait.Store` kept in a checkpointer's database):
its tables, how a namespace is stored as one sortable text, and search filters compiled to
SQL for SQLite (``json_type``/``json_extract``) and PostgreSQL (``jsonb``).

Layout (schema 10; ``P`` is the table prefix)::

    P_memory_items    prefix, key -> value, created_at, updated_at, expires_at, ttl
                      (PostgreSQL: value jsonb for filters, raw text: the exact JSON returned)
    P_memory_vectors  prefix, key, field -> vector  (SQLite: float32 blob; PostgreSQL: float8[])

Times are microseconds since the epoch; ``expires_at`` is NULL for an item that never
expires; vectors go with their item. ``prefix`` is the namespace as one text (see
:func:`encode_namespace`) whose byte order is the namespaces' tuple order, so that one
``ORDER BY prefix`` and one range (``prefix >= lo AND prefix < hi``) serve both.

Filters (:func:`compile_filters`) give exactly :func:`plait.store.rules.holds`' answers:
JSON equality (``1 == 1.0``, ``True`` is not ``1``, containers compared whole), ``$gt`` and
friends only number with number and text with text (code-point order), a missing path
matching only ``$ne``; a path descends through objects only (never into an array).
Operands are always parameters; keys are parameters (PostgreSQL) or JSON-escaped path
labels passed as parameters (SQLite), never SQL text.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

import orjson

from plait.store.records import Condition, Namespace

__all__ = [
    "PG_MEMORY_TABLES",
    "SQLITE_MEMORY_TABLES",
    "compile_filters",
    "decode_namespace",
    "encode_namespace",
    "prefix_range",
    "without_nul",
]

SEP: Final = "\x01\x01"
"""Between two labels. A label holds no NUL, and its ``\\x01`` is stored as ``\\x01\\x02``,
so the separator sorts below anything a label can continue with: the stored texts sort as
the namespaces do (``("a", "b") < ("a-",)``, where a "." join would sort the other way)."""

SQLITE_MEMORY_TABLES: Final = (
    """CREATE TABLE {P}memory_items (
        prefix TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL,
        created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL, expires_at INTEGER, ttl REAL,
        PRIMARY KEY (prefix, key))""",
    # A search without a query reads newest first and stops at its page (the filter checked
    # on the way); the columns after updated_at are its tie order.
    "CREATE INDEX {I}memory_recent ON {P}memory_items (updated_at DESC, prefix, key)",
    "CREATE INDEX {I}memory_expiry ON {P}memory_items (expires_at) WHERE expires_at IS NOT NULL",
    """CREATE TABLE {P}memory_vectors (
        prefix TEXT NOT NULL, key TEXT NOT NULL, field TEXT NOT NULL, vector BLOB NOT NULL,
        PRIMARY KEY (prefix, key, field))""",
)
"""Schema 10 on SQLite: the value as canonical JSON text (sorted keys), vectors as float32."""

PG_MEMORY_TABLES: Final = (
    """CREATE TABLE {P}memory_items (
        prefix TEXT COLLATE "C" NOT NULL, key TEXT COLLATE "C" NOT NULL, value JSONB NOT NULL, raw TEXT NOT NULL,
        created_at BIGINT NOT NULL, updated_at BIGINT NOT NULL, expires_at BIGINT, ttl DOUBLE PRECISION,
        PRIMARY KEY (prefix, key))""",
    "CREATE INDEX {I}memory_recent ON {P}memory_items (updated_at DESC, prefix, key)",
    "CREATE INDEX {I}memory_expiry ON {P}memory_items (expires_at) WHERE expires_at IS NOT NULL",
    """CREATE TABLE {P}memory_vectors (
        prefix TEXT COLLATE "C" NOT NULL, key TEXT COLLATE "C" NOT NULL, field TEXT NOT NULL,
        vector DOUBLE PRECISION[] NOT NULL,
        PRIMARY KEY (prefix, key, field))""",
)
"""Schema 10 on PostgreSQL: ``value`` (jsonb) is what filters read; ``raw`` is the JSON text
returned, exactly as written (jsonb keeps numbers as decimals: ``1e20`` would come back as an
integer). Prefixes and keys in byte order (``COLLATE "C"``), as Python sorts them."""


def encode_namespace(ns: Namespace) -> str:
    """``ns`` as the one text stored in ``prefix`` (see :data:`SEP`)."""
    return SEP.join(label.replace("\x01", "\x01\x02") if "\x01" in label else label for label in ns)


def decode_namespace(text: str) -> Namespace:
    """The namespace :func:`encode_namespace` stored as ``text``."""
    return tuple(p.replace("\x01\x02", "\x01") if "\x01" in p else p for p in text.split(SEP))


def prefix_range(prefix: Namespace) -> tuple[str, str] | None:
    """``(lo, hi)``: the stored prefixes of ``prefix`` and of every namespace under it are
    exactly those with ``lo <= prefix < hi`` (None: ``()``, everything)."""
    if not prefix:
        return None
    lo = encode_namespace(prefix)
    return lo, lo + "\x01\x02"


_NUL_ESCAPE = re.compile(r"(?<!\\)((?:\\\\)*)\\u0000")


def without_nul(text: str) -> str:
    """JSON text with every NUL character in it made U+FFFD: a ``jsonb`` value cannot hold
    NUL (the exact text is kept beside it, in ``raw``)."""
    return _NUL_ESCAPE.sub(r"\1\\ufffd", text) if "\\u0000" in text else text


def _json(value: Any) -> str:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()


def _number(x: Any) -> bool:
    return type(x) is not bool and isinstance(x, int | float)


def _sqlite_number(x: Any) -> Any:
    """A number as sqlite3 can bind it (an integer past 64 bits only as a float, as SQLite
    itself reads such an integer in JSON)."""
    return float(x) if type(x) is int and not -(2**63) <= x < 2**63 else x


# -- SQLite ------------------------------------------------------------------------------------


class _Node:
    """Where a JSON node is, for SQLite: ``json_type(doc, path)`` and friends, where ``doc``
    is SQL (the value column, or a hop through ``json_each`` for a key a path cannot name)
    with its parameters."""

    __slots__ = ("doc", "params", "path")

    def __init__(self, doc: str, params: tuple[Any, ...], path: str) -> None:
        self.doc, self.params, self.path = doc, params, path

    def child(self, part: str | int) -> _Node:
        if type(part) is int:
            return _Node(self.doc, self.params, f"{self.path}[{part}]")
        assert isinstance(part, str)
        # A path label matches a key as written in the stored JSON (orjson's escapes, which
        # SQLite before 3.45 compares as written and later versions unescape on both sides);
        # a key holding '"' cannot be a label: it is found among its object's members instead.
        label = orjson.dumps(part).decode()[1:-1]
        if '"' not in label:
            return _Node(self.doc, self.params, f'{self.path}."{label}"')
        hop = (
            f"(SELECT CASE j.type WHEN 'text' THEN json_quote(j.value) WHEN 'true' THEN 'true' "
            f"WHEN 'false' THEN 'false' WHEN 'null' THEN 'null' ELSE j.value END "
            f"FROM json_each({self.doc}, ?) j WHERE json_type({self.doc}, ?) = 'object' AND j.key = ?)"
        )
        return _Node(hop, (*self.params, self.path, *self.params, self.path, part), "$")

    def type(self) -> tuple[str, tuple[Any, ...]]:
        return f"json_type({self.doc}, ?)", (*self.params, self.path)

    def value(self) -> tuple[str, tuple[Any, ...]]:
        return f"json_extract({self.doc}, ?)", (*self.params, self.path)


def _sqlite_eq(node: _Node, wanted: Any) -> tuple[str, tuple[Any, ...]]:
    """SQL true exactly when the node is JSON-equal to ``wanted`` (NULL or false otherwise)."""
    t, tp = node.type()
    if wanted is None:
        return f"{t} = 'null'", tp
    if type(wanted) is bool:
        return f"{t} = '{'true' if wanted else 'false'}'", tp
    if _number(wanted):
        v, vp = node.value()
        return f"({t} IN ('integer', 'real') AND {v} = ?)", (*tp, *vp, _sqlite_number(wanted))
    if type(wanted) is str:
        v, vp = node.value()
        return f"({t} = 'text' AND {v} = ?)", (*tp, *vp, wanted)
    parts: list[str] = []
    params: list[Any] = []
    if isinstance(wanted, Mapping):
        parts.append(f"{t} = 'object' AND (SELECT count(*) FROM json_each({node.doc}, ?)) = ?")
        params.extend((*tp, *node.params, node.path, len(wanted)))
        children: Sequence[tuple[str | int, Any]] = list(wanted.items())
    else:
        parts.append(f"{t} = 'array' AND json_array_length({node.doc}, ?) = ?")
        params.extend((*tp, *node.params, node.path, len(wanted)))
        children = list(enumerate(wanted))
    for part, item in children:
        sql, ps = _sqlite_eq(node.child(part), item)
        parts.append(sql)
        params.extend(ps)
    return "(" + " AND ".join(parts) + ")", tuple(params)


def _sqlite_condition(column: str, c: Condition) -> tuple[str, tuple[Any, ...]]:
    node = _Node(column, (), "$")
    for part in c.path:
        node = node.child(part)
    if c.op in ("$eq", "$ne"):
        sql, params = _sqlite_eq(node, c.value)
        return (sql, params) if c.op == "$eq" else (f"({sql}) IS NOT TRUE", params)
    t, tp = node.type()
    v, vp = node.value()
    cmp = {"$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<="}[c.op]
    if _number(c.value):
        return f"({t} IN ('integer', 'real') AND {v} {cmp} ?)", (*tp, *vp, _sqlite_number(c.value))
    if type(c.value) is str:
        return f"({t} = 'text' AND {v} {cmp} ?)", (*tp, *vp, c.value)
    return "0", ()


# -- PostgreSQL --------------------------------------------------------------------------------


def _pg_condition(column: str, c: Condition) -> tuple[str, tuple[Any, ...]]:
    # ``->`` with a text key finds an object's member and nothing in an array (``#>`` would
    # take "0" as an index), as the reference descends objects only.
    keys = tuple(p.replace("\x00", "\ufffd") for p in c.path)
    node = column + "".join(" -> %s::text" for _ in keys)
    if c.op in ("$eq", "$ne"):
        sql = f"({node} = %s::jsonb)"
        params = (*keys, without_nul(_json(c.value)))
        return (sql, params) if c.op == "$eq" else (f"{sql} IS NOT TRUE", params)
    cmp = {"$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<="}[c.op]
    if _number(c.value):
        return f"(jsonb_typeof({node}) = 'number' AND {node} {cmp} %s::jsonb)", (*keys, *keys, _json(c.value))
    if type(c.value) is str:
        text = column + "".join(" -> %s::text" for _ in keys[:-1]) + " ->> %s::text"
        wanted = c.value.replace("\x00", "\ufffd")
        return (
            f"(jsonb_typeof({node}) = 'string' AND ({text}) COLLATE \"C\" {cmp} %s::text)",
            (*keys, *keys, wanted),
        )
    return "FALSE", ()


def compile_filters(conditions: Sequence[Condition], column: str, *, jsonb: bool) -> tuple[str, tuple[Any, ...]]:
    """``AND``-joined SQL (with a leading `` AND ``; empty for no condition) testing every
    condition on the JSON in ``column``, and its parameters in order; ``jsonb``: PostgreSQL's
    (``%s`` markers), else SQLite's (``?``)."""
    out: list[str] = []
    params: list[Any] = []
    for c in conditions:
        sql, ps = _pg_condition(column, c) if jsonb else _sqlite_condition(column, c)
        out.append(sql)
        params.extend(ps)
    return "".join(f" AND {s}" for s in out), tuple(params)
