"""What ``plait serve`` (the LangGraph-compatible API server) refuses (see :mod:`plait.errors`).

Each of these reaches an HTTP client as a 4xx response in the shape the LangGraph SDKs read
(``{"error": <class name>, "message": ...}``), so a client sees plait's message, never a 500.
"""

from __future__ import annotations

from plait.errors._base import PlaitError

__all__ = [
    "AssistantNotFoundError",
    "CheckpointMetadataReadOnlyError",
    "ServeConfigError",
    "ServeError",
    "ServeRequestError",
    "ThreadNotFoundError",
]


class ServeError(PlaitError):
    """The API server refused a request or could not start."""


class AssistantNotFoundError(ServeError):
    """An ``assistant_id`` that names no served graph (neither a graph's name nor its id)."""

    def __init__(self, assistant_id: str, served: list[str]) -> None:
        self.assistant_id = assistant_id
        self.served = served
        names = ", ".join(sorted(served)) or "none"
        super().__init__(
            f"no assistant {assistant_id!r} is served; the served graphs are: {names}. Pass a graph's "
            "name or its assistant id (GET /assistants/search lists them), or serve the graph with "
            "`plait serve --graph NAME=MODULE:GRAPH`."
        )


class ThreadNotFoundError(ServeError):
    """A thread id the server has no record of (never created, or deleted)."""

    def __init__(self, thread_id: str) -> None:
        self.thread_id = thread_id
        super().__init__(
            f"thread {thread_id!r} was not found; create it with POST /threads (client.threads.create()) "
            "or run with if_not_exists='create'."
        )


class ServeRequestError(ServeError, ValueError):
    """A request body or parameter the server cannot act on; nothing was written."""

    def __init__(self, where: str, problem: str) -> None:
        self.where = where
        self.problem = problem
        super().__init__(f"{where}: {problem}")


class ServeConfigError(ServeError):
    """``plait serve`` cannot start as configured (a config file it cannot read, a graph it
    cannot load, a public address without an API key)."""


_INSTEAD_OF_PATCH = (
    'Tag the thread instead (PATCH /threads/{thread_id} with {"metadata": ...}, client.threads.update), '
    "or write a new state (POST /threads/{thread_id}/state) and give the next run its metadata."
)


class CheckpointMetadataReadOnlyError(ServeError):
    """``PATCH /threads/{id}/state`` (the SDKs' ``threads.patchState``): a stored checkpoint's
    metadata cannot be edited, because plait never rewrites a checkpoint."""

    def __init__(self, thread_id: str) -> None:
        self.thread_id = thread_id
        what = f"thread {thread_id!r}: a checkpoint's metadata cannot be edited, because plait never rewrites"
        super().__init__(f"{what} a stored checkpoint. {_INSTEAD_OF_PATCH}")
