"""`analyze`: the rules on traces recorded elsewhere or by an earlier run. One trace is parsed into the
trace model, the facts are computed on demand, every per-trace rule is evaluated; several traces (the
ranks of a job) are analysed in parallel processes and merged, with the job's own rules on top."""
from __future__ import annotations

import glob
import os
import re
from dataclasses import dataclass, field, replace

from ..engine.evaluate import evaluate
from ..engine.loader import Rule, load_rules
from ..engine.projected import with_projected_costs
from ..errors import TraceError, UsageError
from ..facts import Context, Missing
from ..facts.distributed.ranks import rank_stats
from ..facts.emulated import gpu_branch_ran
from ..findings import Finding, Report, Skipped, TraceSummary
from ..policy import gate
from ..policy.config import checked_target
from ..policy.gate import GateOptions
from ..trace import Trace, load_trace
from ..trace.gc_pause import collection_paused
from ..trace.parser import WHEN_EMULATED
from ..trace.run_record import add_late_entries, record_beside

_TRACE_PATTERNS = ("*.json", "*.json.gz")

def expand_trace_paths(paths: list[str]) -> list[tuple[str, bool]]:
    """(file, found in a folder) for the paths given; a folder stands for the traces inside it (one per
    rank, say)."""
    out: list[tuple[str, bool]] = []
    for path in paths:
        if os.path.isdir(path):
            found = sorted({f for pat in _TRACE_PATTERNS for f in glob.glob(os.path.join(path, pat))
                            if os.path.isfile(f)})  # a FIFO or a socket in the folder is no trace to open
            if not found:
                raise UsageError(f"no trace files (*.json, *.json.gz) in folder {path}")
            out.extend((f, True) for f in found)
        else:
            out.append((path, False))
    if not out:
        raise UsageError("no trace files given")
    return out


_OWN_FILES = re.compile(r"^(rank\d+\.)?(result|report)\.json$")


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


def summarize(trace: Trace, ctx: Context) -> TraceSummary:
    env = dict(ctx.probes.get("environment", {}))
    return _summary_of(trace, ctx, env, _device_label(trace, env, ctx.probes))


def _device_label(trace: Trace, env: dict, probes: dict) -> str:
    """What ran it: the GPU's name, "GPU" when the trace does not name it, a GPU trace without kernels
    said as such (not "cpu"), else the CPU."""
    props = trace.device_properties
    name = str(props.get("name") or "").strip()
    if trace.has_gpu:
        return name or "GPU (unnamed in the trace)"
    gpu_runtime = any(e.kind == "runtime" for name, events in trace.names().items()
                      if name.startswith(("cuda", "hip")) for e in events)
    if props or gpu_runtime:
        return f"{name or 'GPU'} (no GPU kernels or copies recorded)"
    if env.get("emulated_cuda"):
        return CPU_EMULATING_CUDA if gpu_branch_ran(probes) else CPU_BRANCH_TAKEN
    return env.get("device_name") or "cpu"


CPU_EMULATING_CUDA = "cpu, CUDA path emulated"
CPU_BRANCH_TAKEN = "cpu, CUDA path offered but not taken"


def _summary_of(trace: Trace, ctx: Context, env: dict, device: str) -> TraceSummary:
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
    excluded = [{"step": s.number, "why": s.excluded, "kept": not trace.excluded_steps}
                for s in trace.steps if not s.warmup and s.excluded]
    window = _window if isinstance(_window := trace.probes.get("window"), dict) else {}
    busy_measured = measured if isinstance(measured := window.get("busy_steps_measured"), int) else 0
    threads = window.get("threads") if isinstance(window.get("threads"), dict) else None
    try:
        training = ctx.get("run.training")
    except Missing:
        training = None
    try:
        mfu = ctx.get("mfu")
    except Missing:
        mfu = None
    try:
        memory = ctx.get("memory.emulated") or ctx.get("memory.measured")
    except Missing:
        memory = None
    try:
        projection = ctx.get("projection")
    except Missing:
        projection = None
    try:
        unprofiled = ctx.get("step.unprofiled")
    except Missing:
        unprofiled = []
    return TraceSummary(trace.path, device, trace.rank, len(trace.measured_steps), trace.step_source,
                        step_ms, breakdown, trace.has_stacks, env, gpu, per_step, gpu_steps, compiled, excluded,
                        busy_measured, threads, training, mfu, memory=memory, projection=projection,
                        unprofiled=unprofiled)


