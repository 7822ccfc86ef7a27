"""One keyword, two spellings: plait's own and LangGraph's (``mode=`` and ``stream_mode=``,
``thread_id=`` and ``config={"configurable": {"thread_id": ...}}``).

Code ported from LangGraph keeps its spelling and works; code that passes both is refused
unless they agree, because which one should win is a guess either way. A config key plait
has no place for is a ``TypeError`` that says what to write instead, never silently dropped.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

__all__ = ["either", "from_config", "with_config"]

T = TypeVar("T")


def either(name: str, value: T | None, alias: str, alias_value: T | None) -> T | None:
    """``value``, else ``alias_value``.

    Raises:
        TypeError: both given, and different; the message says what to write.
    """
    if value is not None and alias_value is not None and value != alias_value:
        raise TypeError(
            f"{name}={value!r} and {alias}={alias_value!r} disagree, and they are one option ({alias}= is "
            f"LangGraph's spelling of {name}=): pass {name}= or {alias}=, not both, e.g. {name}={value!r}"
        )
    return value if value is not None else alias_value


_RUN_KEYS = ("recursion_limit", "metadata", "max_concurrency")
"""Top-level keys of LangGraph's config that are plait keywords of the same name."""
_ADDRESS_KEYS = ("thread_id", "checkpoint_id")
"""``config["configurable"]`` keys that are plait keywords of the same name."""
_DEFAULTS: dict[str, Any] = {"recursion_limit": 10_000}
"""Keywords whose default is not None: given as the default, the config's value is taken."""


def from_config(config: Any, call: str, *, run: bool) -> dict[str, Any]:
    """plait's keywords for LangGraph's ``config`` dict: ``{"configurable": {"thread_id": t,
    "checkpoint_id": c}}``, and with ``run`` (``invoke``/``stream``) also
    ``recursion_limit``, ``metadata`` and ``max_concurrency``. A thread id that is a number
    (LangGraph takes ``{"thread_id": 1}``) becomes its text.

    Raises:
        TypeError: a key plait has no place for; the message says what to write instead.
    """
    if config is None:
        return {}
    if not isinstance(config, Mapping):
        raise TypeError(f"{call}: config is LangGraph's dict, {{'configurable': {{'thread_id': ...}}}}, not {config!r}")
    out: dict[str, Any] = {}
    for key, value in config.items():
        if key == "configurable":
            for name, given in (value or {}).items():
                if name in _ADDRESS_KEYS:
                    out[name] = str(given) if isinstance(given, int) and not isinstance(given, bool) else given
                elif name == "checkpoint_ns" and not given:
                    continue
                else:
                    raise TypeError(_unplaced_configurable(call, name, given))
        elif run and key in _RUN_KEYS:
            out[key] = value
        else:
            raise TypeError(_unplaced(call, key, run))
    return out


def with_config(given: dict[str, Any], config: Any, call: str, *, run: bool = True) -> dict[str, Any]:
    """``given`` (a call's keywords, its ``locals()``) with what ``config`` says filled in.

    Raises:
        TypeError: a key of ``config`` plait has no place for, or one that disagrees with
            the keyword of the same meaning.
    """
    for key, value in from_config(config, call, run=run).items():
        mine = given.get(key)
        if mine is None or mine == _DEFAULTS.get(key):
            given[key] = value
        elif mine != value:
            raise TypeError(
                f"{call}: {key}={mine!r} and the config's {key} {value!r} disagree: pass one of them, "
                f"e.g. {key}={mine!r}"
            )
    return given


def _unplaced_configurable(call: str, name: str, value: Any) -> str:
    if name == "checkpoint_ns":
        return (
            f"{call}: config['configurable']['checkpoint_ns'] = {value!r} names a subgraph's namespace; plait "
            "addresses a subgraph with subgraph='node:task_id' (update_state) or get_state(t, subgraphs=True)"
        )
    return (
        f"{call}: config['configurable'][{name!r}] is a per-run value, which plait passes as context=: "
        f"write {call}(..., context={{{name!r}: {value!r}}}) and read ctx.context in the node "
        "(a node's second parameter, ctx)"
    )


def _unplaced(call: str, key: str, run: bool) -> str:
    if key in ("callbacks", "tags", "run_name", "run_id"):
        return (
            f"{call}: config[{key!r}] is LangChain's tracing; plait has no callbacks: trace with "
            "plait.instrument() (OpenTelemetry), and pass metadata={...} to label a run's checkpoints"
        )
    if key in _RUN_KEYS:
        return f"{call}: config[{key!r}] is a run's option; {call} runs nothing: drop it"
    keys = "'configurable' (thread_id, checkpoint_id)" + (", " + ", ".join(repr(k) for k in _RUN_KEYS) if run else "")
    return f"{call}: config[{key!r}] has no place in plait: a config may hold {keys}; pass the rest as keywords"
