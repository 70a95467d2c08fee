"""`diff`: two runs or traces side by side. The step time of each with an interval of the change, the host
and GPU breakdowns (which part grew), the findings that appeared, vanished or changed cost (matched by rule
and the code they point at, so a line moved by an edit still matches), the ops or kernels whose time changed
most, and what differs in the environment."""
from __future__ import annotations

import os
from collections import defaultdict

from ..engine.loader import Rule, load_rules
from ..findings import Finding, Report, TraceSummary
from ..report.json_report import read_report
from ..untrusted import Unreadable
from ..verify.comparison import Diff, FindingChange
from ..verify.stats import speed_change, undisturbed_unprofiled_s
from .analysis import analyze

HOST_PHASES = ("data", "forward", "backward", "optimizer", "other")
GPU_PARTS = (("compute", "compute"), ("copies", "copies"), ("sync_wait", "sync wait"), ("alloc_wait", "allocator wait"),
             ("data_wait", "data wait"), ("other_idle", "idle (host-bound)"))
TOP_OPS = 10
OPS_MIN_MS, OPS_MIN_SHARE = 0.001, 0.005  # an op's change shown from this many ms per step and share of A's step
MIN_STEPS = 3  # an interval from fewer steps a side would be no interval at all
# a finding's cost changed when it moved by this much (ms per step) and this share of its old cost
CHANGED_MS, CHANGED_SHARE = 0.05, 0.2
NOISY_ENVIRONMENT = {"load_avg", "platform"}  # differ between any two runs; not a cause


def diff(a: str, b: str, rules: list[Rule] | None = None, source_roots: tuple[str, ...] = ()) -> Diff:
    """Analyse A and B (run folders, folders of rank traces, or trace files) and compare them."""
    rules = rules if rules is not None else load_rules()
    report_a, report_b = read_side(a, rules, source_roots), read_side(b, rules, source_roots)
    steps_a, steps_b = step_times(report_a), step_times(report_b)
    out = Diff(a, b, report_a, report_b, speed_change([steps_a], [steps_b], min_steps=MIN_STEPS))
    plain_a, plain_b = unprofiled_times(report_a), unprofiled_times(report_b)
    if len(plain_a) >= MIN_STEPS and len(plain_b) >= MIN_STEPS:
        out.unprofiled = speed_change([plain_a], [plain_b], min_steps=MIN_STEPS)
    ta, tb = report_a.traces[0], report_b.traces[0]
    out.host = _parts(_mean_over(report_a, "breakdown"), _mean_over(report_b, "breakdown"),
                      [(p, p) for p in HOST_PHASES])
    if ta.gpu_breakdown and tb.gpu_breakdown:
        out.gpu = _parts(_mean_over(report_a, "gpu_breakdown"), _mean_over(report_b, "gpu_breakdown"), GPU_PARTS)
    # on GPU traces the device's parts say what slowed the step (host phases then mostly wait on it)
    side, parts = ("GPU", out.gpu) if out.gpu else ("host", out.host)
    grown = [{"side": side, **p} for p in parts if p["delta_ms"] > 0]
    out.grew = max(grown, key=lambda p: p["delta_ms"]) if grown else None
    out.findings = match_findings(report_a.findings, report_b.findings)
    out.ops_kind, out.ops = _ops(report_a, report_b)
    out.environment = _environment(ta, tb)
    return out


def read_side(path: str, rules: list[Rule], source_roots: tuple[str, ...]) -> Report:
    """One side analysed; a run folder's findings as its run reported them (report.json: placed by the run's
    probes and the static pass on the script as it was then, which may have been edited since)."""
    report = analyze([path], rules, source_roots, op_times=True)
    saved = os.path.join(path, "report.json")
    if os.path.isdir(path) and os.path.isfile(saved):
        try:
            recorded, _ = read_report(saved)
        except Unreadable as exc:  # the trace's own findings would sit at the lines of the script as it is now
            raise Unreadable(f"{exc}; diff places a run's findings from it (remove it to compare the traces "
                             "alone)") from None
        report.findings, report.script = recorded.findings, report.script or recorded.script
    return report


def step_times(report: Report) -> list[float]:
    """Every measured step's duration (s) over the traces of one side (the ranks of a job pooled)."""
    return [row["total"] / 1000.0 for t in report.traces for row in t.per_step if row.get("total")]


def unprofiled_times(report: Report) -> list[float]:
    """The steps each run timed after its window without the profiler (s), less those a busy machine disturbed,
    as `verify` leaves them out: what `verify` times. The recorded steps carry the profiler's cost per Python call
    and op, which weighs on work in the training process (a Dataset's `__getitem__`, collate) several times more
    than on work it moves elsewhere."""
    return [s for t in report.traces for s in undisturbed_unprofiled_s(t.unprofiled)]


