"""HTML pieces the templates use: the collapsible JSON tree and a channel diff.

Everything is escaped here (markupsafe), so an id or a value can never become markup. The
tree is nested ``<details>`` elements: it folds and unfolds without JavaScript; a channel
whose JSON is large is not sent inline but as a button (and, without JavaScript, a link)
that loads it from the API when asked.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlencode

from markupsafe import Markup, escape

from plait import inspect as ins
from plait.server.render_large import json_size, large_change_html

__all__ = ["ID_CHARS", "LAZY_BYTES", "change_html", "shown_id", "state_html", "tree_html"]

LAZY_BYTES = 4096
"""A channel whose JSON is larger than this is loaded on demand."""
OPEN_DEPTH = 1
ID_CHARS = 60
"""An id longer than this is cut short in a list (its row keeps the full one on hover)."""
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_BIDI = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u2028\u2029")


def _visible(ch: str) -> str:
    if ch in _NAMED:
        return _NAMED[ch]
    if unicodedata.category(ch) == "Cc" or ch in _BIDI:
        return f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}"
    return ch


def shown_id(text: str, limit: int | None = ID_CHARS) -> str:
    """An id as a page shows it: control characters (a newline, an escape, a bidi override)
    written out as ``\\n`` or ``\\x1b`` so they cannot split a row or reorder its text, and,
    with a ``limit``, cut short with an ellipsis so one long id cannot push a list's columns off."""
    out = "".join(_visible(ch) for ch in str(text))
    return out if limit is None or len(out) <= limit else out[: limit - 1] + "…"


def _leaf(value: Any) -> Markup:
    if value is None:
        return Markup('<span class="v null">null</span>')
    if isinstance(value, bool):
        return Markup('<span class="v bool">{}</span>').format("true" if value else "false")
    if isinstance(value, int | float):
        return Markup('<span class="v num">{}</span>').format(json.dumps(value))
    return Markup('<span class="v str">{}</span>').format(json.dumps(str(value), ensure_ascii=False))


def tree_html(value: Any, label: str | None = None, depth: int = 0) -> Markup:
    """``value`` as a tree: mappings and lists fold, the first levels open."""
    head = Markup('<span class="k">{}</span>: ').format(label) if label is not None else Markup("")
    if isinstance(value, Mapping):
        items = [(str(k), v) for k, v in value.items()]
        kind = f"{{{len(items)}}}"
    elif isinstance(value, list | tuple):
        items = [(str(i), v) for i, v in enumerate(value)]
        kind = f"[{len(items)}]"
    else:
        return Markup('<div class="leaf">{}{}</div>').format(head, _leaf(value))
    if not items:
        return Markup('<div class="leaf">{}<span class="v empty">{}</span></div>').format(
            head, "{}" if isinstance(value, Mapping) else "[]"
        )
    children = Markup("").join(tree_html(v, k, depth + 1) for k, v in items)
    return Markup('<details class="node"{}><summary>{}<span class="t">{}</span></summary>{}</details>').format(
        Markup(" open") if depth <= OPEN_DEPTH else Markup(""), head, kind, children
    )


def state_html(values: Mapping[str, Any], lazy_url: str, query: Mapping[str, str]) -> Markup:
    """A checkpoint's channels, each a tree; a large one as a load button (and link)."""
    rows = []
    for key in sorted(values):
        value = values[key]
        size = json_size(value)
        if size > LAZY_BYTES:
            url = lazy_url + "?" + urlencode({**query, "key": key})
            rows.append(
                Markup(
                    '<div class="channel lazy" data-key="{k}"><span class="k">{k}</span>: '
                    '<button type="button" data-lazy="{u}">load ({n:.1f} KB)</button> '
                    '<a class="nojs" href="{u}">as JSON</a></div>'
                ).format(k=key, u=url, n=size / 1024)
            )
        else:
            rows.append(Markup('<div class="channel" data-key="{}">{}</div>').format(key, tree_html(value, key)))
    return Markup("").join(rows)


def _items(cls: str, sign: str, items: Any) -> Markup:
    return Markup("").join(
        Markup('<li class="{}"><span class="sign">{}</span>{}</li>').format(cls, sign, tree_html(v)) for v in items
    )


def change_html(d: ins.ChannelDiff, lazy_url: str | None = None) -> Markup:
    """One channel's difference: appended/removed items, changed keys, or before → after.

    With ``lazy_url`` (where the API gives this one channel's change), a change whose JSON
    is larger than :data:`LAZY_BYTES` is not sent whole: a count of what changed, the first
    few small values, and a button (without JavaScript, a link) that loads the rest."""
    if lazy_url is not None:
        size = json_size(d.to_json())
        if size > LAZY_BYTES:
            return large_change_html(d, lazy_url + "&" + urlencode({"key": d.key}), size)
    parts: list[Markup] = []
    if d.kind in ("list", "messages"):
        parts.append(_items("add", "+", d.appended))
        parts.append(_items("del", "-", d.removed_items))
        for before, after in d.updated:
            parts.append(
                Markup('<li class="upd"><span class="sign">~</span>{} → {}</li>').format(
                    tree_html(before), tree_html(after)
                )
            )
    elif d.kind == "map":
        parts.append(_items("add", "+", [{k: v} for k, v in d.added_keys.items()]))
        parts.append(_items("del", "-", [{k: v} for k, v in d.removed_keys.items()]))
        for k, (before, after) in d.changed_keys.items():
            parts.append(
                Markup('<li class="upd"><span class="sign">~</span><span class="k">{}</span>: {} → {}</li>').format(
                    k, tree_html(before), tree_html(after)
                )
            )
    elif d.kind == "added":
        parts.append(_items("add", "+", [d.after]))
    elif d.kind == "removed":
        parts.append(_items("del", "-", [d.before]))
    else:
        parts.append(
            Markup('<li class="upd"><span class="sign">~</span>{} → {}</li>').format(
                tree_html(d.before), tree_html(d.after)
            )
        )
    return Markup('<ul class="change {}">{}</ul>').format(d.kind, Markup("").join(parts))


def escape_text(text: str) -> Markup:
    return escape(text)
