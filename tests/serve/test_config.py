"""Reading a langgraph.json for `plait serve` and `plait worker`: a LangGraph project's file
works as it is (unknown keys ignored), paths are the file's folder's, the env is a dotenv
file or a mapping, and every refusal names the file and the key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from plait.errors import ServeConfigError
from plait.serve.config import parse_config, parse_dotenv, read_config, read_dotenv, resolve_target


def write(path: Path, data: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    return path


def test_a_langgraph_projects_file_reads_as_it_is_with_paths_from_its_folder(tmp_path: Path) -> None:
    config = write(
        tmp_path / "project" / "langgraph.json",
        {
            "$schema": "https://langgra.ph/schema.json",
            "dependencies": ["."],
            "python_version": "3.12",
            "graphs": {
                "agent": "./agent.py:graph",
                "deep": {"path": "src/deep/flow.py:make_graph", "description": "a factory"},
                "mod": "app.agents:graph",
            },
            "env": {"MODEL": "small", "EMPTY": ""},
            "http": {"cors": {"allow_origins": ["*"]}},
            "store": {"ttl": {"default_ttl": 10}},
        },
    )
    found = read_config(config)
    folder = tmp_path / "project"
    assert found.graphs == {
        "agent": f"{folder / 'agent.py'}:graph",
        "deep": f"{folder / 'src' / 'deep' / 'flow.py'}:make_graph",
        "mod": "app.agents:graph",
    }
    assert found.env == {"MODEL": "small", "EMPTY": ""}
    assert list(found.graphs) == ["agent", "deep", "mod"]  # the file's order is the served order
    assert found.store == {"ttl": {"default_ttl": 10}}


def test_env_as_a_file_name_is_read_beside_the_config(tmp_path: Path) -> None:
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / ".env").write_text("# keys\nOPENAI_API_KEY=sk-1 # a comment\nexport GREETING='hi # there'\n")
    found = read_config(write(tmp_path / "conf" / "langgraph.json", {"graphs": {"a": "a.py:g"}, "env": ".env"}))
    assert found.env == {"OPENAI_API_KEY": "sk-1", "GREETING": "hi # there"}


def test_dotenv_lines_comments_and_quotes() -> None:
    text = "\n".join(
        [
            "",
            "# a comment",
            "PLAIN=value with spaces  ",
            "EMPTY=",
            "SPACED = x",
            'DOUBLE="line\\nnext \\"q\\" \\\\ end" # after',
            "SINGLE='as \\n is'",
            "HASH=a#b",
            "export EXPORTED=1",
            "URL=postgresql://u:p@h/db?x=1",
            "PLAIN=second wins",
        ]
    )
    assert parse_dotenv(text, ".env") == {
        "PLAIN": "second wins",
        "EMPTY": "",
        "SPACED": "x",
        "DOUBLE": 'line\nnext "q" \\ end',
        "SINGLE": "as \\n is",
        "HASH": "a#b",
        "EXPORTED": "1",
        "URL": "postgresql://u:p@h/db?x=1",
    }


@pytest.mark.parametrize("line", ["JUST_A_NAME", "=value", "1BAD=x", "OPEN='not closed", 'OPEN="not closed', "A='x' y"])
def test_a_line_that_is_not_key_value_names_the_file_and_line(line: str) -> None:
    with pytest.raises(ServeConfigError) as err:
        parse_dotenv(f"OK=1\n{line}\n", "app/.env")
    assert "app/.env, line 2" in str(err.value) and "KEY=VALUE" in str(err.value)


@pytest.mark.parametrize(
    ("data", "key"),
    [
        ([], "must hold a JSON object"),
        ({}, '"graphs"'),
        ({"graphs": {}}, '"graphs"'),
        ({"graphs": ["a.py:g"]}, '"graphs"'),
        ({"graphs": {"a": 3}}, '"graphs.a"'),
        ({"graphs": {"a": {"description": "no path"}}}, '"graphs.a"'),
        ({"graphs": {"a": "agent.py"}}, '"graphs.a"'),
        ({"graphs": {"a:b": "a.py:g"}}, '"graphs.a:b"'),
        ({"graphs": {"a": "a.py:g"}, "env": ["X=1"]}, '"env"'),
        ({"graphs": {"a": "a.py:g"}, "env": {"X": 1}}, '"env"'),
        ({"graphs": {"a": "a.py:g"}, "store": []}, '"store"'),
        ({"graphs": {"a": "a.py:g"}, "store": {"path": "./s.py:store"}}, '"store.path": plait serve serves its own'),
        ({"graphs": {"a": "a.py:g"}, "store": {"indexes": {}}}, "\"store\": 'indexes' not known here"),
        ({"graphs": {"a": "a.py:g"}, "store": {"ttl": {"ttl": 1}}}, "\"store.ttl\": 'ttl' not known here"),
        ({"graphs": {"a": "a.py:g"}, "store": {"index": {"dims": 3}}}, '"store.index.embed" must name'),
        (
            {"graphs": {"a": "a.py:g"}, "store": {"index": {"dims": 3, "embed": "openai:text-embedding-3-small"}}},
            'a LangChain "provider:model", which plait does not load',
        ),
    ],
)
def test_a_key_it_cannot_use_is_named_with_the_file(data: object, key: str) -> None:
    with pytest.raises(ServeConfigError) as err:
        parse_config(data, "proj/langgraph.json")
    assert str(err.value).startswith("proj/langgraph.json") and key in str(err.value)


def test_files_it_cannot_read_are_named(tmp_path: Path) -> None:
    with pytest.raises(ServeConfigError, match="cannot read the config file .*missing.json"):
        read_config(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{graphs: 1}")
    with pytest.raises(ServeConfigError, match=r"bad.json is not valid JSON .*line 1"):
        read_config(tmp_path / "bad.json")
    config = write(tmp_path / "langgraph.json", {"graphs": {"a": "a.py:g"}, "env": "prod.env"})
    with pytest.raises(ServeConfigError, match=r'langgraph.json: "env" names .*prod.env.*cannot be read'):
        read_config(config)
    with pytest.raises(ServeConfigError, match=r"the env file .*none.env.* cannot be read"):
        read_dotenv(tmp_path / "none.env")


def test_a_module_target_is_left_and_a_file_target_is_made_the_folders(tmp_path: Path) -> None:
    assert resolve_target("pkg.mod:graph", tmp_path, "x") == "pkg.mod:graph"
    assert resolve_target("../up/flow.py:g", tmp_path / "a", "x") == f"{tmp_path / 'up' / 'flow.py'}:g"
    with pytest.raises(ServeConfigError, match="x: 'flow.py:' names no graph"):
        resolve_target("flow.py:", tmp_path, "x")


def test_the_store_sections_embed_is_a_target_and_loads_as_one(tmp_path: Path) -> None:
    from plait.checkpoint.address import open as open_store
    from plait.serve.memory import load_store_options, served_store

    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "embed.py").write_text("def embed(texts):\n    return [[1.0, float(len(t))] for t in texts]\n")
    section = {"index": {"dims": 2, "embed": "./embed.py:embed", "fields": ["text"]}, "ttl": {"default_ttl": 3}}
    found = read_config(write(tmp_path / "proj" / "langgraph.json", {"graphs": {"a": "a.py:g"}, "store": section}))
    assert found.store["index"] == {"dims": 2, "embed": f"{tmp_path / 'proj' / 'embed.py'}:embed", "fields": ["text"]}
    options = load_store_options(found.store, "proj/langgraph.json")
    assert options["index"]["embed"](["ab"]) == [[1.0, 2.0]] and options["ttl"] == {"default_ttl": 3}
    memory = open_store("memory:")
    store = served_store(memory, options)
    assert store is not None and store.backend is memory and store.default_ttl == 3 and store.index is not None
    assert served_store(memory) is memory.store  # no options: the checkpointer's own
    with pytest.raises(ServeConfigError, match=r'proj/langgraph.json: "store.index.embed" cannot be loaded: .*nope'):
        load_store_options({"index": {"dims": 2, "embed": f"{tmp_path}/proj/embed.py:nope"}}, "proj/langgraph.json")
    with pytest.raises(ServeConfigError, match="cannot be used: .*sweep_interval_minutes=0"):
        served_store(memory, {"ttl": {"sweep_interval_minutes": 0}})
    files = open_store(f"file://{tmp_path / 'files'}")
    assert served_store(files) is None
    with pytest.raises(ServeConfigError, match=r'"store" section configures a memory store, but FileCheckpointer'):
        served_store(files, options)
