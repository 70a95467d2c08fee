"""torch.cuda.empty_cache() as a GPU pays for it: each call the emulated device marked (probe_schema.EMPTY_CACHE_MARK)
gives back the cached segments with nothing in them, a cudaFree each, and the next step takes each again with a
cudaMalloc; how many a call gives back is the emulated device's allocator replay of its tracked steps
(collect/emulation/memory/device_memory.py). Both are host time on the GPU's machine (calibration.yaml's
cuda_free_us and cuda_malloc_us), put at the call; MEM001's fix takes them away."""
from __future__ import annotations

from collections.abc import Callable

from ..probe_schema import EMPTY_CACHE_MARK
from ..trace.model import Event
from .plans import Item, StepPlan

MarkedItem = Callable[[Event], "Item | None"]


def with_emptied_cache(copy: MarkedItem | None, release_us: float | None) -> MarkedItem | None:
    """The item of a mark the run wrote (the projection's `copy` callable, timeline.from_shapes): a marked copy
    (`copy`), or an emptied cache costing `release_us` on the host (None: not known, nothing added)."""
    if not release_us:
        return copy

    def item(op: Event) -> Item | None:
        if op.name == EMPTY_CACHE_MARK:
            return Item("modelled", host_us=release_us, source=op)
        return copy(op) if copy is not None else None
    return item


def without_emptied_cache(plans: list[StepPlan]) -> list[StepPlan]:
    """MEM001's fix: the steps without the segments given back and taken again."""
    return [StepPlan(p.number, p.measured_us, [i for i in p.items if not _emptied(i)]) for p in plans]


def _emptied(item: Item) -> bool:
    return isinstance(item.source, Event) and item.source.name == EMPTY_CACHE_MARK
