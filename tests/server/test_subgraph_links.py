"""The thread page links a subgraph node to its steps: a step that ran a subgraph, and a
pause inside a subgraph, name it and link to the child namespace's own page."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest

pytest.importorskip("fastapi", reason="the Studio needs the studio extra: pip install 'plait[studio]'")

from fastapi.testclient import TestClient  # noqa: E402

from plait import END, START, AppendList, Command, CompiledGraph, Graph, SqliteCheckpointer, interrupt  # noqa: E402
from plait.server import StudioConfig, create_app  # noqa: E402


class Notes(TypedDict):
    notes: Annotated[list[str], AppendList()]


def _draft(state: Any) -> dict[str, Any]:
    return {"notes": ["drafted"]}


def _ask(state: Any) -> dict[str, Any]:
    return {"notes": [f"answer: {interrupt('ok?')}"]}


def _fin(state: Any) -> dict[str, Any]:
    return {"notes": ["done"]}


def _outer(saver: Any) -> CompiledGraph:
    inner = Graph(Notes).add_node("draft", _draft).add_node("ask", _ask)
    inner.add_edge(START, "draft").add_edge("draft", "ask").add_edge("ask", END)
    g = Graph(Notes).add_node("review", inner.compile(name="review")).add_node("fin", _fin)
    g.add_edge(START, "review").add_edge("review", "fin").add_edge("fin", END)
    return g.compile(checkpointer=saver, name="outer")


@pytest.fixture
def saver(tmp_path: Path) -> Iterator[SqliteCheckpointer]:
    s = SqliteCheckpointer(str(tmp_path / "nested.db"))
    yield s
    s.close()


def _links(html: str) -> list[tuple[str, str, str]]:
    """(when, namespace, href) of each subgraph link on a thread page."""
    found = re.findall(r'<li data-ns="([^"]+)" data-when="(\w+)">.*?<a href="([^"]+)">its steps</a>', html)
    return [(when, ns, href.replace("&amp;", "&")) for ns, when, href in found]


def test_a_pause_inside_a_subgraph_links_to_its_steps(saver: SqliteCheckpointer) -> None:
    app = _outer(saver)
    app.invoke({"notes": []}, thread_id="t")
    studio = TestClient(create_app(saver, [_outer(None)], config=StudioConfig(allowed_hosts=("testserver",))))
    page = studio.get("/threads/t").text
    [(when, ns, href)] = _links(page)
    assert when == "next" and ns.startswith("review:") and "namespace=" in href
    child = studio.get(href)
    assert child.status_code == 200 and f"namespace <b>{ns}</b>" in child.text
    assert "drafted" in child.text and "interrupt" in child.text.lower()

    app.invoke(Command(resume="yes"), thread_id="t")
    head = studio.get("/threads/t").text
    assert _links(head) == []  # the head was written by fin, which is no subgraph
    history = app.get_state_history("t")
    after_review = next(s for s in history if s.metadata.get("writes") and "review" in s.metadata["writes"])
    page = studio.get("/threads/t", params={"checkpoint": after_review.checkpoint_id}).text
    [(when, ns2, href)] = _links(page)
    assert (when, ns2) == ("wrote", ns)
    assert "answer: yes" in studio.get(href).text
