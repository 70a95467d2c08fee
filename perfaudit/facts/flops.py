"""Model FLOPs per step and the device's peak (tip T31): counted from the recorded input shapes of the
matrix, convolution and attention ops (forward and backward), with torch's own conventions: a multiply-add is two
FLOPs, a bias add and causal masking are not counted, attention's backward recomputes its scores."""
from __future__ import annotations

import os
from collections import Counter
from functools import cache
from math import prod

import yaml

from ..trace.op_names import ATTENTION_BACKWARD_OPS, ATTENTION_OPS, CONV_OPS, FLOP_OPS, MM_OPS
from .flop_split import module_split
from .registry import Context, Missing, fact

_FUSED = CONV_OPS | ATTENTION_OPS | ATTENTION_BACKWARD_OPS  # a matmul inside one of these is part of it


def _attention(q, k, v) -> float:
    """QK^T and PV of scaled dot-product attention; key/value may have fewer heads (GQA)."""
    b, h, lq, e = q
    s, ev = k[-2], v[-1]
    return 2.0 * b * h * lq * s * e + 2.0 * b * h * lq * s * ev


def _conv_out(x: list, w: list, concrete: list | None) -> list:
    """The output's spatial size, from stride, padding and dilation when the trace kept them (else the
    input's: stride 1 and same padding)."""
    spatial = list(x[2:])
    try:
        stride, padding, dilation = (_ints(concrete[i], len(spatial)) for i in (3, 4, 5))
    except (TypeError, ValueError, IndexError):
        return spatial
    return [(n + 2 * p - d * (kernel - 1) - 1) // s + 1
            for n, kernel, s, p, d in zip(spatial, w[2:], stride, padding, dilation)]


def _ints(text, n: int) -> list[int]:
    values = [int(v) for v in str(text).strip("[]() ").split(",") if v.strip()]
    if len(values) == 1:
        values *= n
    if len(values) != n:
        raise ValueError(text)
    return values


def op_flops(op) -> float:
    """FLOPs of one recorded op from its input shapes; 0 when they are missing or not understood."""
    dims = op.args.get("Input Dims") or []
    name = op.name
    try:
        if name == "aten::mm":
            (m, k), (_, n) = dims[0], dims[1]
            return 2.0 * m * k * n
        if name == "aten::addmm":
            (m, k), (_, n) = dims[1], dims[2]
            return 2.0 * m * k * n
        if name == "aten::bmm":
            (b, m, k), (_, _, n) = dims[0], dims[1]
            return 2.0 * b * m * k * n
        if name == "aten::baddbmm":
            (b, m, k), (_, _, n) = dims[1], dims[2]
            return 2.0 * b * m * k * n
        if name == "aten::convolution":
            x, w = dims[0], dims[1]
            concrete = op.args.get("Concrete Inputs")
            transposed = isinstance(concrete, list) and len(concrete) > 6 and str(concrete[6]) in ("True", "1")
            spatial = x[2:] if transposed else _conv_out(x, w, concrete)
            return 2.0 * x[0] * prod(w) * prod(spatial)
        if name == "aten::convolution_backward":  # grad_output holds the output's size: input and weight grads
            grad, x, w = dims[0], dims[1], dims[2]
            concrete = op.args.get("Concrete Inputs")
            mask = str(concrete[10]) if isinstance(concrete, list) and len(concrete) > 10 else ""
            wanted = sum(1 for flag in mask.strip("[]() ").split(",")[:2] if flag.strip() == "True") if mask else 2
            return wanted * 2.0 * x[0] * prod(w) * prod(grad[2:])
        if name in ATTENTION_OPS:
            return _attention(dims[0], dims[1], dims[2])
        if name in ATTENTION_BACKWARD_OPS:  # scores recomputed, then four products: 2.5x the forward
            return 2.5 * _attention(dims[1], dims[2], dims[3])
    except (TypeError, ValueError, IndexError):
        return 0.0
    return 0.0


def counted_ops(ctx: Context) -> list:
    """The FLOP-carrying ops of the measured steps, a matmul inside a convolution or attention op (the
    CPU's slow paths) left to the op that contains it (computed once)."""
    if "_counted_ops" not in ctx.__dict__:
        ctx.__dict__["_counted_ops"] = _counted_ops(ctx)
    return ctx.__dict__["_counted_ops"]


def _counted_ops(ctx: Context) -> list:
    from ..trace.nesting import enclosing
    ops = [e for e in ctx.trace.named(FLOP_OPS.__contains__, kind="op") if ctx.step_of(e.ts) is not None]
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
    by_op: Counter = Counter()
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
                    for name, f in by_op.most_common(5)] if from_shapes else []}


def _counted_live(ctx: Context) -> dict | None:
    """The live count of `perfaudit run` (collect/flop_probe.py) when it counted a step with a backward."""
    try:
        record = ctx.probe("flops")
    except Missing:
        return None
    if isinstance(record, dict) and record.get("flops") and record.get("backward"):
        return record
    return None


# -- the device's peak --------------------------------------------------------------------------------------------
@cache
def peak_table() -> list[dict]:
    """The peak dense TFLOP/s per device and precision (peaks.yaml, one source per entry)."""
    with open(os.path.join(os.path.dirname(__file__), "peaks.yaml"), encoding="utf-8") as f:
        text = f.read()
    return yaml.safe_load(text)["devices"]


def _tokens(text: str) -> list[str]:
    return "".join(c if c.isalnum() else " " for c in text.upper()).split()


def device_peak(name: str | None) -> dict | None:
    """The peak-table entry whose name tokens appear, in order, in the device's name ("NVIDIA A100-SXM4-80GB"
    is an A100, "NVIDIA A10G" is not an A10); None for a device the table does not know."""
    if not name:
        return None
    have = _tokens(name)
    for entry in peak_table():
        for pattern in entry["match"]:
            want = _tokens(pattern)
            if any(have[i:i + len(want)] == want for i in range(len(have) - len(want) + 1)):
                return entry
    return None


def device_name(ctx: Context) -> str | None:
    name = ctx.trace.device_properties.get("name")
    return name if isinstance(name, str) and name else (ctx.probes.get("environment") or {}).get("device_name")
