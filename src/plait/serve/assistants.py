"""The served graphs as the API's assistants: one per graph, named by the graph's name, with
a stable id (a UUID5 of the name in the namespace LangGraph's servers use, so that a client
that stored an assistant id finds the same one again on plait)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from plait.errors import AssistantNotFoundError
from plait.graph.compiled import CompiledGraph
from plait.serve.wire import iso

__all__ = ["Assistant", "Assistants", "assistant_id_of"]

_GRAPH_NAMESPACE = uuid.UUID("6ba7b821-9dad-11d1-80b4-00c04fd430c8")


def assistant_id_of(name: str) -> str:
    """The assistant id of the graph served as ``name``."""
    return str(uuid.uuid5(_GRAPH_NAMESPACE, name))


@dataclass(frozen=True, slots=True)
class Assistant:
    name: str
    graph: CompiledGraph
    assistant_id: str
    created_at: float

    def to_json(self) -> dict[str, Any]:
        return {
            "assistant_id": self.assistant_id,
            "graph_id": self.name,
            "name": self.name,
            "description": None,
            "config": {},
            "context": {},
            "metadata": {"created_by": "system"},
            "version": 1,
            "created_at": iso(self.created_at),
            "updated_at": iso(self.created_at),
        }


class Assistants:
    """Looks an assistant up by its id or by its graph's name (clients send either)."""

    def __init__(self, graphs: Mapping[str, CompiledGraph], created_at: float) -> None:
        self.by_id: dict[str, Assistant] = {}
        self.by_name: dict[str, Assistant] = {}
        for name, graph in graphs.items():
            a = Assistant(name=name, graph=graph, assistant_id=assistant_id_of(name), created_at=created_at)
            self.by_id[a.assistant_id] = a
            self.by_name[name] = a

    def find(self, key: str) -> Assistant:
        found = self.by_name.get(key) or self.by_id.get(key)
        if found is None:
            raise AssistantNotFoundError(key, list(self.by_name))
        return found

    def all(self) -> list[Assistant]:
        return list(self.by_name.values())
