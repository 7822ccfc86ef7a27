"""The file store's stored retention policy: ``retention-policy.json`` in its folder, written
through a temporary file renamed over it (a reader sees the old policy or the new, never part
of one). Thread files end in ``.jsonl``, so no listing mistakes it for a thread."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

__all__ = ["POLICY_FILE", "read_policy", "write_policy"]

POLICY_FILE = "retention-policy.json"


def read_policy(folder: Path) -> Any:
    """The stored policy as JSON data, or None when none is stored."""
    try:
        return json.loads((folder / POLICY_FILE).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None


def write_policy(folder: Path, data: dict[str, Any] | None) -> None:
    """Store ``data`` as the policy durably, or remove it (None)."""
    path = folder / POLICY_FILE
    if data is None:
        path.unlink(missing_ok=True)
        return
    tmp = path.with_suffix(".json.tmp")
    with open(tmp, "w", encoding="utf-8") as out:
        out.write(json.dumps(data))
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)
