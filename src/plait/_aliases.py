"""One keyword, two spellings: plait's own and LangGraph's (``mode=`` and ``stream_mode=``).

Code ported from LangGraph keeps its spelling and works; code that passes both is refused
unless they agree, because which one should win is a guess either way.
"""

from __future__ import annotations

from typing import TypeVar

__all__ = ["either"]

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
