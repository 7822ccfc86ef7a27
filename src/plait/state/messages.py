"""Chat messages in LangChain's shape: reading a model's stream, building its message.

plait stores messages as JSON dicts in either of the two shapes chat code uses: OpenAI's
(``{"role": "user" | "assistant" | "tool" | "system", ...}``) and LangChain's serialized one
(``{"type": "human" | "ai" | "tool" | "system", ...}``); this module reads both. A model's
streamed answer is built in LangChain's shape, because that is what LangGraph's clients (its
SDKs, ``useStream``) expect of ``messages`` stream items:

- :func:`read_chunk` reads one item of a model's stream (a text delta, a chunk dict, or a
  LangChain ``AIMessageChunk``, duck-typed: plait never imports LangChain);
- :class:`MessageBuilder` adds the chunks up into the finished message, as LangChain's
  ``AIMessageChunk.__add__`` does (text concatenated, content blocks merged by ``index``,
  tool call chunks merged by ``index`` and their ``args`` parsed once complete);
- :func:`chunk_item` is the stream item of one chunk; :func:`as_langchain` the item of a
  whole message a node wrote;
- :func:`written_message` reads the other ways LangGraph code writes a message (a ``(role,
  content)`` tuple, LangChain's ``dumpd`` constructor dict) as a message of one of the two
  shapes, before it is stored.

Pure: no I/O, no run.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from plait._frozen import FrozenDict
from plait.errors import MessageChunkError

__all__ = [
    "Chunk",
    "MessageBuilder",
    "as_langchain",
    "chunk_item",
    "kind_of",
    "read_chunk",
    "written_message",
]

_KIND_OF_ROLE = {"user": "human", "assistant": "ai", "tool": "tool", "system": "system", "developer": "system"}
"""OpenAI's roles as LangChain's message types."""

_KINDS = frozenset({"human", "ai", "tool", "system", "function", "chat"})

_KEEP = frozenset({"id", "type", "name", "index"})
"""Keys of a content block or tool call chunk that name it: a later chunk of the same
``index`` does not extend them (every other string is a fragment, concatenated)."""


def kind_of(message: Mapping[str, Any]) -> str | None:
    """The LangChain type of a message in either shape (``"human"``, ``"ai"``, ``"tool"``,
    ``"system"``), None for what is not a message; a chunk type counts as its message's
    (``"AIMessageChunk"`` is ``"ai"``)."""
    kind = message.get("type")
    if isinstance(kind, str):
        if kind in _KINDS:
            return kind
        if kind.endswith("MessageChunk"):
            return kind[: -len("MessageChunk")].lower()
    role = message.get("role")
    if isinstance(role, str):
        return _KIND_OF_ROLE.get(role, role)
    return None


def as_langchain(message: Mapping[str, Any]) -> Mapping[str, Any]:
    """``message`` in LangChain's shape: one in OpenAI's gets ``type`` for its ``role`` (the
    other keys as they are); one already in LangChain's shape is returned as it is."""
    if "role" not in message or isinstance(message.get("type"), str):
        return message
    out = {"type": kind_of(message)}
    out.update((k, v) for k, v in message.items() if k != "role")
    return out


@dataclass(frozen=True, slots=True)
class Chunk:
    """One item of a model's stream, read (see :func:`read_chunk`)."""

    content: Any
    """A text delta (str) or a list of content blocks."""
    tool_call_chunks: list[dict[str, Any]]
    """Fragments of tool calls, each ``{"name", "args" (a JSON fragment), "id", "index"}``."""
    tool_calls: list[dict[str, Any]]
    """Whole tool calls (``{"name", "args" (a dict), "id"}``) of a chunk that has no fragments."""
    response_metadata: Mapping[str, Any] | None = None
    usage_metadata: Mapping[str, Any] | None = None


