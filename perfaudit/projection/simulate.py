"""A small discrete-event simulation of the host and the GPU's queues over the recorded steps, in order: the
host runs its items (Python, dispatch, fetches) and queues kernels; the GPU runs them when the host has
queued them and the queue before them is done (after a join, the collectives' queue too); a sync holds the
host until the queues drain; a blocking copy holds it until the copy is done; a DataLoader with workers hands
over batch k when its workers have made it. What the GPU is doing, and what the host is doing while the GPU
idles, give the bottleneck."""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from .timeline import StepPlan

BOTTLENECKS = ("data", "host", "sync", "copies", "gpu", "communication")


@dataclass
class Pipeline:
    """A DataLoader as the projection sees it: `workers` processes each making a batch in `batch_us`
    (0 workers: the fetch is the main process's own work, as recorded)."""
    workers: int = 0
    batch_us: float = 0.0


@dataclass
class Projection:
    step_us: float
    per_step_us: list[float]
    busy_us: dict            # per step: compute, communication, copies (the GPU's time in each)
    idle_us: dict            # per step: the GPU idle while the host was in data, sync, host (Python, launches)
    bottleneck: str
    gpu_busy_share: float
    data_share: float
    shares: dict = field(default_factory=dict)   # each bottleneck class's share of the step


def _busy(spans: list, start: float, end: float) -> None:
    """A stream's busy span: its starts never go back, so one that meets the last span extends it."""
    if spans and start <= spans[-1][1]:
        if end > spans[-1][1]:
            spans[-1][1] = end
    else:
        spans.append([start, end])


def simulate(plans: list[StepPlan], pipeline: Pipeline | None = None, without: frozenset[str] = frozenset(),
             host_scale: list[float] | None = None) -> Projection:
    """The plans replayed; a what-if as the plans would be with it, without copying them: the items of the
    kinds in `without` left out (syncs, DataLoader fetches), each step's Python time times its `host_scale`.
    The hot loop of every projection (a replay per fix): the clocks are local variables."""
    host = compute_free = comm_free = 0.0   # the host; the compute stream (kernels, copies); the collectives'
    busy: dict[str, list] = {"compute": [], "communication": [], "copies": []}
    host_spans: list[list] = []             # [start, end, what]: what the host is doing when the GPU idles
    after_sync = False
    workers = pipeline.workers if pipeline is not None else 0
    ends, fetched, first_fetch = [], 0, 0.0
    for n, plan in enumerate(plans):
        scale = host_scale[n] if host_scale is not None else 1.0
        for item in plan.items:
            kind = item.kind
            if kind in without:
                continue
            t0 = host
            what = "sync" if after_sync else "host"
            if kind == "launch" or kind == "copy":
                host += item.host_us
                gpu = item.gpu_us
                if kind == "launch" and item.stream == "comm":
                    start = max(host, comm_free, compute_free)
                    comm_free = start + gpu
                    stream = "communication"
                else:
                    start = host if host > compute_free else compute_free
                    compute_free = start + gpu
                    stream = "copies" if kind == "copy" else "compute"
                if gpu > 0:
                    _busy(busy[stream], start, start + gpu)
                after_sync = False
                if kind == "copy" and item.blocking:
                    host = max(host, compute_free)
                    after_sync = True
            elif kind == "host":
                host += item.host_us * scale
            elif kind == "modelled":  # host time a GPU's host spends that the run did not (cuDNN's searches)
                host += item.host_us
            elif kind == "sync":
                host = max(host, compute_free, comm_free) + item.round_trip_us
                after_sync = True
            elif kind == "join":  # DDP's wait for its buckets' all-reduces: a GPU's host runs on, its stream waits
                compute_free = max(compute_free, comm_free)
            elif kind == "data":
                what = "data"
                if workers > 0:
                    first_fetch = host if fetched == 0 else first_fetch
                    fetched += 1
                    host = max(host, first_fetch + fetched * pipeline.batch_us / workers)  # type: ignore[union-attr]
                else:
                    host += item.host_us
            if host > t0:  # what the host does, one span while it goes on doing it
                if host_spans and host_spans[-1][1] == t0 and host_spans[-1][2] == what:
                    host_spans[-1][1] = host
                else:
                    host_spans.append([t0, host, what])
        ends.append(max(host, compute_free, comm_free))
    return _summarise(busy, host_spans, plans, ends)


