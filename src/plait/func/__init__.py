"""The functional API: a plain function as a durable workflow (:class:`entrypoint`), whose
:func:`task` calls are durable steps, recorded as they finish and replayed on resume.

Built on the engine as it is: an entrypoint is a one-node graph, and a task call is an entry
in the node's effects ledger (the one ``ctx.once`` writes), so threads, checkpointers, leases,
statuses, the CLI and workers treat an entrypoint like any graph.
"""

from plait.func._calls import TaskFuture
from plait.func._entrypoint import Entrypoint, entrypoint
from plait.func._task import TaskFunction, task

__all__ = ["Entrypoint", "TaskFunction", "TaskFuture", "entrypoint", "task"]
