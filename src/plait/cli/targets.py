"""Which graphs a server or worker runs, and under which names: ``--graph`` and ``--config``.

``plait serve`` and ``plait worker`` read them alike, so that a graph has one name in both:

* ``--graph NAME=MODULE:GRAPH`` names the graph ``NAME`` (the assistant a client runs, the
  ``graph`` a run is submitted under);
* ``--graph MODULE:GRAPH`` leaves the name to the command (the worker keeps the target
  itself, as runs were always submitted; the server takes the graph's own name);
* ``--config langgraph.json`` adds the file's graphs under its names, after setting the
  variables of its ``env`` that the environment does not set already.
"""

import os
import sys
from collections.abc import Mapping

from plait.errors import ArgumentError

__all__ = ["apply_env", "graph_targets", "split_graph_option"]


def split_graph_option(text: str) -> tuple[str | None, str]:
    """``NAME=MODULE:GRAPH`` -> ``(NAME, MODULE:GRAPH)``; ``MODULE:GRAPH`` -> ``(None, it)``.

    A ``=`` counts as the name's end only before the target's ``:`` and with no path in
    front of it, so a file whose path holds ``=`` still loads.

    Raises:
        ArgumentError: an empty name or an empty target (``=x.py:g``, ``agent=``).
    """
    name, eq, target = text.partition("=")
    if not eq or ":" in name or "/" in name or os.sep in name:
        return None, text
    if not name.strip() or not target.strip():
        raise ArgumentError("--graph", f"--graph takes NAME=MODULE:GRAPH or MODULE:GRAPH, got {text!r}")
    return name.strip(), target.strip()


def graph_targets(options: list[str], config: str | None) -> list[tuple[str | None, str]]:
    """The ``(name, target)`` pairs of ``--config`` (first, in the file's order) and ``--graph``.

    Reading the config sets its ``env`` (see :func:`apply_env`) and puts its folder on
    ``sys.path``, so that its module targets (``app.agent:graph``) import as LangGraph's do.

    Raises:
        ArgumentError: two graphs given one name.
        ServeConfigError: the config file cannot be used.
    """
    pairs: list[tuple[str | None, str]] = []
    if config is not None:
        from plait.serve.config import read_config

        found = read_config(config)
        apply_env(found.env)
        folder = os.path.abspath(found.path.parent)
        if folder not in sys.path:
            sys.path.append(folder)
        pairs += list(found.graphs.items())
    pairs += [split_graph_option(text) for text in options]
    seen: set[str] = set()
    for name, _ in pairs:
        if name is not None and name in seen:
            raise ArgumentError(
                "--graph", f"two graphs are named {name!r} (in --graph or --config): give each its own NAME="
            )
        if name is not None:
            seen.add(name)
    return pairs


def apply_env(env: Mapping[str, str]) -> None:
    """Set ``env``'s variables that are not set already: the process's own environment wins,
    so that ``OPENAI_API_KEY=... plait serve`` overrides the file, as python-dotenv does."""
    for key, value in env.items():
        os.environ.setdefault(key, value)
