"""The report of `perfaudit diff`: console, JSON (docs/diff-schema.json), Markdown (a pull-request comment)
and a self-contained HTML page."""
from __future__ import annotations

import html
import json
import math
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .. import __version__

if TYPE_CHECKING:
    from ..verify.comparison import Diff

_STATUS = {"new": "NEW", "gone": "GONE", "changed": "CHANGED", "same": "same"}


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def _signed(v: float) -> str:
    return f"{v:+.2f}"


def _speed_line(s, label: str) -> str:
    if math.isnan(s.mean_a_ms) or math.isnan(s.mean_b_ms):
        return f"{label}: not measured on one side (no measured steps)"
    pct = 100.0 * s.delta_ms / s.mean_a_ms if s.mean_a_ms else 0.0
    interval = ("no interval (fewer than 3 steps a side)" if math.isnan(s.low_ms)
                else f"95% interval [{s.low_ms:+.2f}, {s.high_ms:+.2f}] ms")
    verdict = {"faster": "B is faster", "slower": "B is slower"}.get(s.verdict, s.verdict)
    return (f"{label} {s.mean_a_ms:.2f} → {s.mean_b_ms:.2f} ms ({s.delta_ms:+.2f} ms, {pct:+.1f}%), {interval}, "
            f"{s.n_a} + {s.n_b} steps: {verdict}")


def headline(d: Diff) -> str:
    """One line: the step time of each side, the change with its interval and the verdict; from the steps timed
    without the profiler where both runs have them (what `verify` times), else from the recorded steps."""
    if d.unprofiled is not None:
        return _speed_line(d.unprofiled, "step time without the profiler")
    return _speed_line(d.speed, "step time")


def recorded_line(d: Diff) -> str | None:
    """The recorded (profiled) steps' comparison, where the headline is the unprofiled one."""
    return _speed_line(d.speed, "as recorded under the profiler:") if d.unprofiled is not None else None


def disagreement(d: Diff) -> str | None:
    """Why the profiled and the unprofiled steps disagree on the change, where they do."""
    u, s = d.unprofiled, d.speed
    if u is None or u.verdict == s.verdict or not {u.verdict, s.verdict} & {"faster", "slower"}:
        return None
    return (f"The recorded steps say {s.verdict}, the steps timed without the profiler say {u.verdict}: the "
            "profiler costs time per Python call and op, so work in the training process (a Dataset's "
            "__getitem__, collate, the Python between ops) weighs several times its own cost in the recorded "
            "steps, so a change to it (moved to DataLoader workers, removed, added) looks bigger there than it is. "
            "The unprofiled figure is what the script takes, and what `perfaudit verify` times.")


def grew_text(d: Diff) -> str | None:
    g = d.grew
    return f"grew most: {g['side']} {g['part']} {g['delta_ms']:+.2f} ms per step" if g else None


def render_console(d: Diff, console: Console) -> None:
    console.print(f"[bold]perfaudit diff[/] A={escape(d.a)}  B={escape(d.b)}", highlight=False)
    console.print(headline(d), highlight=False)
    for line in (recorded_line(d), disagreement(d)):
        if line:
            console.print(line, highlight=False)
    if grew_text(d):
        console.print(grew_text(d), highlight=False)
    for title, rows in (("host time per step (ms)", d.host), ("GPU time per step (ms)", d.gpu)):
        if rows:
            table = Table(title=title, title_justify="left")
            for col in ("part", "A", "B", "change"):
                table.add_column(col, justify="left" if col == "part" else "right")
            for r in rows:
                table.add_row(r["part"], _ms(r["a_ms"]), _ms(r["b_ms"]), _signed(r["delta_ms"]))
            console.print(table)
    changed = d.changed_findings
    console.print(f"\nfindings: {sum(f.status == 'new' for f in changed)} new, "
                  f"{sum(f.status == 'gone' for f in changed)} gone, {sum(f.status == 'changed' for f in changed)} "
                  f"changed cost, {sum(f.status == 'same' for f in d.findings)} the same", highlight=False)
    for f in changed:
        cost = f"{_ms(f.ms_a)} → {_ms(f.ms_b)} ms/step"
        console.print(f"  {_STATUS[f.status]:<8}{f.rule} {escape(f.where or '(no location)')}  {cost}", highlight=False)
        console.print(f"          {escape(f.message)}", highlight=False)
    if d.ops:
        console.print(f"\n{d.ops_kind} whose time changed most (ms per step):", highlight=False)
        for r in d.ops:
            console.print(f"  {_signed(r['delta_ms'])}  {_ms(r['a_ms'])} → {_ms(r['b_ms'])}  {escape(r['name'][:100])}",
                          highlight=False)
    if d.environment:
        console.print("\nenvironment differences:", highlight=False)
        for e in d.environment:
            console.print(f"  {escape(str(e['key']))}: {escape(str(e['a']))} → {escape(str(e['b']))}", highlight=False)


def _step_dict(s) -> dict:
    nan = (lambda v: None if v is None or math.isnan(v) else v)
    return {"a_ms": nan(s.mean_a_ms), "b_ms": nan(s.mean_b_ms), "delta_ms": nan(s.delta_ms),
            "change_pct": nan(100.0 * s.delta_ms / s.mean_a_ms) if s.mean_a_ms else None,
            "interval_ms": None if math.isnan(s.low_ms) else [s.low_ms, s.high_ms], "confidence": 0.95,
            "steps": [s.n_a, s.n_b], "verdict": s.verdict}


