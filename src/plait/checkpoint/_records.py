"""JSON records of checkpoints, shared by the backends that write bytes (SQL, files).

Everything a backend stores is JSON (orjson), so loading never runs code and a damaged or
foreign record fails to decode instead of doing something. Every decoder here raises
:class:`RecordError` (a ``ValueError``) for bytes it cannot read; the backend turns that into
:class:`~plait.errors.CheckpointCorruptError` naming the thread and checkpoint, because only
it knows them.

The API:

* :func:`encode_body` / :func:`decode_body`: a checkpoint's versions, next tasks and join
  barriers, plus either its values inline (file backend) or a ``channel -> blob id`` map
  (SQL backends, which store values apart so unchanged ones are shared) and the small blobs
  it wrote itself, kept in the body rather than as rows of their own;
  :func:`decode_body_fields` is the SQL read path's faster decoder of the same bytes.
* :func:`encode_json` / :func:`decode_json`: any JSON value (metadata, a pending write's
  value); decoded values are frozen.
* :func:`encode_checkpoint` / :func:`decode_checkpoint`: a whole checkpoint with its values
  and metadata in one record (pending writes excluded).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from plait._codec import freeze_decoded, freeze_trusted
from plait._fast_init import positional_maker
from plait._frozen import FrozenDict
from plait.checkpoint._validate import metadata_problem
from plait.checkpoint.model import Checkpoint, Task, make_task, task_from_json, task_id

__all__ = [
    "Body",
    "BodyFields",
    "Inline",
    "RecordError",
    "blob_map",
    "decode_body",
    "decode_body_fields",
    "decode_checkpoint",
    "decode_json",
    "encode_body",
    "encode_checkpoint",
    "encode_json",
]


class RecordError(ValueError):
    """Bytes that are not a record this version of plait wrote."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Body:
    """The decoded body of a checkpoint."""

    versions: Mapping[str, int]
    next_tasks: tuple[Task, ...]
    barriers: Mapping[str, tuple[str, ...]]
    blobs: Mapping[str, str] | None = None
    """``channel -> blob id`` when the values are stored apart."""
    values: Mapping[str, Any] | None = None
    """The values (frozen) when they are stored inline."""
    inline: Mapping[str, Inline] | None = None
    """Blobs this checkpoint wrote in its body (SQL backends): ``channel -> (base blob id
    or None for a full value, the stored JSON bytes)``, as a blob row would hold them."""


def encode_json(value: Any) -> bytes:
    """Compact JSON bytes of a JSON value."""
    return orjson.dumps(value)


def decode_json(data: bytes | str) -> Any:
    """A frozen JSON value from bytes.

    Raises:
        RecordError: the bytes are not JSON.
    """
    try:
        return freeze_decoded(orjson.loads(data))
    except (orjson.JSONDecodeError, TypeError) as exc:
        raise RecordError(f"not JSON ({exc})") from None
    except RecursionError:  # deeper than plait writes (values are at most MAX_DEPTH deep)
        raise RecordError("JSON nested too deeply") from None


def encode_body(
    cp: Checkpoint, *, blobs: Mapping[str, str] | None = None, inline: Mapping[str, Inline] | None = None
) -> bytes:
    """The body of ``cp``: with ``blobs`` the value map (and ``inline``, the blobs this
    checkpoint keeps in its body), else the values inline.

    With a value map (schema 12), a planned task whose id is the one the engine gives the
    first task of its node planned from this checkpoint (:func:`~plait.checkpoint.model.task_id`)
    is written as its node's name alone: the id is a hash of the two, and took 21 of such a
    body's bytes a task; a decoder hashes it again (0.4 µs a task).

    When every channel, in the order of the versions, has the blob this checkpoint wrote
    (its id is the checkpoint's: a chat whose state is its messages, at every step), the
    value map is left out (schema 12; a body then has neither ``b`` nor ``x``): it took 40
    of such a body's 97 bytes (docs/benchmarks.md, "W3 storage"). The decoders put it back
    (:func:`blob_map`).
    A map with other ids keeps every id: a marker per entry saved 23 bytes an entry but
    cost a decoded body of two channels a fifth more time, which a history pays per step."""
    body: dict[str, Any] = {"v": cp.versions}
    cid = cp.id
    if cp.next_tasks and blobs is not None:
        body["n"] = [t.node if not t.send and t.id == task_id(cid, t.node, 0) else t.to_json() for t in cp.next_tasks]
    elif cp.next_tasks:
        body["n"] = [t.to_json() for t in cp.next_tasks]
    if cp.barriers:
        body["j"] = {k: list(v) for k, v in cp.barriers.items()}
    if blobs is not None:
        if not blobs or set(blobs.values()) != {cid} or list(blobs) != list(cp.versions):
            body["b"] = blobs
        if inline:
            body["i"] = {ch: [base, orjson.Fragment(data)] for ch, (base, data) in inline.items()}
    else:
        body["x"] = cp.values
    return orjson.dumps(body)


