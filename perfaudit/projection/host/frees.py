"""What freeing the emulated device's large tensors cost the CPU, to take out of the host's time before
projecting it: glibc hands a block of 32 MiB or more back to the OS when it is freed, page by page (about
2-4 ms for an LM's 32 MiB logits on a 2-core machine), where a GPU's caching allocator keeps the block for
the next step at no cost. A free inside an op is already out (the op's CPU time is replaced by its
kernels); one between ops (a step's outputs going out of scope) lengthens the Python gap it lands in.

The evidence is the run's own: the CPU allocator's [memory] events of 1 MiB or more (recorded on the
emulated path, trace.host_blocks), a block counting as the device's when it was allocated outside a
DataLoader fetch (a batch is the host's, and so is its free on a GPU machine), and the cost of a free
measured in the run (collect/probes/host_overhead.py: µs per MiB freed on this machine, under this load).
What is taken out is the stretch between the traced calls around the free (the untraced time the free
filled), at most twice what the calibration says such a block costs; without Python calls to bound it,
what the calibration says."""
from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable
from math import isfinite
from operator import attrgetter

from ...trace.model import Trace
from ...trace.op_names import DATALOADER

LOOK_BACK = 256   # calls looked at before a free for the end of the last one (bounded: a trace is the user's)
SLACK = 2.0   # a free's stretch is kept to this many times the calibrated cost (page cache, load)
_TS = attrgetter("ts")


def _us_per_mib(trace: Trace) -> float | None:
    probes = trace.probes.get("probes")
    record = probes.get("host_overhead") if isinstance(probes, dict) else None
    value = record.get("free_us_per_mib") if isinstance(record, dict) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not isfinite(value) or value <= 0:
        return None
    return float(value)


def device_frees(trace: Trace) -> list[tuple[float, int]]:
    """(time, bytes) of each free of a block allocated outside a DataLoader fetch, in time order."""
    fetches = sorted((e.ts, e.end) for e in trace.named(lambda name: name.startswith(DATALOADER)))
    starts = [f[0] for f in fetches]

    def in_fetch(ts: float) -> bool:
        i = bisect_left(starts, ts + 1e-9) - 1
        return i >= 0 and fetches[i][0] <= ts < fetches[i][1]

    allocated: dict[int, float] = {}
    out = []
    for ts, nbytes, addr in sorted(trace.host_blocks):
        if nbytes > 0:
            allocated[addr] = ts
        else:
            at = allocated.pop(addr, None)
            if at is not None and not in_fetch(at):
                out.append((ts, -nbytes))
    return out


def freed_in(trace: Trace) -> Callable[[float, float], float] | None:
    """(start, end) of a stretch of host time between ops -> the µs of it the CPU spent freeing the device's
    large blocks; None when the run recorded no such free or no calibration (a trace recorded elsewhere)."""
    measured = _us_per_mib(trace)
    frees = device_frees(trace) if measured is not None and trace.host_blocks else []
    if measured is None or not frees:
        return None
    per_mib: float = measured
    times = [f[0] for f in frees]
    python = trace.python
    traced = bool(python)

    def freed(start: float, end: float) -> float:
        if not traced:  # no Python calls to bound a free's stretch: what the calibration says it costs
            return min(per_mib * sum(n for _, n in frees[bisect_left(times, start):bisect_left(times, end)])
                       / (1 << 20), end - start)
        stretches: dict[tuple[float, float], float] = {}   # (from, to) -> the calibrated cost of its frees
        for ts, nbytes in frees[bisect_left(times, start):bisect_left(times, end)]:
            i = bisect_left(python, ts, key=_TS)
            hi = min(python[i].ts, end) if i < len(python) else end
            # the latest end of a call before it: among the calls started just before (a bounded look back)
            lo = max((ev.end for ev in python[max(i - LOOK_BACK, 0):i] if ev.end <= ts), default=start)
            lo = min(max(lo, start), hi)
            stretches[(lo, hi)] = stretches.get((lo, hi), 0.0) + per_mib * nbytes / (1 << 20)
        return min(sum(min(hi - lo, SLACK * cost) for (lo, hi), cost in stretches.items()), end - start)
    return freed
