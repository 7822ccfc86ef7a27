"""The Studio in a real headless Chromium (Debian's, driven by Playwright; no browser
download): the demo's store, a thread's timeline, a diff of two checkpoints, a fork with an
edit appearing live in another tab's thread list, an interrupt answered and the run watched
to its end, keyboard navigation, dark mode; a queued run that a `plait worker` is running,
cancelled with its Cancel button; the Studio mounted at ``/studio`` in another app, as
``plait serve`` mounts it; odd thread ids (`user/42` forked into `team/fork-1`, `..`, a
300-character id, a newline in an id); the Memory page (the namespace tree unfolded, an item opened, a
filtered search, a deletion); and no request leaves 127.0.0.1 (nor, mounted, the mount path).

Screenshots go to the test's temporary folder (and to ``$PLAIT_STUDIO_SCREENSHOTS`` when set:
``docs/img`` is made that way).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest

sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is in the dev extra")
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
if not os.path.exists(CHROMIUM):
    if os.environ.get("CI"):  # .ci/run installs it: a CI without it must not pass by skipping
        raise RuntimeError("no chromium on this CI machine: .ci/run should have installed it with apt-get")
    pytest.skip("no chromium here (apt-get install chromium; .ci/run installs it)", allow_module_level=True)

from plait import PostgresCheckpointer, SqliteCheckpointer  # noqa: E402
from plait.cli import demo  # noqa: E402
from plait.server import create_app  # noqa: E402

from ._memory_support import seed  # noqa: E402
from ._studio_support import MOUNT, LiveServer, compiled, mounted  # noqa: E402

WAIT = 15_000
"""Milliseconds a step may take before the test fails (the page itself updates within 1 s)."""


@pytest.fixture(scope="module")
def studio(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    folder = tmp_path_factory.mktemp("browser")
    db = str(folder / "plait-demo.db")
    summary = demo.run_demo(db, out=demo.Reporter())
    waiting = demo.open_graph(db)
    waiting.invoke({"question": "Ship the new pipeline?"}, thread_id="needs-approval")
    assert waiting.checkpointer is not None
    waiting.checkpointer.close()
    saver = SqliteCheckpointer(db)
    app = create_app(saver, {"demo": demo.build_graph().compile(name="demo")})
    with LiveServer(app) as server:
        yield {"url": server.url, "threads": summary["threads"], "folder": folder}
    saver.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        yield b
        b.close()


class Page:
    """A tab that records every request it makes."""

    def __init__(self, browser: Any, folder: Path) -> None:
        self.context = browser.new_context(viewport={"width": 1440, "height": 900})
        self.page = self.context.new_page()
        self.requests: list[str] = []
        self.errors: list[str] = []
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("dialog", lambda d: d.accept())
        self.folder = folder

    def shot(self, name: str) -> None:
        self.page.screenshot(path=str(self.folder / f"{name}.png"))
        extra = os.environ.get("PLAIT_STUDIO_SCREENSHOTS")
        if extra:
            self.page.screenshot(path=str(Path(extra) / f"studio-{name}.png"))

    def hosts(self) -> set[str]:
        return {urlparse(u).hostname or urlparse(u).scheme for u in self.requests}


def test_the_studio_in_a_browser(studio: dict[str, Any], browser: Any) -> None:
    url = studio["url"]
    main, forked_before = studio["threads"]
    tab, lst = Page(browser, studio["folder"]), Page(browser, studio["folder"])
    expect = sync_api.expect

    # The thread list: the demo's two threads and the one waiting for approval, with badges.
    lst.page.goto(url + "/")
    rows = lst.page.locator("table.threads tbody tr")
    expect(rows).to_have_count(3)
    expect(lst.page.locator('tr[data-thread="needs-approval"] .badge')).to_have_text("interrupted")
    expect(lst.page.locator(f'tr[data-thread="{main}"] .badge')).to_have_text("idle")
    lst.page.wait_for_function("document.documentElement.dataset.live === 'on'")
    lst.shot("threads")

    # Open a thread: its timeline, state and graph.
    tab.page.goto(url + "/")
    tab.page.click(f'a[href="/threads/{main}"]')
    expect(tab.page.locator("h1 .tid")).to_have_text(main)
    items = tab.page.locator(".timeline li")
    assert items.count() >= 8
    expect(tab.page.locator("#graph svg")).to_be_visible()
    tab.shot("thread")

    # Keyboard: down moves to the previous checkpoint (a deep link), up comes back.
    first_id = items.nth(0).get_attribute("data-id")
    second_id = items.nth(1).get_attribute("data-id")
    tab.page.keyboard.press("ArrowDown")
    tab.page.wait_for_url(f"**checkpoint={second_id}")
    expect(tab.page.locator('.timeline li[aria-current="true"]')).to_have_attribute("data-id", second_id or "")
    tab.page.keyboard.press("k")
    tab.page.wait_for_url(f"**checkpoint={first_id}")

    # Select two checkpoints and see their diff.
    tab.page.locator('.timeline input[name="pick"]').nth(0).check()
    tab.page.locator('.timeline input[name="pick"]').nth(4).check()
    tab.page.click("#diff-selected")
    expect(tab.page.locator("#diff")).to_be_visible()
    expect(tab.page.locator('#diff tr[data-key="messages"] li.add').first).to_be_visible()
    tab.shot("diff")

    # Across threads: the demo's two branches.
    tab.page.goto(url + f"/diff?a={main}&b={forked_before}")
    expect(tab.page.locator('#diff tr[data-key="style"]')).to_contain_text("brief")

    # Fork with an edit; the other tab's thread list shows the new thread without a reload.
    tab.page.goto(url + f"/threads/{main}")
    tab.page.fill('#fork-form input[name="target"]', "from-the-browser")
    tab.page.fill('#fork-form textarea[name="edits"]', '{"style": "brief"}')
    tab.page.click('#fork-form button[type="submit"]')
    expect(tab.page.locator("#flash")).to_contain_text("forked")
    expect(tab.page.locator("h1 .tid")).to_have_text("from-the-browser")
    expect(lst.page.locator('tr[data-thread="from-the-browser"]')).to_be_visible(timeout=WAIT)
    expect(rows).to_have_count(4)

    # Answer the interrupt and watch the run finish live.
    tab.page.goto(url + "/threads/needs-approval")
    expect(tab.page.locator("#status")).to_have_text("interrupted")
    tab.page.wait_for_function("document.documentElement.dataset.live === 'on'")
    tab.shot("interrupt")
    tab.page.fill('#answer-form textarea[name="resume"]', '{"approved": true, "by": "the browser test"}')
    tab.page.click('#answer-form button[type="submit"]')
    expect(tab.page.locator("#flash")).to_contain_text("answered the interrupt")
    expect(tab.page.locator("#status")).to_have_text("idle", timeout=WAIT)
    expect(tab.page.locator(".timeline li").first).to_contain_text("summarize")
    expect(lst.page.locator('tr[data-thread="needs-approval"] .badge')).to_have_text("idle", timeout=WAIT)

    # Dark mode.
    tab.page.click("#theme")
    assert tab.page.evaluate("document.documentElement.dataset.theme") in ("dark", "light")
    tab.page.evaluate("document.documentElement.dataset.theme = 'dark'")
    tab.shot("dark")

    for t in (tab, lst):
        assert t.hosts() <= {"127.0.0.1", "data"}, t.requests
        assert t.errors == []


def test_the_studio_mounted_in_another_app_in_a_browser(browser: Any, tmp_path: Path) -> None:
    """Under ``/studio``: the list, a thread, a fork shown live in another tab (its stream and
    refresh under the mount path too), every request the page makes under it."""
    db = str(tmp_path / "plait-demo.db")
    with ThreadPoolExecutor(1) as other:  # off this thread: Playwright's loop runs on it
        main, _ = other.submit(demo.run_demo, db, out=demo.Reporter()).result()["threads"]
    # Opened from its address: the host's lifespan (studio_lifespan) opens and closes it.
    studio = create_app(db, {"demo": demo.build_graph().compile(name="demo")})
    expect = sync_api.expect
    with LiveServer(mounted(studio)) as server:
        url = server.url + MOUNT
        tab, lst = Page(browser, tmp_path), Page(browser, tmp_path)
        lst.page.goto(url + "/")
        expect(lst.page.locator("table.threads tbody tr")).to_have_count(2)
        lst.page.wait_for_function("document.documentElement.dataset.live === 'on'")

        tab.page.goto(url + "/")
        tab.page.click(f'a[href="{MOUNT}/threads/{main}"]')
        expect(tab.page.locator("h1 .tid")).to_have_text(main)
        expect(tab.page.locator("#graph svg")).to_be_visible()
        assert tab.page.evaluate("getComputedStyle(document.querySelector('header.top')).display") == "flex"  # its CSS
        tab.page.keyboard.press("ArrowDown")  # the timeline's links: under the mount path
        tab.page.wait_for_url(f"{url}/threads/{main}?checkpoint=*")

        tab.page.fill('#fork-form input[name="target"]', "mounted-fork")
        tab.page.click('#fork-form button[type="submit"]')
        expect(tab.page.locator("#flash")).to_contain_text("forked")
        expect(tab.page.locator("h1 .tid")).to_have_text("mounted-fork")
        assert tab.page.url.startswith(f"{url}/threads/mounted-fork?")
        expect(lst.page.locator('tr[data-thread="mounted-fork"]')).to_be_visible(timeout=WAIT)
        tab.page.click('nav a:has-text("Runs")')
        expect(tab.page.locator("#no-queue")).to_be_visible()
        for t in (tab, lst):
            assert t.hosts() <= {"127.0.0.1", "data"}, t.requests
            assert all(u.startswith(url + "/") for u in t.requests if not u.startswith("data:")), t.requests
            assert t.errors == []
            t.context.close()


def test_the_memory_page_in_a_browser(browser: Any, tmp_path: Path) -> None:
    cp = SqliteCheckpointer(str(tmp_path / "memory.db"))
    seed(cp)
    expect = sync_api.expect
    with LiveServer(create_app(cp)) as server:
        tab = Page(browser, tmp_path)
        tab.page.goto(server.url + "/")
        tab.page.click('nav a:has-text("Memory")')
        rows = tab.page.locator("#items tbody tr[data-key]")
        expect(rows).to_have_count(6)

        # Unfold users (its marker, not its link): its two users show; u1's link lists u1's items.
        u1 = tab.page.locator('#namespaces li[data-ns="users.u1"]')
        expect(u1).to_be_hidden()
        tab.page.locator('#namespaces li[data-ns="users"] > details > summary').click(position={"x": 4, "y": 8})
        expect(u1).to_be_visible()
        u1.locator("> details > summary > a").click()
        expect(tab.page.locator("#items h2")).to_contain_text("under users.u1")
        expect(rows).to_have_count(3)
        expect(tab.page.locator('#namespaces li[data-ns="users.u1.notes"]')).to_be_visible()  # the path is open

        # Open an item: its whole value, its times.
        rows.filter(has_text="coffee").locator("a").click()
        expect(tab.page.locator("#item .item-key")).to_have_text("coffee")
        expect(tab.page.locator("#item-value")).to_contain_text('"no coffee after noon"')
        expect(tab.page.locator("#created-at")).to_have_text("2027-01-15T08:00:02.000000+00:00")
        tab.shot("memory")

        # A filtered search under the selected namespace.
        tab.page.fill('#search-form input[name="filter"]', '{"kind": "note", "n": {"$lt": 2}}')
        tab.page.click('#search-form button[type="submit"]')
        expect(rows).to_have_count(1)
        expect(rows.first).to_have_attribute("data-key", "tea")

        # Delete the item that is open (the box, then the confirmation the tab accepts).
        tab.page.goto(server.url + "/memory?namespace=users.u1&item_ns=users.u1.notes&key=coffee")
        tab.page.check('#delete-item-form input[name="confirm"]')
        tab.page.click('#delete-item-form button[type="submit"]')
        expect(tab.page.locator("#flash")).to_contain_text("deleted item coffee of namespace users.u1.notes")
        expect(rows).to_have_count(2)
        expect(tab.page.locator('#items tr[data-key="coffee"]')).to_have_count(0)
        expect(tab.page.locator("#item")).to_have_count(0)
        assert cp.store.get(("users", "u1", "notes"), "coffee") is None
        assert tab.hosts() <= {"127.0.0.1", "data"}, tab.requests
        assert tab.errors == []
        tab.context.close()
    cp.close()


@pytest.mark.postgres
def test_a_running_queued_run_is_cancelled_with_its_button(
    queue_db: tuple[str, str], queue_worker: Any, browser: Any, tmp_path: Path
) -> None:
    from plait.runs import Runs

    from ._queue_support import flows, ledger_lines, wait_for

    dsn, schema = queue_db
    ledger = tmp_path / "ledger"
    queue_worker(env={"PLAIT_TEST_LEDGER": str(ledger), "PLAIT_TEST_GATE": str(tmp_path / "gate")})
    expect = sync_api.expect
    with Runs(dsn, schema=schema) as runs:
        done = runs.submit(flows.name("single"), {}, thread_id="browser-done")
        runs.join(done, timeout=60)
        long = runs.submit(flows.name("steps"), {"steps": 10, "tag": "b"}, thread_id="browser-long")
        wait_for(lambda: len(ledger_lines(ledger)) >= 4, 60, "the run's fourth step (held at a gate never opened)")
        store = PostgresCheckpointer(dsn, schema=schema)
        with LiveServer(create_app(store)) as server:
            tab = Page(browser, tmp_path)
            tab.page.goto(server.url + "/")
            tab.page.click('nav a[href="/runs"]')
            row = tab.page.locator(f'tr[data-run="{long}"]')
            expect(row.locator(".badge")).to_have_text("running")
            expect(tab.page.locator(f'tr[data-run="{done}"] .badge')).to_have_text("success")
            expect(tab.page.locator(f'tr[data-run="{done}"] button.cancel-run')).to_have_count(0)
            tab.page.wait_for_function("document.documentElement.dataset.live === 'on'")
            row.locator("button.cancel-run").click()  # confirmed (the tab accepts dialogs)
            expect(tab.page.locator("#flash")).to_contain_text(f"run {long}", timeout=WAIT)
            expect(row.locator(".badge")).to_have_text("cancelled", timeout=WAIT)
            expect(row.locator("button.cancel-run")).to_have_count(0)
            expect(row.locator(".run-error")).to_contain_text("Cancelled")
            tab.shot("runs")
            row.locator("td a").first.click()
            expect(tab.page.locator("#run-status")).to_have_text("cancelled")
            tab.shot("run")
            tab.page.click('a[href="/threads/browser-long"]')
            expect(tab.page.locator(f'#queue-runs li[data-run="{long}"] .badge')).to_have_text("cancelled")
            tab.shot("thread-runs")
            assert tab.hosts() <= {"127.0.0.1", "data"}, tab.requests
            assert tab.errors == []
        store.close()
        assert runs.get(long).status == "cancelled"
    assert len(ledger_lines(ledger)) == 4


def test_odd_thread_ids_in_a_browser(browser: Any, tmp_path: Path) -> None:
    """``user/42`` opens from the list and forks into ``team/fork-1`` (the redirect opens it,
    and its timeline's links keep the id); ``..`` opens too; a 300-character id and one with a
    newline keep their rows one line high, the long one cut short with the whole id on hover."""
    db = str(tmp_path / "odd.db")
    long, two_lines = "team/" + "x" * 295, "two\nlines"

    def seed() -> None:
        saver = SqliteCheckpointer(db)
        app = compiled(saver)
        for thread in ("user/42", "..", long, two_lines, "plain"):
            app.invoke({"topic": "rivers"}, thread_id=thread)
        saver.close()

    with ThreadPoolExecutor(1) as other:  # off this thread: Playwright's loop runs on it
        other.submit(seed).result()
    expect = sync_api.expect
    with LiveServer(create_app(db, [compiled(None)])) as server:
        tab = Page(browser, tmp_path)
        tab.page.goto(server.url + "/")
        rows = tab.page.locator("table.threads tbody tr")
        expect(rows).to_have_count(5)
        # measured in one evaluation: the list may be redrawn (its live refresh) between two calls
        heights = dict(
            tab.page.eval_on_selector_all(
                "table.threads tbody tr", "rs => rs.map(r => [r.dataset.thread, r.getBoundingClientRect().height])"
            )
        )
        assert heights[long] == heights["plain"] and heights[two_lines] == heights["plain"], heights
        width = tab.page.eval_on_selector(f'a.tid[title="{long}"]', "a => a.getBoundingClientRect().width")
        assert width < 600
        expect(tab.page.locator('a.tid[title="two\\\\nlines"]')).to_have_text("two\\nlines")

        tab.page.click('a.tid:text-is("user/42")')
        expect(tab.page.locator("h1 .tid")).to_have_text("user/42")
        tab.page.keyboard.press("ArrowDown")  # the timeline's links keep the id
        tab.page.wait_for_url("**/threads/user%2F42?checkpoint=*")
        expect(tab.page.locator("h1 .tid")).to_have_text("user/42")
        tab.page.fill('#fork-form input[name="target"]', "team/fork-1")
        tab.page.click('#fork-form button[type="submit"]')
        expect(tab.page.locator("#flash")).to_contain_text("forked user/42 into team/fork-1")
        expect(tab.page.locator("h1 .tid")).to_have_text("team/fork-1")
        assert "/threads/team%2Ffork-1?" in tab.page.url
        tab.page.reload()
        expect(tab.page.locator("h1 .tid")).to_have_text("team/fork-1")

        tab.page.goto(server.url + "/")
        tab.page.click('a.tid:text-is("..")')
        expect(tab.page.locator("h1 .tid")).to_have_text("..")
        expect(tab.page.locator("#status")).to_have_text("interrupted")
        tab.shot("odd-ids")
        assert tab.hosts() <= {"127.0.0.1", "data"}, tab.requests
        assert tab.errors == []
        tab.context.close()
