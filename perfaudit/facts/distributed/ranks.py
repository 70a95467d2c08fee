"""Several ranks of one distributed job: per-rank step, compute and collective time, and who waits
for whom (tip T16). Each rank's figures are computed where its trace is analysed (`rank_stats`, in
a worker process with --jobs); a job context holds only those small dicts, never the traces."""
from __future__ import annotations

from statistics import mean

from ..gpu import intervals as iv
from ..gpu.kernels import is_collective
from ..registry import Context, Missing, fact


def _collective_names(events) -> dict[str, bool]:
    """Whether each distinct event name is a collective (one regex test per name, not per event)."""
    return {name: is_collective(name) for name in {e.name for e in events}}


def _per_step(rank_ctx: Context, events) -> list[list]:
    """The events (sorted by start) overlapping each measured step."""
    return [rank_ctx.overlapping(events, step.ts, step.end) for step in rank_ctx.steps]


def _rank_stats(rank_ctx: Context) -> dict:
    trace = rank_ctx.need_trace()
    kernels = [e for e in trace.device if e.kind == "kernel"]
    is_collective = _collective_names(kernels)
    compute = collective = 0.0
    for step, inside in zip(rank_ctx.steps, _per_step(rank_ctx, kernels)):
        compute += iv.total(iv.union(iv.clip([(e.ts, e.end) for e in inside if not is_collective[e.name]],
                                             step.ts, step.end)))
        collective += iv.total(iv.union(iv.clip([(e.ts, e.end) for e in inside if is_collective[e.name]],
                                                step.ts, step.end)))
    n = len(rank_ctx.steps)
    return {"rank": trace.rank, "path": trace.path, "step_ms": rank_ctx.step_ms,
            "compute_ms": compute / n / 1000.0, "collective_ms": collective / n / 1000.0,
            "cpu_wait_ms": _cpu_wait_ms(rank_ctx)}


def _host_rank_stats(rank_ctx: Context) -> dict:
    """A CPU job (gloo): collectives run on the host, in gloo's threads (`gloo:all_reduce`); a rank
    waiting for a slower one spends that wait inside them. Compute is the rest of the step."""
    trace = rank_ctx.need_trace()
    calls = trace.named(is_collective)
    collective = step_total = 0.0
    for step, inside in zip(rank_ctx.steps, _per_step(rank_ctx, calls)):
        collective += iv.total(iv.union(iv.clip([(e.ts, e.end) for e in inside], step.ts, step.end)))
        step_total += step.dur
    n = len(rank_ctx.steps)
    return {"rank": trace.rank, "path": trace.path, "step_ms": rank_ctx.step_ms,
            "compute_ms": (step_total - collective) / n / 1000.0, "collective_ms": collective / n / 1000.0,
            "device": "cpu", "cpu_wait_ms": _cpu_wait_ms(rank_ctx)}


def _cpu_wait_ms(rank_ctx: Context) -> float:
    """The rank's mean wait per step for a CPU held by other processes (what its recording measured; 0 for
    a trace recorded elsewhere): a rank delayed by the machine is late at every collective too."""
    steps = rank_ctx.steps
    return sum(s.dur - rank_ctx.undisturbed_us(s) for s in steps) / len(steps) / 1000.0


def rank_stats(rank_ctx: Context) -> dict | None:
    """One rank's figures for the job facts, or None for a trace without a rank or steps."""
    trace = rank_ctx.need_trace()
    if trace is None or trace.rank is None:
        return None
    try:
        return _rank_stats(rank_ctx) if trace.has_gpu else _host_rank_stats(rank_ctx)
    except (Missing, ZeroDivisionError):
        return None


@fact("job.ranks", "Per rank (traces of one job): mean step, compute and collective time (ms): GPU kernels "
                   "on a GPU job, host time in gloo collectives on a CPU job.")
def job_ranks(ctx: Context) -> list[dict]:
    ranks = [r for r in (ctx.job or []) if r]
    if len({r["rank"] for r in ranks}) < 2:
        raise Missing("needs the traces of at least two ranks of one job (perfaudit analyze DIR)")
    return sorted(ranks, key=lambda r: r["rank"])


@fact("job.imbalance", "The straggler: the rank that spends least time in collectives (the others wait "
                       "for it there), the wait it causes per step (mean and worst, ms and share of the "
                       "step), and whether its own GPU compute is heavier than the others'.")
def job_imbalance(ctx: Context) -> dict:
    ranks = ctx.get("job.ranks")
    if not any(r["collective_ms"] for r in ranks):
        raise Missing("no collectives in the traces")
    slowest = min(ranks, key=lambda r: r["collective_ms"])
    others = [r for r in ranks if r is not slowest]
    waits = {r["rank"]: r["collective_ms"] - slowest["collective_ms"] for r in others}
    worst_rank = max(waits, key=lambda r: waits[r])
    mean_compute = mean(r["compute_ms"] for r in others)
    mean_step = mean(r["step_ms"] for r in ranks)
    mean_wait = mean(waits.values())
    excess_cpu_wait = slowest.get("cpu_wait_ms", 0.0) - mean(r.get("cpu_wait_ms", 0.0) for r in others)
    busiest = max(ranks, key=lambda r: r.get("cpu_wait_ms", 0.0))
    busy_machine = _late_for_the_machine(slowest, others, mean_wait, excess_cpu_wait, busiest.get("cpu_wait_ms", 0.0))
    return {
        "slowest_rank": slowest["rank"], "ranks": len(ranks),
        "mean_wait_ms": mean(waits.values()), "max_wait_ms": waits[worst_rank], "max_wait_rank": worst_rank,
        "wait_pct": 100.0 * mean(waits.values()) / mean_step if mean_step else 0.0,
        "slowest_compute_ms": slowest["compute_ms"], "others_compute_ms": mean_compute,
        "compute_heavier": slowest["compute_ms"] > 1.1 * mean_compute,
        "step_min_ms": min(r["step_ms"] for r in ranks), "step_max_ms": max(r["step_ms"] for r in ranks),
        "max_cpu_wait_ms": busiest.get("cpu_wait_ms", 0.0), "max_cpu_wait_rank": busiest["rank"],
        "excess_cpu_wait_ms": excess_cpu_wait, "busy_machine": busy_machine,
    }


def _late_for_the_machine(slowest: dict, others: list[dict], mean_wait: float, excess_cpu_wait: float,
                          max_cpu_wait: float) -> bool:
    """Whether other processes holding the CPUs, not the job's balance, may have made the straggler late (a
    loaded 2-core machine made a balanced job's rank late in 4 of 7 runs). Either a rank waited for a CPU,
    per step, at least half as long as the imbalance (which rank arrives last then changes from step to
    step with the machine), or the straggler waited noticeably more than the others and its own work is
    not heavier by half the wait it causes: on a CPU job its compute less that wait (a descheduled rank's
    compute includes it); on a GPU job its kernels."""
    if mean_wait <= 0:
        return False
    if max_cpu_wait >= 0.5 * mean_wait:
        return True
    if excess_cpu_wait < 0.25 * mean_wait:
        return False
    if all(r.get("device") == "cpu" for r in (slowest, *others)):
        def own(r: dict) -> float:
            return r["compute_ms"] - r.get("cpu_wait_ms", 0.0)
        return own(slowest) - mean(own(r) for r in others) < 0.5 * mean_wait
    return excess_cpu_wait >= 0.5 * mean_wait and slowest["compute_ms"] <= 1.1 * mean(r["compute_ms"] for r in others)
