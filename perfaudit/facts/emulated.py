"""What the emulated CUDA device saw (`perfaudit run --device emulate-cuda`, collect/emulation/placement.py):
host-to-device copies as the script's GPU branch makes them, at the user's line, per measured step.
Copies are not timed (a CPU has no PCIe link): their cost is the bytes over a typical bandwidth."""
from __future__ import annotations

import os

from ..probe_schema import HALF_MATH_RANGE
from ..projection.work import precision
from ..static.gpu_switch import amp_switch
from ..trace.nesting import enclosing
from ..trace.op_names import MM_OPS
from .flops.counted import op_flops
from .registry import Context, Missing, fact
from .sites import Site, SiteCollector, site_from_probe

# typical effective host-to-device bandwidths, used only to estimate on a CPU run what a copy costs on
# a GPU: a pageable copy is staged through a bounce buffer and blocks the host; a pinned one runs at the
# link's speed (and overlaps compute when non_blocking)
PAGEABLE_GBPS = 6.0
PINNED_GBPS = 20.0
ORIGIN = {"loader": "a DataLoader batch", "sample": "moved in a DataLoader fetch (__getitem__ or collate_fn)",
          "host": "a tensor kept on the host", "data": "host data (a list or array)",
          "made": "made on the host in the step", "thread": "moved by a thread of the script's (a prefetcher)"}


def offered(probes: dict) -> bool:
    """Whether the run offered the script an emulated CUDA device (whichever branch it then took)."""
    env = probes.get("environment") or {}
    return bool(env.get("emulated_cuda")) and isinstance(probes.get("cuda_emulation"), dict)


def gpu_branch_ran(probes: dict) -> bool:
    """Whether the script took its GPU branch on the emulated device, from what the device saw: the
    parameters an optimizer steps were on it, or (no optimizer: inference) torch ran ops on tensors on
    it. A script that put a probe tensor there but trained on the CPU took its CPU branch."""
    if not offered(probes):
        return False
    seen = probes["cuda_emulation"]
    if "device_ops" not in seen:  # recorded before the branch was followed: the device was used
        return True
    optimizers = [o for o in probes.get("optimizers") or [] if isinstance(o, dict) and "on_emulated_device" in o]
    if optimizers:
        return any(o["on_emulated_device"] for o in optimizers)
    return bool(seen.get("device_ops"))


def emulated(ctx: Context) -> bool:
    """Whether what the report says of the CUDA path comes from the emulated device: it was offered and
    the script's GPU branch ran there (else the run is the CPU branch's, and reported as one)."""
    return gpu_branch_ran(ctx.probes)


@fact("run.emulated_cuda", "Whether the script ran its CUDA branch on an emulated CUDA device (a CPU-only "
                           "run with --device emulate-cuda or auto): copies and placements seen as a GPU run makes them.")
def run_emulated_cuda(ctx: Context) -> bool:
    return emulated(ctx)


@fact("run.cpu_branch_taken", "Whether an emulated CUDA device was offered but the script took its CPU "
                              "branch (nothing it trained was put on the device): a CPU report.")
def cpu_branch_taken(ctx: Context) -> bool:
    return offered(ctx.probes) and not gpu_branch_ran(ctx.probes)


def in_measured_steps(ctx: Context, record: dict) -> dict[int, int]:
    """A record's counts per step (by the probes' step number), as index into ctx.steps -> count, for
    the measured steps only."""
    index = {str(s.number): i for i, s in enumerate(ctx.steps)}
    return {index[k]: v for k, v in (record.get("by_step") or {}).items() if k in index}


def copy_sites(ctx: Context, origins: set[str], only_costly: bool) -> list[Site]:
    """The emulated copies from these origins in the measured steps, one Site per line; `only_costly`
    leaves out pinned non_blocking copies (they overlap compute on a GPU)."""
    sites = []
    for copy in ctx.probes["cuda_emulation"]["copies"]:
        if copy["origin"] not in origins:
            continue
        by_step = in_measured_steps(ctx, copy)
        pinned, non_blocking = copy.get("pinned", False), copy.get("non_blocking", False)
        if not by_step or (only_costly and pinned and non_blocking):
            continue
        count = sum(by_step.values())
        per_copy = copy.get("window_bytes", 0) / max(copy.get("window_calls", 0), 1)
        made, where = copy.get("made_at") or {}, copy["site"]
        made_text = ""
        if copy["origin"] == "made" and made and (made.get("path"), made.get("line")) != (where["path"], where["line"]):
            made_text = f", made at {ctx.source.display_path(made['path'])}:{made['line']}"
        detail = (f"{ORIGIN[copy['origin']]}{made_text}, {_size(per_copy)} each, "
                  + ("pinned" if pinned else "pageable") + (", non_blocking" if non_blocking else ", blocking"))
        site = site_from_probe(ctx, copy["site"], detail, blocking=not non_blocking, pageable=not pinned,
                               estimated=True, emulated=True, lines=[copy["site"]["line"]], origin=copy["origin"])
        site.count = count
        site.ms = per_copy * count / ((PINNED_GBPS if pinned else PAGEABLE_GBPS) * 1e9) * 1000.0
        site.steps_seen = set(by_step)
        sites.append(site)
    return sorted(sites, key=lambda s: (-s.ms, s.line or 0))