def evaluate_rules(ctx: Context, rules: list[Rule]) -> tuple[list[Finding], list[Skipped]]:
    """The rules' findings, each with its saving on the projection's target GPU when the run is projected."""
    findings, skipped = [], []
    for rule in rules:
        result = evaluate(rule, ctx)
        if isinstance(result, Finding):
            findings.append(result)
        elif isinstance(result, Skipped):
            skipped.append(result)
    return with_projected_costs(findings, rules, ctx), skipped


def evaluate_trace(trace: Trace | None, rules: list[Rule], probes: dict | None = None,
                   source_roots: tuple[str, ...] = ()) -> tuple[list[Finding], list[Skipped], TraceSummary | None]:
    """The per-trace rules on one trace (or on probes alone when no trace was recorded)."""
    ctx = Context(trace, probes, source_roots)
    findings, skipped = evaluate_rules(ctx, [r for r in rules if r.scope == "trace"])  # job/report: elsewhere
    return findings, skipped, (summarize(trace, ctx) if trace is not None else None)


def context_notes(ctx: Context) -> list[str]:
    notes = list(dict.fromkeys(ctx.errors))
    if ctx.malformed_probes:
        notes.append(f"malformed probe data ignored: {', '.join(ctx.malformed_probes)}")
    try:
        unstacked, measured = len(ctx.unstacked_steps), len(ctx.steps)
    except Missing:
        unstacked = measured = 0
    if unstacked:
        notes.append(f"Python stacks were recorded for {measured - unstacked} of the {measured} measured steps (the "
                     "rest without, to stay within the trace budget): a finding's figures at a file:line come from "
                     "those steps; the step times and totals from all of them")
    elif measured and len(ctx.steps_without_stacks) == measured:
        if ctx.site_steps is not ctx.steps:
            notes.append(f"Python stacks were recorded only for {len(ctx.site_steps)} step(s) left out of the times "
                         "for waiting on a busy CPU (the trace budget kept them for one step): a finding's lines and "
                         "counts come from those, its times from the measured steps")
        else:
            notes.append("Python stacks were recorded only for steps that are not measured (the trace budget kept "
                         "them for one step, and it was left out): findings have no file:line")
    return notes


PARALLEL_FROM_BYTES = 32 << 20  # by default, traces are parsed in parallel from this total size
# --target naming a GPU: every op's shapes are kept, so that a GPU trace's kernels are scaled by their op's
# modelled time on both GPUs; above this size (on disk) by their names only (+51 % time, x2.3 memory on a
# 1 GB trace otherwise: benchmarks/bench_projection.py)
OP_SHAPES_MAX_BYTES = 128 << 20


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


@dataclass
class TraceResult:
    """What one trace contributes to the report: small enough to come back from a worker process."""
    path: str
    findings: list[Finding] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    summary: TraceSummary | None = None
    notes: list[str] = field(default_factory=list)
    rank_stats: dict | None = None
    probes_meta: dict = field(default_factory=dict)   # script and outcome, for a perfaudit run's trace
    error: TraceError | None = None


def analyze_one(path: str, rules: list[Rule], source_roots: tuple[str, ...], job: bool = True,
                op_times: bool = False, target: str = "auto") -> TraceResult:
    """Parse one trace and evaluate the per-trace rules on it (in a worker process with --jobs); the
    trace itself is dropped afterwards, so memory does not grow with the number of ranks. `op_times`: the
    summary carries the time per op or kernel name too (what `diff` compares)."""
    try:
        named = target not in ("auto", "none") and _size(path) <= OP_SHAPES_MAX_BYTES
        # by default, a CPU run of a CUDA path is projected from its op shapes: the trace's header says which
        trace = load_trace(path, op_shapes=True if named else WHEN_EMULATED if target == "auto" else False)
    except TraceError as exc:
        return TraceResult(path, error=exc)
    add_late_entries(trace, record_beside(path))  # a run folder's trace: what its run added after writing it
    roots = source_roots + (os.path.dirname(os.path.abspath(path)), os.getcwd())
    ctx = Context(trace, None, roots, target=target)
    with collection_paused():  # the facts walk the trace's events: no cycle collection over them meanwhile
        findings, skipped = evaluate_rules(ctx, [r for r in rules if r.scope == "trace"])
        summary = summarize(trace, ctx)
    notes = context_notes(ctx) + reading_notes(path, trace)
    meta = {k: trace.probes.get(k) for k in ("script", "outcome")} if trace.probes else {}
    if op_times:
        try:
            summary.op_times = ctx.get("ops.time_by_name")
        except Missing:
            pass
    return TraceResult(path, findings, skipped, summary, notes, rank_stats(ctx) if job else None, meta)


