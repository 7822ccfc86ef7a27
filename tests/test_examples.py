"""Every file in examples/ runs, so the README never lies."""

import pathlib
import subprocess
import sys

import pytest

EXAMPLES = sorted((pathlib.Path(__file__).parent.parent / "examples").glob("*.py"))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_runs(path: pathlib.Path, tmp_path: pathlib.Path) -> None:
    out = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip(), "an example must show the user something"