def to_dict(d: Diff) -> dict:
    return {
        "tool": {"name": "perfaudit", "version": __version__},
        "a": d.a, "b": d.b,
        "step": _step_dict(d.speed),
        "unprofiled_step": _step_dict(d.unprofiled) if d.unprofiled is not None else None,
        "disagreement": disagreement(d),
        "host_ms": d.host, "gpu_ms": d.gpu, "grew": d.grew,
        "findings": [{"rule": f.rule, "title": f.title, "severity": f.severity, "status": f.status,
                      "location": f.where, "code": f.code, "a_ms_per_step": f.ms_a, "b_ms_per_step": f.ms_b,
                      "message": f.message} for f in d.findings],
        "ops_kind": d.ops_kind, "ops": d.ops, "environment": d.environment,
    }


def render_json(d: Diff) -> str:
    return json.dumps(to_dict(d), indent=2, default=str)


def render_markdown(d: Diff) -> str:
    """A pull-request comment: the headline, the parts that moved, the findings that changed."""
    def cell(text) -> str:
        return str(text).replace("|", "\\|").replace("\n", " ")
    lines = ["### perfaudit diff", "", f"A: `{cell(d.a)}`  ", f"B: `{cell(d.b)}`", "", f"**{cell(headline(d))}**"]
    lines += ["", cell(line)] if (line := recorded_line(d)) else []
    lines += ["", cell(line)] if (line := disagreement(d)) else []
    if grew_text(d):
        lines += ["", cell(grew_text(d))]
    for title, rows in (("Host time per step", d.host), ("GPU time per step", d.gpu)):
        if rows:
            lines += ["", f"| {title} | A (ms) | B (ms) | change |", "|---|---:|---:|---:|"]
            lines += [f"| {r['part']} | {_ms(r['a_ms'])} | {_ms(r['b_ms'])} | {_signed(r['delta_ms'])} |" for r in rows]
    changed = d.changed_findings
    if changed:
        lines += ["", "| finding | rule | where | A ms/step | B ms/step |", "|---|---|---|---:|---:|"]
        lines += [f"| {f.status} | {f.rule} | `{cell(f.where or '-')}` | {_ms(f.ms_a)} | {_ms(f.ms_b)} |" for f in changed]
    else:
        lines += ["", "No finding appeared, vanished or changed cost."]
    if d.ops:
        lines += ["", f"| {d.ops_kind} | A (ms) | B (ms) | change |", "|---|---:|---:|---:|"]
        lines += [f"| `{cell(r['name'][:80])}` | {_ms(r['a_ms'])} | {_ms(r['b_ms'])} | {_signed(r['delta_ms'])} |"
                  for r in d.ops]
    if d.environment:
        lines += ["", "Environment: " + "; ".join(f"{cell(e['key'])} `{cell(e['a'])}` → `{cell(e['b'])}`"
                                                  for e in d.environment)]
    return "\n".join(lines) + "\n"


def render_html(d: Diff) -> str:
    """One self-contained page (no script, no network): the Markdown's content as HTML tables, escaped."""
    e = html.escape

    def table(head: list[str], rows: list[list]) -> str:
        out = "<table><tr>" + "".join(f"<th>{e(h)}</th>" for h in head) + "</tr>"
        return out + "".join("<tr>" + "".join(f"<td>{e(str(c))}</td>" for c in r) + "</tr>" for r in rows) + "</table>"
    parts = [f"<h1>perfaudit diff</h1><p>A: <code>{e(d.a)}</code><br>B: <code>{e(d.b)}</code></p>",
             f"<p><b>{e(headline(d))}</b></p>"]
    parts += [f"<p>{e(line)}</p>" for line in (recorded_line(d), disagreement(d)) if line]
    grew = grew_text(d)
    if grew:
        parts.append(f"<p>{e(grew)}</p>")
    for title, rows in (("Host time per step (ms)", d.host), ("GPU time per step (ms)", d.gpu)):
        if rows:
            parts.append(f"<h2>{e(title)}</h2>" + table(["part", "A", "B", "change"], [
                [r["part"], _ms(r["a_ms"]), _ms(r["b_ms"]), _signed(r["delta_ms"])] for r in rows]))
    parts.append("<h2>Findings</h2>" + table(["status", "rule", "where", "A ms/step", "B ms/step", "message"], [
        [f.status, f.rule, f.where or "-", _ms(f.ms_a), _ms(f.ms_b), f.message] for f in d.findings]))
    if d.ops:
        parts.append(f"<h2>{e(d.ops_kind or 'Ops')} whose time changed most (ms per step)</h2>" + table(
            ["name", "A", "B", "change"], [[r["name"], _ms(r["a_ms"]), _ms(r["b_ms"]), _signed(r["delta_ms"])]
                                           for r in d.ops]))
    if d.environment:
        parts.append("<h2>Environment differences</h2>" + table(
            ["", "A", "B"], [[x["key"], x["a"], x["b"]] for x in d.environment]))
    style = ("body{font:14px system-ui,sans-serif;margin:2em;max-width:1100px}table{border-collapse:collapse;"
             "margin:.5em 0}td,th{border:1px solid #ddd;padding:3px 8px;text-align:left}code{font-size:13px}")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>perfaudit diff</title><style>{style}</style>"
            f"</head><body>{''.join(parts)}<p><small>perfaudit {e(__version__)}</small></p></body></html>\n")


RENDERERS = {"json": render_json, "markdown": render_markdown, "html": render_html}
