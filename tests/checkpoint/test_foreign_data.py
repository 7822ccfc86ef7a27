"""Stored data of the wrong types, as another program or a damaged disk may leave it, on the
backends that decode bytes (file, SQLite, PostgreSQL): every decoded field is checked where it
is decoded, so a foreign record is refused as corrupt, naming its thread and checkpoint, and
never decodes into a checkpoint that crashes (or silently misleads) a resume later."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from plait import END, START, AppendList, Command, Graph, StateSchema, interrupt
from plait.checkpoint.base import Checkpointer
from plait.checkpoint.file import FileCheckpointer
from plait.checkpoint.file._format import file_stem
from plait.checkpoint.model import task_id
from plait.errors import CheckpointCorruptError

from ._backend_helpers import Backend, make

Edit = Callable[[dict[str, Any]], None]
"""Changes a stored checkpoint record (a SQL body, or a file's checkpoint record) in place."""


class Store:
    """A backend whose stored checkpoint records a test can rewrite."""

    def __init__(self, kind: str, tmp_path: Path, request: pytest.FixtureRequest | None = None) -> None:
        self.kind = kind
        self.folder = tmp_path / "files"
        self.sql = None if request is None or kind == "file" else Backend(kind, tmp_path, request)

    def open(self) -> Checkpointer:
        if self.sql is None:
            cp = FileCheckpointer(self.folder)
            asyncio.run(cp.asetup())
            return cp
        return self.sql.open()

    def edit(self, thread: str, checkpoint_id: str, change: Edit) -> None:
        """Rewrite the stored record of one checkpoint with ``change``."""
        if self.sql is None:
            path = self.folder / (file_stem("", thread) + ".jsonl")
            lines = path.read_bytes().splitlines()
            for i, line in enumerate(lines[1:], 1):
                records = orjson.loads(line)
                for rec in records:
                    if rec.get("k") == "c" and rec["id"] == checkpoint_id:
                        change(rec)
                lines[i] = orjson.dumps(records)
            path.write_bytes(b"\n".join(lines) + b"\n")
            return
        where = "WHERE thread_id = %s AND id = %s"
        (body,) = self.sql.sql("SELECT body FROM {P}checkpoints " + where, thread, checkpoint_id)
        raw = orjson.loads(bytes(body[0]))
        # A task stored by its node's name alone (schema 12) written out whole, as the edits
        # expect it (its id is the one a reader derives for it).
        if type(raw.get("n")) is list:
            raw["n"] = [[task_id(checkpoint_id, t, 0), t] if type(t) is str else t for t in raw["n"]]
        change(raw)
        self.sql.sql("UPDATE {P}checkpoints SET body = %s " + where, orjson.dumps(raw), thread, checkpoint_id)

    def edit_metadata(self, thread: str, checkpoint_id: str, metadata: Any) -> None:
        if self.sql is None:
            self.edit(thread, checkpoint_id, lambda rec: rec.__setitem__("m", metadata))
            return
        self.sql.sql(
            "UPDATE {P}checkpoints SET metadata = %s WHERE thread_id = %s AND id = %s",
            orjson.dumps(metadata),
            thread,
            checkpoint_id,
        )


@pytest.fixture(params=["file", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    yield Store(request.param, tmp_path, request)


SCHEMA = StateSchema.builder().add("log", AppendList()).add_lww("answer").build()


def compiled(cp: Checkpointer) -> Any:
    """START -> a -> ask (interrupts) -> b -> END, on ``cp``."""
    g = Graph(SCHEMA)
    g.add_node("a", lambda s: {"log": ["a"]})
    g.add_node("ask", lambda s: {"answer": interrupt("ok?")})
    g.add_node("b", lambda s: {"log": ["b"]})
    g.add_edge(START, "a").add_edge("a", "ask").add_edge("ask", "b").add_edge("b", END)
    return g.compile(checkpointer=cp)


def paused(cp: Checkpointer) -> None:
    """Thread "t" run to its pause in "ask" (the head plans "ask", with an interrupt pending)."""
    compiled(cp).invoke({"log": []}, thread_id="t")


def _task_id(value: Any) -> Edit:
    def change(rec: dict[str, Any]) -> None:
        rec["n"][0][0] = value

    return change


def _task_node(value: Any) -> Edit:
    def change(rec: dict[str, Any]) -> None:
        rec["n"][0][1] = value

    return change


def _field(key: str, value: Any) -> Edit:
    return lambda rec: rec.__setitem__(key, value)


FOREIGN: dict[str, Edit] = {
    "a task id that is an int": _task_id(5),
    "a task node that is null": _task_node(None),
    "a task node that is a list": _task_node(["ask"]),
    "a task of three fields": lambda rec: rec["n"][0].append(True),
    "a Send task whose send flag is a string": lambda rec: rec["n"][0].extend(["yes", None]),
    "next tasks that are an object": _field("n", {"ask": 1}),
    "a version that is a string": lambda rec: rec["v"].update({"log": "3"}),
    "a version that is a bool": lambda rec: rec["v"].update({"log": True}),
    "versions that are a list": _field("v", [1]),
    "barriers of ints": _field("j", {"join": [1, 2]}),
    "barriers that are a list": _field("j", ["a"]),
}


@pytest.mark.parametrize("change", FOREIGN.values(), ids=FOREIGN.keys())
def test_a_foreign_field_is_refused_as_corrupt_by_reads_and_resume(store: Store, change: Edit) -> None:
    cp = store.open()
    paused(cp)
    head = cp.get("t")
    assert head is not None and [t.node for t in head.next_tasks] == ["ask"]
    cp.close()
    store.edit("t", head.id, change)
    cp = store.open()
    try:
        for read in (lambda: cp.get("t"), lambda: cp.get("t", head.id), lambda: cp.history("t")):
            with pytest.raises(CheckpointCorruptError) as info:
                read()
            assert info.value.thread_id == "t" and info.value.checkpoint_id == head.id
        with pytest.raises(CheckpointCorruptError):
            compiled(cp).invoke(Command(resume="yes"), thread_id="t")
    finally:
        cp.close()


METADATA: dict[str, Any] = {
    "a list": [1],
    "'reducers' that is a list": {"source": "loop", "reducers": ["log"]},
    "'reducers' of ints": {"source": "loop", "reducers": {"log": 1}},
    "'writes' of strings": {"source": "loop", "writes": {"a": "log"}},
    "'writes' that is a list": {"source": "loop", "writes": ["log"]},
    "'source' that is an int": {"source": 3},
    "'step' that is a string": {"source": "loop", "step": "2"},
}


@pytest.mark.parametrize("metadata", METADATA.values(), ids=METADATA.keys())
def test_metadata_of_a_foreign_shape_is_refused_as_corrupt(store: Store, metadata: Any) -> None:
    cp = store.open()
    paused(cp)
    head = cp.get("t")
    assert head is not None
    cp.close()
    store.edit_metadata("t", head.id, metadata)
    cp = store.open()
    try:
        for read in (lambda: cp.get("t"), lambda: cp.history("t"), lambda: cp.history("t", filter={"source": "x"})):
            with pytest.raises(CheckpointCorruptError, match="metadata") as info:
                read()
            assert info.value.thread_id == "t" and info.value.checkpoint_id == head.id
    finally:
        cp.close()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def sql_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    yield Store(request.param, tmp_path, request)


@pytest.mark.parametrize(
    ("task_id", "kind", "key"),
    [("task", "finished", ""), ("task", "RESULT", ""), ("task", "result ", "")],
    ids=["an unknown kind", "a kind in capitals", "a kind with a space"],
)
def test_a_pending_write_of_an_unknown_kind_is_corrupt_not_ignored(
    sql_store: Store, task_id: str, kind: str, key: str
) -> None:
    """The engine would not see such a write: a task whose result it holds would run again."""
    cp = sql_store.open()
    paused(cp)
    head = cp.get("t")
    assert head is not None
    cp.close()
    assert sql_store.sql is not None
    sql_store.sql.sql(
        "INSERT INTO {P}writes (ns, thread_id, checkpoint_id, task_id, kind, wkey, value) "
        "VALUES ('', 't', %s, %s, %s, %s, %s)",
        head.id,
        task_id,
        kind,
        key,
        b'{"w": [], "r": []}',
    )
    cp = sql_store.open()
    try:
        with pytest.raises(CheckpointCorruptError, match=kind) as info:
            cp.get("t")
        assert info.value.thread_id == "t" and info.value.checkpoint_id == head.id
        with pytest.raises(CheckpointCorruptError):
            compiled(cp).invoke(Command(resume="yes"), thread_id="t")
    finally:
        cp.close()


def test_sqlite_rows_of_other_column_types_are_corrupt(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """SQLite keeps whatever type a value is given, whatever its column's: a step stored as
    text, a parent id or a time as bytes, a value as text are refused as corrupt, not crashed on."""
    store = Store("sqlite", tmp_path, request)
    assert store.sql is not None
    cp = store.open()
    paused(cp)
    head = cp.get("t")
    assert head is not None and head.parent_id is not None
    cp.close()
    for column, value in (("step", "'two'"), ("parent_id", "x'3432'"), ("created_at", "x'00'")):
        store.sql.sql(f"UPDATE {{P}}checkpoints SET {column} = {value} WHERE thread_id = 't' AND id = %s", head.id)
        cp = store.open()
        try:
            for read in (lambda: cp.history("t"), lambda: cp.get("t")):
                with pytest.raises(CheckpointCorruptError, match="wrong type|not \\(str") as info:
                    read()
                assert info.value.checkpoint_id == head.id
        finally:
            cp.close()
        before = _original(head, column)
        store.sql.sql(f"UPDATE {{P}}checkpoints SET {column} = %s WHERE thread_id = 't' AND id = %s", before, head.id)
    cp = store.open()
    cp.commit(checkpoints=[make("big", None, {"v": "x" * 1000})])  # (small values live in the body)
    cp.close()
    store.sql.sql("UPDATE {P}blobs SET data = 'text, not bytes' WHERE thread_id = 'big'")
    assert store.sql.sql("SELECT count(*) FROM {P}blobs WHERE thread_id = 'big'") == [(1,)]
    cp = store.open()
    try:
        for read in (lambda: cp.history("big"), lambda: cp.get("big")):
            with pytest.raises(CheckpointCorruptError, match="not bytes"):
                read()
    finally:
        cp.close()


def _original(head: Any, column: str) -> Any:
    return {"step": head.step, "parent_id": head.parent_id, "created_at": head.created_at}[column]


def test_a_damaged_file_line_names_its_checkpoint(tmp_path: Path) -> None:
    """Not just "a line after X": the id a damaged line still shows is named."""
    cp = FileCheckpointer(tmp_path)
    asyncio.run(cp.asetup())
    paused(cp)
    head = cp.get("t")
    assert head is not None and head.parent_id is not None
    path = tmp_path / (file_stem("", "t") + ".jsonl")
    lines = path.read_bytes().splitlines()
    assert head.id.encode() in lines[-1]
    lines[-1] = lines[-1][: len(lines[-1]) // 2] + b"\x00garbage"  # damaged in the middle, still a whole line
    path.write_bytes(b"\n".join(lines) + b"\n")
    with pytest.raises(CheckpointCorruptError) as info:
        FileCheckpointer(tmp_path).get("t")
    assert info.value.checkpoint_id == head.id and info.value.thread_id == "t"
    assert f"checkpoint {head.id!r}" in str(info.value)


@pytest.mark.parametrize(
    "header",
    [
        b'{"plait": "file-checkpointer", "v": "1", "ns": "", "t": "t"}',
        b'{"plait": "file-checkpointer", "v": 1.5, "ns": "", "t": "t"}',
        b'{"plait": "file-checkpointer", "v": true, "ns": "", "t": "t"}',
        b'{"plait": "file-checkpointer", "v": 1, "ns": 0, "t": "t"}',
        b'{"plait": "file-checkpointer", "v": 1, "ns": "", "t": "t", "g": 7}',
        b'["plait", 1]',
    ],
)
def test_a_thread_file_header_of_other_types_is_corrupt(tmp_path: Path, header: bytes) -> None:
    cp = FileCheckpointer(tmp_path)
    asyncio.run(cp.asetup())
    paused(cp)
    path = tmp_path / (file_stem("", "t") + ".jsonl")
    rest = path.read_bytes().split(b"\n", 1)[1]
    path.write_bytes(header + b"\n" + rest)
    with pytest.raises(CheckpointCorruptError, match="header") as info:
        FileCheckpointer(tmp_path).get("t")
    assert info.value.thread_id == "t"


@pytest.mark.parametrize(
    "change",
    [
        _field("full", 1),
        _field("fold", "yes"),
        _field("s", 2.0),
        _field("t", "now"),
        _field("p", 12),
        _field("gone", "log"),
        lambda rec: rec["x"].update({"log": ["f", [], "0", 0, 0, 0]}),
        lambda rec: rec["x"].update({"log": ["f", []]}),
        lambda rec: rec.pop("p"),
    ],
    ids=["full", "fold", "step", "created", "parent", "gone", "chain", "entry", "no parent"],
)
def test_a_file_record_of_other_types_is_corrupt(tmp_path: Path, change: Edit) -> None:
    store = Store("file", tmp_path)
    cp = store.open()
    paused(cp)
    head = cp.get("t")
    assert head is not None
    store.edit("t", head.id, change)
    with pytest.raises(CheckpointCorruptError) as info:
        store.open().get("t", head.id)
    assert info.value.thread_id == "t" and info.value.checkpoint_id == head.id


def test_pending_writes_in_a_file_of_other_types_are_corrupt(tmp_path: Path) -> None:
    cp = FileCheckpointer(tmp_path)
    asyncio.run(cp.asetup())
    paused(cp)
    head = cp.get("t")
    assert head is not None and head.pending_writes
    path = tmp_path / (file_stem("", "t") + ".jsonl")
    for row in ([5, "result", "", 1], ["t", "result", None, 1], ["t", "result", ""], "row"):
        with open(path, "ab") as f:
            f.write(orjson.dumps([{"k": "w", "cp": head.id, "w": [row]}]) + b"\n")
        with pytest.raises(CheckpointCorruptError) as info:
            FileCheckpointer(tmp_path).get("t")
        assert info.value.checkpoint_id == head.id
        path.write_bytes(path.read_bytes().rsplit(b"\n", 2)[0] + b"\n")  # the line taken back off
