"""``plait serve``: the real console script on a loopback port, driven by the unmodified
``langgraph-sdk`` client (assistants, threads, runs.wait), its graphs from ``--graph`` or a
langgraph.json with an env file, an API key, an open address refused without one, and a
SIGTERM that ends it cleanly. Waits are on the server's answers (``/ok``), never sleeps."""

from __future__ import annotations

import contextlib
import json
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ._cli_support import Cli, command

pytest.importorskip("fastapi", reason="plait serve needs the serve extra: pip install 'plait[serve]'")
langgraph_sdk = pytest.importorskip("langgraph_sdk")

AGENT = """
import os

from plait import END, START, Graph, MessagesState


def reply(state):
    said = state["messages"][-1]["content"]
    return {"messages": [{"role": "assistant", "content": f"{os.environ.get('GREETING', 'echo')}: {said}"}]}


graph = Graph(MessagesState)
graph.add_node("reply", reply)
graph.add_edge(START, "reply").add_edge("reply", END)
named = graph.compile(name="echoer")
"""

ROOT = Path(__file__).resolve().parents[2]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/ok", timeout=2) as reply:
            return bool(json.loads(reply.read()).get("ok"))
    except (OSError, ValueError):
        return False


@dataclass
class Served:
    """A running ``plait serve``: its URL, its process, and the SDK clients made for it."""

    url: str
    proc: subprocess.Popen[str]
    clients: list[Any]

    def client(self, api_key: str | None = None) -> Any:
        """The real SDK's sync client (closed when the server's block ends)."""
        made = langgraph_sdk.get_sync_client(url=self.url, api_key=api_key)
        self.clients.append(made)
        return made


