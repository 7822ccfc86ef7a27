"""The Studio's timeline, "what step N changed" panel, graph and Runs page in a real headless
Chromium (the browser and tab of test_browser.py): each step's node durations, retries and
owner; a 2 MB write that stays inside its column, loaded on demand; the graph's labels
readable, its subgraph nodes styled and in the legend, and dark in dark mode; and the Runs
page at 1280 px with every Cancel button and one-line times.

Screenshots go where test_browser.py's go (``$PLAIT_STUDIO_SCREENSHOTS``: ``docs/img``).
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from plait import END, PostgresCheckpointer, SqliteCheckpointer
from plait.server import create_app

from ._studio_support import LiveServer, build_graph
from ._timeline_support import retried_graph, write_step
from .test_browser import Page, browser, sync_api  # noqa: F401  (browser: the fixture, shared)

TIMINGS = {"timings": [["research", 0.012, 1], ["fetch", 1.34, 2]], "owner": "worker-a/job-7"}


def _element_shot(tab: Page, selector: str, name: str) -> None:
    """A screenshot of one part of the page, for the docs: of where it is (the live refresh
    may swap the element for its identical twin while a screenshot of it waits)."""
    box = tab.page.locator(selector).bounding_box()
    assert box is not None
    tab.page.screenshot(path=str(tab.folder / f"{name}.png"), clip=box)
    extra = os.environ.get("PLAIT_STUDIO_SCREENSHOTS")
    if extra:
        tab.page.screenshot(path=str(Path(extra) / f"studio-{name}.png"), clip=box)


def _with_subgraph() -> Any:
    inner = build_graph().compile(name="inner")
    g = build_graph()
    return g.add_node("review", inner).add_edge("research", "review").add_edge("review", END).compile(name="outer")


def _seed(db: str) -> None:
    saver = SqliteCheckpointer(db)
    saver.setup()
    write_step(saver, "timed", {"topic": "rivers", "style": "long"}, source="input")
    write_step(saver, "timed", {"notes": ["a"], "sources": {"web": 1}}, metadata=TIMINGS)
    write_step(saver, "timed", {"style": "brief"}, source="update")
    huge = {"answer": "y" * 2_000_000, "notes": [{"n": i, "text": f"item {i}"} for i in range(3000)]}
    write_step(saver, "timed", huge, metadata={"timings": [["ask", 0.4, 1]], "owner": "worker-b/job-9"})
    retried_graph().bind(checkpointer=saver).invoke({"topic": "rivers"}, thread_id="research", owner="worker-a/job-7")
    saver.close()


def _inside(box: dict[str, float], outer: dict[str, float]) -> bool:
    return box["x"] >= outer["x"] - 0.5 and box["x"] + box["width"] <= outer["x"] + outer["width"] + 0.5


def test_the_timeline_change_panel_and_graph_in_a_browser(browser: Any, tmp_path: Path) -> None:  # noqa: F811
    db = str(tmp_path / "views.db")
    with ThreadPoolExecutor(1) as other:  # off this thread: Playwright's loop runs on it
        other.submit(_seed, db).result()
    expect = sync_api.expect
    with LiveServer(create_app(db, [_with_subgraph()])) as server:
        tab = Page(browser, tmp_path)
        tab.page.goto(server.url + "/threads/timed")

        # The timeline: each step's nodes with their durations, the retry, the owner.
        steps = tab.page.locator(".timeline li")
        expect(steps).to_have_count(4)
        expect(steps.nth(0).locator(".timing")).to_contain_text("ask 400 ms")
        expect(steps.nth(0).locator(".owner")).to_have_text("by worker-b/job-9")
        expect(steps.nth(1).locator(".timing")).to_have_count(0)  # an update: nothing recorded
        retried = steps.nth(2).locator(".timing")
        expect(retried).to_contain_text("research 12 ms")
        expect(retried.locator('.took[data-node="fetch"]')).to_have_text("fetch 1.3 s attempt 2")
        expect(retried.locator(".owner")).to_have_text("by worker-a/job-7")

        # The change panel: a summary of the 2 MB write, inside its column, loaded on demand.
        state, side = tab.page.locator("#state"), tab.page.locator("aside.side")
        change = tab.page.locator("#change")
        expect(change.locator(".large-change")).to_have_count(2)
        assert _inside(change.bounding_box(), state.bounding_box())
        assert state.bounding_box()["x"] + state.bounding_box()["width"] <= side.bounding_box()["x"]
        change.locator('.large-change[data-key="answer"] button[data-lazy]').click()
        expect(change.locator("button.all")).to_have_text("show all 2,000,000 characters")
        change.locator('.large-change[data-key="notes"] button[data-lazy]').click()
        expect(change.locator('.channel[data-key="notes"] > details > summary')).to_contain_text("{4}")
        for part in (change, change.locator('.channel[data-key="answer"] .v.str').last):
            assert _inside(part.bounding_box(), state.bounding_box())
        assert state.bounding_box()["x"] + state.bounding_box()["width"] <= side.bounding_box()["x"]

        # The graph: labels of 11 px or more, the subgraph node its own style, in the legend.
        label_px = tab.page.eval_on_selector_all(
            "#graph svg text",
            "ts => ts.map(t => parseFloat(getComputedStyle(t).fontSize) * t.getScreenCTM().a)",
        )
        assert label_px and min(label_px) >= 11, label_px
        sub = tab.page.locator('#graph g.node.subgraph[data-name="review"] > rect').first
        plain = tab.page.locator('#graph g.node[data-name="research"] > rect').first
        sub_fill = sub.evaluate("r => getComputedStyle(r).fill")
        assert sub_fill not in (plain.evaluate("r => getComputedStyle(r).fill"), "rgb(185, 240, 192)")  # running
        expect(tab.page.locator("#graph .legend .sw.subgraph")).to_be_visible()
        assert tab.page.eval_on_selector("#graph rect.bg", "r => getComputedStyle(r).fill") == "rgb(255, 255, 255)"
        # A real run's timeline (a retried node, a worker's name), for the docs.
        tab.page.goto(server.url + "/threads/research")
        expect(tab.page.locator('.timeline .took[data-node="fetch"] .attempt')).to_have_text("attempt 2")
        expect(tab.page.locator(".timeline .owner").first).to_have_text("by worker-a/job-7")
        _element_shot(tab, "#timeline", "timeline")
        assert tab.errors == []
        tab.context.close()

        # Dark mode (the system's choice): the graph is drawn dark too.
        dark = browser.new_context(viewport={"width": 1440, "height": 900}, color_scheme="dark")
        page = dark.new_page()
        page.goto(server.url + "/threads/timed")
        bg = page.eval_on_selector("#graph rect.bg", "r => getComputedStyle(r).fill")
        text = page.eval_on_selector('#graph g.node[data-name="research"] text', "t => getComputedStyle(t).fill")
        assert bg != "rgb(255, 255, 255)" and _luma(bg) < 60 and _luma(text) > 180, (bg, text)
        dark.close()


def _luma(rgb: str) -> float:
    r, g, b = (float(v) for v in rgb[rgb.index("(") + 1 : rgb.index(")")].split(",")[:3])
    return 0.299 * r + 0.587 * g + 0.114 * b


@pytest.mark.postgres
def test_the_runs_page_fits_1280_pixels(
    queue_db: tuple[str, str],
    queue_worker: Any,
    browser: Any,  # noqa: F811
    tmp_path: Path,
) -> None:
    from plait.runs import Runs

    from ._queue_support import flows, ledger_lines, wait_for

    dsn, schema = queue_db
    ledger = tmp_path / "ledger"
    queue_worker(env={"PLAIT_TEST_LEDGER": str(ledger), "PLAIT_TEST_GATE": str(tmp_path / "gate")})
    long_thread = "support/customer-4711/conversation-about-a-refund-of-an-order-" + "x" * 40
    with Runs(dsn, schema=schema) as runs:
        failed = runs.submit(flows.name("failing"), {}, thread_id=long_thread + "-failed")
        done = runs.submit(flows.name("single"), {}, thread_id="short")
        assert [runs.join(r, timeout=60).status for r in (failed, done)] == ["error", "success"]
        held = runs.submit(flows.name("steps"), {"steps": 10, "tag": "w"}, thread_id=long_thread)
        wait_for(lambda: len(ledger_lines(ledger)) >= 4, 60, "the run's fourth step (held at a gate never opened)")
        store = PostgresCheckpointer(dsn, schema=schema)
        with LiveServer(create_app(store)) as server:
            context = browser.new_context(viewport={"width": 1280, "height": 800})
            page = context.new_page()
            page.goto(server.url + "/runs")
            expect = sync_api.expect
            expect(page.locator(f'tr[data-run="{held}"] .badge')).to_have_text("running")
            expect(page.locator(f'tr[data-run="{failed}"] .badge')).to_have_text("error")
            table = page.locator("table.runs").bounding_box()
            buttons = page.locator("button.cancel-run")
            expect(buttons).to_have_count(1)
            button = buttons.first.bounding_box()
            assert button is not None and table is not None
            assert button["x"] + button["width"] <= min(1280, table["x"] + table["width"]), (button, table)
            assert page.evaluate("document.documentElement.scrollWidth") <= 1280
            lines = page.eval_on_selector_all("td.when time", "ts => ts.map(t => t.getClientRects().length)")
            assert len(lines) == 3 + 2 + 2 + 1 and set(lines) == {1}, lines  # created x3, started, ended
            heights = page.eval_on_selector_all("td.when time", "ts => ts.map(t => t.getBoundingClientRect().height)")
            assert max(heights) < 24, heights
            context.close()
        store.close()
