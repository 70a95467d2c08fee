"""Time per op or kernel name in the measured steps: what `perfaudit diff` compares between two traces."""
from __future__ import annotations

from collections import defaultdict

from ..trace.nesting import innermost
from .registry import Context, fact

TOP_NAMES = 200  # names kept per trace, by time: enough to match both sides of a diff


@fact("ops.time_by_name", "ms per measured step by name: the GPU kernels' time on a GPU trace, the host ops' self "
                          "time (less the ops they called) on a CPU one; the top names by time.")
def time_by_name(ctx: Context) -> dict:
    ctx.need_trace()
    steps = ctx.steps
    total: dict[str, float] = defaultdict(float)
    if ctx.is_gpu:
        kind = "kernels"
        for step in steps:
            for ev in ctx.within(ctx.need_trace().device, step.ts, step.end):
                if ev.kind == "kernel":
                    total[ev.name] += ev.dur
    else:
        kind = "ops (self time)"
        ops = [e for step in steps for e in ctx.within(ctx.need_trace().host, step.ts, step.end) if e.kind == "op"]
        parent = innermost(ops, ops)
        for op in ops:
            total[op.name] += op.dur
            up = parent.get(id(op))
            if up is not None:
                total[up.name] -= op.dur
    ranked = sorted(total.items(), key=lambda kv: -kv[1])[:TOP_NAMES]
    return {"kind": kind, "ms_per_step": {name: max(us, 0.0) / len(steps) / 1000.0 for name, us in ranked}}
