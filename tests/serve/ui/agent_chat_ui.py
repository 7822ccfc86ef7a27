"""agent-chat-ui, unmodified, against ``plait serve`` on SQLite, driven in Chromium.

    python -m tests.serve.ui.agent_chat_ui --checkout /tmp/agent-chat-ui

starts ``plait serve`` (a SQLite file in a temporary folder, the tutorial's agent as the
assistant ``agent``: tests/serve/ui/tutorial_agent.py) and agent-chat-ui's ``next dev`` (its
``NEXT_PUBLIC_API_URL`` and ``NEXT_PUBLIC_ASSISTANT_ID`` set), both on free loopback ports,
then drives the page with Playwright in Debian's Chromium (``/usr/bin/chromium``, no browser
download) and checks, one by one:

1. ``stream``: a streamed answer: its first words are on the page while the run goes on;
2. ``approve``: the approval card of the email tool, and approving it sends the email;
3. ``edit``: editing a message and regenerating an answer (runs from past checkpoints);
4. ``branches``: after an edit, the edited message's branch switcher ("2 / 2") goes back to
   the earlier branch (its message and answer) and forward to the new one again;
5. ``threads``: the thread list after a reload (threads.search by ``graph_id`` metadata);
6. ``stop``: Cancel stops the page reading; the run still ends with the whole answer.

It prints a pass/fail line per check, then every request the page made to the API (method,
path with ids replaced, statuses), each 4xx/5xx, each answer of the wrong shape, and the
page's console errors. Exit status 0 when every check passed.

The checkout is agent-chat-ui's repository with its dependencies installed
(``npx pnpm@9 install``); none of it is part of plait. docs/serve.md, "agent-chat-ui", has
the steps.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import pathlib
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[3]
AGENT = pathlib.Path(__file__).resolve().parent / "tutorial_agent.py"
CHROMIUM = "/usr/bin/chromium"

GREETING = "I can look up the weather and send emails."
"""The scripted model's answer to a message that asks for no tool."""
ASK_EMAIL = "What's the weather in Oslo? Then email ann@example.com saying bring a coat"
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


@dataclass
class Check:
    name: str
    passed: bool
    detail: str
    gaps: list[str] = field(default_factory=list)
    """What differs from LangGraph's server though the check passed."""


@dataclass
class Request:
    method: str
    path: str
    body: str
    check: str = ""
    status: int | None = None
    failure: str | None = None
    events: collections.Counter[str] = field(default_factory=collections.Counter)
    shape_error: str | None = None


@dataclass
class Report:
    checks: list[Check]
    requests: list[Request]
    console_errors: list[str]
    loads: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return len(self.checks) == 6 and all(c.passed for c in self.checks)

    def lines(self) -> list[str]:
        out = []
        for c in self.checks:
            out.append(f"{'PASS' if c.passed else 'FAIL'} {c.name}: {c.detail}")
            out.extend(f"     gap: {g}" for g in c.gaps)
        out.append("")
        out.append(f"requests agent-chat-ui made to the API ({len(self.requests)}):")
        groups: dict[tuple[str, str], list[Request]] = {}
        for r in self.requests:
            groups.setdefault((r.method, UUID.sub("{id}", r.path)), []).append(r)
        for (method, path), rs in groups.items():
            statuses = collections.Counter(str(r.status) if r.failure is None else "aborted" for r in rs)
            events: collections.Counter[str] = collections.Counter()
            for r in rs:
                events.update(r.events)
            said = ", ".join(f"{k} x{v}" for k, v in sorted(statuses.items()))
            extra = f"; events: {dict(sorted(events.items()))}" if events else ""
            out.append(f"  {method} {path}  x{len(rs)}  [{said}]{extra}")
        bad = [r for r in self.requests if (r.status or 0) >= 400]
        out.append(f"4xx/5xx answers: {len(bad)}")
        out.extend(f"  {r.status} {r.method} {r.path} (check {r.check}) {r.body[:200]}" for r in bad)
        aborted = [r for r in self.requests if r.failure is not None]
        out.append(f"requests the page aborted: {len(aborted)}")
        out.extend(f"  {r.method} {r.path} (check {r.check}): {r.failure}" for r in aborted)
        shapes = [r for r in self.requests if r.shape_error]
        out.append(f"answers of the wrong shape: {len(shapes)}")
        out.extend(f"  {r.method} {r.path}: {r.shape_error}" for r in shapes)
        out.append(f"page loads: {len(self.loads)}")
        out.extend(f"  {e}" for e in self.loads)
        out.append(f"console errors on the page: {len(self.console_errors)}")
        out.extend(f"  {e[:300]}" for e in self.console_errors)
        return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_http(url: str, timeout: float, proc: subprocess.Popen[bytes], log: pathlib.Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args!r} exited {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=60) as r:
                if r.status == 200:
                    return
        except (OSError, urllib.error.URLError):
            pass
        time.sleep(0.5)
    raise TimeoutError(f"{url} did not answer in {timeout:.0f}s:\n{log.read_text()[-3000:]}")


