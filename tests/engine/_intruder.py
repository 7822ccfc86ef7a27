"""A second owner trying to take a thread's lease, from another OS thread and event loop."""

from __future__ import annotations

import asyncio
import threading

from plait import Checkpointer, ThreadBusyError


def try_to_take_lease(saver: Checkpointer, thread_id: str) -> str:
    """``"taken"`` if an intruder got the thread's lease, ``"busy"`` if a run still holds it."""
    out: list[str] = []

    def run() -> None:
        try:
            asyncio.run(saver.atake_lease(thread_id, "intruder"))
            out.append("taken")
        except ThreadBusyError:
            out.append("busy")

    worker = threading.Thread(target=run)
    worker.start()
    worker.join()
    return out[0]
