"""The HTML report: one self-contained file (no script, no network, no web font) to open, attach to a
pull request or a ticket. Charts are inline SVG computed here; the page is a Jinja2 template with
autoescaping, so op names and code from the trace or the source are text, never markup."""
from __future__ import annotations

import os
from importlib import resources

from jinja2 import Environment

from .. import __version__
from ..engine.loader import Rule
from ..findings import Finding, Report, TraceSummary
from .console import compile_text, describe_outcome, device_note, mfu_text, unprofiled_note, verified_text
from .json_report import mfu_dict

HOST_PHASES = (("data", "data", "#e4a03c"), ("forward", "forward", "#4c78a8"), ("backward", "backward", "#72b7b2"),
               ("optimizer", "optimizer", "#b279a2"), ("other", "other", "#bab0ac"))
GPU_PHASES = (("compute", "compute", "#54a24b"), ("copies", "copies", "#4c78a8"), ("sync_wait", "sync wait", "#e45756"),
              ("alloc_wait", "allocator wait", "#b279a2"), ("data_wait", "data wait", "#e4a03c"),
              ("other_idle", "idle (host-bound)", "#bab0ac"))
CONTEXT_LINES = 3
CHART_W, CHART_H, BAR_GAP = 640, 180, 4


def _stacked(rows: list[dict], phases, total_key: str) -> dict | None:
    """Geometry of a stacked bar per step: each bar a list of (x, y, w, h, colour, label, ms)."""
    if not rows:
        return None
    top = max((r.get(total_key) or sum(r.get(k, 0.0) for k, _, _ in phases)) for r in rows) or 1.0
    width = max(min((CHART_W - 40) / len(rows) - BAR_GAP, 60), 2)
    bars = []
    for i, row in enumerate(rows):
        x, y, segments = 40 + i * (width + BAR_GAP), CHART_H - 20, []
        for key, label, colour in phases:
            h = (CHART_H - 30) * row.get(key, 0.0) / top
            if h > 0:
                y -= h
                segments.append({"x": x, "y": y, "w": width, "h": h, "colour": colour, "label": label,
                                 "ms": row.get(key, 0.0)})
        bars.append({"x": x, "w": width, "step": i, "segments": segments,
                     "total": row.get(total_key) or sum(row.get(k, 0.0) for k, _, _ in phases)})
    return {"width": CHART_W, "height": CHART_H, "top": top, "bars": bars,
            "legend": [{"label": label, "colour": colour} for _, label, colour in phases]}


def _ranks_chart(report: Report) -> dict | None:
    if len(report.ranks) < 2:
        return None
    top = max(max(r["step_ms"] or 0, r["collective_ms"]) for r in report.ranks) or 1.0
    slowest = (report.straggler or {}).get("slowest_rank")
    width = max(min((CHART_W - 40) / len(report.ranks) - BAR_GAP, 60), 4)
    bars = []
    for i, r in enumerate(report.ranks):
        x = 40 + i * (width + BAR_GAP)
        step_h = (CHART_H - 30) * (r["step_ms"] or 0) / top
        coll_h = (CHART_H - 30) * r["collective_ms"] / top
        bars.append({"x": x, "w": width, "rank": r["rank"], "step_ms": r["step_ms"] or 0, "collective_ms": r["collective_ms"],
                     "step_y": CHART_H - 20 - step_h, "step_h": step_h, "coll_y": CHART_H - 20 - coll_h,
                     "coll_h": coll_h, "straggler": r["rank"] == slowest})
    return {"width": CHART_W, "height": CHART_H, "top": top, "bars": bars}


LEDGER_LABEL_W, LEDGER_ROW_H = 230, 18
LEDGER_COLOURS = {None: "#bab0ac", "ideal at peak": "#54a24b", "kernel efficiency": "#9d755d"}


