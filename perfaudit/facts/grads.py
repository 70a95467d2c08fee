"""Gradients zero-filled instead of set to None (tip T02)."""
from __future__ import annotations

from ..trace.nesting import enclosing
from .gpu.launches import device_events_by_op
from .registry import Context, fact
from .sites import SiteCollector
from .steps import ZERO_GRAD

FILL_OPS = {"aten::zero_", "aten::fill_"}


def _zeroing_ops(ctx: Context):
    """Fill ops that zero gradients: inside Optimizer.zero_grad / Module.zero_grad, or a manual
    `p.grad.zero_()` in the user's code. Returns (op, anchor) pairs."""
    trace = ctx.need_trace()
    fills = trace.named(FILL_OPS.__contains__, kind="op")
    containers = trace.named(lambda name: name.startswith(ZERO_GRAD))
    pairs = []
    in_optimizer = set()
    for op, stack in enclosing(containers, fills):
        outer = [c for c in stack if c.end >= op.end]
        if outer and not any(o.kind == "op" and o.name in FILL_OPS for o in stack):
            pairs.append((op, outer[-1]))
            in_optimizer.add(id(op))
    if ctx.frames:
        rest = [f for f in fills if id(f) not in in_optimizer]
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
