"""Rows of results, the targets they are held to, and their renderings (terminal, JSON lines, docs)."""

from __future__ import annotations

import json
import math
import re
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PLAIT = "plait"
LG = "langgraph"


@dataclass(kw_only=True)
class Row:
    """One measured case of one workload, holding the samples of each library."""

    workload: str
    """"W1" .. "W10", or "floor"."""
    case: str
    """What varies inside the workload: backend, durability, node kind, size."""
    backend: str
    unit: str
    samples: dict[str, list[float]] = field(default_factory=dict)
    higher_is_better: bool = False
    target: str = ""
    """The target in words, shown in the table."""
    check: Callable[[Row], bool | None] | None = None
    """Decides PASS (True) / MISS (False) / not decidable (None)."""
    errors: dict[str, str] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    def median(self, lib: str) -> float | None:
        s = self.samples.get(lib)
        return statistics.median(s) if s else None

    def speedup(self) -> float | None:
        """How many times better plait is than LangGraph (>1 means plait wins)."""
        p, g = self.median(PLAIT), self.median(LG)
        if p is None or g is None or p == 0 or g == 0:
            return None
        return p / g if self.higher_is_better else g / p

    def verdict(self) -> str:
        if self.check is None:
            return ""
        try:
            ok = self.check(self)
        except Exception:  # a check on missing data is simply undecided
            ok = None
        return "" if ok is None else ("PASS" if ok else "MISS")


def speedup_at_least(x: float) -> Callable[[Row], bool | None]:
    def check(row: Row) -> bool | None:
        s = row.speedup()
        return None if s is None else s >= x

    return check


def plait_at_most(limit: float) -> Callable[[Row], bool | None]:
    def check(row: Row) -> bool | None:
        p = row.median(PLAIT)
        return None if p is None else p <= limit

    return check


def loglog_slope(xs: list[float], ys: list[float]) -> float | None:
    """Least-squares slope of log(y) against log(x); None when it cannot be fitted."""
    pts = [(math.log(x), math.log(y)) for x, y in zip(xs, ys, strict=True) if x > 0 and y > 0]
    if len(pts) < 2:
        return None
    mx = statistics.fmean(p[0] for p in pts)
    my = statistics.fmean(p[1] for p in pts)
    den = sum((p[0] - mx) ** 2 for p in pts)
    return None if den == 0 else sum((p[0] - mx) * (p[1] - my) for p in pts) / den


# --------------------------------------------------------------------------- formatting


def _num(x: float | None) -> str:
    if x is None:
        return "-"
    ax = abs(x)
    if ax >= 1000:
        return f"{x:,.0f}"
    if ax >= 100:
        return f"{x:.0f}"
    if ax >= 10:
        return f"{x:.1f}"
    if ax >= 1:
        return f"{x:.2f}"
    return f"{x:.3f}"


def _cell(row: Row, lib: str) -> str:
    if lib in row.errors:
        return "ERROR"
    s = row.samples.get(lib)
    if not s:
        return "-"
    med = statistics.median(s)
    if len(s) == 1:
        return _num(med)
    return f"{_num(med)} [{_num(min(s))}-{_num(max(s))}]"


def table_rows(rows: list[Row], libs: list[str]) -> tuple[list[str], list[list[str]]]:
    head = ["workload", "case", "unit", "plait median [min-max]"]
    if LG in libs:
        head += ["LangGraph median [min-max]", "speedup"]
    head += ["target", "result"]
    out = []
    for r in rows:
        line = [r.workload, r.case, r.unit, _cell(r, PLAIT)]
        if LG in libs:
            s = r.speedup()
            line += [_cell(r, LG), "-" if s is None else f"{s:.2f}x"]
        line += [r.target, r.verdict()]
        out.append(line)
    return head, out


def verdict_summary(rows: list[Row]) -> str:
    """One line: how many targets passed and which missed."""
    verdicts = [(r, r.verdict()) for r in rows]
    passed = sum(1 for _, v in verdicts if v == "PASS")
    missed = [f"{r.workload} {r.case}" for r, v in verdicts if v == "MISS"]
    line = f"targets: {passed} PASS, {len(missed)} MISS"
    return line + (f" ({'; '.join(missed)})" if missed else "")


def plain_table(head: list[str], body: list[list[str]]) -> str:
    widths = [max(len(h), *(len(b[i]) for b in body)) if body else len(h) for i, h in enumerate(head)]
    sep = "  "
    lines = [sep.join(h.ljust(w) for h, w in zip(head, widths, strict=True))]
    lines.append(sep.join("-" * w for w in widths))
    prev = None
    for b in body:
        if prev is not None and b[0] != prev:
            lines.append("")
        prev = b[0]
        lines.append(sep.join(c.ljust(w) for c, w in zip(b, widths, strict=True)))
    return "\n".join(lines)


def print_table(rows: list[Row], libs: list[str], *, plain: bool) -> None:
    head, body = table_rows(rows, libs)
    if not plain:
        try:
            from rich.console import Console
            from rich.table import Table
        except ImportError:
            plain = True
    if plain:
        print(plain_table(head, body))
        return
    t = Table(show_lines=False)
    for i, h in enumerate(head):
        t.add_column(h, justify="left" if i < 3 or i >= len(head) - 2 else "right")
    for b in body:
        style = {"PASS": "green", "MISS": "red"}.get(b[-1])
        t.add_row(*b[:-1], f"[{style}]{b[-1]}[/]" if style else b[-1])
    Console(width=240).print(t)