def read_chunk(chunk: Any, index: int) -> Chunk:
    """Read the ``index``-th item of a model's stream: a ``str`` (a text delta), a mapping in
    LangChain's shape (``{"content": ..., "tool_call_chunks": [...]}``) or an object with a
    ``.content`` attribute (LangChain's ``AIMessageChunk``; its ``tool_call_chunks``,
    ``tool_calls``, ``response_metadata`` and ``usage_metadata`` are read when present).

    Raises:
        MessageChunkError: anything else, or content that is neither a str nor a list.
    """
    if isinstance(chunk, str):
        return Chunk(chunk, [], [])
    if isinstance(chunk, Mapping):
        get = chunk.get
    elif hasattr(chunk, "content"):

        def get(key: str, default: Any = None) -> Any:
            return getattr(chunk, key, default)
    else:
        raise MessageChunkError(index, f"is a {type(chunk).__name__}")
    content = get("content", "")
    if content is None:
        content = ""
    if not isinstance(content, str | list):
        raise MessageChunkError(index, f"has content of type {type(content).__name__}, not a str or a list of blocks")
    fragments = [dict(c) for c in get("tool_call_chunks", None) or ()]
    whole = [] if fragments else [dict(c) for c in get("tool_calls", None) or ()]
    return Chunk(content, fragments, whole, get("response_metadata", None) or None, get("usage_metadata", None) or None)


def chunk_item(message_id: str, chunk: Chunk) -> dict[str, Any]:
    """The ``messages`` stream item of one chunk: LangChain's serialized ``AIMessageChunk``,
    as LangGraph's server sends it, every chunk of a message under the message's id (a
    client merges them by id)."""
    return {
        "type": "AIMessageChunk",
        "id": message_id,
        "content": chunk.content,
        "tool_call_chunks": [{**c, "type": "tool_call_chunk"} for c in chunk.tool_call_chunks],
        "additional_kwargs": {},
        "response_metadata": dict(chunk.response_metadata or {}),
        "name": None,
        "tool_calls": [_tool_call(c) for c in chunk.tool_calls],
        "invalid_tool_calls": [],
        "usage_metadata": chunk.usage_metadata,
    }


class MessageBuilder:
    """Adds a stream's chunks up into the finished message (see :meth:`message`)."""

    __slots__ = ("_at", "_blocks", "_calls", "_text", "_usage", "id", "response_metadata")

    def __init__(self, message_id: str) -> None:
        self.id = message_id
        self._text: list[str] = []
        """The content so far while it is only text (joined once, at the end)."""
        self._blocks: list[Any] | None = None
        """The content so far once a list of blocks came (None before)."""
        self._at: dict[Any, int] = {}
        """Where the content block of each ``index`` is in ``_blocks``."""
        self._calls: list[dict[str, Any]] = []
        self._usage: dict[str, Any] | None = None
        self.response_metadata: dict[str, Any] = {}

    def add(self, chunk: Chunk) -> None:
        content = chunk.content
        if type(content) is str:
            if content:
                self._add_text(content)
        else:
            self._add_blocks(content)
        for fragment in chunk.tool_call_chunks:
            _merge_indexed(self._calls, fragment)
        self._calls.extend({**c, "whole": True} for c in chunk.tool_calls)
        if chunk.response_metadata:
            self.response_metadata.update(chunk.response_metadata)
        if chunk.usage_metadata:
            self._usage = _add_usage(self._usage or {}, chunk.usage_metadata)

    def _add_text(self, text: str) -> None:
        blocks = self._blocks
        if blocks is None:
            self._text.append(text)
        elif blocks and isinstance(blocks[-1], str):
            blocks[-1] += text
        else:
            blocks.append(text)

    def _add_blocks(self, content: list[Any]) -> None:
        if self._blocks is None:  # text so far becomes the list's first item (as LangChain does)
            self._blocks = ["".join(self._text)] if self._text else []
            self._text = []
        blocks = self._blocks
        for block in content:
            index = block.get("index") if isinstance(block, Mapping) else None
            if isinstance(index, int | str) and not isinstance(index, bool):
                at = self._at.get(index)
                if at is not None:
                    blocks[at] = _extend(blocks[at], block)
                    continue
                self._at[index] = len(blocks)
            blocks.append(dict(block) if isinstance(block, Mapping) else block)

    @property
    def content(self) -> Any:
        """The content so far: a str, or a list of blocks once a chunk brought blocks."""
        return "".join(self._text) if self._blocks is None else list(self._blocks)

    def message(self) -> dict[str, Any]:
        """The finished message, in the keys of LangChain's ``AIMessage`` (so
        ``AIMessage(**message)`` rebuilds it): tool call fragments whose ``args`` parse as a
        JSON object are ``tool_calls``; the others are kept in ``invalid_tool_calls``, with
        their raw ``args``, as LangChain keeps them."""
        calls: list[dict[str, Any]] = []
        invalid: list[dict[str, Any]] = []
        for c in self._calls:
            if c.get("whole"):
                calls.append(_tool_call(c))
                continue
            raw = c.get("args") or ""
            try:
                args = json.loads(raw) if raw.strip() else {}
            except (TypeError, ValueError):
                args = None
            if isinstance(args, dict):
                calls.append({"name": c.get("name") or "", "args": args, "id": c.get("id"), "type": "tool_call"})
            else:
                invalid.append(
                    {"name": c.get("name"), "args": raw, "id": c.get("id"), "error": None, "type": "invalid_tool_call"}
                )
        return {
            "type": "ai",
            "id": self.id,
            "content": self.content,
            "tool_calls": calls,
            "invalid_tool_calls": invalid,
            "additional_kwargs": {},
            "response_metadata": dict(self.response_metadata),
            "usage_metadata": self._usage,
            "name": None,
        }


