"""Rows of the SQL checkpoint store decoded, every column and field type-checked.

What a database hands back is data from outside the process: another program, an older or
newer plait, a damaged page, or SQLite, which keeps whatever type a value was given whatever
its column's. Each decoder here refuses anything but the types plait writes with
:class:`~plait.errors.CheckpointCorruptError`, naming the thread and the checkpoint, so that
a foreign row fails where it is read, not later in a resume. The reads that use them are
:mod:`plait.checkpoint.sql._read`.
"""

from __future__ import annotations

from typing import Any

import orjson

from plait._codec import freeze_decoded
from plait._frozen import FrozenDict
from plait.checkpoint._records import BodyFields, RecordError, decode_body_fields
from plait.checkpoint._validate import metadata_problem
from plait.checkpoint.sql._base import Key
from plait.errors import CheckpointCorruptError

__all__ = ["blob_row", "body_of", "check_row", "decode_metadata"]


def decode_metadata(thread_id: str, cid: str, data: bytes, shared: dict[Any, Any] | None = None) -> Any:
    """A checkpoint's stored metadata, which must be a JSON object whose plait keys have their
    types (see :func:`~plait.checkpoint._validate.metadata_problem`), returned frozen.

    Args:
        shared: frozen parts of metadata decoded before, by their JSON text: a part with the
            same text as one seen before (``writes``, ``reducers``: the same in most
            checkpoints of a run) is that frozen part, not a new copy of it (and is not
            checked again).

    Raises:
        CheckpointCorruptError: it does not decode to one.
    """
    try:
        meta = orjson.loads(data)
    except (orjson.JSONDecodeError, TypeError) as exc:
        raise CheckpointCorruptError(thread_id, cid, f"metadata: not JSON ({exc})") from None
    if type(meta) is not dict:
        raise CheckpointCorruptError(thread_id, cid, "metadata is not a JSON object")
    if shared is None:
        problem = metadata_problem(meta)
        if problem is not None:
            raise CheckpointCorruptError(thread_id, cid, problem)
        return _frozen(thread_id, cid, meta)
    get = meta.get
    source, step, written, reducers = get("source"), get("step"), get("writes"), get("reducers")
    if (
        (source is not None and type(source) is not str)
        or (step is not None and type(step) is not int)
        or (written is not None and type(written) is not dict)
        or (reducers is not None and type(reducers) is not dict)
    ):
        raise CheckpointCorruptError(thread_id, cid, str(metadata_problem(meta)))
    for key, value in meta.items():
        t = type(value)
        if t is dict or t is list:
            # Equal JSON text is the same JSON value (1, 1.0 and true differ in it), so
            # the frozen part found is exactly what freezing this one would give.
            try:
                text = orjson.dumps(value)
            except orjson.JSONEncodeError:  # nested deeper than orjson writes
                meta[key] = _frozen(thread_id, cid, value)
                continue
            # A part whose shape is checked is shared under its key too: the same text
            # under another key was not checked as that key's part.
            slot: Any = text if key not in _CHECKED else (key, text)
            part = shared.get(slot)
            if part is None:
                if slot is not text:
                    problem = metadata_problem({key: value})
                    if problem is not None:
                        raise CheckpointCorruptError(thread_id, cid, problem)
                part = shared[slot] = _frozen(thread_id, cid, value)
            meta[key] = part
    return FrozenDict(meta)


_CHECKED = frozenset(("writes", "reducers"))
"""The metadata keys whose parts :func:`metadata_problem` checks (see :func:`decode_metadata`)."""


def _frozen(thread_id: str, cid: str, value: Any) -> Any:
    """``freeze_decoded(value)``, refusing data nested too deep to freeze (no plait store
    writes it: values are at most ``MAX_DEPTH`` deep, and orjson writes no deeper than 254)."""
    try:
        return freeze_decoded(value)
    except RecursionError:
        raise CheckpointCorruptError(thread_id, cid, "metadata is nested too deeply") from None


def check_row(thread_id: str, row: Any) -> None:
    """Refuse a checkpoint row whose columns are not of the types plait writes (SQLite keeps
    whatever type a row was given, whatever its column's)."""
    cid, parent, step, created = row[0], row[1], row[2], row[3]
    if type(cid) is str and (parent is None or type(parent) is str) and type(step) is int and type(created) in _NUMBER:
        return
    found = ", ".join(type(v).__name__ for v in (cid, parent, step, created))
    raise CheckpointCorruptError(
        thread_id,
        cid if type(cid) is str else None,
        f"its row's id, parent id, step and created_at are ({found}), not (str, str or null, int, number)",
    )


_NUMBER = frozenset((int, float))


def blob_row(thread_id: str, channel: Any, blob: Any, base_id: Any, data: Any) -> tuple[Key | None, bytes]:
    """A blob row as ``stored`` holds it (its base's key, its bytes), refused as corrupt when
    its columns hold other types than plait writes (SQLite keeps whatever it is given)."""
    if type(data) is not bytes:
        if not isinstance(data, bytearray | memoryview):
            raise CheckpointCorruptError(
                thread_id, blob if type(blob) is str else None, f"a stored value is a {type(data).__name__}, not bytes"
            )
        data = bytes(data)
    if type(channel) is not str or type(blob) is not str or not (base_id is None or type(base_id) is str):
        raise CheckpointCorruptError(
            thread_id, blob if type(blob) is str else None, "a stored value's channel, id or base id is not text"
        )
    return (None if base_id is None else (channel, base_id)), data


def body_of(thread_id: str, row: Any) -> BodyFields:
    """The fields of a checkpoint row's body (see :func:`decode_body_fields`), or corrupt."""
    try:
        return decode_body_fields(row[5], row[0])
    except RecordError as exc:
        raise CheckpointCorruptError(thread_id, row[0], str(exc)) from None
