"""The library API: audit a script, analyse traces, lint sources. Each returns the finished report
(static pass merged, CI gate applied); the CLI only parses, calls, prints and exits."""
from __future__ import annotations

import glob
import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from . import gate
from .engine.evaluate import evaluate
from .engine.loader import Rule, builtin_rules_dir, load_rules
from .errors import LaunchError, TraceError, UsageError
from .facts import Context, Missing
from .facts.ranks import rank_stats
from .findings import Finding, Report, Skipped, TraceSummary, rank
from .gate import GateOptions
from .outcome import Outcome
from .outcome import describe as describe_outcome
from .trace import Trace, load_trace

if TYPE_CHECKING:
    from .collect.runner import RunOptions, RunResult

_TRACE_PATTERNS = ("*.json", "*.json.gz")
_NOT_TRAINING = {"dataloader": "DataLoader batches", "inference": "calls of the top-level module under no_grad"}
_STEP_NOTES = {"closure": "the optimizer takes a closure (LBFGS): a step is one closure call (forward and "
                          "backward), several per optimizer.step()"}


def expand_trace_paths(paths: list[str]) -> list[tuple[str, bool]]:
    """(file, found in a folder) for the paths given; a folder stands for the traces inside it (one per
    rank, say)."""
    out = []
    for path in paths:
        if os.path.isdir(path):
            found = sorted({f for pat in _TRACE_PATTERNS for f in glob.glob(os.path.join(path, pat))})
            if not found:
                raise UsageError(f"no trace files (*.json, *.json.gz) in folder {path}")
            out.extend((f, True) for f in found)
        else:
            out.append((path, False))
    if not out:
        raise UsageError("no trace files given")
    return out


_OWN_FILES = re.compile(r"^(rank\d+\.)?result\.json$")


