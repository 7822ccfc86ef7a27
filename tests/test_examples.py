"""Every file in examples/ runs, so the README never lies."""

import pathlib
import re
import subprocess
import sys

import pytest

EXAMPLES = sorted((pathlib.Path(__file__).parent.parent / "examples").glob("*.py"))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_runs(path: pathlib.Path, tmp_path: pathlib.Path) -> None:
    out = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip(), "an example must show the user something"


def test_the_tutorial_shows_the_scripted_model_of_the_examples() -> None:
    """docs/tutorial.md copies examples/chat_model.py's model into a block: they must not drift."""
    root = pathlib.Path(__file__).parent.parent
    example = (root / "examples" / "chat_model.py").read_text(encoding="utf-8")
    model = example[example.index("class ScriptedChatModel") : example.index("\n\nRULES = ")].rstrip()
    assert model in (root / "docs" / "tutorial.md").read_text(encoding="utf-8")


def test_the_memory_howto_is_the_memory_example() -> None:
    """docs/memory.md walks through examples/memory_agent.py: its python blocks, in order, are
    the program (after its docstring), so the page and the program cannot drift apart."""
    root = pathlib.Path(__file__).parent.parent
    example = (root / "examples" / "memory_agent.py").read_text(encoding="utf-8")
    program = example[example.index('"""', 3) + 3 :]
    page = (root / "docs" / "memory.md").read_text(encoding="utf-8")
    blocks = re.findall(r"^```python[ \t]*\n(.*?)^```[ \t]*$", page, re.DOTALL | re.MULTILINE)

    def lines(code: str) -> list[str]:
        return [line for line in code.splitlines() if line.strip()]

    assert len(blocks) >= 5
    assert lines("\n".join(blocks)) == lines(program)