def reading_notes(path: str, trace: Trace) -> list[str]:
    """What reading the trace left out or put right."""
    notes = []
    if trace.skipped_events:
        notes.append(f"{path}: {trace.skipped_events} malformed events were ignored")
    if trace.repaired_names:
        notes.append(f"{path}: {trace.repaired_names} event name(s) were not valid JSON (a bare quote, backslash or "
                     "control character, as the profiler wrote them): read with those characters escaped")
    notes.extend(f"{path}: {why}: analysed without it" for why in trace.unreadable_meta)
    if trace.dropped_events:
        notes.append(f"{path}: the trace holds more events than perfaudit keeps in memory: the last "
                     f"{trace.dropped_events:,} were not read, and the figures cover the steps before them "
                     "(PERFAUDIT_MAX_EVENTS raises the limit)")
    return notes


def analyze_all(paths: list[str], rules: list[Rule], source_roots: tuple[str, ...], jobs: int | None,
                 notes: list[str], op_times: bool = False, target: str = "auto") -> list[TraceResult]:
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
            results = list(pool.map(analyze_one, [p for p, _ in items], [rules] * len(items),
                                    [source_roots] * len(items), [True] * len(items), [op_times] * len(items),
                                    [target] * len(items)))
    else:
        results = [analyze_one(p, rules, source_roots, len(items) > 1, op_times, target) for p, _ in items]
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
            gate_options: GateOptions | None = None, jobs: int | None = None, op_times: bool = False,
            target: str | None = None) -> Report:
    """Run the rules on traces recorded elsewhere (or by an earlier `perfaudit run`); several traces
    (the ranks of a job) are analysed in `jobs` processes (default: one per CPU). `target`: the GPU the
    steps are projected onto (a name devices.yaml knows, "auto": the GPU a trace was recorded on, or
    "none")."""
    rules = rules if rules is not None else load_rules()
    report = Report([], [], [])
    target = checked_target(target, "--target") if target else "auto"
    results = analyze_all(paths, rules, source_roots, jobs, report.notes, op_times, target)
    report.source_roots = [os.getcwd(), *source_roots, *{os.path.dirname(os.path.abspath(r.path)) for r in results}]
    combine(report, results, rules, source_roots)
    if len(results) == 1 and results[0].probes_meta:  # recorded by `perfaudit run`: the same report again
        script, outcome = results[0].probes_meta.get("script"), results[0].probes_meta.get("outcome")
        report.script = script if isinstance(script, str) else None
        report.outcome = outcome if isinstance(outcome, dict) else None
    return gate.finalize(report, gate_options or GateOptions(), rules=rules)


def combine(report: Report, results: list[TraceResult], rules: list[Rule], source_roots: tuple[str, ...]) -> None:
    """Each trace's findings into one report; for several ranks, merged across them, with the job's
    own rules (the straggler) on their figures."""
    for result in results:
        report.findings.extend(result.findings)
        report.skipped.extend(s for s in result.skipped if s not in report.skipped)
        if result.summary is not None:
            report.traces.append(result.summary)
        report.notes.extend(n for n in result.notes if n not in report.notes)
    if len(results) > 1:
        report.findings = _merge_across_traces(report.findings, {t.path: t.rank for t in report.traces})
        job = Context(None, {}, source_roots, job=[r.rank_stats for r in results if r.rank_stats is not None])
        findings, skipped = evaluate_rules(job, [r for r in rules if r.scope == "job"])
        report.findings.extend(findings)
        report.skipped.extend(skipped)
        try:
            report.ranks = job.get("job.ranks")
            report.straggler = job.get("job.imbalance")
        except Missing:
            pass
