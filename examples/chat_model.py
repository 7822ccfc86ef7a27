"""A scripted chat model: stands in for an LLM in the tutorial and the agent example, offline.

It answers the way a tool-calling model does, from rules instead of weights: a user message
that matches a rule's pattern gets a reply asking for that rule's tool (the pattern's named
groups are the call's arguments); once the tools have answered, it writes a reply from their
results. Messages are the JSON dicts plait stores (see plait.prebuilt):

    {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "name": "get_weather", "args": {...}}]}

``stream(messages)`` sends the same reply as a streaming model does, for ``ctx.stream_message``:
its text a word at a time, each tool call as fragments of its JSON arguments (LangChain's chunk
shape).

A real client goes where ``invoke`` is called: see docs/tutorial.md, "A real model".

Run it: python examples/chat_model.py
"""

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any


class ScriptedChatModel:
    """``invoke(messages) -> message``: deterministic, no network, no weights."""

    def __init__(self, rules: Sequence[tuple[str, str]]) -> None:
        """``rules``: ``(pattern, tool)`` pairs; a pattern's named groups become the call's args."""
        self.rules = [(re.compile(pattern, re.IGNORECASE), tool) for pattern, tool in rules]
        self.calls = 0  # how many times the "model" was called (what an LLM bills for)

    def invoke(self, messages: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        self.calls += 1
        last = messages[-1]
        if last.get("role", last.get("type")) == "tool":  # the tools answered: reply from what they said
            results = []
            for m in reversed(messages):
                if m.get("role", m.get("type")) != "tool":
                    break
                results.append(f"{m['name']}: {m['content']}")
            return {"role": "assistant", "content": "Done. " + "; ".join(reversed(results))}
        calls = []
        for sentence in re.split(r"[.;?!](?:\s+|$)", self.text_of(last)):
            for pattern, tool in self.rules:
                match = pattern.search(sentence)
                if match:
                    calls.append({"id": f"call_{self.calls}_{len(calls) + 1}", "name": tool, "args": match.groupdict()})
                    break
        if not calls:
            return {"role": "assistant", "content": "I can look up the weather and send emails."}
        return {"role": "assistant", "content": "", "tool_calls": calls}

    @staticmethod
    def text_of(message: Mapping[str, Any]) -> str:
        """The message's text: its content, or the text of its content blocks (a chat UI such
        as agent-chat-ui sends ``[{"type": "text", "text": ...}]``)."""
        content = message.get("content", "")
        if isinstance(content, str):
            return content
        return " ".join(b["text"] for b in content if isinstance(b, Mapping) and isinstance(b.get("text"), str))

    def stream(self, messages: Sequence[Mapping[str, Any]]) -> Iterator[Any]:
        """The reply of ``invoke`` in pieces, as a streaming model sends it."""
        reply = self.invoke(messages)
        yield from re.findall(r"\S+\s*", reply["content"])  # text deltas
        for i, call in enumerate(reply.get("tool_calls", [])):
            args = json.dumps(call["args"])
            first = {"index": i, "id": call["id"], "name": call["name"], "args": args[: len(args) // 2]}
            yield {"content": "", "tool_call_chunks": [first]}
            yield {"content": "", "tool_call_chunks": [{"index": i, "args": args[len(args) // 2 :]}]}


RULES = [
    (r"weather in (?P<city>[A-Z][a-z]+)", "get_weather"),
    (r"email (?P<to>\S+@\S+?) (?:that|saying) (?P<body>.+)", "send_email"),
]
"""The rules of the tutorial's agent."""


if __name__ == "__main__":
    model = ScriptedChatModel(RULES)
    ask = [{"role": "user", "content": "What's the weather in Oslo? Then email ann@example.com saying bring a coat"}]
    print(model.invoke(ask))
    answered = [*ask, {"role": "tool", "name": "get_weather", "content": "4°C, light rain", "tool_call_id": "x"}]
    print(model.invoke(answered))
