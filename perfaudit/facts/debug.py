"""Debugging APIs left on during training (tip T07)."""
from __future__ import annotations

from .registry import Context, fact
from .sites import Site, site_from_probe
from .steps import BACKWARD_PREFIX

# What each API costs, in words, for the finding.
API_EFFECT = {
    "set_detect_anomaly": "anomaly detection",
    "detect_anomaly": "anomaly detection",
    "emit_nvtx": "NVTX ranges around every op",
    "gradcheck": "numerical gradient checking",
    "gradgradcheck": "numerical second-order gradient checking",
    "torch.profiler.profile": "the script's own torch.profiler",
    "torch.autograd.profiler.profile": "the legacy autograd profiler",
    "_record_memory_history": "the CUDA allocator's memory history (a stack trace kept per allocation and free)",
}


@fact("debug.apis_on", "Debugging APIs that were enabled while the window ran, with the line that "
                       "turned each on (anomaly detection, emit_nvtx, gradcheck, the CUDA memory history).")
def debug_apis_on(ctx: Context) -> list[Site]:
    calls = [c for c in ctx.probe("debug_apis") if c.get("enabled")]
    anomaly_on = ctx.probes.get("anomaly_enabled_in_window", False)
    history_on = ctx.probes.get("memory_history_in_window", False)
    sites: dict[tuple, Site] = {}
    for call in calls:
        if call["api"] in ("set_detect_anomaly", "detect_anomaly") and not anomaly_on:
            continue  # turned on and off again outside the window
        if call["api"] == "_record_memory_history" and not history_on:
            continue
        where = call.get("site") or {}
        key = (call["api"], where.get("path"), where.get("line"))
        if key not in sites:
            sites[key] = site_from_probe(ctx, where, API_EFFECT.get(call["api"], call["api"]), api=call["api"])
        site = sites[key]
        site.count += 1
    if anomaly_on and not any(s.extra["api"] in ("set_detect_anomaly", "detect_anomaly") for s in sites.values()):
        sites[("anomaly",)] = Site(None, None, None, "", "anomaly detection", exact=False,
                                   extra={"api": "set_detect_anomaly"})
    return list(sites.values())


@fact("autograd.nodes_per_step", "Backward nodes evaluated per step (autograd::engine::evaluate_function).")
def autograd_nodes(ctx: Context) -> float:
    trace = ctx.need_trace()
    count = sum(1 for e in trace.named(lambda name: name.startswith(BACKWARD_PREFIX)) if ctx.step_of(e.ts) is not None)
    return count / len(ctx.steps)


PROFILERS = {"torch.profiler.profile", "torch.autograd.profiler.profile", "emit_nvtx"}


@fact("debug.profilers_only", "Whether every debugging API on in the window is a profiler the script "
                              "started itself (perfaudit replaced it while recording).")
def profilers_only(ctx: Context) -> bool:
    sites = ctx.get("debug.apis_on")
    return bool(sites) and all(s.extra.get("api") in PROFILERS for s in sites)


@fact("debug.memory_history_on", "Whether the script's CUDA memory history (torch.cuda.memory."
                                 "_record_memory_history) recorded in the window.")
def memory_history_on(ctx: Context) -> bool:
    return any(s.extra.get("api") == "_record_memory_history" for s in ctx.get("debug.apis_on"))


@fact("debug.lighter_only", "Whether every debugging API on in the window costs per event rather than per "
                            "autograd node or evaluation: a profiler perfaudit replaced, the CUDA memory history.")
def lighter_only(ctx: Context) -> bool:
    sites = ctx.get("debug.apis_on")
    return bool(sites) and all(s.extra.get("api") in PROFILERS | {"_record_memory_history"} for s in sites)


@fact("debug.anomaly_nodes_per_step", "Backward nodes per step that paid for anomaly detection (0 when "
                                      "anomaly mode was off in the window).")
def anomaly_nodes(ctx: Context) -> float | None:
    """None (no estimate) when anomaly mode was off: a profiler's cost is not modelled."""
    return ctx.get("autograd.nodes_per_step") if ctx.probe("anomaly_enabled_in_window") else None