@contextlib.contextmanager
def serving(cli: Cli, *args: str, env: dict[str, str] | None = None) -> Iterator[Served]:
    """``plait serve ARGS --port P`` until the block ends, once /ok answers."""
    port = _port()
    proc = subprocess.Popen(
        [*command(), "serve", *args, "--port", str(port)],
        cwd=cli.folder,
        env={**cli.env, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    served = Served(url, proc, [])
    try:
        deadline = time.monotonic() + 60
        while not _ok(url):
            if proc.poll() is not None:
                out, err = proc.communicate()
                raise AssertionError(f"plait serve ended with {proc.returncode}: {out}\n{err}")
            assert time.monotonic() < deadline, "plait serve did not answer /ok within 60 s"
            time.sleep(0.05)  # a poll's pace, not a wait for correctness: /ok decides
        yield served
    finally:
        for made in served.clients:
            made.close()
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=30)


def test_the_sdk_creates_a_thread_waits_for_a_run_and_finds_the_assistant(cli: Cli) -> None:
    cli.write("agent.py", AGENT)
    graphs = ["--graph", "agent.py:graph", "--graph", "agent=agent.py:graph", "--graph", "agent.py:named"]
    with serving(cli, "--db", "app.db", *graphs) as s:
        client = s.client()
        found = client.assistants.search()
        # NAME=, else the graph's own name, else (the default name "Graph", or a name taken) the target
        assert sorted(a["graph_id"] for a in found) == ["agent", "agent.py:graph", "echoer"]
        thread = client.threads.create()
        out = client.runs.wait(thread["thread_id"], "agent", input={"messages": [{"role": "user", "content": "hi"}]})
        assert isinstance(out, dict) and out["messages"][-1]["content"] == "echo: hi"
        state = client.threads.get_state(thread["thread_id"])
        assert [m["content"] for m in state["values"]["messages"]] == ["hi", "echo: hi"]
        assistant = next(a for a in found if a["graph_id"] == "echoer")
        out = client.runs.wait(None, assistant["assistant_id"], input={"messages": [{"role": "user", "content": "x"}]})
        assert isinstance(out, dict) and out["messages"][-1]["content"] == "echo: x"
    with contextlib.closing(
        sqlite3.connect(cli.folder / "app.db")
    ) as db:  # the checkpoints and the run log in one file
        tables = {row[0] for row in db.execute("select name from sqlite_master where type = 'table'")}
    assert any(t.startswith("plait_serve") for t in tables), tables


def test_it_prints_its_urls_and_each_assistant(cli: Cli) -> None:
    cli.write("agent.py", AGENT)
    with serving(cli, "--graph", "agent=agent.py:graph", "--workers", "3") as s:
        s.proc.send_signal(signal.SIGTERM)
        out, _ = s.proc.communicate(timeout=30)
    first = out.splitlines()[0]
    assert re.fullmatch(
        rf"plait serve: {s.url} \(API\), {s.url}/studio \(Studio\); graphs: agent \(assistant [0-9a-f-]{{36}}\)", first
    ), first
    assert "--workers 3 is for PostgreSQL" in out and "plait.db" in out  # the default store


def test_a_langgraph_json_with_an_env_file_serves_its_graphs(cli: Cli) -> None:
    cli.write("project/agent.py", AGENT)
    cli.write("project/.env", "# from the project\nGREETING='hello there' # set for the graph\n")
    config = {
        "dependencies": ["."],
        "python_version": "3.12",
        "graphs": {"assistant": "./agent.py:graph"},
        "env": ".env",
        "http": {"cors": {"allow_origins": ["*"]}},
    }
    cli.write("project/langgraph.json", json.dumps(config))
    with serving(cli, "--config", "project/langgraph.json", "--db", "c.db", "--no-studio") as s:
        client = s.client()
        assert [a["graph_id"] for a in client.assistants.search()] == ["assistant"]
        out = client.runs.wait(None, "assistant", input={"messages": [{"role": "user", "content": "hi"}]})
        assert isinstance(out, dict) and out["messages"][-1]["content"] == "hello there: hi"
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(f"{s.url}/studio/", timeout=5)
        missing.value.close()
        assert missing.value.code == 404
    # the environment wins over the file, and langgraph.json in the folder is read by default
    cli.write("langgraph.json", json.dumps({"graphs": {"a": "./project/agent.py:graph"}, "env": {"GREETING": "no"}}))
    with serving(cli, "--db", "c.db", env={"GREETING": "from the shell"}) as s:
        client = s.client()
        out = client.runs.wait(None, "a", input={"messages": [{"role": "user", "content": "hi"}]})
        assert out["messages"][-1]["content"] == "from the shell: hi"


def test_an_api_key_is_required_of_every_request_but_ok(cli: Cli) -> None:
    cli.write("agent.py", AGENT)
    with serving(cli, "--graph", "agent=agent.py:graph", env={"PLAIT_API_KEY": "s3cret"}) as s:
        with pytest.raises(langgraph_sdk.errors.AuthenticationError):
            s.client().assistants.search()
        with pytest.raises(langgraph_sdk.errors.AuthenticationError):
            s.client("wrong").threads.create()
        client = s.client("s3cret")
        assert [a["graph_id"] for a in client.assistants.search()] == ["agent"]
        thread = client.threads.create()
        out = client.runs.wait(thread["thread_id"], "agent", input={"messages": [{"role": "user", "content": "k"}]})
        assert isinstance(out, dict) and out["messages"][-1]["content"] == "echo: k"
    with serving(cli, "--graph", "agent=agent.py:graph", "--api-key", "given") as s:
        assert _ok(s.url)  # /ok answers without it (health checks)
        assert s.client("given").assistants.search()


def test_an_open_address_and_bad_options_are_refused_before_anything_is_created(cli: Cli) -> None:
    cli.write("agent.py", AGENT)
    r = cli("serve", "--graph", "agent=agent.py:graph", "--host", "0.0.0.0")
    assert r.code == 2 and "--api-key" in r.one_line() and "PLAIT_API_KEY" in r.one_line()
    r = cli("serve", "--graph", "agent=agent.py:graph", "--workers", "0")
    assert r.code == 2 and "--workers must be at least 1" in r.one_line()
    r = cli("serve", "--graph", "agent=agent.py:graph", "--port", "70000")
    assert r.code == 2 and "--port" in r.one_line()
    r = cli("serve")
    assert r.code == 2 and "--graph NAME=MODULE:GRAPH" in r.one_line() and "--config" in r.one_line()
    r = cli("serve", "--graph", "a=agent.py:graph", "--graph", "a=agent.py:named")
    assert r.code == 2 and "two graphs are named 'a'" in r.one_line()
    r = cli("serve", "--config", "nothing.json")
    assert r.code == 2 and "ServeConfigError" in r.one_line() and "nothing.json" in r.one_line()
    cli.write("langgraph.json", '{"graphs": {"agent": 1}}')
    r = cli("serve")
    assert r.code == 2 and 'langgraph.json: "graphs.agent"' in r.one_line()
    assert not (cli.folder / "plait.db").exists()  # nothing was created


@pytest.mark.postgres
def test_on_postgres_its_workers_run_the_runs_through_the_run_queue(
    cli: Cli, postgres_dsn: str, postgres_schema: str
) -> None:
    cli.write("agent.py", AGENT)
    env = {"PGOPTIONS": f"-c search_path={postgres_schema}"}  # what it sets up goes to the test's schema
    with serving(cli, "--graph", "agent=agent.py:graph", "--db", postgres_dsn, "--workers", "2", env=env) as s:
        client = s.client()
        thread = client.threads.create()["thread_id"]
        out = client.runs.wait(thread, "agent", input={"messages": [{"role": "user", "content": "queued"}]})
        assert [m["content"] for m in out["messages"]] == ["queued", "echo: queued"]
    import psycopg

    with psycopg.connect(postgres_dsn, options=f"-c search_path={postgres_schema}") as conn:
        (worker,) = conn.execute("SELECT worker FROM plait_run").fetchone() or (None,)
    assert worker is not None and worker.startswith("serve:")  # run by one of the server's workers


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["sigterm", "sigint"])
def test_a_signal_stops_it_cleanly_and_leaves_the_sqlite_file_whole(cli: Cli, sig: signal.Signals) -> None:
    cli.write("agent.py", AGENT)
    with serving(cli, "--db", "app.db", "--graph", "agent=agent.py:graph") as s:
        client = s.client()
        thread = client.threads.create(thread_id="kept")
        client.runs.wait(thread["thread_id"], "agent", input={"messages": [{"role": "user", "content": "stay"}]})
        s.proc.send_signal(sig)
        out, err = s.proc.communicate(timeout=60)
        assert s.proc.returncode == 0, err
        assert out.rstrip().endswith("plait serve: stopped") and "Traceback" not in err
    assert not (cli.folder / "app.db-wal").exists() or (cli.folder / "app.db-wal").stat().st_size == 0
    with contextlib.closing(sqlite3.connect(cli.folder / "app.db")) as db:
        assert db.execute("pragma integrity_check").fetchone() == ("ok",)
    state = cli("state", "kept", "--db", "app.db", "--json").json()
    assert [m["content"] for m in state["values"]["messages"]] == ["stay", "echo: stay"]
    with serving(cli, "--db", "app.db", "--graph", "agent=agent.py:graph") as s:  # served again, as it was
        client = s.client()
        assert client.threads.get("kept")["status"] == "idle"
        assert len(client.threads.get_history("kept")) >= 2