def decode_body(data: bytes | str, cid: str) -> Body:
    """Decode a body written by :func:`encode_body` for checkpoint ``cid``.

    Raises:
        RecordError: not JSON, or not the shape of a body.
    """
    raw = _load_body(data)
    return _body(raw, cid)


def blob_map(raw: Mapping[str, Any], cid: str) -> Any:
    """The blob map of checkpoint ``cid``'s decoded body ``raw``: its ``b``, or, when the body
    holds neither that nor values (``x``), each channel of its versions with the blob the
    checkpoint wrote (see :func:`encode_body`); None for values. Anything else is returned as
    it is, for the caller's check to refuse."""
    stored = raw.get("b")
    if stored is None and "b" not in raw and "x" not in raw:
        versions = raw.get("v")
        return dict.fromkeys(versions, cid) if type(versions) is dict else None
    return stored


Inline = tuple[str | None, bytes]
"""A blob kept in a checkpoint's body: ``(base blob id or None, JSON bytes)``."""

BodyFields = tuple[
    Mapping[str, int],
    tuple[Task, ...],
    Mapping[str, tuple[str, ...]],
    Mapping[str, str] | None,
    Mapping[str, Inline] | None,
]
"""``(versions, next tasks, barriers, blob map, inline blobs)`` of a body, as
:func:`decode_body_fields` gives them."""


def decode_body_fields(data: bytes | str, cid: str) -> BodyFields:
    """What :func:`decode_body` decodes of a body stored with a blob map, without the values.

    The read path of the SQL backends decodes one body per checkpoint of a history, so the
    shape every body plait writes has a fast path here; any other shape goes through
    :func:`decode_body`, which checks it (and reads values stored inline, whose blob map is
    then None).

    Raises:
        RecordError: not JSON, or not the shape of a body.
    """
    raw = _load_body(data)
    if type(raw) is dict:
        versions = raw.get("v")
        blobs = raw.get("b")
        if blobs is None and type(versions) is dict and "b" not in raw and "x" not in raw:  # (blob_map, inlined)
            blobs = dict.fromkeys(versions, cid)
        if (
            type(versions) is dict
            and type(blobs) is dict
            and blobs
            and "x" not in raw
            and "j" not in raw
            and "i" not in raw
            and _STR.issuperset(map(type, blobs.values()))
            and _INT.issuperset(map(type, versions.values()))
        ):
            planned = raw.get("n", _NONE)
            if type(planned) is list:  # (any other shape is checked by _body)
                tasks = []
                for t in planned:
                    if type(t) is str:  # (a task named by its node: see encode_body; task_id, inlined)
                        tasks.append(
                            _task(_blake2b(f"{cid}|{t}|0".encode(), digest_size=8).hexdigest(), t, False, None)
                        )
                        continue
                    if type(t) is not list or len(t) != 2:
                        break
                    tid, node = t
                    if type(tid) is not str or type(node) is not str:
                        break
                    tasks.append(_task(tid, node, False, None))
                else:
                    return versions, tuple(tasks), {}, blobs, None
    body = _body(raw, cid)
    return body.versions, body.next_tasks, body.barriers, body.blobs, body.inline


_task = positional_maker(Task)
"""``Task(...)`` with every field, in order: a history decodes one per checkpoint."""
_blake2b = hashlib.blake2b


def _inline(raw: Any) -> dict[str, Inline]:
    """The inline blobs of a body, each as the bytes a blob row would hold."""
    if type(raw) is not dict:
        raise TypeError("inline blobs must be an object")
    out: dict[str, Inline] = {}
    for ch, entry in raw.items():
        if type(entry) is not list or len(entry) != 2 or not (entry[0] is None or type(entry[0]) is str):
            raise TypeError(f"inline blob {ch!r} is not [base id, value]")
        out[ch] = (entry[0], orjson.dumps(entry[1]))
    return out


def _load_body(data: bytes | str) -> Any:
    try:
        return orjson.loads(data)
    except (orjson.JSONDecodeError, TypeError) as exc:
        raise RecordError(f"checkpoint body is not JSON ({exc})") from None


_STR = frozenset((str,))
_INT = frozenset((int,))
"""``_INT.issuperset(map(type, xs))``: every x is an int (not a bool), tested at C speed."""
_NONE: list[Any] = []


def _planned(data: Any, cid: str) -> Task:
    """A planned task of checkpoint ``cid``'s body: named by its node alone (see
    :func:`encode_body`), or as :func:`task_from_json` reads it."""
    if type(data) is str:
        return make_task(task_id(cid, data, 0), data, False, None)
    return task_from_json(data)


