"""GPU-side measurements: busy and idle time per step and what the idle time is spent on, math
precision, launch-bound kernel floods, peak memory (tips T09, T11, T12, T14)."""
from __future__ import annotations

from collections import Counter, defaultdict

from ..registry import Context, Missing, fact
from ..steps import data_ranges
from . import intervals as iv
from .device_steps import device_events, per_step, traits
from .kernels import architecture
from .waits import SYNC_RUNTIME


def _require_gpu(ctx: Context) -> None:
    ctx.need_trace()
    if not ctx.is_gpu:
        raise Missing("no GPU activity in the trace (CPU-only run)")


def _gpu_per_step(ctx: Context) -> list[dict]:
    """Per measured step, µs of kernel compute, copies not under compute, idle by cause; computed once."""
    cached = ctx.__dict__.get("_gpu_per_step")
    if cached is not None:
        return cached
    _require_gpu(ctx)
    syncs = iv.Merged(iv.union((e.ts, e.end) for e in ctx.need_trace().named(SYNC_RUNTIME.__contains__, kind="runtime")))
    allocs = iv.Merged(iv.union((e.ts, e.end) for e in ctx.need_trace().named(is_allocator_call, kind="runtime")))
    data = data_ranges(ctx)
    rows = []
    for step, inside in zip(ctx.steps, per_step(ctx)):
        kernels = iv.union(iv.clip([(e.ts, e.ts + e.dur) for e in inside if e.kind == "kernel"], step.ts, step.end))
        copies = iv.union(iv.clip([(e.ts, e.ts + e.dur) for e in inside if e.kind in ("memcpy", "memset")],
                                  step.ts, step.end))
        busy = iv.union(kernels + copies)
        idle = iv.complement(busy, step.ts, step.end)
        sync_idle = iv.intersect(idle, syncs.clip(step.ts, step.end))
        rest = iv.intersect(idle, iv.complement(sync_idle, step.ts, step.end))
        alloc_idle = iv.intersect(rest, allocs.clip(step.ts, step.end))  # host in cudaMalloc/cudaFree
        rest = iv.intersect(rest, iv.complement(alloc_idle, step.ts, step.end))
        data_idle = iv.overlap(rest, data.clip(step.ts, step.end))
        rows.append({"compute": iv.total(kernels), "copies": iv.total(busy) - iv.total(kernels),
                     "sync_wait": iv.total(sync_idle), "alloc_wait": iv.total(alloc_idle), "data_wait": data_idle,
                     "idle": iv.total(idle), "step": step.dur})
    ctx.__dict__["_gpu_per_step"] = rows
    return rows


@fact("gpu.step_breakdown", "Per step on the GPU (ms): kernel compute, copies not hidden under compute, "
                            "and idle time split into sync wait (host blocked in a sync call), allocator wait "
                            "(host in cudaMalloc/cudaFree), data wait (host in DataLoader) and other idle "
                            "(host-bound: Python, launches); busy_pct.")
def gpu_step_breakdown(ctx: Context) -> dict:
    totals: Counter = Counter()
    for row in _gpu_per_step(ctx):
        totals.update(row)
    n = len(ctx.steps)
    out = {k: v / n / 1000.0 for k, v in totals.items()}
    out["other_idle"] = max(out["idle"] - out["sync_wait"] - out["alloc_wait"] - out["data_wait"], 0.0)
    out["busy_pct"] = 100.0 * (1 - out["idle"] / out["step"]) if out["step"] else 0.0
    out["idle_pct"] = 100.0 - out["busy_pct"]
    out["host_share"] = out["other_idle"] / out["idle"] if out["idle"] else 0.0
    return out


@fact("gpu.per_step", "Each measured step on the GPU (ms): compute, copies, sync wait, data wait, other idle.")
def gpu_per_step(ctx: Context) -> list[dict]:
    out = []
    for row in _gpu_per_step(ctx):
        ms = {k: v / 1000.0 for k, v in row.items()}
        ms["other_idle"] = max(ms["idle"] - ms["sync_wait"] - ms["alloc_wait"] - ms["data_wait"], 0.0)
        out.append({k: ms[k] for k in ("compute", "copies", "sync_wait", "alloc_wait", "data_wait", "other_idle",
                                       "step")})
    return out


