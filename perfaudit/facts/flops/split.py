"""Where the model's FLOPs and time go: per module (the `nn.Module: X` ranges a trace with Python stacks
holds) and per op shape, with the rate each achieved (tip T31)."""
from __future__ import annotations

import re
from collections import defaultdict

from ...trace.model import Event
from ...trace.nesting import enclosing
from ..gpu.launches import device_by_correlation, device_events_by_op, runtime_calls
from ..registry import Context

_MODULE = re.compile(r"^nn\.Module: (?P<cls>\w+?)(?:_\d+)?$")
CONTAINERS = {"Sequential", "ModuleList", "ModuleDict"}  # their children are the model's parts
TOP_MODULES = 6
WORST_OPS = 5


def _class(instance: str) -> str:
    match = _MODULE.match("nn.Module: " + instance)
    return match["cls"] if match else instance


def _forward_time_us(ctx: Context, modules: list[Event], instances: set[str]) -> dict[str, float]:
    """instance -> the time of its forward calls in the measured steps: their host wall time on a CPU, the
    kernels launched inside them on a GPU."""
    calls = [e for e in modules if e.name[len("nn.Module: "):] in instances and ctx.step_of(e.ts) is not None]
    out: dict[str, float] = defaultdict(float)
    if not ctx.is_gpu:
        for outer, stack in enclosing(calls, calls):
            if not stack:  # not a call nested in another counted call (a module calling itself)
                out[outer.name[len("nn.Module: "):]] += outer.dur
        return out
    by_corr = device_by_correlation(ctx)
    for rt, stack in enclosing(calls, runtime_calls(ctx)):
        if stack:
            kernels = by_corr.get(rt.args.get("correlation"), ())
            out[stack[0].name[len("nn.Module: "):]] += sum(k.dur for k in kernels if k.kind == "kernel")
    return out


def _op_time_us(ctx: Context, ops: list[Event]) -> dict[int, float]:
    """id(op) -> its compute time: the kernels it launched on a GPU, its own host duration on a CPU."""
    if not ctx.is_gpu:
        return {id(op): op.dur for op in ops}
    launched = device_events_by_op(ctx, ops)
    return {id(op): sum(k.dur for k in launched.get(id(op), ()) if k.kind == "kernel") for op in ops}


def module_split(ctx: Context, ops: list[Event], flops_of) -> list[dict]:
    """The forward FLOPs and time of the top modules: the shallowest level of the module tree at which
    the forward work splits between modules (a whole-model wrapper is looked through), modules of one class
    summed (a GPT's blocks as one row). Backward ops run outside module ranges, on autograd's thread: they
    are not split (a module's backward costs about twice its forward)."""
    modules = [e for e in ctx.need_trace().python if e.name.startswith("nn.Module: ")]
    if not modules or not ops:
        return []
    paths = []  # per forward op: its modules outermost first, as instance names; containers looked through
    for op, stack in enclosing(modules, ops):
        path = [e.name[len("nn.Module: "):] for e in stack if e.end >= op.end]
        kept = [name for name in path[:-1] if _class(name) not in CONTAINERS] + path[-1:]
        if kept:
            paths.append((op, kept))
    if not paths:
        return []
    depth = 0
    while True:  # descend while one module holds all forward work
        names = {p[depth] for _, p in paths if len(p) > depth}
        if len(names) != 1 or not any(len(p) > depth + 1 for _, p in paths):
            break
        depth += 1
    rows: dict[str, dict] = defaultdict(lambda: {"flops": 0.0, "us": 0.0, "instances": set()})
    for op, path in paths:
        instance = path[depth] if len(path) > depth else path[-1]
        row = rows[_class(instance)]
        row["flops"] += flops_of(op)
        row["instances"].add(instance)
    for instance, us in _forward_time_us(ctx, modules, {i for r in rows.values() for i in r["instances"]}).items():
        rows[_class(instance)]["us"] += us
    steps = len(ctx.steps)
    total_flops = sum(r["flops"] for r in rows.values()) or 1.0
    total_us = sum(r["us"] for r in rows.values()) or 1.0
    ranked = sorted(rows.items(), key=lambda kv: (-kv[1]["flops"], -kv[1]["us"]))[:TOP_MODULES]
    return [{"name": name, "instances": len(r["instances"]), "forward_flops": r["flops"] / steps,
             "flops_share_pct": 100.0 * r["flops"] / total_flops, "forward_ms": r["us"] / steps / 1000.0,
             "time_share_pct": 100.0 * r["us"] / total_us} for name, r in ranked]


def _shape_key(op: Event) -> str:
    dims = op.args.get("Input Dims") or []
    return ", ".join("x".join(str(d) for d in dim) if isinstance(dim, list) else str(dim) for dim in dims if dim)


def worst_ops(ctx: Context, ops: list[Event], flops_of, peak_tflops: float | None) -> list[dict]:
    """The op shapes whose compute time exceeds their FLOPs' time at peak by the most (the largest part of the
    kernel-efficiency bar), each with its achieved TFLOP/s; without a peak (a CPU, an unknown GPU), the op
    shapes with the most compute time, slowest rate first among equals."""
    times = _op_time_us(ctx, ops)
    groups: dict[tuple, dict] = defaultdict(lambda: {"flops": 0.0, "us": 0.0, "calls": 0})
    for op in ops:
        g = groups[(op.name, _shape_key(op))]
        g["flops"] += flops_of(op)
        g["us"] += times.get(id(op), 0.0)
        g["calls"] += 1
    steps = len(ctx.steps)
    out = []
    for (name, shapes), g in groups.items():
        if g["us"] <= 0 or g["flops"] <= 0:
            continue
        tflops = g["flops"] / (g["us"] / 1e6) / 1e12
        ideal_us = g["flops"] / (peak_tflops * 1e12) * 1e6 if peak_tflops else 0.0
        out.append({"name": name, "shapes": shapes, "calls_per_step": g["calls"] / steps,
                    "ms_per_step": g["us"] / steps / 1000.0, "achieved_tflops": tflops,
                    "share_of_peak": tflops / peak_tflops if peak_tflops else None,
                    "lost_ms_per_step": (g["us"] - ideal_us) / steps / 1000.0 if peak_tflops else None})
    key = (lambda o: -o["lost_ms_per_step"]) if peak_tflops else (lambda o: (-o["ms_per_step"], o["achieved_tflops"]))
    return sorted(out, key=key)[:WORST_OPS]
