"""The on-disk format of :class:`~plait.checkpoint.file.FileCheckpointer`: file names, the
records of a thread file, parsing them, and rebuilding channel values from them.

Everything here is bytes in, records and values out (and back); opening, locking, caching and
fsyncing files is :mod:`plait.checkpoint.file`'s job. A thread file is a header line and then
one line per commit, each a JSON list of records::

    {"plait": "file-checkpointer", "v": 1, "ns": "<namespace>", "t": "<thread id>", "g": "<nonce>"}
    [{"k": "w", "cp": "<checkpoint id>", "w": [<pending write>, ...]},
     {"k": "c", "id": "...", "p": "<parent id>", "s": <step>, "t": <created_at>, "m": {<metadata>},
      "v": {<versions>}, "n": [<task>, ...], "j": {<barriers>}, "full": <bool>,
      "x": {"<channel>": ["f" | "d", <value or delta>, depth, delta_bytes, full_bytes, size]},
      "gone": ["<channel>", ...], "fold": true}]

A checkpoint record with ``"full": false`` holds only the channels that changed over its parent
(``"f"``: the full value, ``"d"``: a :mod:`plait.checkpoint.delta` against the parent's value)
and the channels it dropped (``"gone"``); ``"n"``, ``"j"``, ``"gone"`` and ``"fold"`` may be
left out when empty.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from plait._codec import freeze, freeze_trusted
from plait._frozen import FrozenDict, thaw
from plait.checkpoint import delta
from plait.checkpoint._records import RecordError
from plait.checkpoint._validate import metadata_problem
from plait.checkpoint.model import CheckpointWrite, PendingWrite, Task, WritesBatch, task_from_json
from plait.errors import NotSerializableError, StoreVersionError

FORMAT = 1
_MAGIC = "file-checkpointer"
_SAFE = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_-")
_MAX_PLAIN_NAME = 150
_MEMO_CAP = 512
Key = tuple[str, str]  # (namespace, thread_id)


def file_stem(namespace: str, thread_id: str) -> str:
    """The file name (without suffix) of a thread: injective, and never a path."""

    def enc(s: str) -> str:
        return "".join(c if c in _SAFE else "".join(f"%{b:02x}" for b in c.encode("utf-8", "surrogatepass")) for c in s)

    plain = enc(namespace) + "~" + enc(thread_id)
    if len(plain) <= _MAX_PLAIN_NAME:
        return "t-" + plain
    digest = hashlib.blake2b(orjson.dumps([namespace, thread_id]), digest_size=20).hexdigest()
    return "h-" + digest


class Corrupt(RecordError):
    """A thread file that cannot be read; the checkpointer reports it as a
    :class:`~plait.errors.CheckpointCorruptError` naming the file and, when the damaged line
    still shows it, the checkpoint."""

    def __init__(self, reason: str, checkpoint_id: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.checkpoint_id = checkpoint_id


@dataclass(slots=True)
class Entry:
    """One stored channel value: full, or a delta against the parent's value."""

    is_delta: bool
    data: Any
    chain: delta.Chain


@dataclass(slots=True)
class Rec:
    """A parsed checkpoint record."""

    id: str
    parent_id: str | None
    step: int
    created_at: float
    metadata: Any
    versions: dict[str, int]
    next_tasks: tuple[Task, ...]
    barriers: dict[str, tuple[str, ...]]
    full: bool
    """True: ``entries`` hold every channel; else they are changes over the parent's values."""
    entries: dict[str, Entry]
    gone: tuple[str, ...]
    fold: bool


@dataclass(slots=True)
class State:
    """A thread file, parsed: everything but values is decoded eagerly; values on demand."""

    key: Key | None = None
    header: bytes = b""
    offset: int = 0
    """Bytes of complete lines consumed."""
    stamp: tuple[int, int, int] = (0, 0, 0)
    records: dict[str, Rec] = field(default_factory=dict)
    writes: dict[str, dict[tuple[str, str, str], PendingWrite]] = field(default_factory=dict)
    memo: dict[str, tuple[FrozenDict, dict[str, delta.Chain]]] = field(default_factory=dict)


def header_line(key: Key) -> bytes:
    """The first line of a thread file (without its newline): names the format and the thread."""
    return orjson.dumps({"plait": _MAGIC, "v": FORMAT, "ns": key[0], "t": key[1], "g": os.urandom(8).hex()})


# -- parsing --------------------------------------------------------------------------


