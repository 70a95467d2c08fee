"""What-ifs that take away the work launched inside spans of the trace: GRAD001's gradients set to None
instead of zero-filled (the fills go, a kernel and a launch each, a multi_tensor_apply for `_foreach_zero_`, and
so does the first accumulation into each zeroed gradient: backward adds its result into the zeros in place, where
into a gradient set to None it hands the result over; AccumulateGrad steals it: its node still runs, without a
kernel), BN001's bias kernels of a GPU trace, DDP003's copies of the buckets back into the gradients."""
from __future__ import annotations

from bisect import bisect_right

from ..plans import Item, StepPlan, item_op


def without_work_in(plans: list[StepPlan], spans: list[tuple[float, float]]) -> list[StepPlan]:
    """The plans without the kernels and device copies launched inside `spans` (µs, of the trace: the fill ops
    and the accumulations' `add_`, facts/training/grads.py fill_spans; DDP's copies of its buckets back into the
    gradients, facts/distributed/ddp.py), nor the host time those ops took to dispatch and launch; what else the
    launching op did on the host (an AccumulateGrad node's own work) stays."""
    spans = sorted(spans)
    starts = [s for s, _ in spans]
    out = []
    for p in plans:
        items = []
        for item in p.items:
            # a kernel, or a GPU trace's memcpy/memset (a DtoD copy: DDP's copy of a bucket back into a gradient)
            ts = _launched_at(item) if item.kind == "launch" or isinstance(item.source, tuple) else None
            at = bisect_right(starts, ts) - 1 if ts is not None else -1
            if at < 0 or ts >= spans[at][1]:  # type: ignore[operator]
                items.append(item)
                continue
            # a GPU trace's launch carries its root op's host time (from_kernels): the op's own goes; a CPU
            # run's carries the launch's modelled dispatch alone (from_shapes): all of it goes
            rest = item.host_us - (spans[at][1] - spans[at][0]) if isinstance(item.source, tuple) else 0.0
            if rest > 0:
                items.append(Item("host", host_us=rest, own_us=min(item.own_us, rest)))
        out.append(StepPlan(p.number, p.measured_us, items))
    return out


def _launched_at(item: Item) -> float | None:
    """When the kernel was asked for: a GPU trace's runtime call (its root op may be an autograd node around
    the op), a CPU run's modelled op."""
    source = item.source
    if isinstance(source, tuple) and len(source) == 3:
        return getattr(source[1], "ts", None)
    op = item_op(item)
    return op.ts if op is not None else None