@contextlib.contextmanager
def _process(
    args: list[str], cwd: pathlib.Path, env: dict[str, str], log: pathlib.Path
) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as out:
        proc = subprocess.Popen(args, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)  # its own group: next dev's server child too
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


@dataclass
class Servers:
    api: str
    ui: str
    workdir: pathlib.Path


@contextlib.contextmanager
def servers(checkout: pathlib.Path, token_delay: float) -> Iterator[Servers]:
    """``plait serve`` on SQLite and agent-chat-ui's ``next dev``, on free loopback ports."""
    api_port, ui_port = _free_port(), _free_port()
    api, ui = f"http://127.0.0.1:{api_port}", f"http://127.0.0.1:{ui_port}"
    plait = shutil.which("plait", path=str(pathlib.Path(sys.executable).parent)) or "plait"
    with tempfile.TemporaryDirectory(prefix="plait-chatui-") as tmp:
        work = pathlib.Path(tmp)
        env = {**os.environ, "PLAIT_UI_TOKEN_DELAY": str(token_delay)}
        serve = [plait, "serve", "--db", str(work / "chat.db"), "--graph", f"agent={AGENT}:graph"]
        serve += ["--port", str(api_port), "--cors-origin", ui, "--no-studio"]
        ui_env = {
            **os.environ,
            "NEXT_PUBLIC_API_URL": api,
            "NEXT_PUBLIC_ASSISTANT_ID": "agent",
            "NEXT_TELEMETRY_DISABLED": "1",
        }
        dev = [str(checkout / "node_modules" / ".bin" / "next"), "dev", "-p", str(ui_port), "-H", "127.0.0.1"]
        with (
            _process(serve, work, env, work / "serve.log") as api_proc,  # the outbox lands in work
            _process(dev, checkout, ui_env, work / "next.log") as ui_proc,
        ):
            _wait_http(f"{api}/ok", 60, api_proc, work / "serve.log")
            _wait_http(f"{ui}/", 300, ui_proc, work / "next.log")  # the first page compiles
            yield Servers(api, ui, work)


# The shapes the SDK reads from each JSON answer: (method, path pattern) -> check.
def _thread_shape(t: Any) -> str | None:
    if not isinstance(t, dict) or not {"thread_id", "status", "metadata", "values"} <= t.keys():
        return f"a thread without thread_id/status/metadata/values: {str(t)[:200]}"
    return None


def _state_shape(s: Any) -> str | None:
    keys = {"values", "next", "tasks", "checkpoint", "parent_checkpoint", "metadata", "created_at"}
    if not isinstance(s, dict) or not keys <= s.keys():
        return f"a state without {sorted(keys - set(s) if isinstance(s, dict) else keys)}"
    if not isinstance(s["checkpoint"], dict) or "checkpoint_id" not in s["checkpoint"]:
        return "a state whose checkpoint has no checkpoint_id"
    return None


