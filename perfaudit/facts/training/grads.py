"""Gradients zero-filled instead of set to None (tip T02)."""
from __future__ import annotations

from collections import Counter

from ...trace.nesting import enclosing
from ..gpu.launches import device_events_by_op
from ..registry import Context, fact
from ..sites import SiteCollector
from ..steps import ZERO_GRAD

# `zero_grad(set_to_none=False)` with foreach=True zeroes each device's and dtype's gradients in one
# `_foreach_zero_` (one multi_tensor_apply launch on a GPU; a loop of zero_ inside it on a CPU)
FILL_OPS = {"aten::zero_", "aten::fill_", "aten::_foreach_zero_"}


def _zeroing_ops(ctx: Context):
    """Fill ops that zero gradients: inside Optimizer.zero_grad / Module.zero_grad, or a manual
    `p.grad.zero_()` in the user's code; the outermost of nested fills only (a CPU's zero_ may call fill_).
    Returns (op, anchor) pairs, found once per context (GRAD001's sites and its what-if both read them)."""
    if "_zeroing_ops" not in ctx.__dict__:
        ctx.__dict__["_zeroing_ops"] = _find_zeroing_ops(ctx)
    return ctx.__dict__["_zeroing_ops"]


def _find_zeroing_ops(ctx: Context):
    trace = ctx.need_trace()
    fills = trace.named(FILL_OPS.__contains__, kind="op")
    zero_grads = trace.named(lambda name: name.startswith(ZERO_GRAD))
    containers = sorted(zero_grads + fills, key=lambda e: (e.ts, -e.dur))
    pairs = []
    outermost, in_optimizer = [], set()
    for op, stack in enclosing(containers, fills):
        if any(o.kind == "op" and o.name in FILL_OPS and o.end >= op.end for o in stack):
            continue  # inside another fill: that one is the call
        outermost.append(op)
        outer = [c for c in stack if c.kind != "op" and c.end >= op.end]
        if outer:
            pairs.append((op, outer[-1]))
            in_optimizer.add(id(op))
    if ctx.frames:
        rest = [f for f in outermost if id(f) not in in_optimizer]
        attributions = ctx.frames.attribute_all(rest)
        for op in rest:
            att = attributions.get(id(op))
            if att is None:
                continue
            if att.via == "zero_grad":
                pairs.append((op, op))
            elif att.via in ("zero_", "fill_"):
                calls = ctx.source.calls(att.frame.path, att.frame.line, att.frame.func, {att.via}) or []
                if any(".grad" in c.code for c in calls):
                    pairs.append((op, op))
    return pairs


@fact("grad.zero_fill_sites", "Gradient zero-fill ops per step, grouped by the user line that "
                              "zeroed the gradients (zero_grad(set_to_none=False), p.grad.zero_()).", needs=("stacks",))
def zero_fill_sites(ctx: Context):
    ctx.need_trace()
    ctx.steps
    pairs = _zeroing_ops(ctx)
    kernel_ms = _fill_kernel_ms(ctx, [op for op, _ in pairs]) if ctx.is_gpu else {}
    items = [(anchor, op, kernel_ms.get(id(op), op.dur / 1000.0), "gradient zero-fill")
             for op, anchor in pairs]
    collector = SiteCollector(ctx, fallback_calls={"zero_grad", "zero_", "fill_"})
    collector.add_all(items)
    return collector.result()


def _fill_kernel_ms(ctx: Context, ops) -> dict[int, float]:
    """GPU time of the kernels each fill op launched."""
    out: dict[int, float] = {}
    for op, kernels in device_events_by_op(ctx, ops).items():
        out[op] = sum(k.dur for k in kernels) / 1000.0
    return out


ACCUMULATE = "autograd::engine::evaluate_function: torch::autograd::AccumulateGrad"


def fill_spans(ctx: Context) -> list[tuple[float, float]]:
    """What GRAD001's fix takes off a GPU's step, as spans of the trace (µs): each gradient zero-fill, and the
    first accumulation's `add_` into each zeroed gradient after it (backward adds into the zeros in place; a
    gradient set to None takes backward's result as it is, no kernel). Accumulations are matched to fills by shape,
    or one to one where the trace kept no shapes (a GPU trace read without them)."""
    trace = ctx.need_trace()
    fills = [op for op, _ in _zeroing_ops(ctx)]
    if not fills:
        return []
    accumulates = trace.named(ACCUMULATE.__eq__)
    adds = trace.named("aten::add_".__eq__, kind="op")
    added = {id(op): next(iter(_shapes(op)), None) for op, stack in enclosing(accumulates, adds)
             if stack and stack[-1].name == ACCUMULATE}   # an accumulation into a gradient held (not stolen)
    events = sorted([(op.ts, 0, op) for op in fills] + [(a.ts, 1, a) for a in adds if id(a) in added],
                    key=lambda e: (e[0], e[1]))
    pending: Counter = Counter()
    spans = []
    for _, kind, event in events:
        if kind == 0:
            shapes: list[tuple | None] = [*_shapes(event)] or [None]  # kept no shapes: one gradient, shape unknown
            pending.update(shapes)
            spans.append((event.ts, event.end))
            continue
        key = _zeroed(pending, added[id(event)])
        if key is not _NONE:
            pending[key] -= 1
            spans.append((event.ts, event.end))
    return spans


_NONE = object()


def _zeroed(pending: Counter, shape: tuple | None):
    """The pending fill an accumulation of `shape` adds into: one of its shape, else one that kept no shape
    (None), else, for an accumulation without a shape, any; _NONE where no zeroed gradient is left."""
    if shape is not None and pending[shape] > 0:
        return shape
    if pending[None] > 0:
        return None
    if shape is None:
        return next((k for k, n in pending.items() if n > 0), _NONE)
    return _NONE


def _shapes(op) -> list[tuple]:
    """The shapes of the tensors an op writes: its first input's (a list of them for a `_foreach_` op); none
    where the trace says something else (a trace from elsewhere may hold anything there)."""
    dims = op.args.get("Input Dims")
    dims = dims[0] if isinstance(dims, list) and dims else None
    if not isinstance(dims, list):
        return []
    shapes = dims if dims and all(isinstance(d, list) for d in dims) else [dims]
    if not all(type(n) is int for shape in shapes for n in shape):
        return []
    return [tuple(shape) for shape in shapes]