def _tool_call(call: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "name": call.get("name") or "",
        "args": dict(call.get("args") or {}),
        "id": call.get("id"),
        "type": "tool_call",
    }


def _merge_indexed(items: list[dict[str, Any]], fragment: dict[str, Any]) -> None:
    """Add a tool call fragment: to the call of the same ``index`` when there is one."""
    index = fragment.get("index")
    if index is not None:
        for i, item in enumerate(items):
            if item.get("index") == index and not item.get("whole"):
                items[i] = _extend(item, fragment)
                return
    items.append({k: v for k, v in fragment.items() if k != "type"})


def _extend(current: Mapping[str, Any], more: Mapping[str, Any]) -> dict[str, Any]:
    """A content block or tool call with a later fragment of it added: strings are
    concatenated (text, JSON fragments), except the keys that name it; a key it lacked is
    taken as it comes."""
    out = dict(current)
    for key, value in more.items():
        have = out.get(key)
        if have is None or have == "":
            out[key] = value
        elif key not in _KEEP and isinstance(have, str) and isinstance(value, str):
            out[key] = have + value
    return out


def _add_usage(total: Mapping[str, Any], more: Mapping[str, Any]) -> dict[str, Any]:
    """Token counts summed key by key (nested details too), as LangChain adds them up."""
    out = dict(total)
    for key, value in more.items():
        have = out.get(key)
        if isinstance(value, int | float) and isinstance(have, int | float):
            out[key] = have + value
        elif isinstance(value, Mapping) and isinstance(have, Mapping):
            out[key] = _add_usage(have, value)
        else:
            out[key] = value
    return out


_TUPLE_KEYS = {
    "user": "role",
    "assistant": "role",
    "system": "role",
    "developer": "role",
    "human": "type",
    "ai": "type",
}
"""The roles a ``(role, content)`` tuple may name, and the key it keeps its role under: OpenAI's
names as ``role``, LangChain's (``human``, ``ai``) as ``type``, so the message is kept as
written."""

_CLASS_KIND = {
    "HumanMessage": "human",
    "AIMessage": "ai",
    "SystemMessage": "system",
    "ToolMessage": "tool",
    "RemoveMessage": "remove",
    "HumanMessageChunk": "human",
    "AIMessageChunk": "ai",
    "SystemMessageChunk": "system",
    "ToolMessageChunk": "tool",
}
"""LangChain's message classes, as the ``type`` of their serialized shape."""


def written_message(item: Any) -> Any:
    """``item`` as a message of a shape plait keeps, when LangGraph code wrote it another way:
    a ``(role, content)`` tuple (``("user", "hi")``, ``("ai", "hello")``), as LangGraph's
    ``add_messages`` reads one, or LangChain's ``dumpd`` dict (``{"lc": 1, "type":
    "constructor", "id": [..., "HumanMessage"], "kwargs": {...}}``) as its serialized shape
    (``{"type": "human", ...kwargs}``). Anything else is returned as it is (the reducer
    refuses what is not a message). ``item`` is frozen JSON data (a tuple arrives as a list)."""
    if isinstance(item, Mapping):
        if item.get("lc") == 1 and item.get("type") == "constructor":
            ident, kwargs = item.get("id"), item.get("kwargs")
            kind = _CLASS_KIND.get(ident[-1]) if isinstance(ident, list) and ident else None
            if kind is not None and isinstance(kwargs, Mapping):
                return FrozenDict({**kwargs, "type": kind})
        return item
    if isinstance(item, list) and len(item) == 2 and isinstance(item[0], str) and isinstance(item[1], str | list):
        key = _TUPLE_KEYS.get(item[0])
        if key is not None:
            return FrozenDict({key: item[0], "content": item[1]})
    return item
