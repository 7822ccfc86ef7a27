"""Reading the exported spans as the tree they form."""

from __future__ import annotations

from collections.abc import Sequence

from opentelemetry.sdk.trace import ReadableSpan


class Tree:
    def __init__(self, spans: Sequence[ReadableSpan]) -> None:
        self.spans = list(spans)

    def named(self, name: str) -> list[ReadableSpan]:
        return [s for s in self.spans if s.name == name]

    def one(self, name: str) -> ReadableSpan:
        found = self.named(name)
        assert len(found) == 1, [s.name for s in self.spans]
        return found[0]

    def children(self, parent: ReadableSpan, name: str | None = None) -> list[ReadableSpan]:
        pid = parent.context.span_id
        return [
            s
            for s in sorted(self.spans, key=lambda s: s.start_time or 0)
            if s.parent is not None and s.parent.span_id == pid and (name is None or s.name == name)
        ]

    def parent(self, span: ReadableSpan) -> ReadableSpan:
        assert span.parent is not None, span.name
        (found,) = [s for s in self.spans if s.context.span_id == span.parent.span_id]
        return found

    def roots(self) -> list[ReadableSpan]:
        return [s for s in self.spans if s.parent is None]