def _mean_over(report: Report, attr: str) -> dict:
    """One breakdown for a side: the mean over its traces (ranks)."""
    rows = [getattr(t, attr) for t in report.traces if getattr(t, attr)]
    keys = {k for r in rows for k, v in r.items() if isinstance(v, (int, float))}
    return {k: sum(r.get(k, 0.0) or 0.0 for r in rows) / len(rows) for k in keys} if rows else {}


def _parts(a: dict, b: dict, names) -> list[dict]:
    return [{"part": label, "a_ms": a.get(key, 0.0), "b_ms": b.get(key, 0.0),
             "delta_ms": b.get(key, 0.0) - a.get(key, 0.0)} for key, label in names
            if a.get(key, 0.0) or b.get(key, 0.0)]


def _key(f: Finding) -> tuple:
    """What identifies a finding across two versions of a script: its rule and the code it points at (an
    edit above it moves its line, not its code), or its line when the code is unknown."""
    loc = f.location
    if loc is None:
        return (f.rule,)
    name = os.path.basename(loc.path)
    return (f.rule, name, " ".join(loc.code.split())) if loc.code.strip() else (f.rule, name, loc.line)


def match_findings(a: list[Finding], b: list[Finding]) -> list[FindingChange]:
    """B's findings against A's: new, changed in cost, the same, and A's that are gone; new and gone first."""
    left: dict[tuple, list[Finding]] = defaultdict(list)
    for f in a:
        left[_key(f)].append(f)
    out = []
    for f in b:
        before = left[_key(f)].pop(0) if left.get(_key(f)) else None
        ms_a = before.cost.ms_per_step if before else None
        ms_b = f.cost.ms_per_step
        if before is None:
            status = "new"
        elif _changed(ms_a, ms_b):
            status = "changed"
        else:
            status = "same"
        out.append(_change(f, status, ms_a, ms_b))
    out += [_change(f, "gone", f.cost.ms_per_step, None) for rest in left.values() for f in rest]
    order = {"new": 0, "gone": 1, "changed": 2, "same": 3}
    return sorted(out, key=lambda c: (order[c.status], -abs((c.ms_b or 0.0) - (c.ms_a or 0.0))))


def _changed(ms_a: float | None, ms_b: float | None) -> bool:
    if ms_a is None or ms_b is None:
        return (ms_a is None) != (ms_b is None)
    return abs(ms_b - ms_a) >= max(CHANGED_MS, CHANGED_SHARE * abs(ms_a))


def _change(f: Finding, status: str, ms_a, ms_b) -> FindingChange:
    loc = f.location
    return FindingChange(f.rule, f.title, f.severity, status, f"{loc.path}:{loc.line}" if loc else None,
                         loc.code.strip() if loc else "", ms_a, ms_b, f.message)


def _ops(a: Report, b: Report) -> tuple[str | None, list[dict]]:
    """The op (CPU) or kernel (GPU) names whose time per step changed most, when both sides timed the same kind."""
    times_a = [t.op_times for t in a.traces if t.op_times]
    times_b = [t.op_times for t in b.traces if t.op_times]
    if not times_a or not times_b or times_a[0]["kind"] != times_b[0]["kind"]:
        return None, []

    def mean(rows: list[dict]) -> dict:
        out: dict[str, float] = defaultdict(float)
        for r in rows:
            for name, ms in r["ms_per_step"].items():
                out[name] += ms / len(rows)
        return out
    ma, mb = mean(times_a), mean(times_b)
    rows = [{"name": n, "a_ms": ma.get(n, 0.0), "b_ms": mb.get(n, 0.0), "delta_ms": mb.get(n, 0.0) - ma.get(n, 0.0)}
            for n in set(ma) | set(mb)]
    step = max(_mean_over(a, "breakdown").get("total", 0.0), 0.0)
    rows = [r for r in rows if abs(r["delta_ms"]) >= max(OPS_MIN_MS, OPS_MIN_SHARE * step)]
    return times_a[0]["kind"], sorted(rows, key=lambda r: -abs(r["delta_ms"]))[:TOP_OPS]


def _environment(a: TraceSummary, b: TraceSummary) -> list[dict]:
    """What differs between the two sides' devices and environments (versions, flags, CPUs)."""
    env_a, env_b = {"device": a.device, **(a.environment or {})}, {"device": b.device, **(b.environment or {})}
    keys = [k for k in dict.fromkeys([*env_a, *env_b]) if k not in NOISY_ENVIRONMENT]
    return [{"key": k, "a": env_a.get(k), "b": env_b.get(k)} for k in keys if env_a.get(k) != env_b.get(k)]
