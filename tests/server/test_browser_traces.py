"""The trace ids in a real headless Chromium (the browser of test_browser.py): each timeline
step of a traced thread links to its run's trace with the ``--trace-url`` template applied,
in a new tab (``rel=noopener``); the selected checkpoint names its trace and span; a thread
run without tracing shows nothing of the kind.

Screenshots go where test_browser.py's go (``$PLAIT_STUDIO_SCREENSHOTS``: ``docs/img``).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the traced runs need opentelemetry-sdk (the dev extra)")

from plait.server import StudioConfig, create_app  # noqa: E402

from ._studio_support import LiveServer  # noqa: E402
from ._trace_support import JAEGER, seed_traced  # noqa: E402
from .test_browser import Page, browser, sync_api  # noqa: E402, F401  (browser: the fixture, shared)
from .test_browser_views import _element_shot  # noqa: E402


def test_each_step_links_to_its_runs_trace_in_a_browser(browser: Any, tmp_path: Path) -> None:  # noqa: F811
    db = str(tmp_path / "traces.db")
    with ThreadPoolExecutor(1) as other:  # off this thread: Playwright's loop runs on it
        ids = other.submit(seed_traced, db).result()
    (paused, paused_span), (resumed, resumed_span) = ids["paused"], ids["resumed"]
    expect = sync_api.expect
    with LiveServer(create_app(db, config=StudioConfig(trace_url=JAEGER))) as server:
        tab = Page(browser, tmp_path)
        tab.page.goto(server.url + "/threads/traced")
        steps = tab.page.locator(".timeline li")
        expect(steps).to_have_count(3)
        links = tab.page.locator(".timeline li a.trace")
        expect(links).to_have_count(3)
        wanted = [(resumed, resumed_span), (paused, paused_span), (paused, paused_span)]  # newest first
        for i, (trace_id, span_id) in enumerate(wanted):
            link = links.nth(i)
            expect(link).to_have_attribute("href", f"http://localhost:16686/trace/{trace_id}?span={span_id}")
            expect(link).to_have_attribute("target", "_blank")
            assert "noopener" in (link.get_attribute("rel") or "").split()
            expect(link).to_have_text(f"trace {trace_id[:8]} ↗")
        detail = tab.page.locator("#trace-of a.trace")
        expect(detail).to_contain_text(resumed)
        expect(detail).to_contain_text(resumed_span)
        _element_shot(tab, "#timeline", "trace-ids")

        # Another checkpoint selected: the detail names the run that wrote that one.
        steps.nth(2).locator("a.cp").click()
        expect(tab.page.locator("#trace-of a.trace")).to_contain_text(paused)

        # A thread run without tracing: no trace anywhere on its page.
        tab.page.goto(server.url + "/threads/plain")
        expect(tab.page.locator(".timeline li")).to_have_count(3)
        expect(tab.page.locator(".trace, #trace-of")).to_have_count(0)
        assert tab.errors == [] and tab.hosts() == {"127.0.0.1"}
        tab.context.close()