def looks_like_trace(path: str) -> bool:
    """Whether a JSON file found in a folder is a profiler trace (its first MiB names traceEvents),
    not a neighbour such as perfaudit's own result.json."""
    import gzip
    try:
        with (gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")) as f:
            return b'"traceEvents"' in f.read(1 << 20)
    except (OSError, EOFError, ValueError):
        return True  # unreadable: let the parser say why


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
    device = "cpu"
    if trace.device_properties and trace.has_gpu:
        device = str(trace.device_properties.get("name", "GPU"))
    elif trace.has_gpu:
        device = "GPU"
    elif env.get("device_name"):
        device = env["device_name"]
    try:
        step_ms, breakdown = ctx.get("step.mean_ms"), ctx.get("step.breakdown")
    except Missing:
        step_ms, breakdown = None, None
    try:
        gpu, gpu_steps = ctx.get("gpu.step_breakdown"), ctx.get("gpu.per_step")
    except Missing:
        gpu, gpu_steps = None, []
    try:
        per_step = ctx.get("step.per_step")
    except Missing:
        per_step = []
    try:
        compiled = ctx.get("compile.summary")
    except Missing:
        compiled = None
    return TraceSummary(trace.path, device, trace.rank, len(trace.measured_steps), trace.step_source,
                        step_ms, breakdown, trace.has_stacks, env, gpu, per_step, gpu_steps, compiled)


def _evaluate(ctx: Context, rules: list[Rule]) -> tuple[list[Finding], list[Skipped]]:
    findings, skipped = [], []
    for rule in rules:
        result = evaluate(rule, ctx)
        if isinstance(result, Finding):
            findings.append(result)
        elif isinstance(result, Skipped):
            skipped.append(result)
    return findings, skipped


def evaluate_trace(trace: Trace | None, rules: list[Rule], probes: dict | None = None,
                   source_roots: tuple[str, ...] = ()) -> tuple[list[Finding], list[Skipped], TraceSummary | None]:
    """The per-trace rules on one trace (or on probes alone when no trace was recorded)."""
    ctx = Context(trace, probes, source_roots)
    findings, skipped = _evaluate(ctx, [r for r in rules if r.scope == "trace"])  # job/report: elsewhere
    return findings, skipped, (_summary(trace, ctx) if trace is not None else None)


def _context_notes(ctx: Context) -> list[str]:
    notes = list(dict.fromkeys(ctx.errors))
    if ctx.malformed_probes:
        notes.append(f"malformed probe data ignored: {', '.join(ctx.malformed_probes)}")
    return notes


PARALLEL_FROM_BYTES = 32 << 20  # by default, traces are parsed in parallel from this total size


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


@dataclass
class _TraceResult:
    """What one trace contributes to the report: small enough to come back from a worker process."""
    path: str
    findings: list[Finding] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    summary: TraceSummary | None = None
    notes: list[str] = field(default_factory=list)
    rank_stats: dict | None = None
    probes_meta: dict = field(default_factory=dict)   # script and outcome, for a perfaudit run's trace
    error: TraceError | None = None


def _analyze_one(path: str, rules: list[Rule], source_roots: tuple[str, ...], job: bool = True) -> _TraceResult:
    """Parse one trace and evaluate the per-trace rules on it (in a worker process with --jobs); the
    trace itself is dropped afterwards, so memory does not grow with the number of ranks."""
    try:
        trace = load_trace(path)
    except TraceError as exc:
        return _TraceResult(path, error=exc)
    roots = source_roots + (os.path.dirname(os.path.abspath(path)), os.getcwd())
    ctx = Context(trace, None, roots)
    findings, skipped = _evaluate(ctx, [r for r in rules if r.scope == "trace"])
    notes = _context_notes(ctx)
    if trace.skipped_events:
        notes.append(f"{path}: {trace.skipped_events} malformed events were ignored")
    meta = {k: trace.probes.get(k) for k in ("script", "outcome")} if trace.probes else {}
    return _TraceResult(path, findings, skipped, _summary(trace, ctx), notes, rank_stats(ctx) if job else None, meta)


def _analyze_all(paths: list[str], rules: list[Rule], source_roots: tuple[str, ...], jobs: int | None,
                 notes: list[str]) -> list[_TraceResult]:
    """Every trace named or found, in parallel processes when there are several (`jobs`: how many,
    default the CPU count). In a folder, files that are not traces are skipped and a trace that cannot
    be read is named and skipped, as long as one trace can be read."""
    items = []
    for path, in_folder in expand_trace_paths(paths):
        if in_folder and not looks_like_trace(path):
            if not _OWN_FILES.search(os.path.basename(path)):  # perfaudit's own files in a run folder: quietly
                notes.append(f"skipped {path}: not a profiler trace")
        else:
            items.append((path, in_folder))
    if jobs is None and sum(_size(p) for p, _ in items) < PARALLEL_FROM_BYTES:
        jobs = 1  # starting worker processes costs more than parsing a few small traces
    workers = min(jobs or os.cpu_count() or 1, len(items))
    if workers > 1:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            results = list(pool.map(_analyze_one, [p for p, _ in items], [rules] * len(items),
                                    [source_roots] * len(items)))
    else:
        results = [_analyze_one(p, rules, source_roots, len(items) > 1) for p, _ in items]
    good, errors = [], []
    for (path, in_folder), result in zip(items, results):
        if result.error is None:
            good.append(result)
        elif not in_folder:
            raise result.error
        else:
            errors.append(result.error)
            notes.append(f"skipped {result.error}")
    if not good:
        raise errors[0] if errors else UsageError(f"no profiler traces in {', '.join(paths)}")
    return good


def analyze(paths: list[str], rules: list[Rule] | None = None, source_roots: tuple[str, ...] = (),
            gate_options: GateOptions | None = None, jobs: int | None = None) -> Report:
    """Run the rules on traces recorded elsewhere (or by an earlier `perfaudit run`); several traces
    (the ranks of a job) are analysed in `jobs` processes (default: one per CPU)."""
    rules = rules if rules is not None else load_rules()
    report = Report([], [], [])
    results = _analyze_all(paths, rules, source_roots, jobs, report.notes)
    _combine(report, results, rules, source_roots)
    if len(results) == 1 and results[0].probes_meta:  # recorded by `perfaudit run`: the same report again
        script, outcome = results[0].probes_meta.get("script"), results[0].probes_meta.get("outcome")
        report.script = script if isinstance(script, str) else None
        report.outcome = outcome if isinstance(outcome, dict) else None
    return gate.finalize(report, gate_options or GateOptions(), rules=rules)


def _combine(report: Report, results: list[_TraceResult], rules: list[Rule], source_roots: tuple[str, ...]) -> None:
    """Each trace's findings into one report; for several ranks, merged across them, with the job's
    own rules (the straggler) on their figures."""
    for result in results:
        report.findings.extend(result.findings)
        report.skipped.extend(s for s in result.skipped if s not in report.skipped)
        report.traces.append(result.summary)
        report.notes.extend(n for n in result.notes if n not in report.notes)
    if len(results) > 1:
        report.findings = _merge_across_traces(report.findings, {t.path: t.rank for t in report.traces})
        job = Context(None, {}, source_roots, job=[r.rank_stats for r in results])
        findings, skipped = _evaluate(job, [r for r in rules if r.scope == "job"])
        report.findings.extend(findings)
        report.skipped.extend(skipped)
        try:
            report.ranks = job.get("job.ranks")
            report.straggler = job.get("job.imbalance")
        except Missing:
            pass


def audit(script: str, args: list[str], options: RunOptions, rules: list[Rule] | None = None,
          on_progress: Callable[[dict], None] | None = None, gate_options: GateOptions | None = None,
          command: str | None = None) -> Report:
    """Run a script for a bounded profiler window, evaluate every rule on what was recorded, and
    merge what the static pass sees in the script. The run folder gets the report as HTML."""
    from .collect.runner import run_script  # not for `analyze`: subprocess, threads, tempfile
    from .static import lint as lint_paths
    rules = rules if rules is not None else load_rules()
    if options.launch:  # the ranks evaluate the same rules on their own traces
        options.rule_ids = [r.id for r in rules]
        folders = {os.path.dirname(os.path.realpath(r.path)) for r in rules}
        options.rules_dirs = sorted(folders - {os.path.realpath(builtin_rules_dir())})
    result = run_script(script, args, options, on_progress)
    if options.launch:
        return _audit_job(script, result, rules, gate_options, command)
    trace = None
    notes = []
    if result.trace_path:
        try:
            trace = load_trace(result.trace_path)
        except TraceError as exc:
            notes.append(f"the recorded trace could not be read: {exc}")
    roots = (os.path.dirname(result.script), os.getcwd())
    probes = None if trace is not None else result.probes
    ctx = Context(trace, probes, roots)
    findings, skipped = _evaluate(ctx, [r for r in rules if r.scope == "trace"])
    report = Report(findings, skipped, [_summary(trace, ctx)] if trace is not None else [], script=result.script,
                    outcome=result.outcome, run_dir=result.run_dir, notes=notes + _context_notes(ctx),
                    stop_signal=result.stop_signal, command=command)
    if trace is None:
        report.notes.append(_no_trace_reason(result))
    elif result.outcome.get("step_source") in _NOT_TRAINING:
        report.notes.append(f"no optimizer step or backward() was seen: the steps are "
                            f"{_NOT_TRAINING[result.outcome['step_source']]} (inference or evaluation)")
    if result.outcome.get("step_source") in _STEP_NOTES:
        report.notes.append(_STEP_NOTES[result.outcome["step_source"]])
    trimmed = result.outcome.get("trimmed") or {}
    if "steps" in trimmed or "stacks" in trimmed:
        report.notes.append(
            f"a step writes about {trimmed.get('estimated_mb_per_step', 0):g} MB of trace, so to stay within the "
            f"{options.trace_budget_mb:g} MB trace budget {trimmed.get('steps', options.steps)} step(s) were measured "
            f"after {trimmed.get('warmup', options.warmup)} warm-up"
            + (", without Python stacks (no file:line)" if trimmed.get("stacks") == "off" else ""))
    if result.outcome.get("budget_hit"):
        report.notes.append(f"recording stopped at its time budget ({options.record_budget_s:g} s) after "
                            f"{len(trace.measured_steps) if trace else 0} measured step(s); --steps sets fewer")
    gate.merge_static(report, lint_paths([script], rules))
    report = gate.finalize(report, gate_options or GateOptions(), extra_files=(script,), rules=rules)
    _write_html(report, rules)
    return report


def _audit_job(script: str, result: RunResult, rules: list[Rule], gate_options: GateOptions | None,
               command: str | None) -> Report:
    """A run under torchrun: every rank's trace analysed (in parallel processes), merged into the job's
    report as `perfaudit analyze RUN_FOLDER` would, with what happened to each rank."""
    from .static import lint as lint_paths
    if not result.rank_outcomes and result.stop_signal is None:
        raise LaunchError(f"torchrun could not start the job: {_last_error(result.log_path)} "
                          f"(its output: {result.log_path})")
    report = Report([], [], [], script=result.script, outcome=result.outcome, run_dir=result.run_dir,
                    stop_signal=result.stop_signal, command=command)
    roots = (os.path.dirname(result.script), os.getcwd())
    if result.rank_traces:
        done = job_results(result.rank_traces, rules, roots, report.notes)
        if done:
            _combine(report, done, rules, roots)
    failed = result.outcome.get("failed_ranks") or []
    for failed_rank in failed:
        said = describe_outcome(result.rank_outcomes.get(failed_rank))
        report.notes.append(f"rank {failed_rank}: {said or 'did not finish its window'}")
    unmeasured = [r for r in result.outcome.get("unmeasured_ranks") or [] if r not in failed]
    if unmeasured:
        report.notes.append(f"rank(s) {', '.join(map(str, unmeasured))} never reached the measured window "
                            "(uneven data, or stopped when another rank failed)")
    if not result.rank_traces:
        report.notes.append(_no_trace_reason(result))
    gate.merge_static(report, lint_paths([script], rules))
    report = gate.finalize(report, gate_options or GateOptions(), extra_files=(script,), rules=rules)
    _write_html(report, rules)
    return report


def job_results(traces: list[str], rules: list[Rule], roots: tuple[str, ...], notes: list[str]) -> list[_TraceResult]:
    """Each rank's result, in rank order: what the rank analysed itself (rank<R>.analysis.json), and
    for a rank that left none, its trace parsed here (in worker processes when there are several)."""
    from .jobs import load_analyses
    done, missing = load_analyses(traces)
    try:
        done += _analyze_all(missing, rules, roots, None, notes) if missing else []
    except (TraceError, UsageError) as exc:
        notes.append(f"the recorded traces could not be read: {exc}")
    return sorted(done, key=lambda r: traces.index(r.path) if r.path in traces else len(traces))


def _last_error(log_path: str) -> str:
    """The last line of the launcher's output that names an error, else its last line."""
    try:
        with open(log_path, encoding="utf-8", errors="replace") as f:
            lines = [l.strip() for l in f.read()[-(64 << 10):].splitlines() if l.strip()]
    except OSError:
        return "no output"
    errors = [l for l in lines if re.search(r"(Error|Exception|error:)", l)]
    return (errors or lines or ["no output"])[-1][:300]


def _write_html(report: Report, rules: list[Rule]) -> None:
    """Every run folder holds its report as one HTML file to open or attach."""
    from .report import html
    path = os.path.join(report.run_dir, "report.html")
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(html.render(report, rules))
    except OSError as exc:
        report.notes.append(f"could not write {path}: {exc.strerror}")


def lint(paths: list[str], rules: list[Rule] | None = None, gate_options: GateOptions | None = None) -> Report:
    """What the source alone shows, without running it (imports no torch)."""
    from .static import lint as lint_paths
    from .static import python_files
    rules = rules if rules is not None else load_rules()
    files = python_files(paths)
    from .static.registry import CHECKS
    checked = {spec.rule for specs in CHECKS.values() for spec in specs}
    report = Report([], [], [], files=len(files), static_rules=sorted(r.id for r in rules if r.id in checked))
    report.findings = lint_paths(files, rules, report.notes)
    report.notes.append(f"static pass over {len(files)} file(s); `perfaudit run` measures what it finds")
    return gate.finalize(report, gate_options or GateOptions(), extra_files=tuple(files), rules=rules)


def _no_trace_reason(result: RunResult) -> str:
    o = result.outcome
    if Outcome.of(o) == Outcome.SPAWNED:
        return ("nothing was measured: the script starts its training in new processes "
                f"({o.get('api')}), which perfaudit does not watch; call the training function directly "
                "(one process) or launch it with torchrun")
    if o.get("profiling_started"):
        return "no trace was recorded before the script ended"
    if Outcome.of(o) in (Outcome.TIMEOUT, Outcome.INTERRUPTED, Outcome.CRASHED):
        return "nothing was measured: the script was stopped before its second training step"
    if o.get("optimizers_built"):
        return ("nothing was measured: an optimizer was built but never stepped, and no training step "
                "was seen before the script ended")
    return ("nothing was measured: the script never started training (no optimizer step, backward(), "
            "DataLoader batch or inference call was seen before it ended)")


def __getattr__(name: str):
    """RunOptions, exported here, is imported on first use: `analyze` never needs the runner."""
    if name == "RunOptions":
        from .collect.runner import RunOptions
        return RunOptions
    raise AttributeError(name)


__all__ = ["GateOptions", "Report", "RunOptions", "analyze", "audit", "evaluate_trace", "expand_trace_paths", "lint", "rank"]


def project_root(script: str) -> str:
    """The nearest folder above the script that holds a project (.git, pyproject.toml, setup.py); the
    script's own folder when there is none. `fix` edits files inside it only."""
    folder = os.path.dirname(os.path.abspath(script))
    here = folder
    while True:
        if any(os.path.exists(os.path.join(here, mark)) for mark in (".git", "pyproject.toml", "setup.py")):
            return here
        parent = os.path.dirname(here)
        if parent == here:
            return folder
        here = parent


def recorded_report(source: str, rules: list[Rule]) -> tuple[Report, str | None]:
    """The report of an earlier run: its folder or trace (analysed again) or its JSON report; and the
    folder relative paths in it are read from."""
    import json

    from .report.json_report import report_from_dict
    if os.path.isdir(source) or looks_like_trace(source):
        report = analyze([source], rules)
        return report, os.getcwd()
    try:
        with open(source, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError) as exc:
        raise UsageError(f"--from {source}: not a run folder, a trace or a JSON report ({exc})") from None
    report = report_from_dict(data)
    if report is None:
        raise UsageError(f"--from {source}: a JSON file, but not a perfaudit report")
    return report, os.path.dirname(os.path.abspath(report.script)) if report.script else None


def fix(script: str, args: list[str], options: RunOptions, rules: list[Rule] | None = None,
        select: set[str] | None = None, source: str | None = None,
        on_progress: Callable[[dict], None] | None = None):
    """The edits for the findings of a run of SCRIPT (or of an earlier run, `source`): a FixPlan to
    show as a diff or write. Nothing is written here."""
    from .fix.plan import plan_fixes
    rules = rules if rules is not None else load_rules()
    report, base = _audited(script, args, options, rules, source, on_progress)
    return report, plan_fixes(report.findings, project_root(script), select, base)


def _audited(script: str, args: list[str], options: RunOptions, rules: list[Rule], source: str | None,
             on_progress: Callable[[dict], None] | None = None) -> tuple[Report, str | None]:
    """The report to fix: a new run of SCRIPT, or an earlier one; and the folder its relative paths
    are read from."""
    if source is not None:
        return recorded_report(source, rules)
    return audit(script, args, options, rules, on_progress), None


def verify(script: str, args: list[str], audit_options: RunOptions, timing_options: RunOptions, rounds: int = 3,
           rules: list[Rule] | None = None, select: set[str] | None = None, source: str | None = None,
           each: bool = False, on_progress: Callable[[str], None] | None = None):
    """Audit SCRIPT (or take an earlier run), make the fixes, and measure them: A (as it is) against B
    (all fixes, or with `each` one B per rule) over interleaved rounds, step times and losses compared.
    Returns (report, plan, verification); the user's files are not written."""
    from .collect.rundir import make_run_dir
    from .fix.plan import plan_fixes
    from .verify import Variant, run_ab
    say = on_progress or (lambda text: None)
    folder = make_run_dir(timing_options.out_dir, timing_options.keep_runs)
    say("auditing the script …")
    rules = rules if rules is not None else load_rules()
    report, base = _audited(script, args, replace(audit_options, out_dir=os.path.join(folder, "audit")), rules, source)
    root = project_root(script)
    plan = plan_fixes(report.findings, root, select, base)
    variants = [Variant("A", None)]
    if each:
        variants += [Variant(rule, plan_fixes(report.findings, root, {rule}, base)) for rule in plan.rules]
    elif plan.files:
        variants.append(Variant("B", plan))
    if len(variants) == 1:
        from .verify import Verification
        return report, plan, Verification(script, args, 0, timing_options.warmup, timing_options.steps, None, [],
                                          folder)
    verification = run_ab(script, args, variants, folder, timing_options, rounds, say)
    report.findings = rank([_with_figures(f, verification) for f in report.findings])
    return report, plan, verification


def _with_figures(f: Finding, verification) -> Finding:
    """The finding with what verify measured for its fix, when it was measured and passed."""
    if f.evidence.get("origin") == "static":
        return f
    for v in verification.verdicts:
        if f.rule in v.rules and v.speed is not None and v.passed:
            s = v.speed
            interval = None if math.isnan(s.low_ms) else [-s.high_ms, -s.low_ms]  # NaN: too few steps
            return replace(f, verified={
                "saved_ms": s.saved_ms, "interval_ms": interval, "speedup_pct": s.speedup_pct, "verdict": s.verdict,
                "loss": v.loss.verdict, "loss_detail": v.loss.detail, "device": verification.device,
                "together": [r for r in v.rules if r != f.rule] or None})
    return f
