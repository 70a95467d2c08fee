"""A step as the simulation replays it (`StepPlan`, a list of `Item`s), and what of the host's measured time in
it was the script's: perfaudit's own frames and the emulated device's mode, the wait for a CPU that other
processes held, and an interruption no wait shows, each taken out once (timeline.plan() calls them in order); the
items of the host's time between two ops (gap_items)."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ..trace.model import Event
from .host.overhead import OwnCost


@dataclass(slots=True)
class Item:
    kind: str                 # host, launch, sync, data, copy, modelled (host time the run had none of),
                              # join (the compute stream waits for the collectives queued before it)
    host_us: float = 0.0      # the host's own time (Python, dispatch, a fetch in the main process)
    gpu_us: float = 0.0       # device time queued (launch, copy)
    stream: str = "compute"   # compute, comm (a collective), copy
    blocking: bool = False    # a copy the host waits for (pageable memory, or not non_blocking)
    pageable: bool = False    # a host-to-device copy from pageable memory
    own_us: float = 0.0       # what perfaudit's recording cost in it: a fetch's calls and ops; a Python gap's
                              # own frames and device mode
    round_trip_us: float = 0.0  # a sync's read of the value once the queue drained (the copy back, the wait's
                                # return): on a GPU a read costs this even when nothing is queued
    kernels: int = 0          # kernel launches in a modelled launch (a CPU run), and how many of them are
    small: int = 0            # short elementwise ones on the target (under SMALL_KERNEL_US: fusion's candidates)
    source: object = None     # what a launch's GPU time was taken from (timeline.py), for a what-if to time it again

    def timed(self, gpu_us: float) -> Item:
        """The same item with another GPU time (positional: a what-if makes thousands)."""
        return Item(self.kind, self.host_us, gpu_us, self.stream, self.blocking, self.pageable, self.own_us,
                    self.round_trip_us, self.kernels, self.small, self.source)


def item_op(item: Item) -> Event | None:
    """The op an item was planned from: a CPU run's modelled op, a GPU trace's launching root op."""
    source = item.source
    if isinstance(source, Event):
        return source
    if isinstance(source, tuple) and len(source) == 3:
        return getattr(source[2], "op", None)
    return None


@dataclass
class StepPlan:
    number: int
    measured_us: float
    items: list[Item] = field(default_factory=list)


MEASURED = ("host", "data")   # the host's own measured time: Python gaps, ops' CPU time, fetches in the main process
OUTLIER = 3.0        # a part of a step this many times its median over the steps of the same shape …
OUTLIER_US = 100.0   # … and this much longer is an interruption, not the script's work
SLICE_US = 3000.0    # what a thread loses when the scheduler hands its CPU to another process (Linux CFS: ms)


def _shape(p: StepPlan) -> tuple:
    return tuple(i.kind for i in p.items)


def _by_shape(plans: list[StepPlan]) -> dict[tuple, list[StepPlan]]:
    shapes: dict[tuple, list[StepPlan]] = {}
    for p in plans:
        shapes.setdefault(_shape(p), []).append(p)
    return shapes


def _typical(plans: list[StepPlan], value: Callable[[Item], float], rank: float) -> list[list[float | None]]:
    """Each plan's items' typical `value`: its `rank` quantile over the steps of the same shape, at least three
    of them. A step of a rarer shape (an epoch's end, a logging step) takes the commonest shape's values where
    its items line up with them, from its start and from its end; None for the rest."""
    shapes = _by_shape(plans)
    common: dict[tuple, list[float | None]] = {
        shape: [sorted(value(q.items[n]) for q in alike)[int(len(alike) * rank)] for n in range(len(shape))]
        for shape, alike in shapes.items() if len(alike) >= 3}
    ref = max(common, key=lambda shape: len(shapes[shape]), default=None)
    return [common.get(_shape(p)) or _lined_up(_shape(p), ref, common[ref] if ref else []) for p in plans]


def _lined_up(shape: tuple, ref: tuple | None, values: list[float | None]) -> list[float | None]:
    out: list[float | None] = [None] * len(shape)
    if ref is None:
        return out
    n = min(len(shape), len(ref))
    head = next((i for i in range(n) if shape[i] != ref[i]), n)
    tail = next((i for i in range(n - head) if shape[-1 - i] != ref[-1 - i]), n - head)
    out[:head] = values[:head]
    for i in range(1, tail + 1):
        out[-i] = values[-i]
    return out


def take_out_usual_own(plans: list[StepPlan]) -> None:
    """perfaudit's own frames and the device mode do the same each step: of each Python gap's own time, what is
    usual for it (its first quartile over the steps, see _typical) comes out now; what is beyond (`own_us`
    left) was an interruption, which the wait for a CPU or the outlier clip may take out first
    (take_out_own_rest after them)."""
    for p, usual in zip(plans, _typical(plans, lambda i: i.own_us, 0.25)):
        for item, u in zip(p.items, usual):
            if item.kind == "host":
                part = item.own_us if u is None else min(u, item.own_us)
                item.host_us, item.own_us = max(item.host_us - part, 0.0), item.own_us - part


def take_out_waits(plans: list[StepPlan], waited: list[float],
                   host_waited: list[tuple[float | None, float | None]] | None = None) -> None:
    """Each step's wait for a CPU (µs) out of its measured host time. The scheduler takes the CPU away in
    slices, each lengthening the part of the step it lands in: first out of what a part exceeds what is usual
    for it (its first quartile over the steps, see _typical: load only lengthens, and a low quartile holds
    when most steps were hit in the same long part) by a quarter of a slice or more (less is the part's own
    variation); the rest in proportion to the step (a slice lands in the ops' own time as often as in the
    host's parts, by their length) where it is hidden in a part's usual time: a part that waits less than a
    slice in expectation was most often not hit at all, so its first quartile is its own time and the first
    pass took out what hit it, while a long part is hit in every step.
    `host_waited`: where the recording measured them (µs), what the training thread itself waited, whoever held
    the CPU (`waited` is other processes' part of every thread's: a GPU host gives the script's DataLoader workers
    and intra-op threads cores of their own, so a 2-core machine's contention between them and the training is
    not the host's time there either), and what the step's fetches waited, which comes out of them and the rest
    out of the other parts."""
    hosts = host_waited if host_waited is not None else [(None, None)] * len(plans)
    for p, wait, (thread, fetch), usual in zip(plans, waited, hosts, _typical(plans, lambda i: i.host_us, 0.25)):
        wait = thread if thread is not None else wait
        if wait <= 0 or p.measured_us <= 0:
            continue
        kinds: tuple[str, ...] = MEASURED
        rest = p.measured_us
        data = [i for i in p.items if i.kind == "data"]
        fetched = sum(i.host_us for i in data)
        if fetch is not None and fetched > 0:
            cut = min(fetch, wait, fetched)  # measured together with the fetch: never more than it took
            for item in data:
                item.host_us -= cut * item.host_us / fetched
            kinds, rest, wait = ("host",), rest - fetched, wait - cut
        for over, item in sorted(((i.host_us - u, i) for i, u in zip(p.items, usual)
                                  if i.kind in kinds and u is not None), key=lambda pair: -pair[0]):
            cut = min(over, wait) if over >= SLICE_US / 4 else 0.0  # less: the part's own variation, no slice
            item.host_us -= cut
            wait -= cut
            rest -= cut
        rate = min(wait / rest, 1.0) if rest > 0 else 0.0
        for item in p.items:
            if item.kind in kinds:  # what it waited in expectation, as far as its usual time holds it (above)
                item.host_us -= item.host_us * rate * min(item.host_us * rate / SLICE_US, 1.0)


def clip_outliers(plans: list[StepPlan]) -> None:
    """Each measured part of a step (a Python gap, a fetch in the main process) at most OUTLIER times its median
    over the steps of the same shape, plus OUTLIER_US: a 3 ms gap between two ops that take 0.1 ms apart in
    every other step is the machine (a hypervisor's steal, a page reclaim), which no run-queue wait shows,
    not the script. What every step does, or most, stays; a step of a rarer shape does its own work."""
    shapes = _by_shape(plans)
    for shape, alike in shapes.items():
        if len(alike) < 3:
            continue
        for n, kind in enumerate(shape):
            if kind not in MEASURED:
                continue
            times = sorted(q.items[n].host_us for q in alike)
            bound = OUTLIER * times[len(times) // 2] + OUTLIER_US
            for q in alike:
                q.items[n].host_us = min(q.items[n].host_us, bound)


def take_out_own_rest(plans: list[StepPlan], before: dict[int, float]) -> None:
    """What is left of perfaudit's own time in each item: a Python gap's interruption in its own frames, less
    what was already cut from the gap since `before` (id(item) -> its time then); a fetch's recording cost."""
    for p in plans:
        for item in p.items:
            if item.kind == "host":
                cut = before.get(id(item), item.host_us) - item.host_us
                item.host_us = max(item.host_us - max(item.own_us - cut, 0.0), 0.0)
            elif item.kind == "data":
                item.host_us = max(item.host_us - item.own_us, 0.0)


def take_out(items: list[Item], us: float) -> None:
    """perfaudit's own cost out of the Python time between ops, in proportion (never below none)."""
    gaps = [i for i in items if i.kind == "host"]
    total = sum(i.host_us for i in gaps)
    if total <= 0 or us <= 0:
        return
    keep = max(1.0 - us / total, 0.0)
    for item in gaps:
        item.host_us *= keep


def fetch_at_most(plans: list[StepPlan], us: float) -> None:
    """The fetches in the training process at most `us` a step on average, as the run timed them without the
    profiler: what recording them cost was taken out by the calibration's price per call, which real code's
    calls beat (a fetch stayed up to 2x the script's own); never raised (on the emulated device the timed
    fetch holds the device mode's cost, which the recorded one has had taken out)."""
    fetched = [sum(i.host_us for i in p.items if i.kind == "data") for p in plans]
    mean = sum(fetched) / len(fetched) if fetched else 0.0
    if mean <= 0 or not us < mean:
        return
    keep = max(us, 0.0) / mean
    for p in plans:
        for item in p.items:
            if item.kind == "data":
                item.host_us *= keep


Freed = Callable[[float, float], float]
Waits = Callable[[float, float], list[tuple[float, float]]]
Kernels = Callable[[float, float], list[tuple[float, float, Item]]]  # host/compiled_kernels.py


def gap_items(start: float, end: float, data: list[tuple[float, float]], freed: Freed | None = None,
               own: OwnCost | None = None, waits: Waits | None = None, compiled: Kernels | None = None) -> list[Item]:
    """Python time between two ops, a DataLoader fetch in it split off as its own item (with what recording
    its Python calls and ops cost, `own`); `freed(a, b)`: what of a stretch the CPU spent freeing device
    blocks a GPU would keep (frees.py), left out; `waits(a, b)`: its waits for a collective, each a `join`;
    `compiled(a, b)`: the kernels a compiled graph generated for the CPU that ran there, each a launch."""
    def plain(a: float, b: float) -> Item:
        return Item("host", host_us=(b - a) - (freed(a, b) if freed is not None else 0.0),
                    own_us=own.timed(a, b) if own is not None else 0.0)

    def python(a: float, b: float) -> list[Item]:
        out, at = [], a
        for k0, k1, launch in compiled(a, b) if compiled is not None else ():
            out += [plain(at, k0), launch]
            at = k1
        return out + [plain(at, b)]

    def host(a: float, b: float) -> list[Item]:
        out, at = [], a
        for w0, w1 in waits(a, b) if waits is not None else ():
            out += [*python(at, w0), Item("join")]
            at = w1
        return out + python(at, b)
    items, cursor = [], start
    for d0, d1 in data:
        d0, d1 = max(d0, start), min(d1, end)
        if d1 <= d0:
            continue
        if d0 > cursor:
            items.extend(host(cursor, d0))
        items.append(Item("data", host_us=d1 - d0, own_us=own.between(d0, d1) if own is not None else 0.0))
        cursor = d1
    if end > cursor:
        items.extend(host(cursor, end))
    return items
