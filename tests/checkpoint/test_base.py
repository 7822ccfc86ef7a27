"""Checkpoint ids (plait.checkpoint.base.new_checkpoint_id) and building a Task."""

from __future__ import annotations

import dataclasses
import os
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
