"""OPT001's fix as a what-if: each optimizer update (its foreach ops, or its per-parameter loop) replaced by the
fused kernel torch runs with `fused=True`, which reads the parameters, gradients and optimizer state once and
writes the parameters and state once, in one launch per group of tensors."""
from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass
from math import ceil

from ..kernels import Work
from ..plans import Item, StepPlan, item_op
from ..work import FOREACH_TENSORS_PER_LAUNCH

# tensors the fused kernel reads and writes per parameter element: Adam(W) reads p, g, m, v and writes p, m, v;
# SGD with momentum reads p, g, buf and writes p, buf; without momentum reads p, g and writes p
PASSES = {"Adam": 7, "AdamW": 7, "SGD": 5}
PASSES_SGD_PLAIN = 3
TENSORS_PER_LAUNCH = FOREACH_TENSORS_PER_LAUNCH[3]  # the fused kernel's four lists (p, g, m, v)


@dataclass(frozen=True)
class Update:
    """One optimizer update in the trace: where it ran (µs; after its closure's backward, if it ran one) and
    what the fused kernel would move there."""
    start: float
    end: float
    fused_bytes: float
    tensors: int


def passes(optimizer: str, options: dict) -> int | None:
    """The fused kernel's tensor passes for this optimizer class (None: no fused kernel on CUDA)."""
    if optimizer == "SGD" and not options.get("momentum"):
        return PASSES_SGD_PLAIN
    return PASSES.get(optimizer)


def fused(plans: list[StepPlan], updates: list[Update], kernel_us: Callable[[Work], float],
          host_us_per_launch: float) -> list[StepPlan]:
    """The plans with every launch of each update's ops replaced by the fused kernel's launches, placed where the
    update's first launch was (the Python around them stays: both paths group the tensors first)."""
    updates = sorted(updates, key=lambda u: u.start)
    starts = [u.start for u in updates]
    out = []
    for p in plans:
        items: list[Item] = []
        placed: set[int] = set()
        for item in p.items:
            op = item_op(item) if item.kind == "launch" else None
            at = bisect_right(starts, op.ts) - 1 if op is not None else -1
            if at < 0 or op.ts >= updates[at].end:  # type: ignore[union-attr]
                items.append(item)
                continue
            if at not in placed:
                placed.add(at)
                u = updates[at]
                n = max(ceil(u.tensors / TENSORS_PER_LAUNCH), 1)
                items.append(Item("launch", host_us=host_us_per_launch * n, gpu_us=kernel_us(Work("memory",
                                  bytes=u.fused_bytes, kernels=n)), kernels=n))
        out.append(StepPlan(p.number, p.measured_us, items))
    return out
