"""Device memory measured on a real GPU (collect/probes/gpu_memory.py): the same figures the emulated device
estimates (facts/gpu/memory_estimate.py `memory.emulated`), from torch's own counters and allocator history."""
from __future__ import annotations

from ..registry import Context, fact


@fact("memory.measured", "On a real GPU, the device memory of two warm-up steps as torch counted it: peak "
                         "allocated and reserved bytes, what held them at the peak and the user's lines that "
                         "allocated them, against this GPU's memory (collect/probes/gpu_memory.py).")
def measured_memory(ctx: Context) -> dict | None:
    seen = ctx.probes.get("device_memory")
    if not isinstance(seen, dict) or not seen.get("measured") or not seen.get("peak_allocated_bytes"):
        return None
    env = ctx.probes.get("environment") or {}
    total = seen.get("device_total_bytes") or env.get("device_memory") or 0
    outside = int(seen.get("outside_pool_bytes") or 0)
    sites = [{"file": ctx.source.display_path(s["path"]), "line": s["line"], "bytes": s["bytes"],
              "categories": s.get("categories") or {}} for s in seen.get("top_sites") or [] if s.get("path")]
    name = env.get("device_name") or "this GPU"
    scope = seen.get("peak_scope") if isinstance(seen.get("peak_scope"), str) else None
    source = "measured on this GPU by torch's allocator over the last two warm-up steps"
    return {"source": source + (f" ({scope})" if scope else ""),
            "measured": True, "peak_allocated_bytes": seen["peak_allocated_bytes"],
            "peak_reserved_bytes": seen["peak_reserved_bytes"], "by_category": seen.get("by_category") or {},
            "top_sites": sites, "target": name, "device_total_bytes": total,
            "headroom_bytes": total - seen["peak_reserved_bytes"] - outside, "cuda_context_bytes": outside or None,
            "peak_scope": scope or None}
