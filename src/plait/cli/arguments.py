"""Turning the ``plait`` command line's arguments into values: JSON (or ``@file``), an
``--input`` object, ``--set`` pairs, ``--keys`` lists, limits and confirmations.

``--set`` follows HTTPie's convention, so that a value never changes type by accident:
``key=value`` is the string ``value``; ``key:=json`` is JSON (``n:=3``, ``ok:=true``,
``tags:='["a", "b"]'``), and JSON that does not parse is an error, never quietly a string.

Every refusal is an :class:`~plait.errors.ArgumentError` naming the option.
"""

import datetime
import json
import re
import sys
import time
from collections.abc import Sequence
from typing import Any

from plait.errors import ArgumentError, NotConfirmedError

__all__ = [
    "check_positive",
    "confirm",
    "parse_context",
    "parse_duration",
    "parse_input",
    "parse_json",
    "parse_keys",
    "parse_sets",
    "parse_since",
    "plural",
]


def parse_json(text: str, what: str) -> Any:
    """JSON text, or ``@path`` for a file holding it (``@-``: standard input)."""
    if text.startswith("@"):
        name = text[1:]
        try:
            if name == "-":
                text = sys.stdin.read()
            else:
                with open(name, encoding="utf-8") as f:
                    text = f.read()
        except OSError as exc:
            raise ArgumentError(what, f"{what}: cannot read {name!r}: {exc.strerror}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        shown = text if len(text) <= 60 else text[:57] + "..."
        raise ArgumentError(what, f"{what} is not valid JSON ({exc.msg} at column {exc.colno}): {shown!r}") from None


def parse_input(text: str) -> dict[str, Any]:
    """``--input``: a JSON object of channel values (or ``@file`` holding one)."""
    return _json_object(text, "--input", "channel values", '{"topic": "tides"}')


def _json_object(text: str, option: str, what: str, example: str) -> dict[str, Any]:
    value = parse_json(text, option)
    if not isinstance(value, dict):
        raise ArgumentError(option, f"{option} is a JSON object of {what}, like '{example}'; got {_kind(value)}")
    return value


def parse_sets(items: Sequence[str], option: str = "--set") -> list[tuple[str, Any]]:
    """``key=value`` (a string) and ``key:=json`` pairs, in the order given (a key given twice
    is written twice: an appending reducer keeps both)."""
    out: list[tuple[str, Any]] = []
    for item in items:
        eq = item.find("=")
        if eq <= 0 or (eq == 1 and item[0] == ":"):
            raise ArgumentError(
                option, f"{option} takes key=value (a string) or key:=json (any JSON value), got {item!r}"
            )
        if item[eq - 1] == ":":
            key, raw = item[: eq - 1], item[eq + 1 :]
            try:
                out.append((key, json.loads(raw)))
            except json.JSONDecodeError as exc:
                raise ArgumentError(
                    option,
                    f"{option} {key}:= takes JSON, and {raw!r} is not ({exc.msg} at column {exc.colno}); "
                    f"for a string write {key}={raw}",
                ) from None
        else:
            out.append((item[:eq], item[eq + 1 :]))
    return out


def parse_metadata(items: Sequence[str] | None, option: str = "--metadata") -> dict[str, Any] | None:
    """``--metadata KEY=VALUE`` (repeatable) as the filter a listing takes: VALUE as JSON when
    it parses as JSON (``n=1``, ``ok=true``, ``run={"attempt": 2}``), else as the text it is
    (``user=ada``); None when none is given."""
    if not items:
        return None
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ArgumentError(
                option,
                f"{option} takes KEY=VALUE (VALUE as JSON, else as text), like {option} user=ada "
                f"or {option} 'run={{\"attempt\": 2}}'; got {item!r}",
            )
        if key in out:
            raise ArgumentError(option, f"{option} gives {key!r} twice: give each key once")
        try:
            out[key] = json.loads(raw, parse_constant=_no_constant)
        except ValueError:
            out[key] = raw
    return out


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")  # NaN and Infinity are text here, as JSON has no such numbers


def parse_keys(text: str | None) -> list[str] | None:
    """``--keys a,b``: channel names (None when not given)."""
    if text is None:
        return None
    keys = [k.strip() for k in text.split(",") if k.strip()]
    if not keys:
        raise ArgumentError("--keys", "--keys takes channel names separated by commas, like --keys messages,phase")
    return keys


_AGO = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")
_UNIT = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_since(text: str | None, *, now: float | None = None) -> float | None:
    """``--since``: a time as unix seconds, from a span back from now (``90s``, ``15m``, ``2h``,
    ``7d``) or an ISO 8601 date or time (``2025-01-31``, ``2025-01-31T12:00``; local time
    unless it names a zone, as the tables show local times). None when not given."""
    if text is None:
        return None
    ago = _AGO.match(text.strip())
    if ago:
        return (time.time() if now is None else now) - float(ago.group(1)) * _UNIT[ago.group(2)]
    try:
        when = datetime.datetime.fromisoformat(text.strip())
    except ValueError:
        raise ArgumentError(
            "--since", f"--since takes a span back from now (90s, 15m, 2h, 7d) or an ISO 8601 time, got {text!r}"
        ) from None
    return when.timestamp()  # a naive time is local time


def parse_duration(text: str, option: str) -> float:
    """A span of time in seconds: ``30d``, ``12h``, ``90m``, ``45s`` or plain seconds (``3600``).

    Raises:
        ArgumentError: ``text`` is none of these, or not above zero.
    """
    found = _AGO.match(text.strip())
    try:
        seconds = float(found.group(1)) * _UNIT[found.group(2)] if found else float(text)
    except ValueError:
        seconds = -1.0
    if not seconds > 0 or seconds == float("inf"):
        raise ArgumentError(
            option, f"{option} takes a span of time above zero (30d, 12h, 90m, 45s or seconds), got {text!r}"
        )
    return seconds


def check_positive(value: int | None, option: str) -> None:
    """Refuse a count below 1 (``--limit 0`` would show nothing, a negative one is a typo)."""
    if value is not None and value < 1:
        raise ArgumentError(option, f"{option} must be at least 1, got {value}")


def confirm(question: str, action: str, yes: bool) -> None:
    """Ask ``question`` on stderr and read the answer from stdin, unless ``yes`` (``--yes``).

    Raises:
        NotConfirmedError: the answer was not yes, or there was no answer (stdin closed).
    """
    if yes:
        return
    print(f"{question} [y/N] ", end="", file=sys.stderr, flush=True)
    answer = sys.stdin.readline()
    if not answer or not sys.stdin.isatty():
        print(file=sys.stderr)  # the answer was not echoed: end the question's line
    if not answer:
        raise NotConfirmedError(action, declined=False)
    if answer.strip().lower() not in ("y", "yes"):
        raise NotConfirmedError(action, declined=True)


def plural(count: int, noun: str) -> str:
    """``1 checkpoint``, ``2 checkpoints``."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _kind(value: Any) -> str:
    if isinstance(value, list):
        return "a list"
    if value is None:
        return "null"
    return f"a {type(value).__name__}"


def parse_context(text: str | None) -> dict[str, Any] | None:
    """``--context``: the run's per-run values (a JSON object, or @file), None when not given."""
    return None if text is None else _json_object(text, "--context", "per-run values", '{"model": "small"}')
