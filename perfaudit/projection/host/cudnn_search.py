"""cuDNN's benchmark searches as a GPU's host pays for them: each search the emulated device marked
(probe_schema.CUDNN_SEARCH_MARK: a convolution's first call with its shapes while torch.backends.cudnn.benchmark
is on) costs the host cuDNN's own work on the search (calibration.yaml `cudnn_search`: a fixed time for the
forward and for each gradient's, measured on an H100) and the trial runs of its candidate algorithms (`trials`
times the convolution's modelled kernel, for the forward and each gradient). CUDNN002's and SHAPE001's fix (fixed
shapes, or benchmark off) takes them away. Modelled as host time: the search runs on the host, each trial
synchronised."""
from __future__ import annotations

from collections.abc import Callable

from ...probe_schema import CUDNN_SEARCH_MARK, read_cudnn_search_mark
from ...trace.model import Event
from ..kernels import Work
from ..plans import Item, StepPlan

MarkedItem = Callable[[Event], "Item | None"]


def search_us(backward: int, flops: int, nbytes: int, precision: str, kernel_us: Callable[[Work], float],
              cal: dict) -> float:
    """One search's host time (µs): the forward's and `backward` gradients'."""
    own = cal["cudnn_search"]
    trial = own["trials"] * kernel_us(Work("conv", flops=float(flops), bytes=float(nbytes), precision=precision))
    return own["forward_us"] + backward * own["backward_us"] + (1 + backward) * trial


def with_searches(copy: MarkedItem | None, kernel_us: Callable[[Work], float], cal: dict) -> MarkedItem:
    """The item of a mark the run wrote (timeline.from_shapes's `copy`): a search's modelled host time, or what
    `copy` makes of the other marks."""
    def item(op: Event) -> Item | None:
        if op.name.startswith(CUDNN_SEARCH_MARK):
            read = read_cudnn_search_mark(op.name)
            return Item("modelled", host_us=search_us(*read, kernel_us, cal), source=op) if read else None
        return copy(op) if copy is not None else None
    return item


def _searched(item: Item) -> bool:
    return item.kind == "modelled" and isinstance(item.source, Event) and item.source.name.startswith(CUDNN_SEARCH_MARK)


def any_search(plans: list[StepPlan]) -> bool:
    return any(_searched(i) for p in plans for i in p.items)


def without_searches(plans: list[StepPlan]) -> list[StepPlan]:
    """The steps without cuDNN's searches: CUDNN002's and SHAPE001's fix."""
    return [StepPlan(p.number, p.measured_us, [i for i in p.items if not _searched(i)]) for p in plans]
