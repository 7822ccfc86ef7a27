"""Checkpoint ids (plait.checkpoint.base.new_checkpoint_id)."""

from __future__ import annotations

import os
import sys

import pytest

from plait.checkpoint.base import new_checkpoint_id


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