@fact("device.capability", "Compute capability of the GPU (major.minor as a float), from the trace's "
                           "deviceProperties or the live process.")
def device_capability(ctx: Context) -> float:
    _require_gpu(ctx)
    props = ctx.need_trace().device_properties
    if isinstance(props.get("computeMajor"), int):
        minor = props.get("computeMinor") if isinstance(props.get("computeMinor"), int) else 0
        return float(f"{props['computeMajor']}.{minor}")
    cap = (ctx.probes.get("environment") or {}).get("capability")
    if cap:
        return float(cap)
    if any("hip" in e.name for e in ctx.host_of("runtime")):
        return 9.0  # ROCm: matrix cores on every data-centre part perfaudit meets
    # no deviceProperties (a re-saved or trimmed trace): the kernels' names say what they were built for
    arches = {arch for name in traits(ctx) if (arch := architecture(name)) is not None}
    if arches:
        return max(arches)
    raise Missing("the trace does not say which GPU it ran on (no deviceProperties, no architecture in the "
                  "kernels' names)")


@fact("gpu.precision", "GPU time in matrix kernels (GEMM/conv) by precision: fp32, tf32, half "
                       "(fp16/bf16/fp8), in ms per step and as shares of all kernel time (%).")
def gpu_precision(ctx: Context) -> dict:
    _require_gpu(ctx)
    totals: defaultdict[str, float] = defaultdict(float)
    by_name, step_of = traits(ctx), ctx.step_of
    bf16 = {name for name, t in by_name.items() if t.precision == "half" and "bf16" in name.lower()}
    for e in device_events(ctx):
        if e.kind != "kernel" or step_of(e.ts) is None:
            continue
        totals["kernels"] += e.dur
        kind = by_name[e.name].precision
        if kind is not None:
            totals[kind] += e.dur
            if e.name in bf16:
                totals["bf16"] += e.dur
    n = len(ctx.steps)
    kernels = totals["kernels"] or 1.0
    out = {k: totals[k] / n / 1000.0 for k in ("fp32", "tf32", "half", "bf16")}  # bf16: part of half
    out["single_ms"] = out["fp32"] + out["tf32"]
    out["single_pct"] = 100.0 * (totals["fp32"] + totals["tf32"]) / kernels
    math = totals["fp32"] + totals["tf32"] + totals["half"]
    out["half_of_math_pct"] = 100.0 * totals["half"] / math if math else 0.0
    out["uses_tf32"] = totals["tf32"] > 0
    out["single_step_pct"] = 100.0 * out["single_ms"] / ctx.step_ms if ctx.step_ms else 0.0
    return out


@fact("gpu.small_kernels", "Short elementwise kernels per step (under 10 µs, fusion candidates), their "
                           "share of all kernels (%), and the host time spent launching them (ms).")
def small_kernels(ctx: Context) -> dict:
    _require_gpu(ctx)
    launches = {e.args.get("correlation"): e.dur
                for e in ctx.need_trace().named(lambda name: "LaunchKernel" in name, kind="runtime")}
    count = small = 0
    launch_us = 0.0
    by_name, step_of = traits(ctx), ctx.step_of
    for e in device_events(ctx):
        if e.kind != "kernel" or step_of(e.ts) is None:
            continue
        count += 1
        if e.dur < 10 and by_name[e.name].small_elementwise:
            small += 1
            launch_us += launches.get(e.args.get("correlation"), 0.0)
    n = len(ctx.steps)
    launch_ms = launch_us / n / 1000.0
    return {"per_step": small / n, "kernels_per_step": count / n,
            "share_pct": 100.0 * small / count if count else 0.0, "launch_ms": launch_ms,
            "launch_share_pct": 100.0 * launch_ms / ctx.step_ms if ctx.step_ms else 0.0}


_ALLOCATOR = ("cudaMalloc", "cudaFree", "hipMalloc", "hipFree", "cudaMallocAsync", "cudaFreeAsync", "hipMallocAsync",
              "hipFreeAsync", "cuMemAlloc", "cuMemFree", "hipExtMallocWithFlags")


