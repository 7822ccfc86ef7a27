"""What a run request asks for, checked before anything is stored: the input or the
``Command`` a run starts with, where it starts, its stream modes and run options.

A request body is the LangGraph SDKs' (``input``, ``command``, ``checkpoint``/
``checkpoint_id``, ``stream_mode``, ``config``, ...). :func:`run_kwargs` keeps what a run
needs as JSON data (stored with the run, so a server started again runs it as asked);
:func:`start_of` turns it into plait's ``invoke`` input when the run starts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from plait.errors import ServeRequestError
from plait.stream_wire import library_modes
from plait.types import Command

__all__ = ["MULTITASK", "run_kwargs", "start_of"]

MULTITASK = ("reject", "enqueue", "interrupt", "rollback")


def _modes(value: Any) -> list[str]:
    if value is None:
        return ["values"]
    modes = [value] if isinstance(value, str) else value
    if not isinstance(modes, list) or not all(isinstance(m, str) for m in modes):
        raise ServeRequestError("stream_mode", "must be a mode name or a list of them")
    library_modes(modes)  # refuses an unknown one now, not when the run starts
    return modes or ["values"]


def _checkpoint_id(body: Mapping[str, Any]) -> str | None:
    cid = body.get("checkpoint_id")
    checkpoint = body.get("checkpoint")
    if isinstance(checkpoint, Mapping) and checkpoint.get("checkpoint_id"):
        cid = checkpoint["checkpoint_id"]
    config = body.get("config")
    if cid is None and isinstance(config, Mapping) and isinstance(config.get("configurable"), Mapping):
        cid = config["configurable"].get("checkpoint_id")
    if cid is not None and not isinstance(cid, str):
        raise ServeRequestError("checkpoint_id", "must be a checkpoint id (a string)")
    return cid or None


def _names(body: Mapping[str, Any], key: str) -> list[str] | None:
    """A run's breakpoints: node names, or ``["*"]`` for every node of the graph (the
    SDKs send ``"*"``), checked against the graph when the run starts."""
    value = body.get(key)
    if value is None:
        return None
    if value == "*":
        return ["*"]
    if not isinstance(value, list) or not all(isinstance(n, str) for n in value):
        raise ServeRequestError(key, "must be '*' (every node) or a list of node names")
    return value


def run_kwargs(body: Mapping[str, Any]) -> dict[str, Any]:
    """What the run of ``body`` needs, as JSON data; raises :class:`ServeRequestError` for a
    body no run can start from (nothing is stored then)."""
    command = body.get("command")
    if command is not None and not isinstance(command, Mapping):
        raise ServeRequestError("command", "must be an object with resume, update and/or goto")
    given = body.get("input")
    if given is not None and not isinstance(given, Mapping):
        raise ServeRequestError("input", "must be an object of channel values (or null)")
    if command and given:
        raise ServeRequestError("input", "send either input or command, not both")
    if command:
        try:
            Command.from_json(command)
        except ValueError as exc:
            raise ServeRequestError("command", str(exc)) from None
    # agent-chat-ui answers an interrupt with `"input": {}` beside its command: the command wins
    config = body.get("config") if isinstance(body.get("config"), Mapping) else {}
    assert isinstance(config, Mapping)
    limit = config.get("recursion_limit")
    if limit is not None and (not isinstance(limit, int) or limit < 1):
        raise ServeRequestError("config.recursion_limit", "must be a whole number of at least 1")
    durability = body.get("durability") or "sync"
    if durability not in ("sync", "async", "exit"):
        raise ServeRequestError("durability", "must be 'sync', 'async' or 'exit'")
    return {
        "input": dict(given) if given is not None and not command else None,
        "command": dict(command) if command else None,
        "checkpoint_id": _checkpoint_id(body),
        "stream_mode": _modes(body.get("stream_mode")),
        "subgraphs": bool(body.get("stream_subgraphs")),
        "context": body.get("context"),
        "recursion_limit": limit,
        "interrupt_before": _names(body, "interrupt_before"),
        "interrupt_after": _names(body, "interrupt_after"),
        "durability": durability,
    }


def start_of(kwargs: Mapping[str, Any], head_id: str | None, landed: bool) -> tuple[Any, str | None]:
    """The input ``invoke`` takes and the checkpoint the run starts from. ``landed``: an
    earlier attempt of this run already moved the thread (its input is stored), so this one
    continues the thread instead of applying the input again."""
    if landed:
        return None, None
    checkpoint_id = kwargs.get("checkpoint_id")
    if checkpoint_id == head_id:  # a client sends the head with every turn: the same as none
        checkpoint_id = None
    command = kwargs.get("command")
    if command:
        return Command.from_json(command), checkpoint_id
    given = kwargs.get("input")
    if given is None and checkpoint_id is None and head_id is None:
        return {}, None  # a first run with no input: start the graph on its defaults
    return given, checkpoint_id
