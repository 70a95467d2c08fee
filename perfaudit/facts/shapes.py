"""Input shapes across steps: fixed convolution shapes (cudnn.benchmark, T08) and varying batch shapes (T13)."""
from __future__ import annotations

from bisect import bisect_right
from collections import Counter

from ..probe_schema import CUDNN_SEARCH_MARK
from ..projection.work import op_flops
from .flops.counted import counted_ops
from .registry import Context, Missing, fact

CONV_OPS = {"aten::convolution", "aten::cudnn_convolution", "aten::_convolution", "aten::mkldnn_convolution"}
SHAPED_OPS = CONV_OPS | {"aten::linear", "aten::addmm", "aten::mm", "aten::bmm", "aten::matmul", "aten::embedding"}
MIN_STEPS = 3  # steps whose shapes are compared: with two, one odd step is half of them


def _signature(ctx: Context, names: set[str], steps: list | None = None) -> list[tuple]:
    """Per step, the tuple of first-input shapes of the named ops, in order: over every recorded step but
    warm-up and steps unlike the others (an evaluation pass), a step delayed by a busy CPU included
    (its shapes are the script's, however long it took); or over `steps`."""
    ops = ctx.need_trace().named(names.__contains__, kind="op")
    if ops and not any("Input Dims" in e.args for e in ops):
        raise Missing("the trace has no input shapes (record with record_shapes=True)")
    steps = steps if steps is not None else ctx.load_independent_steps
    starts = [s.ts for s in steps]
    per_step: list[list] = [[] for _ in steps]
    outer: list = [None] * len(steps)  # each step's last op kept
    for op in ops:
        i = bisect_right(starts, op.ts) - 1
        dims = op.args.get("Input Dims")
        if i >= 0 and op.ts <= steps[i].end and isinstance(dims, list) and dims:
            last = outer[i]
            if (last is not None and last.name == op.name and last.tid == op.tid and op.end <= last.end
                    and last.args.get("Input Dims") == dims):
                continue  # the same op dispatched again inside itself (a warm-up probe's mode)
            outer[i] = op
            per_step[i].append((op.name, str(dims[0])))
    return [tuple(s) for s in per_step]


@fact("shapes.conv", "Convolution input shapes across the recorded steps (one a busy CPU delayed too): "
                     "conv count per step, whether the shapes were the same in every step, the "
                     "convolutions' share of the step's matrix FLOPs (flops_share_pct, from the shapes), and "
                     "on the emulated CUDA device the cuDNN benchmark searches a GPU would make in them "
                     "(searches; None where the run marked none at all), on a GPU trace the calls that "
                     "searched (searched_calls) and their time beyond the op's usual (searched_ms, per step).",
      needs=("shapes",))
def conv_shapes(ctx: Context) -> dict:
    ctx.need_trace()
    signatures = _signature(ctx, CONV_OPS)
    convs = sum(len(s) for s in signatures) / len(signatures)
    if not convs:
        raise Missing("no convolutions in the measured steps")
    distinct = len(set(signatures))
    return {"per_step": convs, "distinct_signatures": distinct, "fixed": distinct == 1,
            "steps": len(signatures), "flops_share_pct": _conv_flops_share(ctx), "searches": _searches(ctx),
            **_searched_on_gpu(ctx)}


SEARCHED_OPS = {"aten::cudnn_convolution", "aten::convolution_backward", "aten::cudnn_convolution_transpose",
                "aten::miopen_convolution"}
SEARCH_RATIO, SEARCH_US = 10.0, 1000.0  # a call this many times its op's median and this much longer: a search


def _searched_on_gpu(ctx: Context) -> dict:
    """On a GPU trace, the convolution calls of the measured steps that took SEARCH_RATIO times their op's median
    and SEARCH_US more (cuDNN's benchmark searching a new shape: 34-39 ms against 0.1 on an H100) and their time
    beyond that median, per step (ms); {} for a CPU trace."""
    trace = ctx.need_trace()
    steps = ctx.load_independent_steps
    if not trace.has_gpu or not steps:
        return {}
    by_name: dict[str, list[float]] = {}
    for op in _in_steps(trace.named(SEARCHED_OPS.__contains__, kind="op"), steps):
        by_name.setdefault(op.name, []).append(op.dur)
    calls, extra = 0, 0.0
    for durations in by_name.values():
        usual = sorted(durations)[len(durations) // 2]
        over = [d - usual for d in durations if d > SEARCH_RATIO * usual and d - usual > SEARCH_US]
        calls, extra = calls + len(over), extra + sum(over)
    return {"searched_calls": calls, "searched_ms": extra / len(steps) / 1e3}


def search_marks(ctx: Context) -> tuple[list[str], int] | None:
    """The cuDNN benchmark searches the emulated device marked (collect/emulation/precision/cudnn_search.py: a
    convolution's first call with its shapes under cudnn.benchmark) in the recorded steps but warm-up, a step a
    busy CPU delayed included (a search is the step's shapes, not the machine's load), and how many steps those
    are; None when it marked none in the whole run (benchmark off, or no emulated device)."""
    marks = ctx.need_trace().named(lambda name: name.startswith(CUDNN_SEARCH_MARK), kind="annotation")
    if not marks:
        return None
    steps = ctx.load_independent_steps
    return [m.name for m in _in_steps(marks, steps)], len(steps)


def _searches(ctx: Context) -> int | None:
    marks = search_marks(ctx)
    return len(marks[0]) if marks is not None else None


def _in_steps(events: list, steps: list) -> list:
    """The events (sorted by start) that start inside one of the steps."""
    starts = [s.ts for s in steps]
    return [e for e in events if (i := bisect_right(starts, e.ts) - 1) >= 0 and e.ts <= steps[i].end]


def _conv_flops_share(ctx: Context) -> float | None:
    """The convolutions' share of the FLOPs the measured steps' matrix, convolution and attention ops carry (%):
    a patch embedding in a transformer is about 1 %, a ResNet's convolutions all of it."""
    flops = [(op.name in CONV_OPS, op_flops(op)) for op in counted_ops(ctx)]
    total = sum(f for _, f in flops)
    return 100.0 * sum(f for conv, f in flops if conv) / total if total else None


@fact("shapes.varying", "How often the input shapes of matmul/conv/embedding ops changed between steps: "
                        "share of steps whose shapes differ from the most common step (%).", needs=("shapes",))
def varying_shapes(ctx: Context) -> dict:
    trace = ctx.need_trace()
    steps = ctx.load_independent_steps
    if len(steps) < MIN_STEPS:
        # the trace budget left fewer measured steps (an emulated step, its allocations recorded, writes more):
        # the warm-up steps ran the script's own ops, at the script's shapes
        steps = sorted([s for s in trace.steps if s.warmup] + steps, key=lambda s: s.ts)
    signatures = _signature(ctx, SHAPED_OPS, steps)
    if len(signatures) < MIN_STEPS or not any(signatures):
        raise Missing("fewer than three recorded steps with shaped ops")
    common, count = Counter(signatures).most_common(1)[0]
    differing = [s for s in signatures if s != common]
    example = ""
    if differing:  # the first op that ran at other shapes (where one step ran other ops, the first that differs)
        pairs = [(a, b) for a, b in zip(common, differing[0]) if a != b]
        pair = next((p for p in pairs if p[0][0] == p[1][0]), pairs[0] if pairs else None)
        if pair is not None:
            (name, was), (other, now) = pair
            example = f"{name} input {was} vs {now}" if name == other else f"{name} {was} vs {other} {now}"
    return {"share_pct": 100.0 * len(differing) / len(signatures), "distinct": len(set(signatures)),
            "example": example}
