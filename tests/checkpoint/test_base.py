"""Checkpoint ids (plait.checkpoint.base.new_checkpoint_id) and building a Task."""

from __future__ import annotations

import dataclasses
import os
import pathlib
import sys

import pytest

from plait.checkpoint.model import Task, make_task, new_checkpoint_id


def test_ids_grow_and_follow_their_parent_even_one_from_the_future() -> None:
    ids = [new_checkpoint_id() for _ in range(1000)]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    future = f"{int(ids[-1][:16], 16) + (10**9 << 12):016x}abcdef"  # about 17 minutes ahead
    child = new_checkpoint_id(after=future)
    assert child > future and new_checkpoint_id() > child
    assert new_checkpoint_id(after="not-an-id") > child  # a foreign parent: our own clock


@pytest.mark.skipif(sys.platform == "win32", reason="fork is POSIX")
def test_a_forked_child_tags_its_ids_apart_from_the_parent() -> None:
    mine = new_checkpoint_id()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report one id and leave at once
        os.write(write, new_checkpoint_id().encode())
        os._exit(0)
    os.close(write)
    theirs = os.read(read, 64).decode()
    os.close(read)
    os.waitpid(pid, 0)
    assert len(theirs) == len(mine) == 22
    assert theirs[16:] != mine[16:], "the child drew its own process tag"


def test_make_task_sets_every_field_as_the_constructor_does() -> None:
    fields = [f.name for f in dataclasses.fields(Task)]
    assert fields == ["id", "node", "send", "arg"], "a new field must be set by make_task too"
    made = make_task("t1", "worker", True, {"i": 1})
    built = Task(id="t1", node="worker", send=True, arg={"i": 1})
    assert [getattr(made, f) for f in fields] == [getattr(built, f) for f in fields]
    assert made == built
    assert Task.from_json(built.to_json()) == built
    assert Task.from_json(["t2", "a"]) == Task(id="t2", node="a")
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.node = "other"  # type: ignore[misc]


def test_each_backend_says_its_kind_and_what_it_takes_on_disk(tmp_path: pathlib.Path) -> None:
    """The command line and the Studio read a store's family and size off the protocol, never
    off its class."""
    from plait import FileCheckpointer, MemoryCheckpointer, SqliteCheckpointer

    sqlite = SqliteCheckpointer(str(tmp_path / "x.db"))
    files = FileCheckpointer(tmp_path / "files")
    memory = MemoryCheckpointer()
    try:
        for store in (sqlite, files, memory):
            store.setup()
        assert [s.capabilities.kind for s in (sqlite, files, memory)] == ["sqlite", "file", "memory"]
        assert memory.disk_bytes() is None
        before = sqlite.disk_bytes()
        assert before is not None and before > 0 and files.disk_bytes() == 0
        sqlite.reclaim_space()  # VACUUM: the file stays a database
        assert sqlite.disk_bytes() is not None
        memory.reclaim_space()  # nothing to give back
    finally:
        sqlite.close()
        files.close()
