"""The library API: audit a script, or analyse traces. The CLI is a thin layer over these."""
from __future__ import annotations

import glob
import os
from dataclasses import dataclass, field, replace
from typing import Callable

from .collect.runner import RunOptions, RunResult, run_script
from .engine.evaluate import evaluate
from .engine.loader import Rule, load_rules
from .errors import TraceError, UsageError
from .facts import Context, Missing
from .findings import Finding, Skipped, rank, severity_rank
from .trace import Trace, load_trace

REPORT_SCHEMA_VERSION = 1
_TRACE_PATTERNS = ("*.json", "*.json.gz")


@dataclass
class TraceSummary:
    path: str
    device: str                  # "cpu", or the GPU's name
    rank: int | None
    steps: int
    step_source: str
    step_ms: float | None
    breakdown: dict | None
    has_stacks: bool
    environment: dict = field(default_factory=dict)
    gpu_breakdown: dict | None = None   # compute, copies, sync_wait, data_wait, other_idle (ms/step)


@dataclass
class Report:
    findings: list[Finding]
    skipped: list[Skipped]
    traces: list[TraceSummary]
    script: str | None = None
    outcome: dict | None = None      # what happened to the script (perfaudit run only)
    run_dir: str | None = None
    notes: list[str] = field(default_factory=list)

    def worst(self) -> str | None:
        return max((f.severity for f in self.findings), key=severity_rank, default=None)

    def fails(self, fail_on: str) -> bool:
        worst = self.worst()
        return fail_on != "never" and worst is not None and severity_rank(worst) >= severity_rank(fail_on)


def expand_trace_paths(paths: list[str]) -> list[str]:
    """Files as given; a directory stands for the traces inside it (one per rank, say)."""
    out = []
    for path in paths:
        if os.path.isdir(path):
            found = sorted({f for pat in _TRACE_PATTERNS for f in glob.glob(os.path.join(path, pat))})
            if not found:
                raise UsageError(f"no trace files (*.json, *.json.gz) in directory {path}")
            out.extend(found)
        else:
            out.append(path)
    if not out:
        raise UsageError("no trace files given")
    return out


def _merge_across_traces(findings: list[Finding], ranks: dict) -> list[Finding]:
    """One finding per rule and place across the traces of a job: the costliest, noting where else."""
    groups: dict[tuple, list[Finding]] = {}
    for f in findings:
        groups.setdefault((f.rule, tuple((l.path, l.line) for l in f.locations)), []).append(f)
    merged = []
    for group in groups.values():
        top = max(group, key=lambda f: f.cost.ms_per_step or 0.0)
        if len(group) > 1:
            names = sorted(str(ranks.get(f.trace)) if ranks.get(f.trace) is not None else os.path.basename(f.trace or "")
                           for f in group)
            label = "ranks" if all(ranks.get(f.trace) is not None for f in group) else "traces"
            top = replace(top, notes=top.notes + (f"Seen on {len(group)} {label} ({', '.join(names)}); "
                                                  "figures are from the costliest.",))
        merged.append(top)
    return merged


def _summary(trace: Trace, ctx: Context) -> TraceSummary:
    env = dict(ctx.probes.get("environment", {}))
    props = trace.meta.get("deviceProperties")
    device = "cpu"
    if isinstance(props, list) and props and isinstance(props[0], dict) and trace.has_gpu:
        device = str(props[0].get("name", "GPU"))
    elif trace.has_gpu:
        device = "GPU"
    elif env.get("device_name"):
        device = env["device_name"]
    try:
        step_ms, breakdown = ctx.get("step.mean_ms"), ctx.get("step.breakdown")
    except Missing:
        step_ms, breakdown = None, None
    try:
        gpu = ctx.get("gpu.step_breakdown")
    except Missing:
        gpu = None
    return TraceSummary(trace.path, device, trace.rank, len(trace.measured_steps), trace.step_source,
                        step_ms, breakdown, trace.has_stacks, env, gpu)


