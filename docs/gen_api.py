"""Generate docs/api.md, the API reference, from the docstrings of everything in plait.__all__.

Run it after changing a public docstring or signature: ``python docs/gen_api.py``. The test
suite (tests/test_api_docs.py) fails when docs/api.md is out of date.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import pathlib
import sys
import textwrap
from typing import Any, ForwardRef

import plait

OUT = pathlib.Path(__file__).with_name("api.md")

GROUPS = (
    (
        "Graphs and runs",
        lambda o: (
            isinstance(o, type) and o.__module__.startswith(("plait.graph", "plait.engine.context", "plait.inspect"))
        ),
    ),
    ("State", lambda o: isinstance(o, type) and o.__module__.startswith("plait.state")),
    ("Checkpoints", lambda o: isinstance(o, type) and o.__module__.startswith("plait.checkpoint")),
    ("Memory store", lambda o: isinstance(o, type) and o.__module__.startswith("plait.store")),
    ("Vocabulary", lambda o: isinstance(o, type) and o.__module__ == "plait.types"),
    ("Events", lambda o: isinstance(o, type) and o.__module__ == "plait.engine.events"),
    ("Ready parts for agents", lambda o: getattr(o, "__module__", "") == "plait.prebuilt"),
    ("Errors", lambda o: isinstance(o, type) and issubclass(o, BaseException)),
    ("Functions", inspect.isfunction),
    ("Constants", lambda o: True),
)


SUPPLIED_DOCS: dict[str, tuple[str, dict[str, str]]] = {
    "NodeStarted": (
        "A task of the step started running its node.",
        {
            "node": "The node's name.",
            "task_id": "The task's id: stable when the task runs again (a retry, a resume).",
            "step": "The step of the checkpoint the task started from; its writes land in the "
            "checkpoint of step + 1 (the step `plait history` lists them under).",
        },
    ),
    "NodeFinished": (
        "A task finished, and its writes were saved with the checkpoint it started from.",
        {
            "node": "The node's name.",
            "task_id": "The task's id.",
            "step": "As in `NodeStarted`: the checkpoint the task started from.",
            "writes": "The channel writes the node made (channel -> list of values written).",
        },
    ),
    "NodeFailed": (
        "An attempt of a task raised (or ran past its timeout).",
        {
            "node": "The node's name.",
            "task_id": "The task's id.",
            "step": "As in `NodeStarted`: the checkpoint the task started from.",
            "error": "The error, as text (`str(exc)`).",
            "attempt": "Which attempt failed, from 1.",
            "will_retry": "True when its `RetryPolicy` runs it again; False when the run fails.",
        },
    ),
    "CheckpointSaved": (
        "A checkpoint was committed to the store.",
        {
            "checkpoint_id": "The new checkpoint's id.",
            "step": "Its step (0 for the input's checkpoint).",
            "source": "Its metadata source: `input`, `loop`, `update` or `fork`.",
        },
    ),
    "Interrupted": (
        "The run paused for input: an `interrupt()` in a node, or a breakpoint.",
        {
            "interrupts": "What it waits for: answer with `Command(resume=...)`.",
            "step": "The step of the thread's head, which stays where it is; the paused tasks are its `next`.",
        },
    ),
    "RunFinished": (
        "The run ended, whatever way it ended (the last event of every run).",
        {
            "thread_id": "The thread it ran on (None without a checkpointer).",
            "step": "The step it ended at.",
            "status": "`done`, `interrupted` or `failed`.",
        },
    ),
    "NodeContext": (
        "",
        {
            "thread_id": "The thread the run is on (None without a checkpointer).",
            "namespace": "The thread's namespace.",
            "step": "The step of the checkpoint the task started from (its writes land in step + 1).",
            "node": "The node's name.",
            "task_id": "The task's id: the same when the task runs again after a retry, an "
            "interrupt or a crash (effects and message ids are named by it).",
        },
    ),
    "CustomEvent": (
        'What a node sent with `ctx.emit(payload)` (`stream(mode="custom")` yields the payload).',
        {
            "node": "The node that sent it.",
            "step": "As in `NodeStarted`: the checkpoint its task started from.",
            "payload": "The JSON data sent.",
        },
    ),
}
"""Docs for records whose source has none yet (the event records, most of NodeContext's
fields: their modules are being reworked); a docstring in the source (of the class or under
a field) always wins over these."""


def _hidden(cls: Any) -> set[str]:
    """Parameters of a dataclass's constructor that are not part of its public surface: a
    field named with a leading underscore, or declared ``repr=False`` (plumbing the engine
    fills in, such as ``NodeContext.host``)."""
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
        return set()
    return {f.name for f in dataclasses.fields(cls) if f.name.startswith("_") or not f.repr}


@functools.cache
def _field_docs(cls: type) -> dict[str, str]:
    """The docstrings written under a class's fields in its source (``x: int`` then
    ``\"\"\"doc\"\"\"``), which Python does not keep at run time."""
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):
        return {}
    tree = ast.parse(source).body[0]
    docs: dict[str, str] = {}
    last: str | None = None
    for node in getattr(tree, "body", []):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            last = node.target.id
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            if last is not None:
                docs[last] = inspect.cleandoc(node.value.value)
            last = None
        else:
            last = None
    return docs


