"""plait.engine.together: how a super-step's tasks run together (run_all)."""

from __future__ import annotations

import asyncio
import gc
from typing import Any

import pytest

from plait.engine.together import run_all


def test_results_come_back_in_the_order_given_not_the_order_of_finishing() -> None:
    async def after(delay: float, value: int) -> int:
        await asyncio.sleep(delay)
        return value

    async def main() -> list[int]:
        return await run_all([after(0.03, 1), after(0.0, 2), after(0.01, 3)])

    assert asyncio.run(main()) == [1, 2, 3]


def test_nothing_to_run_is_an_empty_list() -> None:
    assert asyncio.run(run_all([])) == []


def test_the_tasks_run_concurrently() -> None:
    async def main() -> list[str]:
        first, second = asyncio.Event(), asyncio.Event()

        async def a() -> str:
            first.set()
            await second.wait()  # only returns if b runs while a waits
            return "a"

        async def b() -> str:
            await first.wait()
            second.set()
            return "b"

        return await asyncio.wait_for(run_all([a(), b()]), timeout=5)

    assert asyncio.run(main()) == ["a", "b"]


def test_a_cancelled_caller_cancels_every_task_and_waits_for_them_to_end() -> None:
    ended: list[str] = []

    async def main() -> None:
        started = asyncio.Event()

        async def hangs(name: str) -> None:
            try:
                started.set()
                await asyncio.Event().wait()
            finally:
                await asyncio.sleep(0.01)  # cleanup that takes a moment
                ended.append(name)

        step = asyncio.create_task(run_all([hangs("x"), hangs("y")]))
        await started.wait()
        step.cancel()
        with pytest.raises(asyncio.CancelledError):
            await step
        assert sorted(ended) == ["x", "y"], "both had ended when the caller saw the cancellation"

    asyncio.run(main())


class _Fatal(BaseException):
    """Not an Exception: what a node's own failure handling lets through (asyncio itself
    re-raises KeyboardInterrupt and SystemExit out of the loop, so those cannot stand in)."""


def test_a_task_that_raises_is_reported_after_its_siblings_end() -> None:
    order: list[str] = []

    async def main() -> None:
        async def fails() -> None:
            order.append("fails")
            raise _Fatal("first")

        async def slow() -> None:
            await asyncio.sleep(0.02)
            order.append("slow ended")

        async def also_fails() -> None:
            raise _Fatal("second")

        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _loop, context: unhandled.append(context["message"]))
        with pytest.raises(_Fatal, match="first"):
            await run_all([fails(), slow(), also_fails()])
        order.append("caller")
        gc.collect()  # a task whose failure nobody retrieved reports it when collected

    unhandled: list[str] = []
    asyncio.run(main())
    assert order == ["fails", "slow ended", "caller"]
    assert unhandled == [], "the second failure was retrieved too, not left to be logged"


def test_each_coroutine_runs_as_its_own_task_so_asyncio_timeout_works_inside() -> None:
    """From Python 3.12 the tasks start eagerly; they must still be tasks of their own, or
    ``asyncio.timeout()`` in a node would cancel the engine instead of the node."""

    async def node(i: int) -> tuple[int, asyncio.Task[Any] | None]:
        me = asyncio.current_task()
        try:
            async with asyncio.timeout(0.01):
                await asyncio.sleep(5)
        except TimeoutError:
            return i, me
        raise AssertionError("the timeout did not fire")

    async def main() -> None:
        caller = asyncio.current_task()
        assert caller is not None
        got = await asyncio.wait_for(run_all([node(0), node(1)]), timeout=5)
        assert [i for i, _ in got] == [0, 1]
        own = {task for _, task in got}
        assert len(own) == 2 and caller not in own and None not in own
        assert asyncio.current_task() is caller and not caller.cancelling()

    asyncio.run(main())


def test_coroutines_that_never_wait_finish_within_the_call() -> None:
    async def quick(i: int) -> int:
        return i * 2

    async def main() -> list[int]:
        return await run_all(quick(i) for i in range(100))

    assert asyncio.run(main()) == [i * 2 for i in range(100)]
