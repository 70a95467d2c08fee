"""Communication left exposed (tip T28): collective kernels (NCCL/RCCL) that run while no compute
kernel does, so the step waits for them instead of overlapping them with backward."""
from __future__ import annotations

from ..gpu import intervals as iv
from ..gpu.busy import _require_gpu
from ..gpu.device_steps import per_step, traits
from ..registry import Context, Missing, fact


@fact("comm.exposed", "Per step on the busiest GPU: collective kernel time, the part of it with no "
                      "compute kernel running alongside (exposed), its share of the step and the share "
                      "of collective time overlapped by compute (ms, %).")
def comm_exposed(ctx: Context) -> dict:
    _require_gpu(ctx)
    collective = {name for name, t in traits(ctx).items() if t.collective}
    if not collective:
        raise Missing("no collective kernels in the measured steps")
    collective_total = exposed_total = step_total = 0.0
    for step, inside in zip(ctx.steps, per_step(ctx)):
        comm = iv.union(iv.clip([(e.ts, e.ts + e.dur) for e in inside if e.name in collective and e.kind == "kernel"],
                                step.ts, step.end))
        if not comm:
            continue
        compute = iv.union(iv.clip([(e.ts, e.ts + e.dur) for e in inside
                                    if e.kind == "kernel" and e.name not in collective], step.ts, step.end))
        collective_total += iv.total(comm)
        exposed_total += iv.total(comm) - iv.overlap(comm, compute)
        step_total += step.dur
    if not collective_total:
        raise Missing("no collective kernels in the measured steps")
    n = len(ctx.steps)
    return {"collective_ms": collective_total / n / 1000.0, "exposed_ms": exposed_total / n / 1000.0,
            "share_pct": 100.0 * exposed_total / step_total if step_total else 0.0,
            "overlap_pct": 100.0 * (1 - exposed_total / collective_total)}
