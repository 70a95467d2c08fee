"""The report of `perfaudit bisect`: each comparison against the good commit, the culprit with its step-time
change and interval, and what the audit of the culprit against its parent shows; console and JSON."""
from __future__ import annotations

import json
import signal
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape

from .. import __version__
from .diff_report import headline
from .diff_report import to_dict as diff_dict

if TYPE_CHECKING:
    from ..verify.comparison import BisectResult

_STYLE = {"bad": "red", "good": "green", "skip": "yellow"}


def render_console(r: BisectResult, console: Console) -> None:
    console.print(f"[bold]perfaudit bisect[/] {len(r.commits)} commit(s) after good {r.good.short} up to bad "
                  f"{r.bad.short}; a commit is bad when its step time is worse by more than {r.threshold_pct:g} %",
                  highlight=False)
    for i, c in enumerate(r.comparisons):
        if i == 1 and r.bar_pct > r.threshold_pct:
            console.print(f"  from here a commit is bad above +{r.bar_pct:.3g} %: a quarter of the regression's "
                          f"low end at {r.bad.short} (--exact-threshold keeps {r.threshold_pct:g} %)", highlight=False)
        console.print(f"  [{_STYLE[c.verdict]}]{c.verdict:<4}[/] {c.commit.short}  {escape(c.commit.subject[:50])}: "
                      f"{escape(c.why)}" + (f" ({c.rounds} pair(s))" if c.rounds else ""), highlight=False)
    console.print(f"timed pairs: {r.timed_pairs} in {len(r.comparisons)} comparison(s) (at most "
                  f"{r.most_comparisons} for {len(r.commits)} commits)", highlight=False)
    console.print(f"\n[bold]{escape(r.conclusion)}[/]", highlight=False)
    if r.culprit is None:
        if r.folder:
            console.print(f"runs: {escape(r.folder)}", highlight=False)
        return
    console.print(f"culprit: {r.culprit.sha}  {escape(r.culprit.subject)}", highlight=False)
    measured = next((c for c in r.comparisons if c.commit.sha == r.culprit.sha), None)
    if measured and measured.speed:
        s = measured.speed
        console.print(f"  against {r.good.short}: step time {s.mean_a_ms:.2f} → {s.mean_b_ms:.2f} ms, "
                      f"{escape(measured.why)}", highlight=False)
    if r.diff is not None and r.parent is not None:
        console.print(f"  audited against its parent {r.parent.short}: {headline(r.diff)}", highlight=False)
        new = [f for f in r.diff.findings if f.status in ("new", "changed")]
        for f in new:
            cost = f"{f.ms_b:.3f} ms/step" if f.ms_b is not None else ""
            console.print(f"  {f.status.upper():<8}{f.rule} {escape(f.where or '(no location)')}  {cost}",
                          highlight=False)
            console.print(f"          {escape(f.message)}", highlight=False)
        if not new:
            console.print("  no finding appeared or grew: the cause is outside what the rules recognise", highlight=False)
    console.print(f"runs: {escape(r.folder)}", highlight=False)


def to_dict(r: BisectResult) -> dict:
    def speed(s):
        return None if s is None else {"a_ms": s.mean_a_ms, "b_ms": s.mean_b_ms, "delta_ms": s.delta_ms,
                                       "interval_ms": [s.low_ms, s.high_ms], "steps": [s.n_a, s.n_b]}
    return {
        "tool": {"name": "perfaudit", "version": __version__},
        "good": r.good.sha, "bad": r.bad.sha, "commits": [{"sha": c.sha, "subject": c.subject} for c in r.commits],
        "threshold_pct": r.threshold_pct, "bar_pct": r.bar_pct,
        "comparisons": [{"sha": c.commit.sha, "verdict": c.verdict, "why": c.why, "pairs": c.rounds,
                         "speed": speed(c.speed)} for c in r.comparisons],
        "timed_pairs": r.timed_pairs, "most_comparisons": r.most_comparisons,
        "culprit": r.culprit.sha if r.culprit else None, "parent": r.parent.sha if r.parent else None,
        "candidates": [c.sha for c in r.candidates], "conclusion": r.conclusion,
        "diff": diff_dict(r.diff) if r.diff is not None else None, "folder": r.folder,
        "interrupted": signal.Signals(r.interrupted).name if r.interrupted else None,
    }


def render_json(r: BisectResult) -> str:
    return json.dumps(to_dict(r), indent=2, default=str)
