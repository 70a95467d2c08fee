"""The report of `perfaudit history`: the newest entry against the recent ones (its change and the noise),
the change point when the level shifted, the findings that appeared or went; console and JSON."""
from __future__ import annotations

import json
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape

from .. import __version__
from ..verify.history import BASES, MIN_EARLIER

if TYPE_CHECKING:
    from ..verify.history import HistoryCheck

_STYLE = {"slower": "red", "faster": "green", "steady": "green", "first": "", "too few": "yellow",
          "unmeasured": "yellow", "busy": "yellow"}


def _commit(entry: dict) -> str:
    sha = (entry.get("commit") or "")[:10] or "(no commit)"
    dirty = " +uncommitted changes" if entry.get("dirty") else ""
    subject = f' "{entry["subject"]}"' if entry.get("subject") else ""
    return f"{sha}{dirty}{subject}"


def _ms(value) -> str:
    return f"{value:.2f} ms" if isinstance(value, (int, float)) else "-"


def render_console(h: HistoryCheck, path: str, recorded: bool, notes: list[str], console: Console) -> None:
    e = h.entry
    steps = len(e.get("steps_ms") or ())
    console.print(f"[bold]perfaudit history[/] {escape(path)}: {escape(str(e.get('script')))} on "
                  f"{escape(str(e.get('device')))}", highlight=False)
    plain = len(e.get("unprofiled_steps_ms") or ())
    unprofiled = f"; {_ms(e.get('unprofiled_ms'))} timed without the profiler ({plain} steps)" \
        if isinstance(e.get("unprofiled_ms"), (int, float)) else ""
    console.print(f"this run: {escape(_commit(e))}: step {_ms(e.get('step_ms'))} ({steps} measured steps)"
                  f"{unprofiled}", highlight=False)
    style = _STYLE.get(h.verdict, "")
    if h.verdict == "first":
        console.print("  the first entry for this script and device: nothing to compare with yet", highlight=False)
    elif h.verdict == "unmeasured":
        console.print(f"  [{style}]no step was measured[/]: the entry is recorded without a step time",
                      highlight=False)
    elif h.verdict == "busy":
        console.print(f"  [{style}]not judged[/]: most measured steps waited for a CPU held by other processes, so "
                      "the step time is the machine's (recorded for its findings, left out of later comparisons)",
                      highlight=False)
    elif h.verdict == "too few":
        console.print(f"  against the last {len(h.compared)} ({BASES[h.basis]}): median {_ms(h.baseline_ms)}, "
                      f"{h.change_pct:+.1f} %: "
                      f"[{style}]no verdict yet[/] (from {MIN_EARLIER} earlier entries on, their spread says how "
                      f"far apart runs fall by chance)", highlight=False)
    else:
        console.print(f"  against the last {len(h.compared)} ({BASES[h.basis]}): median {_ms(h.baseline_ms)}, "
                      f"[{style}]{h.change_pct:+.1f} %: {h.verdict}[/] (the noise allows ±{h.noise_pct:.1f} %, "
                      f"from {escape(h.noise_from)})", highlight=False)
    cp = h.change_point
    if cp is not None:
        at = "this commit" if cp.entries_after == 1 else f"{cp.entries_after} entries ago, this one included"
        console.print(f"  change point: the step time went {_ms(cp.before_ms)} → {_ms(cp.after_ms)} "
                      f"({cp.change_pct:+.1f} %) at {escape(_commit(cp.entry))} ({at})", highlight=False)
    if h.compared:
        for label, items in (("new", h.new_findings), ("gone", h.gone_findings)):
            if items:
                console.print(f"  findings {label} since the previous entry: {escape(', '.join(items))}",
                              highlight=False)
    for note in notes:
        console.print(f"  note: {escape(note)}", highlight=False)
    if h.fail_on_slowdown_pct is not None:
        verdict = "[red]FAIL[/]" if h.fails else "pass"
        console.print(f"gate: {verdict} (fails on a slowdown beyond the noise and over "
                      f"{h.fail_on_slowdown_pct:g} %)", highlight=False)
    why = f"stopped by {h.stopped_by}" if h.stopped_by else "--dry-run"
    console.print(f"{'recorded in' if recorded else f'not recorded ({why}):'} {escape(path)}", highlight=False)


def to_dict(h: HistoryCheck, path: str, recorded: bool, notes: list[str]) -> dict:
    cp = h.change_point
    return {
        "tool": {"name": "perfaudit", "version": __version__},
        "file": path, "recorded": recorded, "entry": h.entry, "compared": len(h.compared),
        "baseline_ms": h.baseline_ms, "change_pct": h.change_pct, "noise_pct": h.noise_pct,
        "noise_from": h.noise_from, "verdict": h.verdict, "basis": h.basis,
        "change_point": None if cp is None else {
            "commit": cp.entry.get("commit"), "subject": cp.entry.get("subject"), "before_ms": cp.before_ms,
            "after_ms": cp.after_ms, "change_pct": cp.change_pct, "entries_after": cp.entries_after},
        "new_findings": h.new_findings, "gone_findings": h.gone_findings,
        "fail_on_slowdown_pct": h.fail_on_slowdown_pct, "fails": h.fails, "notes": notes,
    }


def render_json(h: HistoryCheck, path: str, recorded: bool, notes: list[str]) -> str:
    return json.dumps(to_dict(h, path, recorded, notes), indent=2) + "\n"
