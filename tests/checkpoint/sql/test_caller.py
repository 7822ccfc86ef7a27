"""The one rule for when a SQL store's blocking call may run on the caller's thread
(plait.checkpoint.sql._caller), and that it is the only code reading asyncio's ready queue."""

from __future__ import annotations

import ast
import asyncio
import pathlib
import threading
from typing import Any

import pytest

import plait
from plait._sync import run_sync
from plait.checkpoint.sql._caller import may_block
from plait.checkpoint.sqlite import SqliteCheckpointer

SRC = pathlib.Path(plait.__file__).resolve().parent


async def _ask(bounded: bool) -> bool:
    return may_block(asyncio.get_running_loop(), bounded=bounded)


async def _ask_with_work_ready(bounded: bool) -> bool:
    loop = asyncio.get_running_loop()
    loop.call_soon(lambda: None)  # something else is ready on the loop now
    return may_block(loop, bounded=bounded)


def test_a_bounded_call_may_block_any_loop_with_nothing_else_ready() -> None:
    assert asyncio.run(_ask(bounded=True))
    assert run_sync(_ask(bounded=True))


def test_an_unbounded_call_blocks_only_the_sync_facades_own_loop() -> None:
    assert not asyncio.run(_ask(bounded=False)), "an async caller's loop may get work later"
    assert run_sync(_ask(bounded=False))


@pytest.mark.parametrize("bounded", [True, False])
def test_no_call_blocks_a_loop_with_other_work_ready(bounded: bool) -> None:
    assert not asyncio.run(_ask_with_work_ready(bounded))
    assert not run_sync(_ask_with_work_ready(bounded))


def test_a_loop_that_does_not_show_its_ready_queue_is_never_blocked() -> None:
    class OtherLoop:  # uvloop, say: no ready queue to read
        pass

    other: Any = OtherLoop()
    assert not may_block(other, bounded=True)


def test_the_rule_is_the_only_code_that_reads_asyncios_ready_queue() -> None:
    """One rule in one place: no store (nor anything else) reads ``loop._ready`` itself."""
    readers = set()
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            named = isinstance(node, ast.Attribute) and node.attr == "_ready"
            quoted = isinstance(node, ast.Constant) and node.value == "_ready"
            if named or quoted:
                readers.add(str(path.relative_to(SRC)))
    assert readers == {"checkpoint/sql/_caller.py"}


def test_sqlite_runs_a_lone_async_call_on_the_callers_thread_and_a_busy_loops_on_its_worker(
    tmp_path: pathlib.Path,
) -> None:
    """SQLite's inline calls are bounded (no lock waits), so an async caller whose loop has
    nothing else ready runs them itself; with other work ready, its worker runs them."""
    cp = SqliteCheckpointer(tmp_path / "c.db")

    async def where(busy: bool) -> tuple[int, int]:
        if busy:
            loop = asyncio.get_running_loop()
            loop.call_soon(lambda: None)
        ran: int = await cp._reading(lambda cur: threading.get_ident())
        return ran, threading.get_ident()

    try:
        asyncio.run(cp.asetup())
        # (A worker may still be finishing the last job when its caller resumes: then it is
        # busy, and the call is queued; so a few tries, one of which finds it idle.)
        idle = [asyncio.run(where(busy=False)) for _ in range(5)]
        assert any(ran == caller for ran, caller in idle)
        busy = [asyncio.run(where(busy=True)) for _ in range(5)]
        assert all(ran != caller for ran, caller in busy)
    finally:
        cp.close()