def parse_lines(state: State, data: bytes) -> None:
    """Apply the complete lines of ``data`` (read at ``state.offset``) to ``state``. A last
    line without a newline is a torn write and is left unread. Raises Corrupt."""
    pos = 0
    while True:
        end = data.find(b"\n", pos)
        if end < 0:
            return
        line = data[pos:end]
        if state.key is None:
            _parse_header(state, line)
        else:
            _apply(state, line)
        pos = end + 1
        state.offset += len(line) + 1


def _parse_header(state: State, line: bytes) -> None:
    try:
        raw = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise Corrupt(f"the header line is not JSON ({exc})") from None
    if type(raw) is not dict or raw.get("plait") != _MAGIC:
        raise Corrupt("the header line is not a plait file's")
    version = raw.get("v")
    if type(version) is not int:
        raise Corrupt(f"the header line's format version is {_brief(version)}, not an int")
    if version != FORMAT:
        raise StoreVersionError("a FileCheckpointer thread file", version, FORMAT)
    ns, tid = raw.get("ns"), raw.get("t")
    if type(ns) is not str or type(tid) is not str or type(raw.get("g", "")) is not str:
        raise Corrupt("the header line does not name a thread (namespace and thread id strings)")
    state.key = (ns, tid)
    state.header = line + b"\n"


_ID_IN_LINE = re.compile(rb'"(?:id|cp)":"((?:[^"\\]|\\.){1,2048})"')
"""Where a record names its checkpoint: the first ``"id"`` (a checkpoint record) or ``"cp"``
(pending writes), as this module writes them (no spaces)."""


def _id_in(line: bytes) -> str | None:
    """The checkpoint a line that does not parse was about, if the damage left its id readable."""
    found = _ID_IN_LINE.search(line)
    if found is None:
        return None
    try:
        cid = orjson.loads(b'"' + found.group(1) + b'"')
    except orjson.JSONDecodeError:
        return None
    return cid if type(cid) is str else None


