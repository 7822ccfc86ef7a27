"""Keeping a run's lease on its thread alive while the run goes on."""

from __future__ import annotations

import asyncio
import threading
from typing import TYPE_CHECKING

from plait.checkpoint.base import Checkpointer
from plait.checkpoint.file import FileCheckpointer
from plait.checkpoint.memory import MemoryCheckpointer
from plait.checkpoint.postgres import PostgresCheckpointer
from plait.checkpoint.sqlite import SqliteCheckpointer

if TYPE_CHECKING:
    from plait.engine.loop import Run

__all__ = ["LeaseRenewer", "renews_off_loop"]


def renews_off_loop(saver: Checkpointer | None) -> bool:
    """Whether a run on ``saver`` renews its lease from a plain thread, leaving the event
    loop free to be blocked by a lone sync node run inline.

    True for plait's own backends, whose async methods work from any event loop (their
    I/O runs on threads of their own); a third-party backend may bind its connections to
    one loop, so its lease is renewed by a task on the run's loop instead.
    """
    return saver is None or isinstance(
        saver, MemoryCheckpointer | SqliteCheckpointer | FileCheckpointer | PostgresCheckpointer
    )


class LeaseRenewer:
    """Keeps the run's lease on its thread alive while the run goes on.

    For plait's own backends a plain thread renews it (see :func:`renews_off_loop`), so a
    node blocking the loop cannot starve the renewal; for other backends a task on the loop
    does, and lone sync nodes then run in worker threads to keep the loop free. A renewal
    that fails marks the run: its next step and its next commit raise instead of writing
    to a thread another run may own by now.
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
        if renews_off_loop(saver):
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

    def _renew_in_thread(self, saver: Checkpointer) -> None:
        run = self.run
        assert run.thread_id is not None
        loop: asyncio.AbstractEventLoop | None = None
        try:
            while not self._stop.wait(self.period):
                try:
                    if isinstance(saver, MemoryCheckpointer):
                        saver.take_lease(run.thread_id, self.owner, namespace=run.namespace)
                    else:
                        loop = loop or asyncio.new_event_loop()
                        loop.run_until_complete(saver.acquire_lease(run.thread_id, self.owner, namespace=run.namespace))
                except Exception as exc:
                    run._lease_error = exc
                    return
        finally:
            if loop is not None:
                loop.close()

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
        self._stop.set()
