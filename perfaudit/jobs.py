"""A distributed job's ranks analysed where they ran: each rank, when its window ends, parses its own
trace and evaluates the per-trace rules in its own process (the analysis is spread over the job's
machines), then leaves the small result as rank<R>.analysis.json next to its trace. The job report
is put together from those files; a rank that left none (it crashed mid-export, say) is parsed then."""
from __future__ import annotations

import json
import os
from dataclasses import asdict

from .findings import Cost, Finding, Location, Skipped, TraceSummary

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
    from .api import _TraceResult
    summary = TraceSummary(**d["summary"]) if d.get("summary") else None
    return _TraceResult(d["path"], [_finding(f) for f in d["findings"]], [Skipped(**s) for s in d["skipped"]],
                        summary, list(d["notes"]), d.get("rank_stats"), d.get("probes_meta") or {})


def analysis_path(trace_path: str) -> str:
    return trace_path.replace(".trace.json.gz", ".analysis.json")


def analyse_rank(trace_path: str, config: dict) -> None:
    """In the rank's process, after its window: its trace through the rules the run selected."""
    from .api import _analyze_one
    from .engine.loader import load_rules
    rules = load_rules(tuple(config.get("rules_dirs") or ()))
    if config.get("rule_ids") is not None:
        rules = [r for r in rules if r.id in set(config["rule_ids"])]
    roots = tuple(config.get("source_roots") or ())
    result = _analyze_one(trace_path, rules, roots, job=True)
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