def _list_of(check: Callable[[Any], str | None]) -> Callable[[Any], str | None]:
    def each(items: Any) -> str | None:
        if not isinstance(items, list):
            return f"not a list: {str(items)[:200]}"
        return next((e for e in map(check, items) if e), None)

    return each


SHAPES: list[tuple[str, re.Pattern[str], Callable[[Any], str | None]]] = [
    ("POST", re.compile(r"^/threads$"), _thread_shape),
    ("GET", re.compile(r"^/threads/[^/]+$"), _thread_shape),
    ("POST", re.compile(r"^/threads/search$"), _list_of(_thread_shape)),
    ("POST", re.compile(r"^/threads/[^/]+/history$"), _list_of(_state_shape)),
    ("GET", re.compile(r"^/threads/[^/]+/state$"), _state_shape),
]


class Page:
    """The browser page, the API's request log and a Python SDK client on the same server."""

    def __init__(self, page: Any, api: str, ui: str, workdir: pathlib.Path) -> None:
        self.page, self.api, self.ui, self.workdir = page, api, ui, workdir
        self.requests: list[Request] = []
        self.check = ""  # the check under way, named in each request it makes
        self.console_errors: list[str] = []
        self._open: dict[Any, Request] = {}
        page.on("request", self._on_request)
        page.on("requestfinished", self._on_finished)
        page.on("requestfailed", self._on_failed)
        page.on("console", self._on_console)
        page.on("pageerror", lambda e: self.console_errors.append(f"page error: {e}"))
        self.loads: list[str] = []  # every page load, ours and next dev's own reloads
        page.on("load", lambda: self.loads.append(f"{self.check or 'warm-up'}: {page.url}"))
        from langgraph_sdk import get_sync_client

        self.sdk: Any = get_sync_client(url=api, api_key=None)

    def _on_request(self, req: Any) -> None:
        if req.url.startswith(self.api):
            r = Request(req.method, req.url[len(self.api) :].split("?")[0], req.post_data or "", self.check)
            self.requests.append(r)
            self._open[req] = r

    def _on_finished(self, req: Any) -> None:
        r = self._open.pop(req, None)
        if r is None:
            return
        resp = req.response()
        r.status = resp.status if resp else None
        if r.method == "OPTIONS" or r.status is None or r.status >= 400:
            return
        try:
            text = resp.text()
        except Exception:  # a body the browser did not keep
            return
        if "text/event-stream" in (resp.headers.get("content-type") or ""):
            r.events.update(re.findall(r"^event: *(\S+)", text, re.MULTILINE))
            return
        for method, pattern, check in SHAPES:
            if method == r.method and pattern.match(r.path):
                try:
                    r.shape_error = check(json.loads(text))
                except ValueError:
                    r.shape_error = f"not JSON: {text[:200]}"

    def _on_failed(self, req: Any) -> None:
        r = self._open.pop(req, None)
        if r is not None:
            r.failure = req.failure or "failed"
            resp = req.response() if r.failure else None
            r.status = resp.status if resp else None

    def _on_console(self, msg: Any) -> None:
        if msg.type == "error" and "Invalid DOM property" not in msg.text:
            self.console_errors.append(msg.text)

    # page helpers

    def open(self, query: str = "") -> None:
        """Load the page and wait for React to take it over: its first request (GET /info)."""
        before = sum(r.path == "/info" for r in self.requests)
        self.page.goto(f"{self.ui}/{query}", wait_until="domcontentloaded", timeout=180_000)
        self.page.wait_for_selector("textarea[placeholder='Type your message...']", timeout=180_000)
        deadline = time.monotonic() + 120
        while sum(r.path == "/info" for r in self.requests) == before and time.monotonic() < deadline:
            self.page.wait_for_timeout(100)

    def text(self) -> str:
        return str(self.page.evaluate("document.body.innerText"))

    def send(self, message: str) -> None:
        box = self.page.locator("textarea[placeholder='Type your message...']")
        box.fill(message)
        box.press("Enter")

    def answer(self) -> str:
        """The text of the last answer on the page (an AI message's markdown)."""
        texts = self.page.locator("div.group.mr-auto div.py-1").all_inner_texts()
        return texts[-1].strip() if texts else ""

    def humans(self) -> list[str]:
        """The texts of the human messages on the page, in order."""
        return [t.strip() for t in self.page.locator("div.group.ml-auto p").all_inner_texts()]

    def human(self, message: str) -> Any:
        """The human message ``message`` in the chat (not a thread of that title in the
        hidden thread list)."""
        return self.page.locator("div.group.ml-auto").locator(self._text(message)).first

    def _text(self, message: str) -> Any:
        return self.page.locator("p").filter(has_text=re.compile(rf"^\s*{re.escape(message)}\s*$"))

    def switcher(self, message: str) -> tuple[str, Any, Any]:
        """The branch switcher under the human message ``message`` (agent-chat-ui's
        ``BranchSwitcher``: a previous and a next button around an "i / n" span): its label
        ("" when there is none) and its two buttons."""
        box = self.page.locator("div.group.ml-auto", has=self._text(message))
        label = box.locator("span.text-sm", has_text=re.compile(r"^\s*\d+ / \d+\s*$"))
        if not label.count():
            return "", None, None
        buttons = label.first.locator("xpath=..").locator("button")
        return label.first.inner_text().strip(), buttons.first, buttons.last

    def wait_switcher(self, message: str, want: str, timeout: float = 15) -> str:
        """The switcher's label under ``message`` once it reads ``want`` (or the last seen)."""
        deadline = time.monotonic() + timeout
        label = ""
        while time.monotonic() < deadline:
            label = self.switcher(message)[0]
            if label == want:
                break
            self.page.wait_for_timeout(100)
        return label

    def running(self) -> bool:
        """The page shows Cancel while it reads a run's stream."""
        return bool(self.page.get_by_role("button", name="Cancel", exact=True).count())

    def wait_text(self, needle: str, timeout: float = 30) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if needle in self.text():
                return True
            self.page.wait_for_timeout(100)
        return False

    def wait_idle(self, timeout: float = 30) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.running():
                return True
            self.page.wait_for_timeout(100)
        return False

    def thread_id(self) -> str | None:
        match = re.search(r"[?&]threadId=([0-9a-f-]{36})", self.page.url)
        return match.group(1) if match else None

    def wait_thread_id(self, timeout: float = 15) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            tid = self.thread_id()
            if tid:
                return tid
            self.page.wait_for_timeout(100)
        raise AssertionError(f"the page has no threadId in its URL: {self.page.url}")

    def last_messages(self, thread_id: str) -> list[dict[str, Any]]:
        state = self.sdk.threads.get_state(thread_id)
        values = state["values"]
        return list(values.get("messages", [])) if isinstance(values, dict) else []

    def wait_runs_done(self, thread_id: str, timeout: float = 30) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while True:
            runs = list(self.sdk.runs.list(thread_id))
            if all(r["status"] not in ("pending", "running") for r in runs) or time.monotonic() > deadline:
                return [dict(r) for r in runs]
            time.sleep(0.2)


