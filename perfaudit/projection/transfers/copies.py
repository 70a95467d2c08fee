"""The emulated device's host-to-device copies as the simulation replays them: each one the run marked
(probe_schema.H2D_RANGE: a batch, a sample moved in `__getitem__`, a tensor made on the host in the step) at its
place in the step, at the target's PCIe rate for pinned or pageable memory, blocking or not as recorded. A run
without the marks (a plain CPU run, an older emulated one) has one batch copy a step instead (model.py)."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from ...probe_schema import H2D_RANGE, read_h2d_range
from ...trace.model import Event, Trace
from ..plans import Item, StepPlan


def marked(trace: Trace) -> bool:
    """Whether the run marked its copies (the emulated device of a perfaudit that marks them)."""
    return any(e.kind == "annotation" and e.name.startswith(H2D_RANGE) for e in trace.host)


def copy_timer(gbs: dict, host_us: float, floor_us: float) -> Callable[[Event], Item | None]:
    """A marked copy as a copy item: the host's `host_us` to dispatch it, then the link's time at its rate (`gbs`:
    GB/s pinned and pageable), at least `floor_us`; None for another op."""
    def copy(op: Event) -> Item | None:
        read = read_h2d_range(op.name)
        if read is None:
            return None
        where, pinned, non_blocking, nbytes = read
        rate = gbs["pinned" if pinned else "pageable"]
        # from pageable memory the host waits for the copy even when asked not to (it stages the bytes); a
        # prefetching thread's dispatch is not the training thread's time
        return Item("copy", host_us=0.0 if where == "thread" else host_us, gpu_us=max(nbytes / (rate * 1e3), floor_us),
                    stream="copy", blocking=not (non_blocking and pinned), pageable=not pinned, source=op)
    return copy


def _read(item: Item) -> tuple[str, bool, bool, int] | None:
    source = item.source
    return read_h2d_range(source.name) if item.kind == "copy" and isinstance(source, Event) else None


def origin(item: Item) -> str | None:
    """Where a marked copy's tensor came from (loader, sample, made, host, data, thread); None for another item."""
    read = _read(item)
    return read[0] if read is not None else None


def _bytes(item: Item) -> int:
    read = _read(item)
    return read[3] if read is not None else 0


def pinned_and_batched(plans: list[StepPlan], gbs: dict, floor_us: float) -> list[StepPlan]:
    """COPY001's fix: each pageable copy made pinned and non-blocking, the sync torch makes after a pageable
    one gone; and a Dataset's samples, each moved in `__getitem__`, moved as one batch in the loop instead (the
    first sample's place stands for it: the loop moves the batch the fetch made)."""
    ratio = gbs["pageable"] / gbs["pinned"]
    out = []
    for p in plans:
        items: list[Item] = []
        previous: Item | None = None
        sample_bytes, batch_at = 0, None
        for item in p.items:
            before, previous = previous, item
            if item.kind == "sync" and before is not None and before.pageable:
                continue
            if origin(item) == "sample":
                sample_bytes += _bytes(item)
                if batch_at is not None:
                    continue
                batch_at = len(items)
            if item.kind == "copy" and item.pageable:
                item = replace(item, blocking=False, pageable=False, gpu_us=item.gpu_us * ratio)
            items.append(item)
        if batch_at is not None:
            items[batch_at] = replace(items[batch_at], gpu_us=max(sample_bytes / (gbs["pinned"] * 1e3), floor_us))
        out.append(StepPlan(p.number, p.measured_us, items))
    return out


def made_on_device(plans: list[StepPlan], fill: Callable[[int], Item]) -> list[StepPlan]:
    """COPY002's fix: each tensor the step made on the host and then copied made on the device instead, one
    kernel writing its bytes (`fill(bytes)`) in place of the copy."""
    out = []
    for p in plans:
        items = [fill(_bytes(i)) if origin(i) == "made" else i for i in p.items]
        out.append(StepPlan(p.number, p.measured_us, items))
    return out
