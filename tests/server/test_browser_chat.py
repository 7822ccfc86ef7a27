"""A chat agent's thread in a real headless Chromium (Debian's, driven by Playwright): the
chat view beside the state (a human question, an AI tool call, the tool's long result
wrapped inside its panel, the answer, the waiting interrupt), the interrupt's question and
answer box first on the page, a bad answer and a fork into an existing thread shown beside
their fields with the input kept, the interrupt answered and the run watched to its end, and
a fork with an edit whose page shows that edit only.

Screenshots go to the test's temporary folder (and to ``$PLAIT_STUDIO_SCREENSHOTS`` when set:
``docs/img/studio-chat.png`` is made that way).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from plait import SqliteCheckpointer
from plait.server import create_app

from ._chat_support import ASK, QUESTION, chat_graph, start
from ._studio_support import LiveServer
from .test_browser import WAIT, Page, browser, sync_api  # noqa: F401  (browser: the fixture)


def _seed(db: str) -> None:
    saver = SqliteCheckpointer(db)
    start(saver, "paris")
    saver.close()


def _inside(tab: Page, selector: str) -> bool:
    """Whether the element's content fits its own width (nothing overflows sideways)."""
    fits: bool = tab.page.eval_on_selector(selector, "e => e.scrollWidth <= e.clientWidth + 1")
    return fits


def test_a_chat_thread_in_a_browser(browser: Any, tmp_path: Path) -> None:  # noqa: F811  (the fixture)
    db = str(tmp_path / "chat.db")
    with ThreadPoolExecutor(1) as other:  # off this thread: Playwright's loop runs on it
        other.submit(_seed, db).result()
    expect = sync_api.expect
    with LiveServer(create_app(db, [chat_graph()])) as server:
        tab = Page(browser, tmp_path)
        page = tab.page
        page.set_viewport_size({"width": 1440, "height": 1000})  # the chat view whole, in its screenshot
        page.goto(server.url + "/")
        page.click('a.tid:text-is("paris")')

        # The chat view: every kind of message, in order, the interrupt waiting at the end.
        chat = page.locator("#chat")
        expect(chat).to_be_visible()
        kinds = chat.locator("li.msg")
        expect(kinds).to_have_count(5)
        assert [c.split()[-1] for c in kinds.evaluate_all("ls => ls.map(l => l.className)")] == [
            "human",
            "ai",
            "tool",
            "ai",
            "waiting",
        ]
        expect(kinds.nth(0)).to_contain_text(QUESTION)
        expect(chat.locator(".tool-call .tool-name")).to_have_text("get_weather")
        expect(chat.locator(".tool-call pre.args")).to_contain_text('"city": "Paris"')
        expect(kinds.nth(2)).to_contain_text("answers call-1")
        expect(kinds.nth(4)).to_contain_text(ASK)
        assert _inside(tab, "#chat") and _inside(tab, "#chat li.msg.tool")  # the long result wraps
        assert chat.bounding_box()["width"] < 600

        # The question and its answer box: first on the page, above the timeline.
        box = page.locator("#answer-box")
        expect(box.locator("p.question")).to_have_text(ASK)
        assert box.bounding_box()["y"] < page.locator("#timeline").bounding_box()["y"]
        page.wait_for_function("document.documentElement.dataset.live === 'on'")
        tab.shot("chat")

        # A bad answer: the error beside the box, what was typed kept.
        box.locator("textarea").fill("{yes")
        box.locator('button[type="submit"]').click()
        error = page.locator("#answer-box #resume-resume-error")
        expect(error).to_contain_text("must be JSON")
        expect(page.locator("#answer-box textarea")).to_have_value("{yes")
        expect(page.locator("#problem")).to_have_count(0)

        # A fork into a thread that exists: the error beside the target, both fields kept.
        page.fill('#fork-form input[name="target"]', "paris")
        page.fill('#fork-form textarea[name="edits"]', '{"tone": "formal"}')
        page.click('#fork-form button[type="submit"]')
        error = page.locator("#fork-form #fork-target-error")
        expect(error).to_contain_text("ThreadExistsError")
        expect(page.locator('#fork-form input[name="target"]')).to_have_value("paris")
        expect(page.locator('#fork-form textarea[name="edits"]')).to_have_value('{"tone": "formal"}')
        target_box = page.locator('#fork-form input[name="target"]').bounding_box()
        error_box = error.bounding_box()
        assert target_box and error_box and 0 <= error_box["y"] - target_box["y"] < 80  # right under it
        error.scroll_into_view_if_needed()
        tab.shot("form-error")

        # Answer it and watch the run to its end: the box goes, the chat has the reply.
        page.goto(server.url + "/threads/paris")
        page.wait_for_function("document.documentElement.dataset.live === 'on'")
        page.fill("#answer-box textarea", '"yes, send it"')
        page.click('#answer-box button[type="submit"]')
        expect(page.locator("#flash")).to_contain_text("answered the interrupt")
        expect(page.locator("#status")).to_have_text("idle", timeout=WAIT)
        expect(page.locator("#answer-box")).to_be_hidden(timeout=WAIT)
        expect(page.locator("#answer-form")).to_have_count(0)
        expect(page.locator("#chat li.msg").last).to_contain_text("approved: yes, send it", timeout=WAIT)

        # Fork with an edit: the fork's page shows the edit, not every channel as added.
        page.fill('#fork-form input[name="target"]', "paris-formal")
        page.fill('#fork-form textarea[name="edits"]', '{"tone": "formal"}')
        page.click('#fork-form button[type="submit"]')
        expect(page.locator("#flash")).to_contain_text("forked paris into paris-formal with edits to tone")
        expect(page.locator("h1 .tid")).to_have_text("paris-formal")
        rows = page.locator("#change tr")
        expect(rows).to_have_count(1)
        expect(rows.first).to_have_attribute("data-key", "tone")
        expect(rows.first).to_contain_text('"formal"')
        expect(page.locator("#state h2").first).to_contain_text("forked from")
        tab.shot("fork-edit")

        assert tab.hosts() <= {"127.0.0.1", "data"}, tab.requests
        assert tab.errors == []
        tab.context.close()