def _union(spans):
    out = []
    for s, e in sorted(spans):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def _summarise(busy_spans: dict[str, list], spans: list[list], plans: list[StepPlan], ends: list[float]) -> Projection:
    n = max(len(plans), 1)
    total = ends[-1] if ends else 0.0
    per_step = [b - a for a, b in zip([0.0] + ends[:-1], ends)]
    busy = {k: sum(e - s for s, e in _union(v)) / n for k, v in busy_spans.items()}
    busy_all = _union([span for v in busy_spans.values() for span in v])
    idle = {"data": 0.0, "sync": 0.0, "host": 0.0}
    # the GPU's idle stretches, each split by what the host was doing then
    gaps, cursor = [], 0.0
    for s, e in busy_all:
        if s > cursor:
            gaps.append((cursor, s))
        cursor = max(cursor, e)
    if total > cursor:
        gaps.append((cursor, total))
    j = 0
    for g0, g1 in gaps:
        while j < len(spans) and spans[j][1] <= g0:
            j += 1
        k, covered = j, 0.0
        while k < len(spans) and spans[k][0] < g1:
            s, e, what = spans[k]
            part = min(e, g1) - max(s, g0)
            if part > 0:
                idle[what] += part
                covered += part
            k += 1
        idle["host"] += max(g1 - g0 - covered, 0.0)
    idle = {k: v / n for k, v in idle.items()}
    step = total / n if n else 0.0
    gpu_busy = sum(e - s for s, e in busy_all) / n
    return _classified(step, per_step, busy, idle, gpu_busy / step if step else 0.0)


def _classified(step: float, per_step: list[float], busy: dict, idle: dict, gpu_busy_share: float) -> Projection:
    """The step's parts (GPU compute, exposed communication, copies, and the GPU's idle by what the host did)
    and the largest of them, the bottleneck."""
    comm_exposed = max(gpu_busy_share * step - busy["compute"] - busy["copies"], 0.0)
    weights = {"gpu": busy["compute"], "communication": comm_exposed, "copies": busy["copies"], **idle}
    bottleneck = max(weights, key=lambda k: weights[k]) if step else "host"
    shares = {k: (v / step if step else 0.0) for k, v in weights.items()}
    return Projection(step, per_step, busy, idle, bottleneck, gpu_busy_share,
                      idle["data"] / step if step else 0.0, shares)


def sync_idle_capped(p: Projection, without_syncs: Projection) -> Projection:
    """The GPU's idle after a sync (while the host runs on to its next launch) is the sync's only as far as
    the same steps without their syncs are shorter: in a host-bound step the host's Python after a read keeps
    the GPU waiting with or without the read, and a GPU timeline counts that idle as the host's."""
    saved = max(p.step_us - without_syncs.step_us, 0.0)
    moved = p.idle_us.get("sync", 0.0) - saved
    if moved <= 0:
        return p
    idle = {**p.idle_us, "sync": saved, "host": p.idle_us.get("host", 0.0) + moved}
    return _classified(p.step_us, p.per_step_us, p.busy_us, idle, p.gpu_busy_share)


def scaled(p: Projection, factor: float) -> Projection:
    """The projection of a run of steps scaled to the mean step (times and per-step figures; shares hold)."""
    if factor == 1.0:
        return p
    return replace(p, step_us=p.step_us * factor, per_step_us=[s * factor for s in p.per_step_us],
                   busy_us={k: v * factor for k, v in p.busy_us.items()},
                   idle_us={k: v * factor for k, v in p.idle_us.items()})