def _body(raw: Any, cid: str) -> Body:
    """A body (of checkpoint ``cid``), every field type-checked: foreign data fails here,
    not later in a resume."""
    try:
        if type(raw) is not dict:
            raise TypeError("not a checkpoint body (an object)")
        versions = raw.get("v")
        if type(versions) is not dict or not _INT.issuperset(map(type, versions.values())):
            raise TypeError("its versions are not an object of ints")
        blobs = blob_map(raw, cid)
        values = raw.get("x")
        if (blobs is None) == (values is None) or type(values if blobs is None else blobs) is not dict:
            raise TypeError("a body holds either a blob map or values")
        if blobs is not None and not _STR.issuperset(map(type, blobs.values())):
            raise TypeError("blob ids must be strings")
        inline = _inline(raw["i"]) if "i" in raw else None
        if inline is not None and (blobs is None or not inline.keys() <= blobs.keys()):
            raise TypeError("inline blobs belong to channels of the blob map")
        planned = raw.get("n", _NONE)
        if type(planned) is not list:
            raise TypeError("its next tasks are not a list")
        barriers = raw.get("j", {})
        if type(barriers) is not dict or not all(
            type(v) is list and _STR.issuperset(map(type, v)) for v in barriers.values()
        ):
            raise TypeError("its join barriers are not an object of lists of node names")
        return Body(
            inline=inline,
            versions=versions,
            next_tasks=tuple(_planned(t, cid) for t in planned) if planned else (),
            barriers={k: tuple(v) for k, v in barriers.items()},
            blobs=blobs,
            values=FrozenDict({k: freeze_trusted(v) for k, v in values.items()}) if values is not None else None,
        )
    except (KeyError, TypeError, IndexError, AttributeError, ValueError) as exc:
        raise RecordError(f"checkpoint body has the wrong shape ({exc})") from None
    except RecursionError:  # deeper than plait writes (values are at most MAX_DEPTH deep)
        raise RecordError("checkpoint body is nested too deeply") from None


def encode_checkpoint(cp: Checkpoint) -> bytes:
    """One self-contained record of ``cp`` (values inline; pending writes excluded)."""
    head = {
        "t": cp.thread_id,
        "ns": cp.namespace,
        "id": cp.id,
        "p": cp.parent_id,
        "s": cp.step,
        "c": cp.created_at,
        "m": cp.metadata,
    }
    return orjson.dumps({"h": head, "b": orjson.Fragment(encode_body(cp))})


def decode_checkpoint(data: bytes | str) -> Checkpoint:
    """Decode a record written by :func:`encode_checkpoint`.

    Raises:
        RecordError: not JSON, or not the shape of a checkpoint record (every field is
            type-checked).
    """
    try:
        raw = orjson.loads(data)
        head = raw["h"]
        body_raw = raw["b"]
    except (orjson.JSONDecodeError, TypeError, KeyError) as exc:
        raise RecordError(f"checkpoint record is not readable ({exc})") from None
    if type(head) is not dict:
        raise RecordError("checkpoint record has the wrong shape (its head is not an object)")
    reason = _head_problem(head)
    if reason is not None:
        raise RecordError(f"checkpoint record has the wrong shape ({reason})")
    body = _body(body_raw, head["id"])
    try:
        metadata = freeze_trusted(head["m"])
    except RecursionError:
        raise RecordError("checkpoint record's metadata is nested too deeply") from None
    return Checkpoint(
        thread_id=head["t"],
        namespace=head["ns"],
        id=head["id"],
        parent_id=head["p"],
        step=head["s"],
        values=body.values if body.values is not None else FrozenDict(),
        versions=body.versions,
        next_tasks=body.next_tasks,
        barriers=body.barriers,
        metadata=metadata,
        created_at=float(head["c"]),
    )


def _head_problem(head: dict[str, Any]) -> str | None:
    """Why the head of a checkpoint record is not one :func:`encode_checkpoint` wrote, or None."""
    for key in ("t", "ns", "id"):
        if type(head.get(key)) is not str:
            return f"{key!r} is not a string"
    if "p" not in head or not (head["p"] is None or type(head["p"]) is str):
        return "'p' is not a string or null"
    if type(head.get("s")) is not int:
        return "'s' (the step) is not an int"
    if type(head.get("c")) not in _NUMBER:
        return "'c' (created at) is not a number"
    meta = head.get("m")
    if type(meta) is not dict:
        return "'m' (the metadata) is not an object"
    return metadata_problem(meta)


_NUMBER = frozenset((int, float))
"""JSON numbers (a bool is not one)."""