def _brief(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _apply(state: State, line: bytes) -> None:
    try:
        records = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        after = f"after checkpoint {max(state.records)!r}" if state.records else "before any checkpoint"
        cid = _id_in(line)
        what = f"the line of checkpoint {cid!r} ({after})" if cid is not None else f"a line {after}"
        raise Corrupt(f"{what} is not JSON ({exc})", cid) from None
    if type(records) is not list:
        raise Corrupt("a line is not a list of records", _id_in(line))
    for raw in records:
        cid = _record_id(raw)
        try:
            if type(raw) is not dict:
                raise TypeError(f"a record is {_brief(raw)}, not an object")
            kind = raw.get("k")
            if kind == "w":
                _apply_writes(state, raw)
            elif kind == "c":
                rec = _parse_checkpoint(raw)
                if not rec.full and rec.parent_id not in state.records:
                    raise Corrupt(f"its parent {rec.parent_id!r} is not stored before it", rec.id)
                if rec.id in state.records:
                    state.memo.clear()
                state.records[rec.id] = rec
                if rec.fold and rec.parent_id is not None:
                    state.writes.pop(rec.parent_id, None)
            else:
                raise Corrupt(f"a record of unknown kind {_brief(kind)}", cid)
        except (KeyError, TypeError, ValueError, IndexError, AttributeError, RecursionError) as exc:
            if isinstance(exc, Corrupt):
                raise
            raise Corrupt(f"a record has the wrong shape ({exc})", cid) from None


def _record_id(raw: Any) -> str | None:
    """The checkpoint a record is about (its ``id``, or the ``cp`` its writes belong to)."""
    if type(raw) is not dict:
        return None
    cid = raw.get("id", raw.get("cp"))
    return cid if type(cid) is str else None


def _apply_writes(state: State, raw: dict[str, Any]) -> None:
    cid = raw.get("cp")
    rows = raw.get("w")
    if type(cid) is not str or type(rows) is not list:
        raise TypeError("a pending-writes record needs 'cp' (a checkpoint id) and 'w' (a list)")
    slot = state.writes.setdefault(cid, {})
    for row in rows:
        w = PendingWrite.from_json(freeze_trusted(row))
        slot[(w.task_id, w.kind, w.key)] = w


def _parse_checkpoint(raw: dict[str, Any]) -> Rec:
    """A checkpoint record, every field type-checked (see the module's layout)."""
    entries = {}
    stored = raw.get("x")
    if type(stored) is not dict:
        raise TypeError("'x' (the stored values) is not an object")
    for ch, e in stored.items():
        if type(e) is not list or len(e) != 6 or e[0] not in ("f", "d") or not _INT.issuperset(map(type, e[2:])):
            raise ValueError(f"channel {ch!r} is not stored as [tag, value, depth, delta, full, size]")
        tag = e[0]
        entries[ch] = Entry(
            is_delta=tag == "d",
            data=e[1] if tag == "d" else freeze_trusted(e[1]),
            chain=delta.Chain(e[2], e[3], e[4], e[5]),
        )
    cid, parent, step, meta = raw.get("id"), raw.get("p"), raw.get("s"), raw.get("m")
    created: Any = raw.get("t")
    if type(cid) is not str or "p" not in raw or not (parent is None or type(parent) is str):
        raise TypeError("'id' and 'p' must be a checkpoint id and a parent id or null")
    if type(step) is not int or type(created) not in _NUMBER:
        raise TypeError("'s' (the step) must be an int and 't' (created at) a number")
    if type(meta) is not dict:
        raise TypeError("metadata is not an object")
    problem = metadata_problem(meta)
    if problem is not None:
        raise TypeError(problem)
    versions = raw.get("v")
    if type(versions) is not dict or not _INT.issuperset(map(type, versions.values())):
        raise TypeError("'v' (the versions) is not an object of ints")
    barriers = raw.get("j", {})
    if type(barriers) is not dict or not all(
        type(v) is list and _STR.issuperset(map(type, v)) for v in barriers.values()
    ):
        raise TypeError("'j' (the join barriers) is not an object of lists of node names")
    planned, gone = raw.get("n", _NONE), raw.get("gone", _NONE)
    if type(planned) is not list or type(gone) is not list or not _STR.issuperset(map(type, gone)):
        raise TypeError("'n' (the next tasks) and 'gone' must be lists")
    full, fold = raw.get("full"), raw.get("fold", False)
    if type(full) is not bool or type(fold) is not bool:
        raise TypeError("'full' and 'fold' must be true or false")
    return Rec(
        id=cid,
        parent_id=parent,
        step=step,
        created_at=float(created),
        metadata=freeze_trusted(meta),
        versions=versions,
        next_tasks=tuple(task_from_json(freeze_trusted(t)) for t in planned),
        barriers={k: tuple(v) for k, v in barriers.items()},
        full=full,
        entries=entries,
        gone=tuple(gone),
        fold=fold,
    )


_STR = frozenset((str,))
_INT = frozenset((int,))
_NUMBER = frozenset((int, float))
_NONE: list[Any] = []


# -- values ---------------------------------------------------------------------------


def checkpoint_values(state: State, cid: str) -> tuple[FrozenDict, dict[str, delta.Chain]]:  # noqa: PLR0912 - each record kind and delta link in one loop, the read path's inner loop
    """The values and delta chains of checkpoint ``cid``: the nearest full or memoised
    ancestor, with the records after it applied in order; memoised on ``state``. Raises
    Corrupt."""
    path: list[Rec] = []
    cursor: str | None = cid
    base: tuple[FrozenDict, dict[str, delta.Chain]] | None = None
    while cursor is not None:
        if cursor in state.memo:
            base = state.memo[cursor]
            break
        rec = state.records.get(cursor)
        if rec is None:
            raise Corrupt(f"checkpoint {cursor!r}, which it builds on, is missing", cid)
        path.append(rec)
        if rec.full:
            break
        if len(path) > len(state.records):  # (only a cycle makes a path longer than the thread)
            raise Corrupt(
                f"its parent {rec.parent_id!r} is also one of its descendants, so its lineage runs in a cycle", rec.id
            )
        cursor = rec.parent_id
    for rec in reversed(path):
        values: dict[str, Any] = {} if rec.full or base is None else dict(base[0])
        chains: dict[str, delta.Chain] = {} if rec.full or base is None else dict(base[1])
        for ch in rec.gone:
            values.pop(ch, None)
            chains.pop(ch, None)
        for ch, entry in rec.entries.items():
            if entry.is_delta:
                if ch not in values:
                    raise Corrupt(f"channel {ch!r} is a delta with no value before it", rec.id)
                try:
                    values[ch] = delta.apply(values[ch], entry.data)
                except delta.DeltaError as exc:
                    raise Corrupt(f"channel {ch!r}: {exc.reason}", rec.id) from None
                except RecursionError:  # deeper than any value plait writes (MAX_DEPTH)
                    raise Corrupt(f"channel {ch!r} is nested deeper than plait ever writes a value", rec.id) from None
            else:
                values[ch] = entry.data
            chains[ch] = entry.chain
        base = (FrozenDict(values), chains)
        if len(state.memo) >= _MEMO_CAP:
            state.memo.clear()
        state.memo[rec.id] = base
    assert base is not None
    return base


# -- encoding -------------------------------------------------------------------------


def writes_record(batch: WritesBatch) -> dict[str, Any]:
    """The record of one batch of pending writes. Raises NotSerializableError for a value
    that is not JSON data."""
    rows = []
    for w in batch.writes:
        what = f"pending write ({w.task_id!r}, {w.kind!r}, {w.key!r})"
        rows.append(orjson.Fragment(dumps(w.to_json(), what)))
    return {"k": "w", "cp": batch.checkpoint_id, "w": rows}


def checkpoint_record(
    cw: CheckpointWrite, parent: tuple[Mapping[str, Any], dict[str, delta.Chain]] | None
) -> tuple[dict[str, Any], dict[str, delta.Chain]]:
    """The record of one checkpoint, and the delta chain of each of its channels.

    Args:
        cw: the checkpoint; only the channels in ``cw.changed`` or missing from ``parent`` are
            stored, as deltas against ``parent``'s value when that is smaller.
        parent: the parent's values and chains; None stores the checkpoint as a root, every
            value in full.

    Raises:
        NotSerializableError: a value is not JSON data.
    """
    cp = cw.checkpoint
    entries: dict[str, Any] = {}
    chains: dict[str, delta.Chain] = {}
    gone: list[str] = []
    if parent is None:
        stored = set(cp.values)
    else:
        chains = dict(parent[1])
        stored = {ch for ch in cp.values if ch in cw.changed or ch not in parent[0]}
        gone = [ch for ch in parent[0] if ch not in cp.values]
        for ch in gone:
            chains.pop(ch, None)
    for ch in sorted(stored):
        new = cp.values[ch]
        try:
            if parent is not None and ch in parent[0] and ch in parent[1]:
                data, is_delta, chain = delta.encode(new, parent[0][ch], parent[1][ch])
            else:
                data, is_delta, chain = delta.encode(new)
        except TypeError as exc:
            raise not_json(ch, new, exc) from None
        entries[ch] = ["d" if is_delta else "f", orjson.Fragment(data), *_chain_json(chain)]
        chains[ch] = chain
    record: dict[str, Any] = {"k": "c", "id": cp.id, "p": cp.parent_id, "s": cp.step, "t": cp.created_at}
    record["m"] = orjson.Fragment(dumps(cp.metadata, "metadata"))
    record["v"] = cp.versions
    if cp.next_tasks:
        record["n"] = orjson.Fragment(dumps([t.to_json() for t in cp.next_tasks], "a task's arg"))
    if cp.barriers:
        record["j"] = {k: list(v) for k, v in cp.barriers.items()}
    record["full"] = parent is None
    record["x"] = entries
    if gone:
        record["gone"] = gone
    if cw.folds_parent_writes:
        record["fold"] = True
    return record, chains


def rewritten_record(state: State, rec: Rec, keep: set[str]) -> dict[str, Any]:
    """A kept record for the pruned file: as stored if its parent stays, else a root
    holding every value in full."""
    out: dict[str, Any] = {"k": "c", "id": rec.id, "p": rec.parent_id, "s": rec.step, "t": rec.created_at}
    out |= {"m": rec.metadata, "v": rec.versions, "n": [t.to_json() for t in rec.next_tasks]}
    out["j"] = {k: list(v) for k, v in rec.barriers.items()}
    if rec.parent_id is not None and rec.parent_id in keep:
        out["full"] = rec.full
        out["x"] = {ch: ["d" if e.is_delta else "f", e.data, *_chain_json(e.chain)] for ch, e in rec.entries.items()}
        out["gone"] = list(rec.gone)
    else:
        values = checkpoint_values(state, rec.id)[0]
        out["p"] = None
        out["full"] = True
        out["x"] = {}
        for ch, value in values.items():
            data, _, chain = delta.encode(value)
            out["x"][ch] = ["f", orjson.Fragment(data), *_chain_json(chain)]
    return out


def kept_writes_records(state: State, keep: set[str]) -> list[dict[str, Any]]:
    """The pending writes of the kept checkpoints, as records for the pruned file."""
    return [
        {"k": "w", "cp": cid, "w": [w.to_json() for w in ws.values()]}
        for cid, ws in state.writes.items()
        if cid in keep and ws
    ]


def _chain_json(chain: delta.Chain) -> list[int]:
    return [chain.depth, chain.delta_bytes, chain.full_bytes, chain.size]


def dumps(value: Any, what: str) -> bytes:
    try:
        return orjson.dumps(value)
    except TypeError as exc:
        raise not_json(what, value, exc) from None


def not_json(what: str, value: Any, exc: Exception) -> NotSerializableError:
    """The error for a value that slipped past freeze(): find the path if we can."""
    try:
        freeze(thaw(value), what)
    except NotSerializableError as precise:
        return precise
    return NotSerializableError(what, what, f"value ({exc})")