def markdown_table(rows: list[Row], libs: list[str]) -> str:
    head, body = table_rows(rows, libs)
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in b) + " |" for b in body]
    return "\n".join(lines)


# --------------------------------------------------------------------------- JSON lines


def to_json_lines(rows: list[Row], meta: dict[str, Any]) -> list[str]:
    """One line per row x library (the floor rows have one library: the harness)."""
    lines = []
    for r in rows:
        libs = sorted(set(r.samples) | set(r.errors))
        for lib in libs:
            s = r.samples.get(lib, [])
            rec = {
                **meta,
                "workload": r.workload,
                "case": r.case,
                "backend": r.backend,
                "library": lib,
                "unit": r.unit,
                "higher_is_better": r.higher_is_better,
                "n": len(s),
                "median": statistics.median(s) if s else None,
                "min": min(s) if s else None,
                "max": max(s) if s else None,
                "samples": s,
                "speedup_vs_langgraph": r.speedup(),
                "target": r.target,
                "result": r.verdict() or None,
                "error": r.errors.get(lib),
                "extra": r.extra,
            }
            lines.append(json.dumps(rec, default=str))
    return lines


def _stored_verdict(verdict: str | None) -> Callable[[Row], bool | None]:
    def check(_row: Row) -> bool | None:
        return None if verdict is None else verdict == "PASS"

    return check


def rows_from_json_lines(path: Path) -> tuple[list[Row], dict[str, Any]]:
    """Rebuild rows (without their checks; the stored verdicts are kept in ``extra``) from a file."""
    rows: dict[tuple[str, str], Row] = {}
    meta: dict[str, Any] = {}
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        meta = {k: rec[k] for k in ("run_id", "started", "mode", "env") if k in rec}
        key = (rec["workload"], rec["case"])
        row = rows.get(key)
        if row is None:
            row = rows[key] = Row(
                workload=rec["workload"],
                case=rec["case"],
                backend=rec["backend"],
                unit=rec["unit"],
                higher_is_better=rec["higher_is_better"],
                target=rec["target"],
                extra=rec.get("extra") or {},
            )
            verdict = rec.get("result")
            row.check = _stored_verdict(verdict)
        if rec.get("error"):
            row.errors[rec["library"]] = rec["error"]
        if rec["samples"]:
            row.samples[rec["library"]] = rec["samples"]
    return list(rows.values()), meta


# --------------------------------------------------------------------------- docs


TABLE_START = "<!-- bench:table:start -->"
TABLE_END = "<!-- bench:table:end -->"


def update_docs(doc: Path, rows: list[Row], libs: list[str], meta: dict[str, Any]) -> None:
    """Replace the generated block of ``doc`` with the table of ``rows``."""
    env = meta.get("env", {})
    pk = env.get("packages", {})
    facts = (
        f"Run `{meta.get('run_id')}` ({meta.get('mode')} sizes), started {meta.get('started')} on "
        f"{env.get('cpu_count')} cores ({env.get('platform')}), Python {env.get('python')}, "
        f"SQLite {env.get('sqlite')}, PostgreSQL {env.get('postgres_server')}; "
        f"plait {pk.get('plait')}, langgraph {pk.get('langgraph')}, "
        f"langgraph-checkpoint {pk.get('langgraph-checkpoint')}, "
        f"langgraph-checkpoint-sqlite {pk.get('langgraph-checkpoint-sqlite')}, "
        f"langgraph-checkpoint-postgres {pk.get('langgraph-checkpoint-postgres')}."
    )
    floors = [
        f"{r.case}: median {r.median('harness'):.0f} us"
        for r in rows
        if r.workload == "floor" and r.samples.get("harness")
    ]
    if floors:
        facts += "\n\nCommit floor (measured by the harness in the same run): " + "; ".join(floors) + "."
    measured = [r for r in rows if r.workload != "floor"]
    table = markdown_table(measured, libs)
    block = f"{TABLE_START}\n{facts}\n\n{table}\n\n{verdict_summary(measured)}.\n{TABLE_END}"
    text = doc.read_text() if doc.exists() else f"{TABLE_START}\n{TABLE_END}\n"
    pattern = re.compile(re.escape(TABLE_START) + ".*?" + re.escape(TABLE_END), re.S)
    doc.write_text(pattern.sub(lambda _m: block, text))


def plot_storage(rows: list[Row], png: Path) -> bool:
    """Plot bytes on disk against steps for each library and backend (W3); False without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    series: dict[tuple[str, str], list[tuple[int, float]]] = {}
    for r in rows:
        if r.workload != "W3" or "steps" not in r.extra:
            continue
        for lib, s in r.samples.items():
            if s:
                series.setdefault((lib, r.backend), []).append((int(r.extra["steps"]), statistics.median(s)))
    if not series:
        return False
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=110)
    styles = {PLAIT: "-", LG: "--"}
    marks = {"sqlite": "o", "postgres": "s"}
    for (lib, backend), pts in sorted(series.items()):
        pts.sort()
        ax.plot(
            [p[0] for p in pts],
            [p[1] / 1024 for p in pts],  # the rows hold KB
            styles.get(lib, ":"),
            marker=marks.get(backend, "x"),
            label=f"{lib} / {backend}",
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("steps (one ~1 KB message appended per step)")
    ax.axhline(1.5e6 / 2**20, color="grey", linewidth=0.8, linestyle=":", label="plait target at N=500 (1.5 MB)")
    ax.set_ylabel("size on disk (MiB)")
    ax.set_title("W3: storage against thread length")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png)
    plt.close(fig)
    return True