def _content(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    return str(content)


def check_stream(p: Page) -> Check:
    """Tokens on the page before the run ends: a prefix of the answer while Cancel shows."""
    p.open()
    p.send("Hello there")
    seen: list[str] = []
    deadline = time.monotonic() + 30
    partial = None
    while time.monotonic() < deadline:
        shown, running = p.answer(), p.running()
        if shown and (not seen or seen[-1] != shown):
            seen.append(shown)
        if running and shown and shown != GREETING and partial is None:
            partial = shown
        if shown == GREETING and not running:
            break
        p.page.wait_for_timeout(30)
    tid = p.wait_thread_id()
    p.wait_runs_done(tid)
    final = _content(p.last_messages(tid)[-1])
    steps = len(seen)
    if partial is None:
        return Check("stream", False, f"no partial answer shown while the run went on (seen {seen!r})")
    if final != GREETING or not p.wait_text(GREETING, 5):
        return Check("stream", False, f"the answer is {final!r}, not {GREETING!r}")
    return Check("stream", True, f"the answer grew in {steps} steps on the page ({partial!r} first), ended whole")


def check_approve(p: Page) -> Check:
    """The email tool's interrupt shows agent-chat-ui's approval card; Approve sends the email."""
    p.open()
    p.send(ASK_EMAIL)
    tid = p.wait_thread_id()
    p.wait_runs_done(tid)
    status = p.sdk.threads.get(tid)["status"]
    if status != "interrupted":
        return Check("approve", False, f"the thread is {status}, not interrupted, after asking for an email")
    approve = p.page.get_by_role("button", name="Approve", exact=True)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not approve.count():
        p.page.wait_for_timeout(100)
    if not approve.count():
        state = p.sdk.threads.get_state(tid)
        tasks = state["tasks"]
        value = tasks[0]["interrupts"][0]["value"] if tasks and tasks[0]["interrupts"] else None
        generic = "Human Interrupt" in p.text()
        card = "its generic interrupt table (no buttons)" if generic else "no interrupt card"
        return Check("approve", False, f"no Approve button: the page shows {card} for the interrupt value {value!r}")
    approve.first.click()
    if not p.wait_text("send_email: sent msg-", 30):
        return Check("approve", False, "approved, but the answer naming the sent email never showed")
    p.wait_runs_done(tid)
    final = _content(p.last_messages(tid)[-1])
    sent = p.workdir / "outbox.json"  # the example's mail server, in plait serve's folder
    outbox = json.loads(sent.read_text()) if sent.exists() else {}
    if "sent msg-" not in final or len(outbox) != 1:
        return Check("approve", False, f"the thread ends with {final!r}; the outbox holds {len(outbox)} emails")
    return Check("approve", True, f"the approval card's Approve resumed the run: {final!r}; one email sent")


def check_edit(p: Page) -> Check:
    """Edit the first message (a run from the checkpoint before it), then regenerate the answer
    (a run from the checkpoint before the answer): each replaces what followed, on a branch."""
    p.open()
    p.send("Hello again")
    tid = p.wait_thread_id()
    if not p.wait_text(GREETING) or not p.wait_idle():
        return Check("edit", False, "the first answer never ended")
    p.wait_runs_done(tid)
    p.page.get_by_text("Hello again", exact=True).first.hover()
    p.page.get_by_role("button", name="Edit", exact=True).first.click()
    p.page.locator("textarea:not([placeholder='Type your message...'])").first.fill("What's the weather in Lisbon?")
    p.page.get_by_role("button", name="Submit", exact=True).first.click()
    if not p.wait_text("get_weather: 19°C, sunny", 30) or not p.wait_idle():
        return Check("edit", False, "the edited message's answer never showed")
    runs = p.wait_runs_done(tid)
    edit_body = json.loads(next(r.body for r in reversed(p.requests) if r.path.endswith("/runs/stream")))
    msgs = [_content(m) for m in p.last_messages(tid)]
    if len(msgs) != 4 or "Lisbon" not in msgs[0] or "Hello again" in p.text():
        return Check("edit", False, f"after the edit the thread holds {msgs} (request {edit_body})")
    edit_from = (edit_body.get("checkpoint") or {}).get("checkpoint_id")
    # regenerate the last answer: no input, from the checkpoint before that answer
    p.page.get_by_text("Done. get_weather: 19°C, sunny", exact=True).first.hover()
    before = len(runs)
    p.page.get_by_role("button", name="Refresh", exact=True).last.click()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and len(list(p.sdk.runs.list(tid))) == before:
        time.sleep(0.2)
    runs = p.wait_runs_done(tid)
    p.wait_idle()
    regen_body = json.loads(next(r.body for r in reversed(p.requests) if r.path.endswith("/runs/stream")))
    regen_from = (regen_body.get("checkpoint") or {}).get("checkpoint_id")
    after = [_content(m) for m in p.last_messages(tid)]
    if len(runs) != before + 1 or runs[0]["status"] != "success" or after != msgs or regen_from is None:
        return Check("edit", False, f"regenerate ({regen_body}) made runs {[r['status'] for r in runs]}: {after}")
    if not p.wait_text("Done. get_weather: 19°C, sunny", 10):
        return Check("edit", False, "the regenerated answer does not show")
    gaps = []
    if not re.search(r"\b\d+ / \d+\b", p.text()):
        seen = len(list(p.sdk.threads.get_history(tid, limit=10)))
        gaps.append(
            "no branch switcher (2 / 2) on the edited message or the regenerated answer: useStream finds sibling "
            f"branches in POST /threads/{{id}}/history (limit 10), which lists {seen} states"
        )
    return Check(
        "edit",
        True,
        f"the edit ran from checkpoint {edit_from} (the thread's root) and replaced the first turn; regenerate "
        f"ran from {regen_from} with no input and replaced the answer ({len(after)} messages either way)",
        gaps,
    )


def check_branches(p: Page) -> Check:
    """Edit a message on a new thread: the edited message shows "2 / 2"; the previous button
    shows the earlier branch (its message and answer, "1 / 2"), the next one the new again."""
    first, edited, answer = "Hello, branch me", "What's the weather in Lisbon?", "Done. get_weather: 19°C, sunny"
    p.open()
    p.send(first)
    tid = p.wait_thread_id()
    if not p.wait_text(GREETING) or not p.wait_idle():
        return Check("branches", False, "the first answer never ended")
    p.wait_runs_done(tid)
    p.human(first).hover()
    p.page.get_by_role("button", name="Edit", exact=True).first.click()
    p.page.locator("textarea:not([placeholder='Type your message...'])").first.fill(edited)
    p.page.get_by_role("button", name="Submit", exact=True).first.click()
    if not p.wait_text(answer, 30) or not p.wait_idle():
        return Check("branches", False, "the edited message's answer never showed")
    p.wait_runs_done(tid)
    history = list(p.sdk.threads.get_history(tid, limit=10))
    shape = f"POST /threads/{{id}}/history (limit 10) lists {len(history)} states"
    label = p.wait_switcher(edited, "2 / 2")
    if label != "2 / 2":
        return Check("branches", False, f"no '2 / 2' under the edited message (switcher {label!r}); {shape}")
    # the previous button under the edited message, then the next one under the earlier message
    steps = [("previous", edited, first, "1 / 2", GREETING), ("next", first, edited, "2 / 2", answer)]
    for which, under, lands, want, shows in steps:
        p.human(under).hover()
        _, previous, following = p.switcher(under)
        (previous if which == "previous" else following).click()
        label = p.wait_switcher(lands, want)
        seen = (p.humans(), p.answer())
        if label != want or seen != ([lands], shows):
            return Check("branches", False, f"the {which} branch shows {seen} (switcher {label!r}), not {lands!r}")
    heads = [_content(m) for m in p.last_messages(tid)]
    return Check(
        "branches",
        True,
        f"the edited message shows 2 / 2; previous: 1 / 2 with {first!r} and {GREETING!r}; next: 2 / 2 with "
        f"{edited!r} and {answer!r} again ({shape}; the thread's head keeps {heads[0]!r})",
    )


def check_threads(p: Page, expected: list[str]) -> Check:
    """After a reload the sidebar lists the threads made above, found by graph_id metadata."""
    p.page.reload(wait_until="domcontentloaded")
    p.open("?chatHistoryOpen=true")
    deadline = time.monotonic() + 20
    missing = expected
    while time.monotonic() < deadline:
        items = p.page.locator("div.w-full.px-1 button").all_inner_texts()
        missing = [e for e in expected if not any(e[:25] in i for i in items)]
        if not missing:
            break
        p.page.wait_for_timeout(200)
    searches = [r for r in p.requests if r.path == "/threads/search"]
    if missing:
        return Check("threads", False, f"the thread list lacks {missing} (searches: {[s.body for s in searches]})")
    p.page.locator("div.w-full.px-1 button", has_text=expected[0][:25]).first.click()
    if not p.wait_text(GREETING, 20):
        return Check("threads", False, f"clicking {expected[0]!r} in the list did not load its messages")
    said = f"the {len(expected)} threads made above are listed after a reload (threads.search {searches[-1].body})"
    return Check("threads", True, f"{said}; clicking one loads its messages")


def check_stop(p: Page) -> Check:
    """Cancel while the answer streams: the page stops reading; the run still ends whole."""
    p.open()
    p.send("Hi, stop me")
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not p.answer().startswith("I can"):
        p.page.wait_for_timeout(20)
    tid = p.wait_thread_id()
    p.page.get_by_role("button", name="Cancel", exact=True).click()
    stopped_at = p.answer()
    p.page.wait_for_timeout(3000)
    later = p.answer()
    runs = p.wait_runs_done(tid)
    final = _content(p.last_messages(tid)[-1])
    cancels = [r for r in p.requests if r.path.endswith("/cancel")]
    if stopped_at == GREETING:
        return Check("stop", False, "the answer was whole before Cancel was clicked (slow the tokens)")
    if cancels:
        return Check("stop", False, f"the page asked the server to cancel: {[c.path for c in cancels]}")
    if runs[0]["status"] != "success" or final != GREETING:
        return Check("stop", False, f"the run is {runs[0]['status']} with {final!r} after the page stopped reading")
    return Check(
        "stop",
        True,
        f"the page stopped at {stopped_at!r} (3 s later: {later!r}); the run went on to success "
        f"and the thread holds the whole answer (SDK)",
    )


def run(checkout: pathlib.Path, token_delay: float = 0.15, headed: bool = False) -> Report:
    from playwright.sync_api import sync_playwright

    with servers(checkout, token_delay) as s, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"], headless=not headed)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            p = Page(page, s.api, s.ui, s.workdir)
            checks: list[Check] = []
            p.open()  # next dev compiles the page's chunks on first use, and may reload it once
            page.wait_for_timeout(3000)
            steps: list[tuple[str, Callable[[], Check]]] = [
                ("stream", lambda: check_stream(p)),
                ("approve", lambda: check_approve(p)),
                ("edit", lambda: check_edit(p)),
                ("branches", lambda: check_branches(p)),
                ("threads", lambda: check_threads(p, ["Hello there", ASK_EMAIL, "What's the weather in Lisbon?"])),
                ("stop", lambda: check_stop(p)),
            ]
            for name, step in steps:
                p.check = name
                try:
                    checks.append(step())
                except Exception as exc:  # one check's failure does not hide the next ones
                    page.screenshot(path=str(s.workdir.parent / f"plait-chatui-{name}.png"))
                    checks.append(Check(name, False, f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"))
            p.sdk.close()
            return Report(checks, p.requests, p.console_errors, p.loads)
        finally:
            browser.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.serve.ui.agent_chat_ui", description=__doc__.split("\n")[0])
    parser.add_argument("--checkout", type=pathlib.Path, default=os.environ.get("PLAIT_AGENT_CHAT_UI"))
    parser.add_argument("--token-delay", type=float, default=0.15, help="seconds before each streamed piece")
    parser.add_argument("--headed", action="store_true")
    args = parser.parse_args(argv)
    if args.checkout is None or not (args.checkout / "node_modules" / ".bin" / "next").exists():
        parser.error("--checkout: an agent-chat-ui checkout with its node_modules installed")
    report = run(args.checkout.resolve(), args.token_delay, args.headed)
    print("\n".join(report.lines()))
    return 0 if report.passed else 1


if __name__ == "__main__":
    sys.exit(main())
