"""docs/api.md is generated from the docstrings and must match them."""

import importlib.util
import pathlib

GEN = pathlib.Path(__file__).resolve().parent.parent / "docs" / "gen_api.py"


def test_the_api_reference_is_up_to_date() -> None:
    spec = importlib.util.spec_from_file_location("gen_api", GEN)
    assert spec is not None and spec.loader is not None
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    expected = gen.render()
    assert gen.OUT.read_text(encoding="utf-8") == expected, "docs/api.md is stale: run `python docs/gen_api.py`"
    for name in ("CompiledGraph", "StateSchema", "SqliteCheckpointer", "interrupt", "NodeError"):
        assert f"### `{name}" in expected
