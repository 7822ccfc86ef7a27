"""The thread page's chat view: a state channel of chat messages read as a conversation.

A chat agent's state is mostly its messages; as a JSON tree they read badly (a tool call is
three levels down). This module finds the channel that holds them and turns each message
into a :class:`ChatEntry` the ``_chat.html`` partial draws: who speaks, the text, the tool
calls an AI message makes and the tool result answering one. Both shapes
:class:`plait.AppendMessages` keeps are read: LangChain's serialized one (``type``: human,
ai, tool, system) and OpenAI's (``role``: user, assistant, tool, system; a tool call's
``function`` with JSON ``arguments``). Nothing here builds markup: the template escapes.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Chat", "ChatEntry", "ToolCall", "asked", "chat_of", "looks_like_messages", "question_of"]

KINDS = {
    "human": "human",
    "user": "human",
    "ai": "ai",
    "assistant": "ai",
    "tool": "tool",
    "function": "tool",
    "system": "system",
    "developer": "system",
}
"""A message's ``type`` or ``role`` -> the kind the view draws it as (others: ``other``)."""
SHOWN = 200
"""Messages the view shows at most, the last ones: a page stays light however long the chat
(the state tree and the API have them all)."""


@dataclass(frozen=True, slots=True)
class ToolCall:
    name: str
    args: str
    """The arguments as indented JSON (OpenAI's JSON text is parsed first, when it parses)."""
    id: str = ""


@dataclass(frozen=True, slots=True)
class ChatEntry:
    kind: str
    """human, ai, tool, system or other: the CSS class and the label."""
    speaker: str
    """As the message names itself (its type or role, and its name when it has one)."""
    texts: tuple[str, ...]
    """The text parts; a content block that is not text is shown as its JSON."""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str = ""
    """A tool result: the call it answers."""
    id: str = ""


@dataclass(frozen=True, slots=True)
class Chat:
    channel: str
    entries: tuple[ChatEntry, ...] = field(default_factory=tuple)
    earlier: int = 0
    """Messages before the first entry, left out (a long chat shows its last :data:`SHOWN`)."""


def _kind_of(message: Mapping[str, Any]) -> str | None:
    said = message.get("type", message.get("role"))
    return KINDS.get(said) if isinstance(said, str) else None


def looks_like_messages(value: Any) -> bool:
    """A non-empty list whose every item is a chat message: a mapping with a known ``type``
    or ``role`` and a ``content`` (or, an AI message, only its ``tool_calls``)."""
    if not isinstance(value, list | tuple) or not value:
        return False
    return all(
        isinstance(m, Mapping) and _kind_of(m) is not None and ("content" in m or "tool_calls" in m) for m in value
    )


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def _texts(content: Any) -> tuple[str, ...]:
    if content is None or content == "":
        return ()
    if isinstance(content, str):
        return (content,)
    if isinstance(content, list | tuple):
        out: list[str] = []
        for block in content:
            if isinstance(block, str):
                out.append(block)
            elif (
                isinstance(block, Mapping)
                and block.get("type", "text") == "text"
                and isinstance(block.get("text"), str)
            ):
                out.append(block["text"])
            else:
                out.append(_pretty(block))
        return tuple(out)
    return (_pretty(content),)


def _tool_call(call: Any) -> ToolCall:
    if not isinstance(call, Mapping):
        return ToolCall(name="?", args=_pretty(call))
    function = call.get("function")
    if isinstance(function, Mapping):  # OpenAI's: {"function": {"name", "arguments": "<json>"}}
        args: Any = function.get("arguments", {})
        if isinstance(args, str):
            with contextlib.suppress(ValueError):  # not JSON after all: shown as the text it is
                args = json.loads(args)
        return ToolCall(name=str(function.get("name", "?")), args=_pretty(args), id=str(call.get("id") or ""))
    return ToolCall(name=str(call.get("name", "?")), args=_pretty(call.get("args", {})), id=str(call.get("id") or ""))


def entry_of(message: Mapping[str, Any]) -> ChatEntry:
    kind = _kind_of(message) or "other"
    said = str(message.get("type", message.get("role", "")))
    name = message.get("name")
    calls = message.get("tool_calls")
    return ChatEntry(
        kind=kind,
        speaker=f"{said} · {name}" if isinstance(name, str) and name else said,
        texts=_texts(message.get("content")),
        tool_calls=tuple(_tool_call(c) for c in calls) if isinstance(calls, list | tuple) else (),
        tool_call_id=str(message.get("tool_call_id") or ""),
        id=str(message.get("id") or ""),
    )


def chat_channel(values: Mapping[str, Any]) -> str | None:
    """``messages`` when it holds chat messages, else the first channel (by name) that does."""
    if looks_like_messages(values.get("messages")):
        return "messages"
    return next((k for k in sorted(values) if looks_like_messages(values[k])), None)


def chat_of(values: Mapping[str, Any]) -> Chat | None:
    """The conversation a checkpoint's values hold (None: no channel holds messages)."""
    channel = chat_channel(values)
    if channel is None:
        return None
    messages: Sequence[Mapping[str, Any]] = values[channel]
    earlier = max(0, len(messages) - SHOWN)
    return Chat(channel=channel, entries=tuple(entry_of(m) for m in messages[earlier:]), earlier=earlier)


QUESTION_KEYS = ("question", "ask", "prompt", "message")
"""Where an interrupt's payload (a mapping) usually holds the question put to the human."""


def asked(value: Any) -> str:
    """An interrupt's payload as the page shows it: text as it is, else its JSON."""
    return value if isinstance(value, str) else _pretty(value)


def question_of(value: Any) -> str | None:
    """The question an interrupt's payload puts, when it says it in so many words: the
    payload itself when it is text, or its ``question`` (``ask``, ``prompt``, ``message``)."""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        return next((value[k] for k in QUESTION_KEYS if isinstance(value.get(k), str)), None)
    return None