def _fields(cls: type) -> list[str]:
    """``- `field`: doc`` for each public field of a dataclass that has a doc."""
    if not dataclasses.is_dataclass(cls):
        return []
    written = _field_docs(cls)
    fallback = SUPPLIED_DOCS.get(cls.__name__, ("", {}))[1]
    lines = []
    for f in dataclasses.fields(cls):
        if f.name in _hidden(cls):
            continue
        doc = written.get(f.name) or fallback.get(f.name)
        if doc:
            lines.append(f"- `{f.name}`: " + " ".join(doc.split()))
    return lines


def _signature(obj: Any, name: str) -> str:
    """A readable signature: annotations as written in the source, no ``self``, no fields
    that are not public (see :func:`_hidden`)."""
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return ""
    hidden = _hidden(obj)
    parts: list[str] = []
    star_done = False
    for p in sig.parameters.values():
        if p.name in ("self", "cls") or p.name in hidden:
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
            ann = p.annotation
            if isinstance(ann, ForwardRef):  # a NamedTuple's field under `from __future__ import annotations`
                ann = ann.__forward_arg__
            ann = ann if isinstance(ann, str) else inspect.formatannotation(ann)
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
    if isinstance(obj, type) and dataclasses.is_dataclass(obj) and doc.startswith(obj.__name__ + "("):
        doc = ""  # the signature dataclasses writes when a class has no docstring: not a doc
    if not doc and isinstance(obj, type):
        doc = SUPPLIED_DOCS.get(obj.__name__, ("", {}))[0]
    return doc.replace("```", "'''")


def _first_paragraph(obj: Any) -> str:
    """The first paragraph of a docstring, whole (a sentence may go on past its first line)."""
    return _doc(obj).split("\n\n")[0].replace("\n", " ")


def _members(cls: type) -> list[tuple[str, Any]]:
    """The public methods and properties of ``cls``, those of its plait base classes too (the
    graph facade is built in floors: binding, running, threads), but not an error's bases'."""
    bases = [cls] if issubclass(cls, BaseException) else [k for k in cls.__mro__ if k.__module__.startswith("plait")]
    found: dict[str, Any] = {}
    for klass in reversed(bases):
        found.update(klass.__dict__)
    out = []
    for name, member in found.items():
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


def render() -> str:  # noqa: PLR0912 - each kind of API object rendered in one place
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
            if isinstance(obj, type) and (fields := _fields(obj)):
                lines += ["Fields:", "", *fields, ""]
            if isinstance(obj, type) and not issubclass(obj, BaseException):
                for mname, member in _members(obj):
                    if isinstance(member, property):
                        first = _first_paragraph(member)
                        lines += [f"- `{mname}` (property)" + (f": {first}" if first else "")]
                    else:
                        first = _first_paragraph(member)
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
