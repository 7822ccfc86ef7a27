"""Every ```python block in docs/*.md and the README runs: each file's blocks, in order, in one
fresh namespace."""

from __future__ import annotations

import pathlib
import re
import sys
import types

import pytest

DOCS = pathlib.Path(__file__).resolve().parent.parent / "docs"
FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.DOTALL | re.MULTILINE)
README = DOCS.parent / "README.md"
PAGES = sorted(p for p in [*DOCS.glob("*.md"), README] if FENCE.search(p.read_text(encoding="utf-8")))


def blocks(page: pathlib.Path) -> list[tuple[int, str]]:
    """(line number, code) of each python block."""
    text = page.read_text(encoding="utf-8")
    return [(text.count("\n", 0, m.start()) + 2, m.group(1)) for m in FENCE.finditer(text)]


def test_the_docs_have_python_examples() -> None:
    assert len(PAGES) >= 4


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_python_blocks_run(page: pathlib.Path, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    # A real (registered) module, so that typing.get_type_hints finds the blocks' globals.
    module = types.ModuleType(f"docs_{page.stem.replace('-', '_')}")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    namespace = module.__dict__
    for line, code in blocks(page):
        compiled = compile(code, f"{page.name}:{line}", "exec")
        try:
            exec(compiled, namespace)
        except Exception as exc:  # name the block that failed
            pytest.fail(f"{page.name}, the python block at line {line} raised {type(exc).__name__}: {exc}")


def test_no_block_is_left_unfenced() -> None:
    """A ```py or ```Python fence would silently skip the test; only ```python is used."""
    for page in [*DOCS.glob("*.md"), README]:
        for fence in re.findall(r"^```(\w+)", page.read_text(encoding="utf-8"), re.MULTILINE):
            assert fence in ("python", "console", "text", "mermaid", "toml", "json", "bash", "sql"), (page.name, fence)
