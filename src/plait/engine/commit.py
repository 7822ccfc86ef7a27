"""The committer: the one path from a run to its checkpointer.

Commits go out one at a time, in order; whatever is queued while one is in flight goes out
together in the next (group commit). In ``sync`` durability the loop waits for the
checkpoint's commit before starting the next super-step; in ``async`` it does not, so
consecutive steps that finish during a commit share the next one; pending writes of a
running step are flushed the same way, never one commit per task.
"""

from __future__ import annotations

import asyncio

from plait.checkpoint.base import Checkpointer, CheckpointWrite, WritesBatch

__all__ = ["Committer"]


class Committer:
    def __init__(self, saver: Checkpointer) -> None:
        self.saver = saver
        self._checkpoints: list[CheckpointWrite] = []
        self._writes: list[WritesBatch] = []
        self._inflight: asyncio.Task[None] | None = None
        self._error: BaseException | None = None
        self.commits = 0

    def submit(self, *, checkpoint: CheckpointWrite | None = None, writes: WritesBatch | None = None) -> None:
        if writes is not None:
            self._writes.append(writes)
        if checkpoint is not None:
            if checkpoint.folds_parent_writes:
                parent = checkpoint.checkpoint.parent_id
                # queued writes of the folded step are now part of the checkpoint
                self._writes = [w for w in self._writes if w.checkpoint_id != parent]
            self._checkpoints.append(checkpoint)
        if self._inflight is None and self._error is None:
            self._inflight = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        try:
            while self._checkpoints or self._writes:
                cps, ws = self._checkpoints, self._writes
                self._checkpoints, self._writes = [], []
                await self.saver.commit(checkpoints=cps, writes=ws)
                self.commits += 1
        except BaseException as exc:
            self._error = exc
        finally:
            self._inflight = None

    async def commit_now(self, checkpoint: CheckpointWrite) -> None:
        """Commit ``checkpoint`` (with anything queued) and wait for it: sync durability.

        When nothing is in flight this calls the checkpointer directly, without a task
        hop, because a super-step that waits for its commit gains nothing from one.
        """
        if self._inflight is not None or self._error is not None:
            self.submit(checkpoint=checkpoint)
            await self.drain()
            return
        self.submit_queued_only(checkpoint)
        cps, ws = self._checkpoints, self._writes
        self._checkpoints, self._writes = [], []
        await self.saver.commit(checkpoints=cps, writes=ws)
        self.commits += 1

    def submit_queued_only(self, checkpoint: CheckpointWrite) -> None:
        if checkpoint.folds_parent_writes:
            parent = checkpoint.checkpoint.parent_id
            self._writes = [w for w in self._writes if w.checkpoint_id != parent]
        self._checkpoints.append(checkpoint)

    async def drain(self) -> None:
        """Wait until everything submitted is committed; re-raise a commit failure."""
        while self._inflight is not None:
            await asyncio.shield(self._inflight)
        if self._error is None and (self._checkpoints or self._writes):
            self.submit()
            await self.drain()
        if self._error is not None:
            err, self._error = self._error, None
            raise err

    def discard(self) -> None:
        """Forget what is queued and not yet in flight (after a failure)."""
        self._checkpoints, self._writes = [], []
