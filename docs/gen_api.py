"""Generate docs/api.md, the API reference, from the docstrings of everything in plait.__all__.

Run it after changing a public docstring or signature: ``python docs/gen_api.py``. The test
suite (tests/test_api_docs.py) fails when docs/api.md is out of date.
"""

from __future__ import annotations

import inspect
import pathlib
import sys
from typing import Any

import plait

OUT = pathlib.Path(__file__).with_name("api.md")

GROUPS = (
    (
        "Graphs and runs",
        lambda o: isinstance(o, type) and o.__module__.startswith(("plait.graph", "plait.engine.context")),
    ),
    ("State", lambda o: isinstance(o, type) and o.__module__.startswith("plait.state")),
    ("Checkpoints", lambda o: isinstance(o, type) and o.__module__.startswith("plait.checkpoint")),
    ("Vocabulary", lambda o: isinstance(o, type) and o.__module__ == "plait.types"),
    ("Events", lambda o: isinstance(o, type) and o.__module__ == "plait.engine.events"),
    ("Errors", lambda o: isinstance(o, type) and issubclass(o, BaseException)),
    ("Functions", inspect.isfunction),
    ("Constants", lambda o: True),
)


def _signature(obj: Any, name: str) -> str:
    """A readable signature: annotations as written in the source, no ``self``."""
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return ""
    parts: list[str] = []
    star_done = False
    for p in sig.parameters.values():
        if p.name in ("self", "cls"):
            continue
        if p.kind is p.KEYWORD_ONLY and not star_done:
            parts.append("*")
            star_done = True
        if p.kind is p.VAR_POSITIONAL:
            star_done = True
            text = "*" + p.name
        elif p.kind is p.VAR_KEYWORD:
            text = "**" + p.name
        else:
            text = p.name
        if p.annotation is not p.empty:
            ann = p.annotation if isinstance(p.annotation, str) else inspect.formatannotation(p.annotation)
            text += f": {ann}"
        if p.default is not p.empty:
            text += f" = {p.default!r}"
        parts.append(text)
    out = "(" + ", ".join(parts) + ")"
    ret = sig.return_annotation
    if ret is not sig.empty and not isinstance(obj, type):
        out += " -> " + (ret if isinstance(ret, str) else inspect.formatannotation(ret))
    return out


def _doc(obj: Any) -> str:
    doc = inspect.getdoc(obj) or ""
    return doc.replace("```", "'''")


def _members(cls: type) -> list[tuple[str, Any]]:
    out = []
    for name, member in cls.__dict__.items():
        if name.startswith("_"):
            continue
        if isinstance(member, property):
            out.append((name, member))
        elif inspect.isfunction(member) or isinstance(member, classmethod | staticmethod):
            out.append((name, getattr(cls, name)))
    return sorted(out)


def _group_of(obj: Any) -> str:
    if isinstance(obj, type) and issubclass(obj, BaseException):
        return "Errors"
    for title, test in GROUPS:
        if test(obj):
            return title
    return "Constants"


def render() -> str:
    lines = [
        "# API reference",
        "",
        "Generated from the docstrings by `python docs/gen_api.py`; everything here is importable",
        "from `plait` (and nothing else is public), except the last section: `plait.testing`, the",
        "contract suite for checkpointers.",
        "",
    ]
    grouped: dict[str, list[str]] = {title: [] for title, _ in GROUPS}
    for name in sorted(plait.__all__, key=str.lower):
        if name.startswith("__"):
            continue
        grouped[_group_of(getattr(plait, name))].append(name)
    for title, names in grouped.items():
        if not names:
            continue
        lines += [f"## {title}", ""]
        for name in names:
            obj = getattr(plait, name)
            if title == "Constants":
                lines += [f"### `{name}`", "", f"`{name} = {obj!r}`", ""]
                continue
            lines += [f"### `{name}{_signature(obj, name)}`", ""]
            doc = _doc(obj)
            if doc:
                lines += [doc, ""]
            if isinstance(obj, type) and not issubclass(obj, BaseException):
                for mname, member in _members(obj):
                    if isinstance(member, property):
                        lines += [
                            f"- `{mname}` (property)" + (f": {_doc(member).splitlines()[0]}" if _doc(member) else "")
                        ]
                    else:
                        first = _doc(member).split("\n\n")[0].replace("\n", " ")
                        if not first and hasattr(obj, "a" + mname):
                            first = f"the sync form of `a{mname}`"
                        lines += [f"- `{mname}{_signature(member, mname)}`" + (f": {first}" if first else "")]
                lines.append("")
    lines += _testing()
    return "\n".join(lines).rstrip() + "\n"


def _testing() -> list[str]:
    """The section of :mod:`plait.testing`: its functions and classes, and the checks by name."""
    from plait import testing

    lines = ["## Testing a backend (`plait.testing`)", "", _doc(testing).split("\n\n")[0].replace("\n", " "), ""]
    for name in sorted(testing.__all__, key=str.lower):
        obj = getattr(testing, name)
        if inspect.isfunction(obj) or isinstance(obj, type):
            lines += [f"### `plait.testing.{name}{_signature(obj, name)}`", "", _doc(obj), ""]
    lines += ["The checks (`plait.testing.CHECKS`), by name:", ""]
    lines += [f"- `{c.name}`: {c.doc}" for c in testing.CHECKS]
    return lines


def main() -> int:
    OUT.write_text(render(), encoding="utf-8")
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
