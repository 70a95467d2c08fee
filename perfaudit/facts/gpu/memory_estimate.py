"""Device memory on the emulated CUDA path (collect/emulation/memory/device_memory.py): the peak of two warm-up steps,
what held it and the user's lines that made it, with what torch adds on a GPU (cuBLAS workspaces, the CUDA
context), against the projection's target GPU; the measured counterpart is memory.py."""
from __future__ import annotations

from ...collect.emulation.memory.caching_allocator import CUDA_CONTEXT_BYTES, cublas_workspace_bytes
from ...projection import devices
from ..emulated import emulated
from ..registry import Context, Missing, fact

# the GPU the emulated run's memory is weighed against unless the run is projected onto another (--target):
# an H100 80 GB (SXM), with its total memory as torch reports it there (devices.yaml's memory_bytes)
TARGET_NAME = "H100 80 GB"
DEFAULT_DEVICE = "H100 SXM"


def _memory_target(ctx: Context) -> tuple[str, int, float]:
    """The GPU the memory is weighed against: the projection's target (its memory as the device reports it),
    else an H100; and its compute capability (0 when not NVIDIA's)."""
    try:
        name = ctx.get("projection")["target"]
    except Missing:
        name = DEFAULT_DEVICE
    device = devices.target(name)
    if device.name == DEFAULT_DEVICE or not device.memory_gib:
        return TARGET_NAME, devices.target(DEFAULT_DEVICE).reported_memory, device.compute_capability
    return f"{device.name} {device.memory_gib:g} GB", device.reported_memory, device.compute_capability


RECURRENT = {"LSTM", "GRU", "RNN"}



@fact("memory.emulated", "On the emulated CUDA path, the device memory of two warm-up steps: peak allocated "
                         "and reserved bytes, what held them at the peak (parameters, gradients, optimizer state, "
                         "activations, batches, temporaries) and the user's lines that made them, against the "
                         "projection's target GPU, else an H100 80 GB (collect/emulation/memory/device_memory.py).")
def emulated_memory(ctx: Context) -> dict | None:
    seen = ctx.probes.get("device_memory")
    if not emulated(ctx) or not isinstance(seen, dict) or not seen.get("peak_allocated_bytes"):
        return None
    sites = [{"file": ctx.source.display_path(s["path"]), "line": s["line"], "bytes": s["bytes"],
              "categories": s.get("categories") or {}} for s in seen.get("top_sites") or [] if s.get("path")]
    name, total, capability = _memory_target(ctx)
    # what torch adds on a GPU and the CPU does not: a cuBLAS workspace for each pass that ran a matrix
    # op on the device (forward on the script's thread, backward on autograd's device thread)
    # (cuBLASLt's 1 MiB beside them, seen in training on torch 2.11, is not added: inference traces of an older
    # torch on an H100 held none, and which torch adds it is not known)
    workspace = int(seen.get("cublas_workspaces") or 0) * cublas_workspace_bytes(capability)
    by_category = dict(seen.get("by_category") or {})
    if workspace:
        by_category["cuBLAS workspace"] = workspace
    allocated, reserved = seen["peak_allocated_bytes"] + workspace, seen["peak_reserved_bytes"] + workspace
    context = CUDA_CONTEXT_BYTES if capability else None  # NVIDIA's; another vendor's runtime is not known here
    # cuDNN's memory is not modelled. With cudnn.benchmark on, three conv nets' steps 2-7 on an H200 were within
    # 1 MiB of the estimate: what it leaves out is the first step's algorithm search (52-111 MB more), which
    # borrows free memory; with it off (cuDNN's heuristics) and for recurrent layers, the workspaces are not
    # measured (docs/accuracy.md). The estimate says what it leaves out.
    listed = seen.get("cudnn")
    kinds = list(listed) if isinstance(listed, list) else []
    modules = ctx.probes.get("module_order")
    if isinstance(modules, list) and any(m in RECURRENT for m in modules if isinstance(m, str)):
        kinds.append("recurrent layers")  # cuDNN's RNN kernels, with their workspace and reserve space
    cudnn = [k for k in dict.fromkeys(kinds) if k in ("convolutions", "recurrent layers")] if capability else []
    env = ctx.probes.get("environment")
    if "convolutions" in cudnn and isinstance(env, dict) and env.get("cudnn_benchmark") is True:
        cudnn.remove("convolutions")
        not_counted = ["cudnn.benchmark's search for the convolutions' algorithms in the first step (it borrows "
                       "free memory)"]
    else:
        not_counted = []
    not_counted += [f"cuDNN's workspaces for {' and '.join(cudnn)}"] if cudnn else []
    return {"source": "emulated CUDA device, the last two warm-up steps (an estimate of what a GPU holds)",
            "not_counted": not_counted,
            "peak_allocated_bytes": allocated, "peak_reserved_bytes": reserved,
            "by_category": dict(sorted(by_category.items(), key=lambda kv: -kv[1])), "top_sites": sites,
            "target": name, "device_total_bytes": total, "headroom_bytes": total - reserved - (context or 0),
            "cublas_workspace_bytes": workspace, "cuda_context_bytes": context}


@fact("memory.emulated_peak", "The emulated device's peak memory against the target GPU, for the rules: "
                              "reserved_gib, allocated_gib, device_gib, reserved_pct (of the target's memory), "
                              "target, top_site (file:line holding the most at the peak) and top_site_gib.")
def emulated_peak(ctx: Context) -> dict:
    seen = ctx.get("memory.emulated")
    if not seen or not seen.get("device_total_bytes"):
        raise Missing("no device memory estimate (the CUDA path did not run emulated)")
    gib, total = float(1 << 30), seen["device_total_bytes"]
    top = (seen.get("top_sites") or [None])[0]
    return {"reserved_gib": seen["peak_reserved_bytes"] / gib, "allocated_gib": seen["peak_allocated_bytes"] / gib,
            "device_gib": total / gib, "reserved_pct": 100.0 * seen["peak_reserved_bytes"] / total,
            "target": seen["target"], "top_site": f"{top['file']}:{top['line']}" if top else "an unknown line",
            "top_site_gib": top["bytes"] / gib if top else 0.0}
