"""Reading a ``langgraph.json``-style config file: which graphs to serve, and their environment.

A LangGraph project's file works as it is, so that moving to ``plait serve`` needs no edit::

    {"graphs": {"agent": "./agent.py:graph"}, "env": ".env", "dependencies": ["."]}

Only ``graphs``, ``env`` and ``store`` mean something here; every other key
(``dependencies``, ``python_version``, ``http``, ...) is ignored without a word, because it
describes how LangGraph's own tools build an image, not what a graph needs. A graph path is
relative to the file's folder, as LangGraph reads it; ``env`` is a dotenv file (also relative
to the folder) or a mapping of variable names to values. ``store`` configures the served
memory store as LangGraph's does: ``{"index": {"dims": N, "embed": "./embed.py:fn",
"fields": [...]}, "ttl": {"default_ttl": minutes, "refresh_on_read": true,
"sweep_interval_minutes": N}}``, where ``embed`` names a function (or a LangChain
``Embeddings`` object) the way a graph is named, not a ``provider:model`` of LangChain.

Pure functions (the caller reads the files, applies the environment and loads the graphs),
so that every refusal is one :class:`~plait.errors.ServeConfigError` naming the file and
the key, raised before anything runs.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from plait.errors import ServeConfigError

__all__ = ["ServeFile", "parse_config", "parse_dotenv", "parse_store", "read_config", "read_dotenv", "resolve_target"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ServeFile:
    """What a config file asks for."""

    path: Path
    """The file, as given."""
    graphs: dict[str, str]
    """Graph name -> ``MODULE:GRAPH`` target, a file path made relative to the config's folder."""
    env: dict[str, str]
    """Environment variables to set before the graphs load (from ``env``'s file or mapping)."""
    store: dict[str, Any] = field(default_factory=dict)
    """The memory store's options: ``index`` (its ``embed`` a ``MODULE:ATTR`` target, a file
    path made relative to the config's folder) and ``ttl``, each only when the file gives it."""


def read_config(path: str | os.PathLike[str]) -> ServeFile:
    """Read and check the config file at ``path`` (and the dotenv file its ``env`` names).

    Raises:
        ServeConfigError: the file (or its env file) cannot be read, is not JSON, or a key
            holds something it cannot be.
    """
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise ServeConfigError(
            f"cannot read the config file {os.fspath(file)!r}: {exc.strerror or exc}; pass --config with the path "
            "of a langgraph.json"
        ) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ServeConfigError(
            f"{os.fspath(file)} is not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno}); fix the file"
        ) from None
    config = parse_config(data, file)
    raw_env = data.get("env")
    if isinstance(raw_env, str):
        env = read_dotenv(file.parent / raw_env, named_by=f'{os.fspath(file)}: "env"')
        return replace(config, env=env)
    return config


def parse_config(data: Any, path: str | os.PathLike[str]) -> ServeFile:
    """The graphs and the mapping ``env`` of a parsed config file (``env`` as a file name is
    left to :func:`read_config`, which reads it).

    Raises:
        ServeConfigError: ``data`` is not an object, ``graphs`` is missing or not an object of
            name -> path, or ``env`` is neither a file name nor an object of strings.
    """
    file = Path(path)
    where = os.fspath(file)
    if not isinstance(data, dict):
        raise ServeConfigError(f'{where} must hold a JSON object like {{"graphs": {{"agent": "./agent.py:graph"}}}}')
    graphs = data.get("graphs")
    if not isinstance(graphs, dict) or not graphs:
        raise ServeConfigError(
            f'{where}: "graphs" must be an object of graph name -> "path/to/file.py:graph" with at least one '
            'graph, like {"agent": "./agent.py:graph"}'
        )
    targets: dict[str, str] = {}
    for name, spec in graphs.items():
        path_text = spec.get("path") if isinstance(spec, dict) else spec
        if not isinstance(path_text, str) or not path_text.strip():
            raise ServeConfigError(
                f'{where}: "graphs.{name}" must be a "path/to/file.py:graph" (or module:graph) string, '
                f'or an object with such a "path"; got {json.dumps(spec)[:60]}'
            )
        if not name or ":" in name or "=" in name:
            raise ServeConfigError(f'{where}: "graphs.{name}": a graph name may not be empty or hold ":" or "="')
        targets[name] = resolve_target(path_text.strip(), file.parent, f'{where}: "graphs.{name}"')
    store = parse_store(data.get("store"), file)
    env = data.get("env")
    if env is None or isinstance(env, str):
        return ServeFile(path=file, graphs=targets, env={}, store=store)
    if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
        raise ServeConfigError(
            f'{where}: "env" must be the name of a dotenv file (".env") or an object of variable -> string value'
        )
    return ServeFile(path=file, graphs=targets, env=dict(env), store=store)


_TTL_KEYS = ("default_ttl", "refresh_on_read", "sweep_interval_minutes")
_INDEX_KEYS = ("dims", "embed", "fields")


