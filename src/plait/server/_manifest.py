"""Rewrite ``static/MANIFEST.json`` after changing an asset: ``python -m plait.server._manifest``.

The manifest pins every file served under ``/static`` by sha256, with its version, license
and origin; ``tests/server/test_static.py`` fails when a file and its entry disagree, so an
asset can never change unnoticed.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

STATIC = Path(__file__).parent / "static"
ABOUT = (
    "Every file served under /static: written for plait (no third-party code, no CDN), pinned by sha256; "
    "tests/server/test_static.py checks each entry. Rewrite with: python -m plait.server._manifest"
)


def build() -> dict[str, object]:
    from plait import __version__

    files = {
        p.name: {
            "version": __version__,
            "license": "Apache-2.0",
            "origin": "plait",
            "sha256": hashlib.sha256(p.read_bytes()).hexdigest(),
        }
        for p in sorted(STATIC.iterdir())
        if p.name != "MANIFEST.json"
    }
    return {"about": ABOUT, "files": files}


if __name__ == "__main__":
    (STATIC / "MANIFEST.json").write_text(json.dumps(build(), indent=2) + "\n")
