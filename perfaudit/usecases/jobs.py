"""A distributed job's ranks analysed where they ran: each rank, when its window ends, parses its own
trace and evaluates the per-trace rules in its own process (the analysis is spread over the job's
machines), then leaves the small result as rank<R>.analysis.json next to its trace. The job report
is put together from those files; a rank that left none (it crashed mid-export, say) is parsed then."""
from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import asdict

from ..engine.loader import Rule, load_rules
from ..errors import TraceError, UsageError
from ..findings import Cost, Finding, Location, Report, Skipped, TraceSummary
from ..policy import gate
from .analysis import TraceResult, analyze_all, analyze_one, combine

VERSION = 1


def _to_json(result) -> dict:
    return {"version": VERSION, "path": result.path, "findings": [asdict(f) for f in result.findings],
            "skipped": [asdict(s) for s in result.skipped],
            "summary": asdict(result.summary) if result.summary else None, "notes": result.notes,
            "rank_stats": result.rank_stats, "probes_meta": result.probes_meta}


def _finding(d: dict) -> Finding:
    return Finding(**{**d, "tips": tuple(d["tips"]), "cost": Cost(**d["cost"]), "notes": tuple(d["notes"]),
                      "locations": tuple(Location(**loc) for loc in d["locations"])})


def _from_json(d: dict):
    summary = TraceSummary(**d["summary"]) if d.get("summary") else None
    return TraceResult(d["path"], [_finding(f) for f in d["findings"]], [Skipped(**s) for s in d["skipped"]],
                        summary, list(d["notes"]), d.get("rank_stats"), d.get("probes_meta") or {})


def analysis_path(trace_path: str) -> str:
    return trace_path.replace(".trace.json.gz", ".analysis.json")


def analyse_rank(trace_path: str, config: dict) -> None:
    """In the rank's process, after its window: its trace through the rules the run selected."""
    rules = load_rules(tuple(config.get("rules_dirs") or ()))
    if config.get("rule_ids") is not None:
        rules = [r for r in rules if r.id in set(config["rule_ids"])]
    roots = tuple(config.get("source_roots") or ())
    result = analyze_one(trace_path, rules, roots, job=True, target=str(config.get("target") or "auto"))
    if result.error is not None:
        return  # the parent parses it again and says why
    tmp = analysis_path(trace_path) + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(_to_json(result), f, default=str)
    os.replace(tmp, analysis_path(trace_path))


def load_analyses(traces: list[str]) -> tuple[list, list[str]]:
    """The rank results left by the ranks, and the traces that left none (or one unreadable)."""
    results, missing = [], []
    for trace in traces:
        try:
            with open(analysis_path(trace), encoding="utf-8") as f:
                data = json.load(f)
            if data.get("version") != VERSION:
                raise ValueError("another version")
            results.append(_from_json(data))
        except (OSError, ValueError, KeyError, TypeError):
            missing.append(trace)
    return results, missing


def job_results(traces: list[str], rules: list[Rule], roots: tuple[str, ...], notes: list[str],
                target: str = "auto") -> list[TraceResult]:
    """Each rank's result, in rank order: what the rank analysed itself (rank<R>.analysis.json), and
    for a rank that left none, its trace parsed here (in worker processes when there are several), each
    projected onto `target` as the run asked."""
    done, missing = load_analyses(traces)
    try:
        done += analyze_all(missing, rules, roots, None, notes, target=target) if missing else []
    except (TraceError, UsageError) as exc:
        notes.append(f"the recorded traces could not be read: {exc}")
    return sorted(done, key=lambda r: traces.index(r.path) if r.path in traces else len(traces))


RANK_WAIT_S = 120  # how long rank 0 waits for the other ranks' records after its own window
ANALYSIS_WAIT_S = 60  # then for their own analyses (a rank without one is parsed by rank 0)


def job_report(run_dir: str, world_size: int) -> None:
    """Rank 0, after its own window: wait for every rank's record, then report on the job."""
    deadline = time.monotonic() + RANK_WAIT_S
    expected = [os.path.join(run_dir, f"rank{r}.result.json") for r in range(world_size)]
    while time.monotonic() < deadline and not all(os.path.exists(p) for p in expected):
        time.sleep(0.2)
    # each rank analyses its own trace after writing its record: give that a moment to finish
    traces = [p for p in (os.path.join(run_dir, f"rank{r}.trace.json.gz") for r in range(world_size))
              if os.path.exists(p)]
    deadline = time.monotonic() + ANALYSIS_WAIT_S
    while time.monotonic() < deadline and not all(os.path.exists(analysis_path(t)) for t in traces):
        time.sleep(0.2)
    from ..report import console, html, json_report
    rules = load_rules()
    try:
        report = Report([], [], [])
        roots = (os.getcwd(),)
        combine(report, job_results(traces, rules, roots, report.notes), rules, roots)
        report = gate.finalize(report, gate.GateOptions(), rules=rules)
    except Exception as exc:  # noqa: BLE001 - the job must end; say why there is no report
        print(f"perfaudit: no job report: {exc}", file=sys.stderr)
        return
    missing = [r for r, p in enumerate(expected) if not os.path.exists(p)]
    if missing:
        report.notes.append(f"rank(s) {', '.join(map(str, missing))} left no record within {RANK_WAIT_S} s "
                            "(crashed, or the run folder is not shared between nodes)")
    report.run_dir = run_dir
    with open(os.path.join(run_dir, "report.json"), "w", encoding="utf-8") as f:
        f.write(json_report.render(report))
    with open(os.path.join(run_dir, "report.html"), "w", encoding="utf-8") as f:
        f.write(html.render(report, rules))
    from rich.console import Console
    console.render(report, Console(file=sys.stdout))