WAITS = {"torch.cuda.synchronize", "torch.accelerator.synchronize", "Event.synchronize", "Stream.synchronize"}


def emulated_waits(ctx: Context) -> list[Site]:
    """The calls on the emulated CUDA path that block the host until the device has caught up, one
    Site per line, in the measured steps (not timed: a CPU has no device to wait for)."""
    sites = []
    for call in ctx.probes["cuda_emulation"]["calls"]:
        by_step = in_measured_steps(ctx, call)
        if call["api"] not in WAITS or not by_step:
            continue
        site = site_from_probe(ctx, call["site"], f"{call['api']} called directly", emulated=True,
                               lines=[call["site"]["line"]])
        site.count, site.steps_seen = sum(by_step.values()), set(by_step)
        sites.append(site)
    return sites


def _size(nbytes: float) -> str:
    for unit, scale in (("MB", 1e6), ("kB", 1e3)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes:.0f} B"


# matrix math as the CPU trace names it (leaf ops: one per linear layer, matmul or convolution)
MATH_OPS = MM_OPS | {"aten::convolution"}
# forward matrix FLOPs per step below which precision is not what a GPU step waits on (a few
# microseconds of tensor-core time: launches dominate); counted from the recorded input shapes, so the
# verdict does not move with how busy this CPU is
MIN_GFLOP_PER_STEP = 0.5


@fact("amp.fp32_math_sites", "On the emulated CUDA path, the line whose forward matrix math (linear layers, "
                             "matmuls, convolutions; at least 0.5 GFLOP a step) ran with no autocast entered "
                             "for CUDA in the measured steps; ms is this CPU's time for it.", needs=("stacks", "shapes"))
def fp32_math_sites(ctx: Context) -> list[Site]:
    if not emulated(ctx):
        return []
    measured = {str(s.number) for s in ctx.steps}
    for entry in ctx.probes["cuda_emulation"]["autocast"]:
        used = entry.get("enabled", True) and entry["device_type"] == "cuda" and entry.get("dtype") in ("float16", "bfloat16")
        if used and set(entry.get("by_step") or {}) & measured:
            return []  # mixed precision is on for this step
    trace = ctx.need_trace()
    ops = [e for e in trace.named(MATH_OPS.__contains__, kind="op") if ctx.step_of(e.ts) is not None]
    attributions = ctx.frames.attribute_all(ops) if ctx.frames else {}
    # in float32: a model kept in 16 bits (`model.to(torch.bfloat16)`) runs its math in them without autocast,
    # computed in float32 inside a 16-bit op's range where this CPU's 16-bit math is slow (half_math.py)
    half = trace.named(lambda name: name.startswith(HALF_MATH_RANGE), kind="annotation")
    in_half = {id(op) for op, outer in enclosing(half, ops) if outer} if half else set()
    forward = [e for e in ops if id(e) in attributions and attributions[id(e)].via != "backward"
               and precision(e, tf32=False) == "fp32" and id(e) not in in_half]
    if sum(op_flops(e) for e in forward) / len(ctx.steps) < MIN_GFLOP_PER_STEP * 1e9:
        return []
    collector = SiteCollector(ctx)
    collector.add_all([(e, e, e.dur / 1000.0, "FP32 matrix math") for e in forward], attributions=attributions)
    sites = collector.result()
    return sites[:1]  # where most of it is issued: the model's call in the step


@fact("amp.region_off", "On the emulated CUDA path, an autocast region for CUDA the measured steps entered "
                       "switched off (enabled=False): where (file:line), and how to turn it on (the script's own "
                       "option when its code has one, else the region's `enabled=`).")
def autocast_region_off(ctx: Context) -> dict:
    if not emulated(ctx):
        raise Missing("not an emulated CUDA run")
    measured = {str(s.number) for s in ctx.steps}
    for entry in ctx.probes["cuda_emulation"]["autocast"]:
        site = entry.get("site") or {}
        if (entry["device_type"] == "cuda" and entry.get("enabled") is False and site.get("path")
                and set(entry.get("by_step") or {}) & measured):
            script = ctx.meta.get("script")
            script = script if isinstance(script, str) else site["path"]
            switch = amp_switch(script, site["path"], site["line"])
            where = f"{ctx.source.display_path(site['path'])}:{site['line']}"
            if switch is None:
                return {"where": where, "how": f"set its `enabled=` to True at {where}"}
            name = os.path.basename(script)
            option, path, line = switch
            return {"where": where, "how": f"pass `{option}` to the script (its option at "
                                           f"{ctx.source.display_path(path)}:{line}; `perfaudit run {name} -- "
                                           f"{option}` audits that run)"}
    raise Missing("no autocast region entered switched off")
