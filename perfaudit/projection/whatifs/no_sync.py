"""DDP002's fix as a what-if: gradient accumulation under `no_sync()`. DDP all-reduces every gradient bucket in each
backward that runs with synchronisation on; with k such backwards to an optimizer step, the first k-1 rounds of
all-reduces are not needed. The step keeps its last round: the last 1/k of its collectives, in the order they were
queued (each backward queues the same buckets), with their launches' host time; the others go, host time and all."""
from __future__ import annotations

from ..plans import StepPlan


def _is_collective(item) -> bool:
    return item.kind == "launch" and item.stream == "comm"


def one_sync_per_step(plans: list[StepPlan], syncs_per_step: float) -> list[StepPlan]:
    """The plans with each step's collectives cut to the last 1/`syncs_per_step` of them (DDP's synchronised
    backwards per optimizer step, facts/distributed/ddp.py); steps whose collectives do not divide into that many
    rounds keep the rounded share."""
    if syncs_per_step <= 1.0:
        return plans
    out = []
    for p in plans:
        collectives = sum(1 for item in p.items if _is_collective(item))
        drop = collectives - max(round(collectives / syncs_per_step), 1 if collectives else 0)
        items = []
        for item in p.items:
            if drop > 0 and _is_collective(item):
                drop -= 1
                continue
            items.append(item)
        out.append(StepPlan(p.number, p.measured_us, items))
    return out


def any_collective(plans: list[StepPlan]) -> bool:
    """Whether the steps queue any collective (else the what-if has nothing to take away)."""
    return any(_is_collective(item) for p in plans for item in p.items)
