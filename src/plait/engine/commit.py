"""The committer: the one path from a run to its checkpointer.

Commits go out one at a time, in order; whatever is queued while one is in flight goes out
together in the next (group commit). In ``sync`` durability the loop waits for the
checkpoint's commit before starting the next super-step; in ``async`` it does not, so
consecutive steps that finish during a commit share the next one; pending writes of a
running step are flushed the same way, never one commit per task.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import replace

from plait.checkpoint.base import Checkpointer
from plait.checkpoint.model import CheckpointWrite, Fence, RestStatus, WritesBatch

__all__ = ["Committer"]


class Committer:
    """Commits in order, one in flight at a time, grouping what queues up meanwhile.

    A failed commit is final for the run: the error is kept and re-raised by every later
    call, and nothing queued after it is ever committed, so a failure can never leave a
    later checkpoint stored on top of a missing one.

    With a ``fence`` (a run on a thread: its lease's generation), every commit carries it,
    so the backend refuses the commit, atomically, once the lease is no longer the thread's
    current one: the guard only knows what the lease renewer found at its last renewal,
    which may be up to a third of the lease's life ago, or never for a worker that stalled.
    """

    def __init__(
        self,
        checkpointer: Checkpointer,
        on_commit: Callable[[Sequence[CheckpointWrite]], None] | None = None,
        guard: Callable[[], None] | None = None,
        fence: Fence | None = None,
    ) -> None:
        self.checkpointer = checkpointer
        self.on_commit = on_commit
        self.guard = guard
        """Called before every commit; raises to refuse it (the run lost its lease)."""
        self.fence = fence
        """Passed to every commit."""
        self._checkpoints: list[CheckpointWrite] = []
        self._writes: list[WritesBatch] = []
        self._inflight: asyncio.Task[None] | None = None
        self._error: BaseException | None = None
        self.commits = 0
        self._last_fence: Fence | None = None
        """The fence of the run's last commit, which also gives its lease back; see
        :meth:`release_on_next`."""
        self.released = False
        """Whether a commit gave the fence owner's lease back (the run needs no release)."""

    def _queue(self, checkpoint: CheckpointWrite | None, writes: WritesBatch | None) -> None:
        if self._error is not None:
            raise self._error
        if writes is not None:
            self._writes.append(writes)
        if checkpoint is not None:
            if checkpoint.folds_parent_writes:
                parent = checkpoint.checkpoint.parent_id
                # queued writes of the folded step are now part of the checkpoint
                self._writes = [w for w in self._writes if w.checkpoint_id != parent]
            self._checkpoints.append(checkpoint)

    def submit(self, *, checkpoint: CheckpointWrite | None = None, writes: WritesBatch | None = None) -> None:
        """Queue a checkpoint and/or writes; a commit starts if none is in flight."""
        self._queue(checkpoint, writes)
        if self._inflight is None and (self._checkpoints or self._writes):
            self._inflight = asyncio.get_running_loop().create_task(self._run())

    async def _commit_queued(self) -> None:
        cps, ws = self._checkpoints, self._writes
        self._checkpoints, self._writes = [], []
        fence = self.fence
        if self._last_fence is not None:
            fence, self._last_fence = self._last_fence, None
        try:
            if self.guard is not None:
                self.guard()
            await self.checkpointer.acommit(checkpoints=cps, writes=ws, fence=fence)
        except BaseException as exc:
            self._error = exc
            self._checkpoints, self._writes = [], []
            raise
        self.commits += 1
        if fence is not None and fence.release:
            self.released = True
        if self.on_commit is not None and cps:
            self.on_commit(cps)

    async def _run(self) -> None:
        try:
            while self._checkpoints or self._writes:
                await self._commit_queued()
        except BaseException:
            pass  # kept in self._error; raised by the next drain()
        finally:
            self._inflight = None

    def release_on_next(self, status: RestStatus | None) -> None:
        """Make the next commit give the fence's lease back in its transaction, leaving the
        thread ``status`` (see :attr:`Fence.release`); :attr:`released` says whether it did.

        The caller queues the run's last work right after this, with no ``await`` between
        (so no commit can start with part of it): that commit is then the run's last.
        """
        # A subgraph's run (``lease_namespace``) borrows its parent's lease: never gives it back.
        if self.fence is not None and self.fence.token is not None and self.fence.lease_namespace is None:
            self._last_fence = replace(self.fence, release=True, status=status)

    async def commit_now(self, checkpoint: CheckpointWrite) -> None:
        """Commit ``checkpoint`` (with anything queued) and wait for it: sync durability.

        When nothing is in flight this calls the checkpointer directly, without a task
        hop, because a super-step that waits for its commit gains nothing from one.
        """
        if self._inflight is not None:
            self.submit(checkpoint=checkpoint)
            await self.drain()
            return
        self._queue(checkpoint, None)
        await self._commit_queued()

    async def drain(self) -> None:
        """Wait until everything submitted is committed; raise the failure if one happened."""
        while self._inflight is not None:
            await asyncio.shield(self._inflight)
        if self._error is None and (self._checkpoints or self._writes):
            self.submit()
            await self.drain()
        if self._error is not None:
            raise self._error
