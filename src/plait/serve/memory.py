"""The memory store ``plait serve`` serves: the checkpointer's own (``client.store.*`` and the
served graphs' ``ctx.store`` reach the same items), with the ``index`` and ``ttl`` of the
config file's ``store`` section, and its expired items swept while the server runs.

One store per server, so that what a node writes is what a client reads: the served graphs
are bound to it, whatever store they were compiled with (as LangGraph's server gives its
graphs the platform's store).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from plait.checkpoint.base import Checkpointer
from plait.errors import EmbeddingError, InvalidMemoryError, ServeConfigError, StoreUnsupportedError, TargetLoadError
from plait.graph.loading import load_target
from plait.store import Store

__all__ = ["load_store_options", "refusal", "served_store", "unsupported"]


def load_store_options(section: Mapping[str, Any], source: str) -> dict[str, Any]:
    """The options ``Store`` takes, from a config's checked ``store`` section (see
    :func:`plait.serve.config.parse_store`): its ``index.embed`` target loaded.

    Raises:
        ServeConfigError: the embed target cannot be loaded (``source`` names the file).
    """
    out = dict(section)
    index = section.get("index")
    if index is not None:
        target = index["embed"]
        try:
            embed = load_target(target)
        except TargetLoadError as exc:
            raise ServeConfigError(f'{source}: "store.index.embed" cannot be loaded: {exc}') from None
        out["index"] = {**index, "embed": embed}
    return out


def served_store(checkpointer: Checkpointer, options: Mapping[str, Any] | None = None) -> Store | None:
    """The store to serve over ``checkpointer``: its own (``checkpointer.store``) when no
    options are given, else one with them; None when it keeps no memory and none is asked.

    Raises:
        ServeConfigError: options for a checkpointer that keeps no memory, or options the
            store refuses (a ttl or index that is not one).
    """
    options = options or {}
    if not checkpointer.capabilities.memory:
        if options:
            raise ServeConfigError(
                f'the config\'s "store" section configures a memory store, but {unsupported(checkpointer)}, '
                "or remove the section"
            )
        return None
    if not options:
        return checkpointer.store
    try:
        return Store(checkpointer, index=options.get("index"), ttl=options.get("ttl"))
    except (InvalidMemoryError, EmbeddingError) as exc:
        raise ServeConfigError(f"the config's store section cannot be used: {exc}") from None


_KEEPERS = "a SQLite file (plait serve --db app.db), PostgreSQL or memory (--db memory:)"


def _named(checkpointer: Checkpointer) -> str:
    kind = type(checkpointer).__name__
    return f"{kind}({checkpointer.address!r})" if checkpointer.address else kind


def unsupported(checkpointer: Checkpointer) -> str:
    """Why the server over ``checkpointer`` serves no memory store, and what to serve instead."""
    return f"{_named(checkpointer)} keeps none ({checkpointer.memory_refusal}); serve {_KEEPERS}"


def refusal(checkpointer: Checkpointer) -> StoreUnsupportedError:
    """The error a ``/store`` request gets from a server that serves no memory store."""
    return StoreUnsupportedError(
        f"plait serve over {_named(checkpointer)}",
        f"{checkpointer.memory_refusal}. The /store endpoints (client.store.*) need a server over {_KEEPERS}",
    )
