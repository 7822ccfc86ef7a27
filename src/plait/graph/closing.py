"""Closing a compiled graph's checkpointer, by hand or with ``with`` / ``async with``; and the
marker of a required argument its readers take."""

from __future__ import annotations

from typing import Any, Self

from plait._sync import run_sync
from plait.checkpoint.base import Checkpointer

__all__ = ["REQUIRED", "Closing"]


class _Required:
    """The type of ``get_state``'s default: raise when the thread or checkpoint is not stored."""

    def __repr__(self) -> str:  # as the signature shows it (docs/api.md is generated)
        return "<raise>"


REQUIRED: Any = _Required()


class Closing:
    """What :class:`~plait.CompiledGraph` does when a script is done with its store."""

    @property
    def checkpointer(self) -> Checkpointer | None:
        raise NotImplementedError

    async def aclose(self) -> None:
        """Close the graph's checkpointer (whether the graph opened it from an address or
        was given it), giving back its connections and files; nothing without one.

        Call it, or use the graph as a context manager, when a script is done with a store:
        SQLite then folds its write-ahead log into the database file, so that the file alone
        (copied, mailed, opened elsewhere) holds every thread. Several graphs that share one
        checkpointer object should leave it open and close the checkpointer once instead.
        Idempotent; the graph cannot run on a closed checkpointer.
        """
        if self.checkpointer is not None:
            await self.checkpointer.aclose()

    def close(self) -> None:
        """Sync :meth:`aclose`."""
        run_sync(self.aclose())

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
