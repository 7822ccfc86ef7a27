"""Keeping a run's lease on its thread alive while the run goes on."""

from __future__ import annotations

import asyncio
import threading
from typing import TYPE_CHECKING

from plait.checkpoint.memory import MemoryCheckpointer

if TYPE_CHECKING:
    from plait.engine.loop import Run

__all__ = ["LeaseRenewer"]


class LeaseRenewer:
    """Keeps the run's lease on its thread alive while the run goes on.

    On MemoryCheckpointer the lease lives in this process, so a plain thread renews it
    and a lone sync node may run inline on the loop; elsewhere a task on the loop renews
    it (lone sync nodes then run in worker threads, keeping the loop free). A renewal that
    fails marks the run: its next step and its next commit raise instead of writing to a
    thread another run may own by now.
    """

    def __init__(self, run: Run, owner: str) -> None:
        saver = run.saver
        assert saver is not None and run.thread_id is not None
        self.run = run
        self.owner = owner
        self.period = max(saver.lease_ttl / 3, 0.02)
        self._task: asyncio.Task[None] | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if isinstance(saver, MemoryCheckpointer):
            self._thread = threading.Thread(target=self._renew_in_thread, args=(saver,), daemon=True)
            self._thread.start()
        else:
            self._task = run.loop.create_task(self._renew())

    async def _renew(self) -> None:
        run = self.run
        assert run.saver is not None and run.thread_id is not None
        try:
            while True:
                await asyncio.sleep(self.period)
                await run.saver.acquire_lease(run.thread_id, self.owner, namespace=run.namespace)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            run._lease_error = exc

    def _renew_in_thread(self, saver: MemoryCheckpointer) -> None:
        run = self.run
        assert run.thread_id is not None
        while not self._stop.wait(self.period):
            try:
                saver.take_lease(run.thread_id, self.owner, namespace=run.namespace)
            except Exception as exc:
                run._lease_error = exc
                return

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
        self._stop.set()
