"""The JSON report: a documented, versioned schema (docs/report-schema.json)."""
from __future__ import annotations

import json
import os
from dataclasses import asdict
from typing import Any, TypedDict

from .. import __version__, untrusted
from ..findings import Finding, Report

REPORT_SCHEMA_VERSION = 1


def _finding(f: Finding) -> dict:
    loc = f.location
    return {
        "rule": f.rule,
        "title": f.title,
        "tips": list(f.tips),
        "severity": f.severity,
        "message": f.message,
        "location": {"path": loc.path, "line": loc.line} if loc else None,
        "locations": [asdict(l) for l in f.locations],
        "cost": {"ms_per_step": f.cost.ms_per_step, "share_of_step": f.cost.share_of_step,
                 "estimated": f.cost.estimated},
        "projected_ms_per_step": f.cost.projected_ms,
        "projected_share_of_step": f.cost.projected_share,
        "fix": f.fix,
        "notes": list(f.notes),
        "trace": f.trace,
        "origin": f.evidence.get("origin") or ("static" if f.evidence.get("static") else
                                               "projected" if f.evidence.get("projected") else "run"),
        "autofix": f.autofix,
        "verified": f.verified,
    }


def to_dict(report: Report) -> dict:
    first = report.traces[0] if report.traces else None
    env = first.environment if first else {}
    return {
        "schema_version": REPORT_SCHEMA_VERSION,
        "tool": {"name": "perfaudit", "version": __version__},
        "run": {
            "script": report.script,
            "cwd": os.getcwd(),  # the folder the relative paths of the locations are relative to
            "outcome": report.outcome,
            "run_dir": report.run_dir,
            "device": first.device if first else None,
            "steps": first.steps if first else 0,
            "step_source": first.step_source if first else None,
            "step_ms": first.step_ms if first else None,
            "unprofiled_steps": first.unprofiled if first else [],
            "breakdown_ms": first.breakdown if first else None,
            "gpu_breakdown_ms": first.gpu_breakdown if first else None,
            "compile": first.compile if first else None,
            "torch": env.get("torch"),
            "environment": env,
            "excluded_steps": first.excluded if first else [],
            "machine": first.busy_machine if first else None,
            "internal_errors": report.internal_errors,
            "traces": [{"path": t.path, "device": t.device, "rank": t.rank, "steps": t.steps,
                        "step_ms": t.step_ms, "has_stacks": t.has_stacks,
                        "gpu_breakdown_ms": t.gpu_breakdown, "excluded_steps": t.excluded} for t in report.traces],
        },
        "mfu": mfu_dict(first.mfu, report.findings) if first and first.mfu else None,
        "memory": first.memory if first else None,
        "projection": projection_dict(first.projection) if first and first.projection else None,
        "findings": [_finding(f) for f in report.findings],
        "skipped": [{"rule": s.rule, "reason": s.reason} for s in report.skipped],
        "notes": list(report.notes),
    }


def projection_dict(p: dict) -> dict:
    keys = ("target", "why_target", "method", "step_ms", "measured_step_ms", "data_share", "gpu_busy_share",
            "data_wait_ms", "bottleneck", "error_pct", "identity", "shares", "busy_ms", "idle_ms")
    return {k: p.get(k) for k in keys}


def mfu_dict(mfu: dict, findings) -> dict:
    """The MFU figures with each ledger bar's findings located: the file:line of the rule that measures it."""
    where: dict[str, list] = {}
    for f in findings:
        where.setdefault(f.rule, []).extend(f"{loc.path}:{loc.line}" for loc in f.locations)
    ledger = [{**bar, "locations": where.get(bar["rule"], [])[:5]} for bar in mfu["ledger"]]
    return {**mfu, "ledger": ledger}


def render(report: Report) -> str:
    return json.dumps(to_dict(report), indent=2, default=str)


class _StoredLocationRequired(TypedDict):
    path: str
    line: int


class _StoredLocation(_StoredLocationRequired, total=False):
    code: str
    detail: str
    count_per_step: float | None
    ms_per_step: float | None
    exact: bool


class _StoredCost(TypedDict, total=False):
    ms_per_step: float | None
    share_of_step: float | None
    estimated: bool | None


class _StoredFindingRequired(TypedDict):
    rule: str
    title: str
    severity: str
    message: str


class _StoredFinding(_StoredFindingRequired, total=False):
    tips: list[str]
    fix: str
    cost: _StoredCost
    locations: list[_StoredLocation]
    notes: list[str]
    origin: str
    trace: str | None
    autofix: dict[str, Any] | None
    projected_ms_per_step: float | None
    projected_share_of_step: float | None


class _StoredTool(TypedDict, total=False):
    name: str
    version: str


class _StoredRun(TypedDict, total=False):
    script: str | None
    steps: int | None
    outcome: dict[str, Any] | None
    run_dir: str | None
    cwd: str | None


class StoredReport(TypedDict, total=False):
    """What `fix --from` and `diff` read back from a report.json: its findings, where, and the run."""
    tool: _StoredTool
    findings: list[_StoredFinding]
    run: _StoredRun


def read_report(path: str) -> tuple[Report, StoredReport]:
    """A report.json read as hostile (bounded, typed: perfaudit.untrusted): the report and its data, or
    Unreadable naming the file and what is wrong with it."""
    data = untrusted.load(path, StoredReport, "a perfaudit report")
    report = report_from_dict(data)
    if report is None:
        raise untrusted.Unreadable(f"{path}: JSON, but not a perfaudit report (no tool.name \"perfaudit\")")
    return report, data


def report_from_dict(data: StoredReport) -> Report | None:
    """A report read back from its JSON, already decoded as StoredReport (read_report): findings, script,
    outcome. None when the data is not a perfaudit report."""
    from ..findings import Cost, Location
    if data.get("tool", {}).get("name") != "perfaudit":
        return None
    findings = []
    for f in data.get("findings", []):
        cost = f.get("cost") or {}
        locations = tuple(Location(**loc) for loc in f.get("locations", []))
        findings.append(Finding(f["rule"], f["title"], tuple(f.get("tips", ())), f["severity"], f["message"],
                                f.get("fix", ""), Cost(cost.get("ms_per_step"), cost.get("share_of_step"),
                                                       bool(cost.get("estimated")), f.get("projected_ms_per_step"),
                                                       f.get("projected_share_of_step")),
                                locations, tuple(f.get("notes", ())), evidence={"origin": f.get("origin", "run")},
                                trace=f.get("trace"), autofix=f.get("autofix")))
    run = data.get("run") or {}
    steps = run.get("steps")
    return Report(findings, [], [], script=run.get("script"), outcome=run.get("outcome"), run_dir=run.get("run_dir"),
                  stored_steps=steps if isinstance(steps, int) and steps > 0 else None)