def parse_store(section: Any, file: Path) -> dict[str, Any]:
    """The checked ``store`` section (``{}`` when there is none): what it may hold is what
    ``plait.Store`` takes, so a refusal here names the key instead of failing at start.

    Raises:
        ServeConfigError: a section plait cannot serve: a custom store (``path``), an unknown
            key, an ``embed`` that is a LangChain ``provider:model`` or no ``MODULE:ATTR``.
    """
    where = f'{os.fspath(file)}: "store'
    if section is None:
        return {}
    if not isinstance(section, dict):
        raise ServeConfigError(f'{where}" must be an object with "index" and/or "ttl"')
    if "path" in section:
        raise ServeConfigError(
            f'{where}.path": plait serve serves its own memory store, in the database of its checkpoints '
            '(--db); remove "path" (a custom BaseStore is not loaded) and keep "index" and "ttl"'
        )
    _known(section, ("index", "ttl"), where + '"')
    out: dict[str, Any] = {}
    ttl = section.get("ttl")
    if ttl is not None:
        if not isinstance(ttl, dict):
            raise ServeConfigError(f'{where}.ttl" must be an object with {", ".join(_TTL_KEYS)}')
        _known(ttl, _TTL_KEYS, where + '.ttl"')
        out["ttl"] = dict(ttl)
    index = section.get("index")
    if index is not None:
        if not isinstance(index, dict):
            raise ServeConfigError(f'{where}.index" must be an object with "dims", "embed" and optionally "fields"')
        _known(index, _INDEX_KEYS, where + '.index"')
        embed = index.get("embed")
        if not isinstance(embed, str) or not embed.strip():
            raise ServeConfigError(
                f'{where}.index.embed" must name the embed function, like "./embed.py:embed" (or module:embed): '
                "a function from a list of texts to a list of vectors"
            )
        attr = embed.strip().rpartition(":")[2]
        if not all(part.isidentifier() for part in attr.split(".")):
            raise ServeConfigError(
                f'{where}.index.embed": {embed!r} reads as a LangChain "provider:model", which plait does not '
                'load; write a function that embeds a list of texts and name it: "./embed.py:embed"'
            )
        out["index"] = {**index, "embed": resolve_target(embed.strip(), file.parent, where + '.index.embed"')}
    return out


def _known(section: dict[str, Any], keys: tuple[str, ...], where: str) -> None:
    unknown = sorted(set(section) - set(keys))
    if unknown:
        raise ServeConfigError(
            f"{where}: {', '.join(map(repr, unknown))} not known here; the keys are {', '.join(keys)}"
        )


def resolve_target(target: str, folder: Path, where: str) -> str:
    """``target`` with a file path made relative to ``folder`` (``./agent.py:graph`` ->
    ``/project/agent.py:graph``); a module target (``app.agent:graph``) is left as it is.

    Raises:
        ServeConfigError: ``target`` has no ``:GRAPH`` part.
    """
    module, sep, attr = target.rpartition(":")
    if not sep or not module or not attr:
        raise ServeConfigError(f"{where}: {target!r} names no graph; write it as ./file.py:graph (or module:graph)")
    if module.endswith(".py") or "/" in module or os.sep in module:
        return f"{os.path.normpath(folder / module)}:{attr}"
    return target


_LINE = re.compile(r"^(?:export\s+)?([A-Za-z_][A-Za-z0-9_.]*)\s*=\s*(.*)$")
_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", '"': '"', "\\": "\\"}


def parse_dotenv(text: str, source: str) -> dict[str, str]:
    """The variables of a dotenv file: ``KEY=VALUE`` lines (``export KEY=VALUE`` too).

    Blank lines and lines starting with ``#`` are skipped; an unquoted value ends at `` #``
    (a comment) and is stripped; a value in single quotes is taken as it is, one in double
    quotes reads ``\\n``, ``\\t``, ``\\"`` and ``\\\\``. No variable expansion: what the file
    says is what is set.

    Raises:
        ServeConfigError: a line that is none of these (``source`` and its number are named).
    """
    out: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = _LINE.match(line)
        value = _value(match.group(2)) if match else None
        if match is None or value is None:
            raise ServeConfigError(
                f"{source}, line {number}: {line[:60]!r} is not KEY=VALUE (a value in quotes must end with "
                "the same quote); fix the line or start it with # to comment it out"
            )
        out[match.group(1)] = value
    return out


def _value(text: str) -> str | None:
    """An assignment's value, None when a quote is not closed."""
    if text[:1] == "'":
        end = text.find("'", 1)
        return None if end < 0 or not _only_comment(text[end + 1 :]) else text[1:end]
    if text[:1] == '"':
        chars: list[str] = []
        i = 1
        while i < len(text):
            c = text[i]
            if c == "\\" and i + 1 < len(text):
                chars.append(_ESCAPES.get(text[i + 1], "\\" + text[i + 1]))
                i += 2
                continue
            if c == '"':
                return "".join(chars) if _only_comment(text[i + 1 :]) else None
            chars.append(c)
            i += 1
        return None
    comment = re.search(r"\s#", text)
    return (text[: comment.start()] if comment else text).strip()


def _only_comment(rest: str) -> bool:
    rest = rest.strip()
    return not rest or rest.startswith("#")


def read_dotenv(path: str | os.PathLike[str], *, named_by: str | None = None) -> dict[str, str]:
    """The variables of the dotenv file at ``path`` (``named_by``: the config key that names it).

    Raises:
        ServeConfigError: the file cannot be read, or a line is not ``KEY=VALUE``.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        where = f"{named_by} names {os.fspath(path)!r}, which" if named_by else f"the env file {os.fspath(path)!r}"
        raise ServeConfigError(
            f"{where} cannot be read ({exc.strerror or exc}); create the file, or name another one"
        ) from None
    return parse_dotenv(text, os.fspath(path))
