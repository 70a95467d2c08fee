"""What the script did before its first training step (tip T29), from CPU-time samples the probes take
without the profiler from the script's start to the end of its first step."""
from __future__ import annotations

from statistics import median

from .registry import Context, Missing, fact, quartile
from .sites import Site, site_from_probe

# a line must hold at least this share of the start-up samples to be named
MIN_LINE_SHARE = 0.2


@fact("start.summary", "Seconds from the script's start to its first training activity (a batch, backward() or "
                       "an optimizer step: the first step's own work is not start-up), the CPU seconds sampled "
                       "in that time, those inside model forward passes and imports, those at the busiest lines "
                       "of the user's code (each at least 20 % of the samples), and those against one training "
                       "step (steps_equivalent: its CPU time as recorded, or its time without the profiler where "
                       "that is less).")
def start_summary(ctx: Context) -> dict:
    startup = ctx.probe("startup")
    if not startup:
        raise Missing("no start-up samples (the script never reached a training step, or SIGPROF was unavailable)")
    total = max(startup.get("samples", 0), 1)
    per_sample = startup.get("cpu_seconds", 0.0) / total
    named = [line["samples"] for line in startup["lines"] if line["samples"] / total >= MIN_LINE_SHARE]
    named = sum(named) * per_sample
    step_cpu = _step_cpu_seconds(ctx)
    return {"seconds": startup["seconds"], "cpu_seconds": startup.get("cpu_seconds", 0.0),
            "samples": startup.get("samples", 0),
            "model_seconds": startup.get("model_samples", 0) * per_sample,
            "import_seconds": startup.get("import_samples", 0) * per_sample,
            # CPU seconds at the lines a finding names: what a change there can save
            "named_seconds": named,
            # the same against one training step's CPU time: how many steps the start-up costs
            "step_cpu_ms": step_cpu * 1000.0 if step_cpu else None,
            "steps_equivalent": named / step_cpu if step_cpu else None}


def _step_cpu_seconds(ctx: Context) -> float | None:
    """The CPU time of an undisturbed training step (the process's, all threads), as the window recorded
    it: the first quartile over the steps no other process delayed, or over every recorded step when each
    was (intra-op threads spinning while a neighbour holds their core only ever add to it: a step that
    waited 32 ms for a CPU was measured at 31 ms of CPU against 0.8 ms undisturbed, and the start-up
    read as 40 times fewer steps). None for a trace without it."""
    window = _window if isinstance(_window := ctx.meta.get("window"), dict) else {}
    cpu = window.get("step_cpu_s")
    if not isinstance(cpu, list) or ctx.trace is None:
        return None
    try:
        values = [float(cpu[s.number]) for s in ctx.need_trace().measured_steps if s.number < len(cpu)]
    except (TypeError, ValueError):
        return None
    values = [v for v in values if v > 0]
    recorded = quartile(values) if values else None
    unprofiled = _unprofiled_step_s(ctx)
    if recorded is None or unprofiled is None:
        return recorded if unprofiled is None else unprofiled
    return min(recorded, unprofiled)


def _unprofiled_step_s(ctx: Context) -> float | None:
    """The step as timed after the window without the profiler (the median of those no other process delayed,
    else of all), or None: the profiler's cost per op put a tiny model's step at 25 ms of CPU where the script
    takes 0.33 ms (slow_start_bad.py under load), and the start-up then read as 75 times fewer steps."""
    from ..collect.clock import disturbed
    try:
        rows = ctx.get("step.unprofiled")
    except Missing:
        return None
    walls = [r["wall_ms"] / 1000.0 for r in rows if not disturbed(r["waited_ms"] / 1000.0, r["wall_ms"] / 1000.0)]
    walls = walls or [r["wall_ms"] / 1000.0 for r in rows]
    return median(walls) if walls else None


@fact("start.sites", "The user lines that took the most CPU time before the first training step (each at "
                     "least 20 % of the samples), with their share.")
def start_sites(ctx: Context) -> list[Site]:
    startup = ctx.probe("startup")
    if not startup:
        raise Missing("no start-up samples (the script never reached a training step)")
    total = max(startup.get("samples", 0), 1)
    sites = []
    for line in startup["lines"]:
        share = line["samples"] / total
        if share < MIN_LINE_SHARE:
            continue
        site = site_from_probe(ctx, line, f"{100 * share:.0f}% of the start-up",
                               share=share)
        site.count, site.steps_seen = 1, set(range(len(ctx.steps)))
        sites.append(site)
    return sites[:3]
