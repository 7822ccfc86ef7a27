"""The page's assets are served from the package, each pinned in MANIFEST.json by version,
license and sha256, and the pages load nothing from anywhere else."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from fastapi.testclient import TestClient

import plait.server

STATIC = Path(plait.server.__file__).parent / "static"
TEMPLATES = Path(plait.server.__file__).parent / "templates"


def test_every_asset_is_in_the_manifest_with_its_hash_version_and_license() -> None:
    manifest = json.loads((STATIC / "MANIFEST.json").read_text())["files"]
    served = {p.name for p in STATIC.iterdir() if p.name != "MANIFEST.json"}
    assert set(manifest) == served
    for name, entry in manifest.items():
        assert hashlib.sha256((STATIC / name).read_bytes()).hexdigest() == entry["sha256"], name
        assert entry["version"] and entry["license"], name


def test_templates_and_assets_load_nothing_from_another_origin() -> None:
    for path in [*STATIC.iterdir(), *TEMPLATES.iterdir()]:
        text = path.read_text()
        assert not re.search(r"(src|href)=\"(https?:)?//", text), path
        assert "<script>" not in text and " style=" not in text, path  # the CSP allows neither


def test_assets_are_served(client: TestClient) -> None:
    js = client.get("/static/studio.js")
    assert js.status_code == 200 and "javascript" in js.headers["content-type"]
    assert client.get("/static/studio.css").status_code == 200
    assert client.get("/static/../app.py").status_code == 404
