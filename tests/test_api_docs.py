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


def test_the_api_reference_shows_no_plumbing_and_documents_records() -> None:
    text = (GEN.parent / "api.md").read_text(encoding="utf-8")
    context = text.split("### `NodeContext(")[1].split("\n")[0]
    assert "host" not in context and "_interrupts_seen" not in context and "effects" not in context
    for event in ("NodeStarted", "NodeFinished", "NodeFailed", "CheckpointSaved", "Interrupted", "RunFinished"):
        section = text.split(f"### `{event}(")[1].split("\n### ")[0]
        assert f"{event}(*," not in section.split("\n", 2)[2], f"{event} has no doc of its own"
        assert "Fields:" in section and "- `step`: " in section, event
    diff = text.split("### `ThreadDiff(")[1].split("\n### ")[0]
    for field in ("first_step", "keys", "a", "b", "heads"):
        assert f"- `{field}`: " in diff, field