def _waterfall(mfu: dict | None, findings: list[Finding]) -> dict | None:
    """The MFU ledger as a waterfall: one row per bar from the ideal step to the measured one, each bar
    starting where the previous ended, then the measured step; bars of no time are left out."""
    if not mfu or not mfu.get("ledger"):
        return None
    ledger = mfu_dict(mfu, findings)["ledger"]
    step = sum(bar["ms_per_step"] for bar in ledger) or 1.0
    scale = (CHART_W - LEDGER_LABEL_W - 90) / step
    rows: list[dict] = []
    x = float(LEDGER_LABEL_W)
    for bar in ledger:
        if bar["ms_per_step"] <= 0:
            continue
        w = bar["ms_per_step"] * scale
        rows.append({"x": x, "w": max(w, 1.0), "y": 8 + len(rows) * LEDGER_ROW_H, "label": bar["name"],
                     "rule": bar["rule"], "where": bar["locations"][0] if bar["locations"] else None,
                     "ms": bar["ms_per_step"], "pct": 100.0 * bar["ms_per_step"] / step,
                     "colour": LEDGER_COLOURS.get(bar["name"], LEDGER_COLOURS.get(bar["rule"], "#e45756"))})
        x += w
    total = {"x": float(LEDGER_LABEL_W), "w": step * scale, "y": 8 + len(rows) * LEDGER_ROW_H, "ms": step}
    return {"width": CHART_W, "height": total["y"] + LEDGER_ROW_H + 8, "rows": rows, "total": total,
            "label_w": LEDGER_LABEL_W}


def _trusted(path: str, roots: list[str]) -> bool:
    real = os.path.realpath(path)
    return any(real.startswith(os.path.realpath(r).rstrip(os.sep) + os.sep) for r in roots)


def _code_context(path: str, line: int, roots: list[str] | None = None) -> list[dict] | None:
    """The lines around a finding's line, the line itself marked; empty when the file is not here; None
    when it is outside the folders the report may quote (a trace from elsewhere naming local files)."""
    if roots is not None and not _trusted(path, roots):
        return None
    try:
        with open(path, encoding="utf-8-sig", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    lo, hi = max(line - 1 - CONTEXT_LINES, 0), min(line + CONTEXT_LINES, len(lines))
    return [{"n": n + 1, "text": lines[n], "hit": n + 1 == line} for n in range(lo, hi)]


def _finding_view(f: Finding, top_ms: float, rules: dict[str, Rule], roots: list[str] | None = None) -> dict:
    saving = f.saving_ms
    rule = rules.get(f.rule)
    return {
        "f": f, "saving": saving, "kind": "verified" if f.verified else "estimated" if f.cost.estimated else "measured",
        "bar_pct": 100.0 * max(saving, 0.0) / top_ms if saving is not None and top_ms > 0 else 0.0,
        "verified": verified_text(f.verified) if f.verified else None,
        "locations": [{"loc": loc, "code": _code_context(loc.path, loc.line, roots)} for loc in f.locations[:5]],
        "more_locations": max(len(f.locations) - 5, 0),
        "docs": rule.docs if rule else None,
    }


def _trace_view(t: TraceSummary, findings: list[Finding]) -> dict:
    return {"t": t, "host": _stacked(t.per_step, HOST_PHASES, "total"),
            "gpu": _stacked(t.gpu_per_step, GPU_PHASES, "step"),
            "compile": compile_text(t.compile) if t.compile else None,
            "flops": mfu_text(t.mfu) if t.mfu else None, "ledger": _waterfall(t.mfu, findings),
            "unprofiled": unprofiled_note(t)}


def render(report: Report, rules: list[Rule]) -> str:
    env = Environment(autoescape=True, trim_blocks=True, lstrip_blocks=True)
    template = env.from_string(resources.files("perfaudit.report").joinpath("report.html.j2").read_text("utf-8"))
    by_id = {r.id: r for r in rules}
    roots = report.source_roots or [os.getcwd()]
    top = max((f.saving_ms or 0.0 for f in report.findings), default=0.0)
    first = report.traces[0] if report.traces else None
    reanalyse = None
    if first is not None:
        reanalyse = "perfaudit analyze " + (os.path.dirname(first.path) if len(report.traces) > 1 else first.path)
    return template.render(
        report=report, version=__version__, outcome=describe_outcome(report.outcome),
        traces=[_trace_view(t, report.findings) for t in report.traces[:8]], more_traces=max(len(report.traces) - 8, 0),
        ranks=_ranks_chart(report), findings=[_finding_view(f, top, by_id, roots) for f in report.findings],
        reanalyse=reanalyse, device_note=device_note, environment=first.environment if first else {},
        title=_title(report))


def _title(report: Report) -> str:
    if report.script:
        return os.path.basename(report.script)
    if len(report.traces) > 1:
        folder = os.path.basename(os.path.dirname(os.path.abspath(report.traces[0].path)))
        return f"{folder} ({len(report.traces)} traces)"
    return os.path.basename(report.traces[0].path) if report.traces else "perfaudit"
