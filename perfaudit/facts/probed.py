"""Patterns only the live process shows: DataParallel wrappers, empty_cache() calls (T15, T18)."""
from __future__ import annotations

from .emulated import in_measured_steps
from .registry import Context, Missing, fact
from .sites import Site, site_from_probe


@fact("dist.data_parallel_sites", "Where the script wraps a model in nn.DataParallel.")
def data_parallel_sites(ctx: Context) -> list[Site]:
    entries = ctx.probe("data_parallel")
    sites = []
    for entry in entries:
        site = site_from_probe(ctx, entry.get("site"), entry.get("class", "DataParallel"))
        site.count = 1
        sites.append(site)
    if not sites and ctx.trace is not None:
        # a trace recorded with modules/stacks shows DataParallel.forward frames
        if any("DataParallel" in e.name and "forward" in e.name for e in ctx.need_trace().python):
            sites.append(Site(None, None, None, "", "DataParallel.forward in the trace"))
    return sites


@fact("mem.empty_cache_sites", "torch.cuda.empty_cache() calls made in the measured steps, by line.")
def empty_cache_sites(ctx: Context) -> list[Site]:
    n = len(ctx.steps)
    sites = []
    for entry in ctx.probe("empty_cache"):
        if not entry.get("window_calls"):
            continue
        site = site_from_probe(ctx, entry.get("site"), "torch.cuda.empty_cache()")
        if "by_step" in entry:  # the window's warm-up and the steps left out (a busy CPU) are not counted
            by_step = in_measured_steps(ctx, entry)
            if not by_step:
                continue
            site.count, site.steps_seen = sum(by_step.values()), set(by_step)
        else:  # a record from before perfaudit counted by step
            site.count, site.steps_seen = entry["window_calls"], set(range(min(entry["window_calls"], n)))
        sites.append(site)
    return sites


def segments_per_empty_cache(ctx: Context) -> float | None:
    """The cached segments each torch.cuda.empty_cache() gives back on the emulated device (its allocator's replay
    of the tracked steps); None where no call was tracked (a GPU run's trace has the real cudaFree calls)."""
    memory = ctx.probes.get("device_memory")
    emptied = memory.get("empty_cache") if isinstance(memory, dict) else None
    if not emptied or not emptied.get("calls"):
        return None
    return emptied["segments"] / emptied["calls"]


@fact("mem.empty_cache_release", "What each torch.cuda.empty_cache() gives back on the emulated device's allocator "
                                 "(its tracked steps replayed): cached segments and MiB a call.")
def empty_cache_release(ctx: Context) -> dict:
    segments = segments_per_empty_cache(ctx)
    if segments is None:
        raise Missing("no empty_cache() call in the steps whose device memory was tracked")
    emptied = ctx.probes["device_memory"]["empty_cache"]
    return {"segments": segments, "mib": emptied["bytes"] / emptied["calls"] / 2**20}
