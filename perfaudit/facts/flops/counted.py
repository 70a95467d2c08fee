"""Model FLOPs per step and the device's peak (tip T31): counted from the recorded input shapes of the
matrix, convolution and attention ops (forward and backward), with torch's own conventions: a multiply-add is two
FLOPs, a bias add and causal masking are not counted, attention's backward recomputes its scores."""
from __future__ import annotations

from collections import defaultdict

from ...projection import devices
from ...projection.work import op_flops
from ...trace.op_names import ATTENTION_BACKWARD_OPS, ATTENTION_OPS, CONV_OPS, FLOP_OPS, MM_OPS, RNN_OPS
from ..registry import Context, Missing, fact
from .split import module_split

# a matmul inside one of these is part of it (a CPU's GRU: its loop of matmuls)
_FUSED = CONV_OPS | ATTENTION_OPS | ATTENTION_BACKWARD_OPS | frozenset(RNN_OPS)


def counted_ops(ctx: Context) -> list:
    """The FLOP-carrying ops of the measured steps, a matmul inside a convolution or attention op (the
    CPU's slow paths) left to the op that contains it (computed once)."""
    if "_counted_ops" not in ctx.__dict__:
        ctx.__dict__["_counted_ops"] = _counted_ops(ctx)
    return ctx.__dict__["_counted_ops"]


def _counted_ops(ctx: Context) -> list:
    from ...trace.nesting import enclosing
    ops = [e for e in ctx.need_trace().named(FLOP_OPS.__contains__, kind="op") if ctx.step_of(e.ts) is not None]
    if not ops:
        return []
    if not any("Input Dims" in e.args for e in ops):
        raise Missing("the trace has no input shapes (record with record_shapes=True): FLOPs cannot be counted")
    fused = [e for e in ops if e.name in _FUSED]
    inside = {id(q) for q, stack in enclosing(fused, [e for e in ops if e.name in MM_OPS]) if stack} if fused else set()
    return [e for e in ops if id(e) not in inside]


@fact("flops.per_step", "Model FLOPs of one training step (forward and backward), from the recorded shapes of "
                        "the matrix, convolution and attention ops; the top ops by FLOPs and the top modules "
                        "by forward FLOPs and time (with Python stacks).",
      needs=("shapes",))
def flops_per_step(ctx: Context) -> dict:
    ctx.need_trace()
    ops = counted_ops(ctx)
    by_op: defaultdict[str, float] = defaultdict(float)
    for op in ops:
        by_op[op.name] += op_flops(op)
    from_shapes = sum(by_op.values()) / len(ctx.steps)
    live = _counted_live(ctx)
    total = live["flops"] if live else from_shapes
    if not total:
        raise Missing("no matrix ops with recorded shapes in the measured steps")
    source = "from the recorded op shapes"
    if live:
        source = ("counted live (FlopCounterMode, one step of the eager model"
                  + (" the compiled one wraps" if live.get("compiled") else "") + ")")
    return {"per_step": total, "source": source, "from_shapes": from_shapes,
            "live_modules": (live or {}).get("modules") or [], "modules": module_split(ctx, ops, op_flops),
            "ops": [{"name": name, "flops": f / len(ctx.steps), "share_pct": 100.0 * f / from_shapes / len(ctx.steps)}
                    for name, f in sorted(by_op.items(), key=lambda kv: -kv[1])[:5]] if from_shapes else []}


def _counted_live(ctx: Context) -> dict | None:
    """The live count of `perfaudit run` (collect/probes/flops.py) when it counted a step with a backward."""
    try:
        record = ctx.probe("flops")
    except Missing:
        return None
    if isinstance(record, dict) and record.get("flops") and record.get("backward"):
        return record
    return None


# -- the device's peak --------------------------------------------------------------------------------------------
def peak_table() -> list[dict]:
    """The peak dense TFLOP/s per device and precision (projection/devices.yaml, one source per entry)."""
    return devices.table()


def device_peak(name: str | None) -> dict | None:
    """The table's entry for a device's reported name; None for a device the table does not know."""
    return devices.entry_for(name)


def device_name(ctx: Context) -> str | None:
    name = ctx.need_trace().device_properties.get("name")
    return name if isinstance(name, str) and name else (ctx.probes.get("environment") or {}).get("device_name")
