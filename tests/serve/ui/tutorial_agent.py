"""The tutorial's agent (examples/agent.py), its scripted model slowed to a human pace.

``plait serve --graph agent=tests/serve/ui/tutorial_agent.py:graph`` serves the same graph
as ``--graph agent=examples/agent.py:graph``; only the model's stream waits
``$PLAIT_UI_TOKEN_DELAY`` seconds (default 0.15) before each piece, so that a browser sees the
answer grow before the run ends (the scripted model otherwise answers in a millisecond).
"""

from __future__ import annotations

import importlib.util
import os
import pathlib
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

EXAMPLES = pathlib.Path(__file__).resolve().parents[3] / "examples"
if str(EXAMPLES) not in sys.path:
    sys.path.insert(0, str(EXAMPLES))  # examples/agent.py imports chat_model from its folder

_spec = importlib.util.spec_from_file_location("plait_ui_tutorial_agent", EXAMPLES / "agent.py")
assert _spec is not None and _spec.loader is not None
example = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(example)


class _SlowModel(example.ScriptedChatModel):  # type: ignore[misc, name-defined]
    def stream(self, messages: Sequence[Mapping[str, Any]]) -> Iterator[Any]:
        delay = float(os.environ.get("PLAIT_UI_TOKEN_DELAY", "0.15"))
        for piece in super().stream(messages):
            time.sleep(delay)
            yield piece


example.model = _SlowModel(example.RULES)  # type: ignore[attr-defined]  # the agent node reads it
graph = example.graph
