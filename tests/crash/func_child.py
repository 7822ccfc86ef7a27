"""The entrypoint the functional-API crash test kills, and the process that runs it (not a
test module): ``python func_child.py '<json args>'``.

The entrypoint calls ``TASKS`` tasks in batches of ``BATCH`` at a time. Every task appends
``start i`` when it begins and ``done i`` when its work is done (before its result is
recorded), and the entrypoint appends ``seen i`` once task ``i``'s future returned (its
result is recorded by then); each line is one ``write`` to the ledger, opened with
``O_APPEND``, then fsync'd. With ``"hold": "<line>"`` the child writes ``hold <line>`` after
that line and waits there forever: the test SIGKILLs it at exactly that event.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from typing import Any

from plait import Checkpointer, entrypoint, task

TASKS = 50
BATCH = 10


def open_store(args: dict[str, Any]) -> Checkpointer:
    if args["backend"] == "sqlite":
        from plait.checkpoint.sqlite import SqliteCheckpointer

        return SqliteCheckpointer(args["path"])
    from plait.checkpoint.postgres import PostgresCheckpointer

    return PostgresCheckpointer(args["dsn"], schema=args["schema"])


def main(args: dict[str, Any]) -> None:
    ledger, hold = args["ledger"], args.get("hold")

    def mark(line: str) -> None:
        fd = os.open(ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{line}\n".encode())
            if line == hold:
                os.write(fd, f"hold {line}\n".encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        if line == hold:
            threading.Event().wait()  # until the test's SIGKILL

    @task
    def work(i: int) -> int:
        mark(f"start {i}")
        mark(f"done {i}")
        return i * 2

    saver = open_store(args)

    @entrypoint(checkpointer=saver)
    def doubled(n: int) -> list[int]:
        out: list[int] = []
        for first in range(0, n, BATCH):
            futures = [work(i) for i in range(first, min(first + BATCH, n))]
            for i, f in enumerate(futures, first):
                out.append(f.result())
                mark(f"seen {i}")
        return out

    result = doubled.invoke(TASKS if args.get("start") else None, thread_id=args["thread"])
    with open(args["result"], "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
    os._exit(0)  # (no store close needed: the run's commits are durable when invoke returns)