def _doc_snippet(page: str, start: str) -> str:
    """The code of a docs page's text block (it needs a server, so the docs test skips it),
    from ``start`` to the block's end."""
    text = (ROOT / "docs" / page).read_text(encoding="utf-8")
    snippet = text[text.index(start) :]
    return snippet[: snippet.index("```")]


def _run_snippet(cli: Cli, snippet: str, url: str) -> subprocess.CompletedProcess[str]:
    """``snippet`` run by Python against the server at ``url`` (in place of the default one)."""
    done = subprocess.run(
        [sys.executable, "-c", snippet.replace("http://127.0.0.1:2024", url)],
        cwd=cli.folder,
        env=cli.env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done


def test_the_tutorials_client_snippet_runs_against_plait_serve(cli: Cli) -> None:
    """docs/tutorial.md's SDK snippet (a text block: it needs a server) runs as printed."""
    snippet = _doc_snippet("tutorial.md", "from langgraph_sdk import get_sync_client")
    with serving(cli, "--db", "agent.db", "--graph", f"agent={ROOT / 'examples' / 'agent.py'}:graph") as s:
        done = _run_snippet(cli, snippet, s.url)
    assert "Lisbon" in done.stdout or "19°C" in done.stdout, done.stdout


MEMORY_AGENT = """
from typing import TypedDict

from plait import END, START, Graph, NodeContext


class Note(TypedDict, total=False):
    user: str
    text: str


def remember(state, ctx: NodeContext):
    ctx.store.put(("notes", state["user"]), "last", {"text": state["text"]})
    return {}


graph = Graph(Note).add_node("remember", remember)
graph.add_edge(START, "remember").add_edge("remember", END)
"""

EMBED = """
WORDS = ("cat", "dog", "fish")


def embed(texts):
    return [[float(t.count(w)) for w in WORDS] + [0.1] for t in texts]
"""


def test_a_langgraph_json_store_section_and_the_docs_store_snippet(cli: Cli) -> None:
    """The config's store index (its embed a file's function) ranks a query, a node's ctx.store
    write is read back by the client, and docs/serve.md's client.store snippet prints what its
    comments say."""
    cli.write("project/agent.py", MEMORY_AGENT)
    cli.write("project/embed.py", EMBED)
    store = {"index": {"dims": 4, "embed": "./embed.py:embed", "fields": ["text"]}, "ttl": {"default_ttl": 60}}
    cli.write("project/langgraph.json", json.dumps({"graphs": {"memo": "./agent.py:graph"}, "store": store}))
    with serving(cli, "--config", "project/langgraph.json", "--db", "app.db", "--no-studio") as s:
        client = s.client()
        client.runs.wait(None, "memo", input={"user": "ada", "text": "a dog and a cat"})
        client.runs.wait(None, "memo", input={"user": "bo", "text": "fish fish"})
        assert client.store.get_item(["notes", "ada"], "last")["value"] == {"text": "a dog and a cat"}
        ranked = client.store.search_items(["notes"], query="fish")["items"]
        assert [i["namespace"] for i in ranked] == [["notes", "bo"], ["notes", "ada"]]
        start = 'client = get_sync_client(url="http://127.0.0.1:2024", api_key=None)\nclient.store'
        snippet = "from langgraph_sdk import get_sync_client\n" + _doc_snippet("serve.md", start)
        done = _run_snippet(cli, snippet, s.url)
    printed = [line.rsplit("# ", 1)[1] for line in snippet.splitlines() if line.startswith("print(")]
    assert done.stdout.splitlines() == printed
