"""The sync facade's runner: results and errors come back, Ctrl-C cancels the call so that its
cleanup runs (a run releases its lease), the SIGINT handler is put back as it was, and the
caller's context variables reach the coroutine."""

from __future__ import annotations

import asyncio
import contextvars
import os
import signal
import threading
from pathlib import Path
from typing import Any

import pytest

from plait import START, Graph, SqliteCheckpointer, StateSchema
from plait._sync import in_sync_call, run_sync


@pytest.fixture(autouse=True)
def _ctrl_c_raises() -> Any:
    """Ctrl-C raises KeyboardInterrupt here even when pytest was started with SIGINT ignored
    (a background job of a shell without job control is): the tests send it on purpose."""
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGINT) is not signal.SIG_IGN
    ):
        yield
        return
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def _interrupt_soon(delay: float = 0.2) -> threading.Timer:
    timer = threading.Timer(delay, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    return timer


def test_results_errors_and_the_sync_flag_come_back() -> None:
    async def answer() -> tuple[int, bool]:
        await asyncio.sleep(0)
        return 42, in_sync_call()

    async def fail() -> None:
        raise LookupError("nope")

    assert run_sync(answer()) == (42, True)
    assert not in_sync_call()
    with pytest.raises(LookupError, match="nope"):
        run_sync(fail())
    assert run_sync(answer()) == (42, True)  # the thread's loop is still usable


def test_the_callers_context_variables_reach_the_coroutine_and_do_not_leak_back() -> None:
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")

    async def read_then_set() -> str:
        seen = var.get()
        var.set("inside")
        return seen

    token = var.set("caller")
    try:
        assert run_sync(read_then_set()) == "caller"
        assert var.get() == "caller"
    finally:
        var.reset(token)


def test_inside_a_running_loop_the_call_runs_on_a_helper_thread() -> None:
    async def where() -> int:
        return threading.get_ident()

    async def outer() -> int:
        return run_sync(where())

    assert asyncio.run(outer()) != threading.get_ident()


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="SIGINT goes to the main thread")
def test_ctrl_c_cancels_the_call_runs_its_cleanup_and_restores_the_handler() -> None:
    cleaned: list[bool] = []

    async def slow() -> None:
        try:
            await asyncio.sleep(30)
        finally:
            cleaned.append(True)

    timer = _interrupt_soon()
    try:
        with pytest.raises(KeyboardInterrupt):
            run_sync(slow())
    finally:
        timer.cancel()
    assert cleaned == [True]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="SIGINT goes to the main thread")
def test_a_handler_of_the_callers_own_is_left_in_place() -> None:
    got: list[int] = []

    def mine(signum: int, frame: Any) -> None:
        got.append(signum)

    async def wait_for_signal() -> None:
        for _ in range(200):
            if got:
                return
            await asyncio.sleep(0.01)

    previous = signal.signal(signal.SIGINT, mine)
    try:
        timer = _interrupt_soon(0.05)
        run_sync(wait_for_signal())
        timer.join()
        assert got == [signal.SIGINT]
        assert signal.getsignal(signal.SIGINT) is mine
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="SIGINT goes to the main thread")
def test_ctrl_c_during_invoke_releases_the_threads_lease(tmp_path: Path) -> None:
    async def slow(state: Any) -> dict[str, Any]:
        await asyncio.sleep(30)
        return {"n": 1}

    graph = Graph(StateSchema.builder().add_lww("n").build())
    graph.add_node("slow", slow).add_edge(START, "slow")
    cp = SqliteCheckpointer(tmp_path / "plait.db")
    app = graph.compile(checkpointer=cp)
    timer = _interrupt_soon()
    try:
        with pytest.raises(KeyboardInterrupt):
            app.invoke({"n": 0}, thread_id="t")
    finally:
        timer.cancel()
    # The run was cancelled, not killed: its lease is gone, so the thread can be taken at once.
    lease = run_sync(cp.atake_lease("t", "someone else", ttl=60))
    run_sync(cp.arelease_lease(lease))
    info = cp.get_thread("t")
    assert info is not None and info.status == "ready", "the cancelled run's unfinished work waits for a resume"
    cp.close()


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="SIGINT goes to the main thread")
def test_a_second_ctrl_c_still_finishes_the_call_before_raising() -> None:
    """A call that holds out against the first Ctrl-C's cancellation is interrupted by the
    second one, and is cancelled again and finished there: nothing of it is left to resume
    inside the thread's next sync call."""
    seen: list[str] = []

    async def stubborn() -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            seen.append("first cancel ignored")
            timer = _interrupt_soon(0.05)  # the second Ctrl-C
            try:
                await asyncio.sleep(30)
            finally:
                timer.cancel()
                seen.append("finished")

    async def leftovers() -> int:
        return len(asyncio.all_tasks()) - 1  # this call's own task aside

    timer = _interrupt_soon(0.05)
    try:
        with pytest.raises(KeyboardInterrupt):
            run_sync(stubborn())
    finally:
        timer.cancel()
    assert seen == ["first cancel ignored", "finished"]
    assert run_sync(leftovers()) == 0
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
