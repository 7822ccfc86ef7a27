"""agent-chat-ui, unmodified, against plait serve: the six browser checks of agent_chat_ui.py.

Skipped unless ``PLAIT_AGENT_CHAT_UI`` names an agent-chat-ui checkout with its node_modules
installed (none of its code is in plait, and CI has no copy), and Playwright and Debian's
Chromium are there. docs/serve.md, "agent-chat-ui", has the steps.
"""

from __future__ import annotations

import os
import pathlib

import pytest

from .agent_chat_ui import CHROMIUM, run

CHECKOUT = os.environ.get("PLAIT_AGENT_CHAT_UI")


def _why_skip() -> str | None:
    if not CHECKOUT:
        return "PLAIT_AGENT_CHAT_UI is not set (an agent-chat-ui checkout with node_modules; see docs/serve.md)"
    if not (pathlib.Path(CHECKOUT) / "node_modules" / ".bin" / "next").exists():
        return f"PLAIT_AGENT_CHAT_UI={CHECKOUT} has no node_modules/.bin/next: install its dependencies first"
    if not pathlib.Path(CHROMIUM).exists():
        return f"no Chromium at {CHROMIUM} (apt-get install chromium)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "Playwright's Python package is not installed"
    return None


@pytest.mark.skipif(_why_skip() is not None, reason=_why_skip() or "")
def test_agent_chat_ui_streams_approves_edits_switches_branches_lists_and_stops() -> None:
    assert CHECKOUT is not None
    report = run(pathlib.Path(CHECKOUT).resolve())
    print("\n".join(report.lines()))
    assert [c.name for c in report.checks] == ["stream", "approve", "edit", "branches", "threads", "stop"]
    assert report.passed, "\n".join(report.lines())
    assert not [r for r in report.requests if (r.status or 0) >= 400], "\n".join(report.lines())
    assert not [r for r in report.requests if r.shape_error], "\n".join(report.lines())
