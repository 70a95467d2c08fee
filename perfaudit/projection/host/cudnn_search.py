"""cuDNN's benchmark searches as a GPU's host pays for them: each search the emulated device marked
(probe_schema.CUDNN_SEARCH_MARK: a convolution's first call with its shapes while torch.backends.cudnn.benchmark
is on) costs the host cuDNN's own work on the search (calibration.yaml `cudnn_search`: a fixed time for the
forward and for each gradient's, measured on an H100) and the trial runs of its candidate algorithms (`trials`
times the convolution's modelled kernel, for the forward and each gradient). Modelled as host time: the search
runs on the host, each trial synchronised. Each step holds the mean of the searches of every recorded step but
warm-up (facts/shapes.py search_marks), a step a busy machine left out of the measured ones included: where a
search falls is the step's shapes, not the machine's load. CUDNN002's fix (fixed shapes, or benchmark off)
takes them away."""
from __future__ import annotations

from collections.abc import Callable

from ...probe_schema import CUDNN_SEARCH_MARK, read_cudnn_search_mark
from ...trace.model import Event
from ..kernels import Work
from ..plans import Item, StepPlan

MarkedItem = Callable[[Event], "Item | None"]
SEARCHES = "cuDNN's benchmark searches"   # the source of the modelled item that stands for them


def search_us(backward: int, flops: int, nbytes: int, precision: str, kernel_us: Callable[[Work], float],
              cal: dict) -> float:
    """One search's host time (µs): the forward's and `backward` gradients'."""
    own = cal["cudnn_search"]
    trial = own["trials"] * kernel_us(Work("conv", flops=float(flops), bytes=float(nbytes), precision=precision))
    return own["forward_us"] + backward * own["backward_us"] + (1 + backward) * trial


def per_step_us(searches: tuple[list[str], int] | None, kernel_us: Callable[[Work], float], cal: dict) -> float:
    """The searches' mean host time a step (µs): (the marks' names, the steps they were counted over)."""
    if not searches or not searches[1]:
        return 0.0
    names, steps = searches
    return sum(search_us(*read, kernel_us, cal) for name in names if (read := read_cudnn_search_mark(name))) / steps


def without_marks(copy: MarkedItem | None) -> MarkedItem | None:
    """`copy` (timeline.from_shapes's item of a mark the run wrote) with the search marks making nothing: the
    searches are each step's mean (with_searches)."""
    if copy is None:
        return None
    return lambda op: None if op.name.startswith(CUDNN_SEARCH_MARK) else copy(op)


def with_searches(plans: list[StepPlan], us: float) -> list[StepPlan]:
    """Each step with the searches' mean host time a step first."""
    if us <= 0:
        return plans
    return [StepPlan(p.number, p.measured_us, [Item("modelled", host_us=us, source=SEARCHES), *p.items])
            for p in plans]


def _searched(item: Item) -> bool:
    return item.kind == "modelled" and item.source is SEARCHES


def any_search(plans: list[StepPlan]) -> bool:
    return any(_searched(i) for p in plans for i in p.items)


def without_searches(plans: list[StepPlan]) -> list[StepPlan]:
    """The steps without cuDNN's searches: CUDNN002's fix."""
    return [StepPlan(p.number, p.measured_us, [i for i in p.items if not _searched(i)]) for p in plans]
