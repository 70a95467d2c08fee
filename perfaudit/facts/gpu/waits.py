"""The host waiting for the device on a GPU trace: the runtime calls it waits in, and the GPU idle each wait
exposes (what SYNC001 counts for a read of a device value, and COPY001 for a copy from pageable memory)."""
from __future__ import annotations

from bisect import bisect_left

from ...trace.nesting import innermost
from ..registry import Context
from ..steps import data_ranges
from . import intervals as iv

SYNC_RUNTIME = {
    "cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy",
    "hipStreamSynchronize", "hipDeviceSynchronize", "hipEventSynchronize", "hipMemcpy",
}

# A sync exposes the time the host needs to queue new work; beyond this, idle has other causes (an
# evaluation loop, checkpointing) that the sync did not create.
MAX_EXPOSED_US = 10_000.0


def exposed_idle(ctx: Context, syncs) -> dict[int, float]:
    """µs of GPU idle each sync causes: the device drains while the host waits, then sits idle from the
    moment it drained until the work the host queues after the sync starts. Only that: a sync the device
    was already idle for (nothing was queued, so nothing drained) causes none, nor does one at the end of
    a step (the idle after it is the step boundary's, the next step's data or Python), and idle while the
    host then waits for the DataLoader is the input pipeline's."""
    data = data_ranges(ctx)
    device = [e for e in ctx.need_trace().device if e.kind != "gpu_annotation"]
    starts = sorted(e.ts for e in device)
    ends = sorted(e.end for e in device)
    out = {}
    for rt in syncs:
        out[id(rt)] = 0.0
        i = bisect_left(starts, rt.end)
        j = bisect_left(ends, rt.end) - 1
        if i >= len(starts) or j < 0 or ends[j] < rt.ts:
            continue  # no device work finished while the host waited: the sync waited for nothing
        drained_at, next_start = ends[j], starts[i]
        step = ctx.step_of(rt.ts)
        if step is None or next_start > ctx.steps[step].end:
            continue  # the next work is the next step's: what idles until then is not this sync's doing
        gap = (drained_at, max(next_start, drained_at))
        idle = gap[1] - gap[0] - iv.overlap([gap], data.clip(*gap))
        out[id(rt)] = min(max(idle, 0.0), MAX_EXPOSED_US)
    return out


def host_waits(ctx: Context) -> list[tuple]:
    """Every runtime call the host waited in, with the op it was made in (None: called directly) and the GPU
    idle it exposed (µs): [(call, op, idle)], worked out once for SYNC001's sites and COPY001's."""
    cached = ctx.__dict__.get("_host_waits")
    if cached is None:
        ops = ctx.host_of("op")
        runtime = ctx.need_trace().named(SYNC_RUNTIME.__contains__, kind="runtime")
        owners = innermost(ops, runtime, ctx.by_thread(ops))
        exposed = exposed_idle(ctx, runtime)
        cached = ctx.__dict__["_host_waits"] = [(rt, owners.get(id(rt)), exposed[id(rt)]) for rt in runtime]
    return cached