def is_allocator_call(name: str) -> bool:
    return name.startswith(_ALLOCATOR) and "Host" not in name


@fact("mem.allocator_churn", "Device memory allocated and freed by the runtime inside the measured steps "
                             "(cudaMalloc/cudaFree, hipMalloc/hipFree): calls per step, host ms per step, share "
                             "of the step (the caching allocator normally makes these rare after warm-up).")
def allocator_churn(ctx: Context) -> dict:
    _require_gpu(ctx)
    calls = [e for e in ctx.need_trace().named(is_allocator_call, kind="runtime") if ctx.step_of(e.ts) is not None]
    if not calls:
        return {"calls_per_step": 0.0, "ms_per_step": 0.0, "share_pct": 0.0, "frees_per_step": 0.0}
    n = len(ctx.steps)
    ms = sum(e.dur for e in calls) / n / 1000.0
    return {"calls_per_step": len(calls) / n, "ms_per_step": ms,
            "share_pct": 100.0 * ms / ctx.step_ms if ctx.step_ms else 0.0,
            "frees_per_step": sum(1 for e in calls if "Free" in e.name) / n}


@fact("mem.allocator_sites", "Where the runtime's allocator calls in the steps come from: the user line whose "
                             "ops allocated or freed (when the trace has stacks), else the ops.", needs=("stacks",))
def allocator_sites(ctx: Context) -> list:
    from ...trace.nesting import innermost
    from ..sites import SiteCollector
    _require_gpu(ctx)
    calls = ctx.need_trace().named(is_allocator_call, kind="runtime")
    ops = ctx.host_of("op")
    owners = innermost(ops, calls, ctx.by_thread(ops))
    items = []
    for rt in calls:
        op = owners.get(id(rt))
        items.append((op or rt, rt, rt.dur / 1000.0, f"{rt.name} under {op.name}" if op else f"{rt.name}"))
    collector = SiteCollector(ctx, {"empty_cache"}, ())
    collector.add_all(items)
    return collector.result()


@fact("mem.allocator_causes", "What makes the runtime allocate every step, as the live process saw it: the "
                              "caching allocator switched off (PYTORCH_NO_CUDA_MEMORY_CACHING), empty_cache() in "
                              "the loop, allocation retries (fragmentation); an empty string for a foreign trace.")
def allocator_causes(ctx: Context) -> str:
    env = ctx.probes.get("environment") or {}
    causes = []
    if env.get("no_memory_caching"):
        causes.append("PYTORCH_NO_CUDA_MEMORY_CACHING=1 switches the caching allocator off")
    if any(e.get("window_calls") for e in ctx.probes.get("empty_cache") or []):
        causes.append("torch.cuda.empty_cache() runs in the step (MEM001)")
    if env.get("alloc_retries"):
        causes.append(f"{env['alloc_retries']} allocation retries: the cache is fragmented")
    return "; ".join(causes)


@fact("mem.peak", "Peak GPU memory (allocated and reserved, GiB) against the device's memory, from "
                  "profile_memory events or the live process.")
def memory_peak(ctx: Context) -> dict:
    _require_gpu(ctx)
    peaks = ctx.need_trace().memory
    env = ctx.probes.get("environment") or {}
    if peaks:
        peak = max(peaks.values(), key=lambda p: p["peak_reserved"])
    elif env.get("max_memory_reserved"):
        peak = {"peak_allocated": env["max_memory_allocated"], "peak_reserved": env["max_memory_reserved"]}
    else:
        raise Missing("no memory data (record with profile_memory=True, or use `perfaudit run` on a GPU)")
    total = ctx.need_trace().device_properties.get("totalGlobalMem", env.get("device_memory"))
    if not isinstance(total, (int, float)) or isinstance(total, bool):
        total = env.get("device_memory")
    if not total:
        raise Missing("the device's memory size is unknown")
    gib = 1024 ** 3
    return {"allocated_gib": peak["peak_allocated"] / gib, "reserved_gib": peak["peak_reserved"] / gib,
            "device_gib": total / gib, "reserved_pct": 100.0 * peak["peak_reserved"] / total,
            "allocated_pct": 100.0 * peak["peak_allocated"] / total}
