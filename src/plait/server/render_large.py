"""A large change in the "what step N changed" panel, sent as a summary.

A step that writes a 2 MB string or appends 3,000 items would otherwise put all of it in the
page (megabytes of HTML, seconds of layout, a column pushed wide). What is sent instead is
bounded whatever the write: what changed, counted; the first :data:`PREVIEW_ITEMS` values,
each inline only when small (else its type and size); and a load button for the whole change,
which the page's script draws as a tree that unfolds on demand.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from markupsafe import Markup

from plait import inspect as ins

__all__ = ["PREVIEW_BYTES", "PREVIEW_ITEMS", "json_size", "large_change_html"]

PREVIEW_ITEMS = 5
"""Values of a large change shown before its load button."""
PREVIEW_BYTES = 512
"""A previewed value whose JSON is larger than this is named (type and size), not shown."""
PREVIEW_CHARS = 120
"""A string too large to preview is shown by its first characters."""


def json_size(value: Any) -> int:
    """The length of ``value``'s JSON: what decides whether the page sends it or a button."""
    return len(json.dumps(value, default=str, ensure_ascii=False))


def _kb(n: int) -> str:
    return f"{n / 1024:,.1f} KB"


def _gist(value: Any) -> Markup:
    """``value`` if small, else what it is: ``a string of 2,000,000 characters: "xxx…"``."""
    size = json_size(value)
    if size <= PREVIEW_BYTES:
        return Markup('<code class="v">{}</code>').format(json.dumps(value, default=str, ensure_ascii=False))
    if isinstance(value, str):
        return Markup('<span class="v big">a string of {:,} characters: <code>{}…</code></span>').format(
            len(value), json.dumps(value[:PREVIEW_CHARS], ensure_ascii=False)[:-1]
        )
    if isinstance(value, Mapping):
        what = f"an object of {len(value):,} keys"
    elif isinstance(value, list | tuple):
        what = f"a list of {len(value):,} items"
    else:
        what = f"a {type(value).__name__}"
    return Markup('<span class="v big">{} ({})</span>').format(what, _kb(size))


def _rows(d: ins.ChannelDiff) -> list[tuple[str, str, Any]]:
    """(css class, sign, value) of everything the change holds, in the panel's order."""
    rows: list[tuple[str, str, Any]] = []
    if d.kind in ("list", "messages"):
        rows += [("add", "+", v) for v in d.appended]
        rows += [("del", "-", v) for v in d.removed_items]
        rows += [("upd", "~", after) for _, after in d.updated]
    elif d.kind == "map":
        rows += [("add", "+", {k: v}) for k, v in d.added_keys.items()]
        rows += [("del", "-", {k: v}) for k, v in d.removed_keys.items()]
        rows += [("upd", "~", {k: after}) for k, (_, after) in d.changed_keys.items()]
    elif d.kind == "added":
        rows.append(("add", "+", d.after))
    elif d.kind == "removed":
        rows.append(("del", "-", d.before))
    else:
        rows += [("del", "-", d.before), ("add", "+", d.after)]
    return rows


def _counts(d: ins.ChannelDiff) -> str:
    if d.kind in ("list", "messages"):
        parts = [(len(d.appended), "appended"), (len(d.removed_items), "removed"), (len(d.updated), "updated")]
    elif d.kind == "map":
        parts = [(len(d.added_keys), "keys added"), (len(d.removed_keys), "removed"), (len(d.changed_keys), "changed")]
    else:
        return str(d.kind)
    return ", ".join(f"{n:,} {what}" for n, what in parts if n) or "reordered"


def large_change_html(d: ins.ChannelDiff, url: str, size: int) -> Markup:
    """The summary of a change too large to send: counts, a preview, and where the rest is."""
    rows = _rows(d)
    shown = Markup("").join(
        Markup('<li class="{}"><span class="sign">{}</span>{}</li>').format(cls, sign, _gist(v))
        for cls, sign, v in rows[:PREVIEW_ITEMS]
    )
    more = len(rows) - PREVIEW_ITEMS
    rest = Markup('<li class="more">… and {:,} more</li>').format(more) if more > 0 else Markup("")
    return Markup(
        '<div class="channel lazy large-change" data-key="{k}"><p class="gist">{counts} · {kb}</p>'
        '<ul class="change {kind}">{shown}{rest}</ul>'
        '<button type="button" data-lazy="{u}">load the whole change ({kb})</button> '
        '<a class="nojs" href="{u}">as JSON</a></div>'
    ).format(k=d.key, counts=_counts(d), kb=_kb(size), kind=d.kind, shown=shown, rest=rest, u=url)