def _evaluate(ctx: Context, rules: list[Rule]) -> tuple[list[Finding], list[Skipped]]:
    findings, skipped = [], []
    for rule in rules:
        result = evaluate(rule, ctx)
        if isinstance(result, Finding):
            findings.append(result)
        elif isinstance(result, Skipped):
            skipped.append(result)
    return findings, skipped


def _evaluate_in(ctx: Context, rules: list[Rule]) -> tuple[list[Finding], list[Skipped], TraceSummary | None]:
    findings, skipped = _evaluate(ctx, [r for r in rules if r.scope == "trace"])  # job/report: elsewhere
    return findings, skipped, (_summary(ctx.trace, ctx) if ctx.trace is not None else None)


def evaluate_trace(trace: Trace | None, rules: list[Rule], probes: dict | None = None,
                   source_roots: tuple[str, ...] = ()) -> tuple[list[Finding], list[Skipped], TraceSummary | None]:
    return _evaluate_in(Context(trace, probes, source_roots), rules)


def analyze(paths: list[str], rules: list[Rule] | None = None, source_roots: tuple[str, ...] = ()) -> Report:
    """Run the rules on traces recorded elsewhere (or by an earlier `perfaudit run`)."""
    rules = rules if rules is not None else load_rules()
    files = expand_trace_paths(paths)
    report = Report([], [], [])
    contexts = []
    for path in files:
        trace = load_trace(path)
        roots = source_roots + (os.path.dirname(os.path.abspath(path)), os.getcwd())
        ctx = Context(trace, None, roots)  # kept: the job-level rules reuse each rank's facts
        findings, skipped, summary = _evaluate_in(ctx, rules)
        contexts.append(ctx)
        report.findings.extend(findings)
        report.skipped.extend(s for s in skipped if s not in report.skipped)
        report.traces.append(summary)
        if trace.skipped_events:
            report.notes.append(f"{path}: {trace.skipped_events} malformed events were ignored")
        if len(files) == 1 and trace.probes:  # recorded by `perfaudit run`: the same report again
            report.script, report.outcome = trace.probes.get("script"), trace.probes.get("outcome")
    if len(files) > 1:
        report.findings = _merge_across_traces(report.findings, {t.path: t.rank for t in report.traces})
    job_rules = [r for r in rules if r.scope == "job"]
    if len(files) > 1 and job_rules:
        findings, skipped = _evaluate(Context(None, {}, source_roots, job=contexts), job_rules)
        report.findings.extend(findings)
        report.skipped.extend(skipped)
    report.findings = rank(report.findings)
    return report


def audit(script: str, args: list[str], options: RunOptions, rules: list[Rule] | None = None,
          on_progress: Callable[[dict], None] | None = None) -> tuple[Report, RunResult]:
    """Run a script for a bounded profiler window and evaluate every rule on what was recorded."""
    rules = rules if rules is not None else load_rules()
    result = run_script(script, args, options, on_progress)
    trace = None
    notes = []
    if result.trace_path:
        try:
            trace = load_trace(result.trace_path)
        except TraceError as exc:
            notes.append(f"the recorded trace could not be read: {exc}")
    roots = (os.path.dirname(result.script), os.getcwd())
    probes = None if trace is not None else result.probes
    findings, skipped, summary = evaluate_trace(trace, rules, probes, roots)
    report = Report(rank(findings), skipped, [summary] if summary else [], script=result.script,
                    outcome=result.outcome, run_dir=result.run_dir, notes=notes)
    if trace is None:
        report.notes.append(_no_trace_reason(result))
    return report, result


def _no_trace_reason(result: RunResult) -> str:
    o = result.outcome
    if not o.get("profiling_started", False):
        return ("no trace was recorded: the script never started training (no optimizer, DataLoader "
                "iteration or backward() was seen before it ended)")
    return "no trace was recorded before the script ended"
