"""Every decoder of stored data, fed bytes and JSON shapes it did not write: each either
decodes or raises its module's error (RecordError, the file format's Corrupt, a backend's
CheckpointCorruptError; StoreVersionError for a file header of a newer format), and never
anything else, never a hang. A bug here turns a damaged store into a crash somewhere later.

Bounded in time: a few hundred examples per test, each under a deadline, and the test under a
timeout (a decoder that loops would otherwise hang the suite, which a deadline cannot stop).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from plait.checkpoint import _records
from plait.checkpoint._records import RecordError
from plait.checkpoint.file import FileCheckpointer
from plait.checkpoint.file import _format as _file_format
from plait.checkpoint.file._format import file_stem
from plait.checkpoint.model import Checkpoint, Task
from plait.checkpoint.model import task_id as derived_task_id
from plait.errors import CheckpointCorruptError, StoreVersionError

from ._backend_helpers import RowStore as Store

FUZZ = settings(
    max_examples=150,
    deadline=timedelta(seconds=2),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
pytestmark = pytest.mark.timeout(240)

_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
    | st.sampled_from(["f", "d", "c", "w", "result", "effect", "", "p", "n"])
)
JSON = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=6), inner, max_size=5),
    max_leaves=25,
)
"""Any JSON value, small, with the strings decoders look for."""

DEEP = st.integers(200, 1100).map(lambda depth: b"[" * depth + b"1" + b"]" * depth) | st.integers(200, 1100).map(
    lambda depth: b'{"a":' * depth + b"1" + b"}" * depth
)
"""JSON nested past what plait writes (and past Python's recursion limit)."""

BYTES = st.binary(max_size=200) | DEEP | JSON.map(orjson.dumps)


def _mutated(base: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    """``base`` with a few of its keys (or of the lists and objects in it) replaced by other JSON."""

    @st.composite
    def mutate(draw: Any) -> dict[str, Any]:
        out: dict[str, Any] = orjson.loads(orjson.dumps(base))
        for _ in range(draw(st.integers(1, 3))):
            target: Any = out
            while isinstance(target, dict | list) and target and draw(st.booleans()):
                key = (
                    draw(st.sampled_from(sorted(target)))
                    if isinstance(target, dict)
                    else draw(st.integers(0, len(target) - 1))
                )
                if not isinstance(target[key], dict | list):
                    break
                target = target[key]
            if isinstance(target, dict):
                key = draw(st.sampled_from([*sorted(target), "x", "i", "j", "n"]))
                if draw(st.integers(0, 4)) == 0:
                    target.pop(key, None)
                else:
                    target[key] = draw(JSON)
            elif isinstance(target, list) and target:
                target[draw(st.integers(0, len(target) - 1))] = draw(JSON)
        return out

    return mutate()


_CP = Checkpoint(
    thread_id="t",
    id="c1",
    parent_id="c0",
    step=1,
    values={"a": [1, {"b": None}], "s": "x"},
    versions={"a": 1, "s": 2},
    next_tasks=(Task(id="t1", node="n"), Task(id="t2", node="m", send=True, arg={"k": [1]})),
    barriers={"join": ("a", "b")},
    metadata={"source": "loop", "step": 1, "writes": {"n": ["a"]}, "reducers": {"a": "AppendList"}},
)
SQL_BODY = orjson.loads(_records.encode_body(_CP, blobs={"a": "c1", "s": "c0"}, inline={"s": (None, b'"x"')}))
# the blob map left out, a task by its node's name
OWN_BODY = orjson.loads(
    _records.encode_body(
        replace(_CP, next_tasks=(Task(id=derived_task_id("c1", "n", 0), node="n"),)), blobs={"a": "c1", "s": "c1"}
    )
)
FILE_BODY = orjson.loads(_records.encode_body(_CP))
RECORD = orjson.loads(_records.encode_checkpoint(_CP))


@FUZZ
@given(
    data=BYTES
    | _mutated(SQL_BODY).map(orjson.dumps)
    | _mutated(OWN_BODY).map(orjson.dumps)
    | _mutated(FILE_BODY).map(orjson.dumps)
)
def test_body_decoders_raise_only_record_errors(data: bytes) -> None:
    _decodes_or_refuses(data, lambda d: _records.decode_body(d, "c1"), lambda d: _records.decode_body_fields(d, "c1"))


@FUZZ
@given(data=BYTES | _mutated(RECORD).map(orjson.dumps))
def test_record_decoders_raise_only_record_errors(data: bytes) -> None:
    _decodes_or_refuses(data, _records.decode_checkpoint, _records.decode_json)


def _decodes_or_refuses(data: bytes, *decoders: Callable[[bytes], Any]) -> None:
    for decode in decoders:
        with contextlib.suppress(RecordError):
            decode(data)


_HEADER = orjson.loads(_file_format.header_line(("", "t")))
_FILE_CP = {
    "k": "c",
    "id": "c1",
    "p": "c0",
    "s": 1,
    "t": 1.5,
    "m": {"source": "loop", "step": 1},
    "v": {"a": 1, "b": 2},
    "n": [["t1", "n"], ["t2", "m", True, {"k": 1}]],
    "j": {"join": ["a"]},
    "full": False,
    "x": {"a": ["d", {"n": 1, "a": [2]}, 1, 10, 10, 2], "b": ["f", {"k": [1]}, 0, 0, 8, 1]},
    "gone": ["z"],
    "fold": True,
}
_ROOT = {**_FILE_CP, "id": "c0", "p": None, "full": True, "x": {"a": ["f", [1], 0, 0, 3, 1]}, "gone": [], "fold": False}
_WRITES = {"k": "w", "cp": "c1", "w": [["t1", "result", "", {"w": [], "r": []}], ["t2", "effect", "k", [1]]]}


def _file_bytes(header: Any, lines: list[Any]) -> bytes:
    return b"\n".join([orjson.dumps(header), *(orjson.dumps(line) for line in lines)]) + b"\n"


FILES = (
    st.tuples(_mutated(_HEADER), st.just([[_ROOT, _FILE_CP, _WRITES]])).map(lambda t: _file_bytes(*t))
    | st.tuples(st.just(_HEADER), _mutated({"l": [_ROOT, _FILE_CP, _WRITES]})).map(
        lambda t: _file_bytes(t[0], [t[1]["l"]] if isinstance(t[1].get("l"), list) else [t[1]])
    )
    | st.tuples(st.just(_HEADER), st.lists(JSON, max_size=4)).map(lambda t: _file_bytes(*t))
    | BYTES.map(lambda data: orjson.dumps(_HEADER) + b"\n" + data + b"\n")
    | BYTES
)
"""Thread files: a damaged header, damaged records, lines of any JSON, any bytes."""


@FUZZ
@given(data=FILES)
def test_the_file_format_raises_only_corrupt_or_version_errors(data: bytes) -> None:
    state = _file_format.State()
    try:
        _file_format.parse_lines(state, data)
        for cid in list(state.records):
            _file_format.checkpoint_values(state, cid)
    except (_file_format.Corrupt, StoreVersionError):
        pass


@FUZZ
@given(data=FILES)
def test_a_file_checkpointer_reads_damaged_files_as_corrupt(
    tmp_path_factory: pytest.TempPathFactory, data: bytes
) -> None:
    folder: Path = tmp_path_factory.mktemp("fuzz")
    (folder / (file_stem("", "t") + ".jsonl")).write_bytes(data)
    cp = FileCheckpointer(folder)

    async def reads() -> None:
        for read in (cp.aget("t"), cp.aget("t", "c1"), cp.ahistory("t"), cp.ahistory("t", filter={"source": "x"})):
            try:
                await read
            except (CheckpointCorruptError, StoreVersionError):
                pass
        await cp.alist_threads()  # skips (and logs) a damaged file, never raises for one

    asyncio.run(reads())


COLUMN = st.none() | st.integers(-5, 5) | st.floats(allow_nan=False) | st.text(max_size=8) | st.binary(max_size=8)
"""What a SQLite column may hold, whatever its declared type."""


@FUZZ
@given(
    rows=st.lists(
        st.tuples(
            st.sampled_from(["c0", "c1", "c2"]) | COLUMN,
            st.sampled_from(["c0", "c1", None]) | COLUMN,
            st.integers(0, 3) | COLUMN,
            st.floats(0, 10) | COLUMN,
            BYTES | _mutated({"source": "loop", "step": 1, "writes": {"n": ["a"]}}).map(orjson.dumps) | COLUMN,
            BYTES | _mutated(SQL_BODY).map(orjson.dumps) | COLUMN,
        ),
        min_size=1,
        max_size=4,
    ),
    blobs=st.lists(st.tuples(st.sampled_from(["a", "s"]), st.sampled_from(["c0", "c1"]), COLUMN, BYTES | COLUMN)),
    writes=st.lists(
        st.tuples(COLUMN | st.just("t1"), COLUMN | st.just("result"), COLUMN | st.just(""), BYTES | COLUMN)
    ),
)
def test_sql_rows_of_any_shape_read_as_corrupt(rows: list[Any], blobs: list[Any], writes: list[Any]) -> None:
    store = Store()
    put = "INSERT OR REPLACE INTO plait_checkpoints VALUES ('', 't', ?, ?, ?, ?, 'loop', ?, ?)"
    for row in rows:
        if (
            row[0] is not None
            and row[2] is not None
            and row[3] is not None
            and row[4] is not None
            and row[5] is not None
        ):
            store.cur.execute(put, row)  # (NOT NULL columns: anything else is a type SQLite takes)
    for channel, bid, base, data in blobs:
        if data is not None:
            store.cur.execute(
                "INSERT OR REPLACE INTO plait_blobs VALUES ('', 't', ?, ?, ?, ?)", (channel, bid, base, data)
            )
    for task_id, kind, key, value in writes:
        if None not in (task_id, kind, key, value):
            store.cur.execute(
                "INSERT OR REPLACE INTO plait_writes (ns, thread_id, checkpoint_id, task_id, kind, wkey, value) "
                "VALUES ('', 't', 'c2', ?, ?, ?, ?)",
                (task_id, kind, key, value),
            )
    reads: list[Callable[[], object]] = [
        lambda: store.get(None),
        lambda: store.get("c1"),
        lambda: store.get("c2"),
        lambda: store.history(),
        lambda: store.history(limit=1),
        lambda: store.history(before="c2"),
        lambda: store.history(filter={"source": "loop"}),
        lambda: store.core.threads.page(
            store.cur, namespace=None, status=None, limit=None, before=None, now=time.time()
        ),
    ]
    for read in reads:
        try:
            read()
        except CheckpointCorruptError:
            pass


NESTED = [b"[" * 1020 + b"]" * 1020, b'{"a":' * 1020 + b"1" + b"}" * 1020]
"""Values nested far deeper than plait writes one (at most MAX_DEPTH levels), and deeper than
Python's recursion limit, which orjson still reads (up to 1024 levels)."""


@pytest.mark.parametrize("deep", NESTED, ids=["lists", "objects"])
def test_sql_values_nested_too_deep_are_corrupt(deep: bytes) -> None:
    store = Store()
    store.blob("c", "b", None, deep)
    store.checkpoint("c0", None, {"c": "b"}, {})
    for read in (store.history, lambda: store.get("c0")):
        with pytest.raises(CheckpointCorruptError, match="nested deeper"):
            read()
    store.cur.execute("UPDATE plait_checkpoints SET metadata = ? WHERE id = 'c0'", (b'{"m": ' + deep + b"}",))
    for read in (store.history, lambda: store.get("c0")):
        with pytest.raises(CheckpointCorruptError):
            read()


@pytest.mark.parametrize("deep", NESTED, ids=["lists", "objects"])
def test_file_values_nested_too_deep_are_corrupt(deep: bytes) -> None:
    for entry in (b'["f", ' + deep + b", 0, 0, 1, 1]", b'["d", {"n": 0, "a": [' + deep + b"]}, 1, 1, 1, 1]"):
        root = orjson.dumps(_ROOT)
        child = orjson.dumps({**_FILE_CP, "x": {}}).replace(b'"x":{}', b'"x":{"a":' + entry + b"}")
        state = _file_format.State()
        with pytest.raises(_file_format.Corrupt):
            _file_format.parse_lines(state, orjson.dumps(_HEADER) + b"\n[" + root + b"," + child + b"]\n")
            _file_format.checkpoint_values(state, "c1")
