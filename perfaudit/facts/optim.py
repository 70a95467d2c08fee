"""Optimizers: implementation (single-tensor loop, foreach, fused) and training advice (T10, T24)."""
from __future__ import annotations

from ..calls import FOREACH_OPTIMIZERS, FUSABLE_OPTIMIZERS
from .registry import Context, Missing, fact
from .sites import Site, site_from_probe
from .steps import OPTIMIZER_STEP


def _step_ops(ctx: Context) -> dict[str, dict]:
    """Per optimizer class (from the Optimizer.step#Class.step annotations): ms per step, ops per step,
    and which implementation the ops show."""
    trace = ctx.trace
    out: dict[str, dict] = {}
    ops = [e for e in trace.host if e.kind == "op"]
    for ann in (e for e in trace.host if e.name.startswith(OPTIMIZER_STEP)):
        if ctx.step_of(ann.ts) is None:
            continue
        cls = ann.name[len(OPTIMIZER_STEP):].split(".")[0]
        entry = out.setdefault(cls, {"ms": 0.0, "ops": 0, "fused": False, "foreach": False})
        entry["ms"] += ann.dur / 1000.0
        for op in ctx.within(ops, ann.ts, ann.end):
            if op.end > ann.end:
                continue
            entry["ops"] += 1
            entry["fused"] |= "_fused_" in op.name
            entry["foreach"] |= "_foreach_" in op.name
    n = len(ctx.steps)
    for entry in out.values():
        entry["mode"] = "fused" if entry["fused"] else "foreach" if entry["foreach"] else "single_tensor"
        entry["ms_per_step"] = entry.pop("ms") / n
        entry["ops_per_step"] = entry.pop("ops") / n
    return out


@fact("optim.single_tensor_sites", "Optimizers stepping parameter by parameter (no foreach, no fused) "
                                   "that have a fused or foreach implementation; ms is their step time.")
def single_tensor_sites(ctx: Context) -> list[Site]:
    ctx.need_trace()
    measured = _step_ops(ctx)
    if not measured:
        raise Missing("no Optimizer.step ranges in the measured steps")
    probes = {o["class"]: o for o in ctx.probes.get("optimizers", [])}
    sites = []
    n = len(ctx.steps)
    for cls, m in measured.items():
        if m["mode"] != "single_tensor" or cls not in FOREACH_OPTIMIZERS:
            continue
        probe = probes.get(cls, {})
        options = probe.get("options", {})
        if not ctx.is_gpu and not (options.get("foreach") is False and not options.get("fused")):
            # on the CPU torch defaults to the loop; on CUDA the same defaults pick foreach, so a CPU
            # run only shows a problem the script asked for explicitly (foreach=False)
            continue
        params = probe.get("param_tensors")
        if params is not None and params < 4:
            continue  # a handful of tensors: nothing to batch
        site = site_from_probe(ctx, probe.get("site"),
                               f"{cls} single-tensor loop ({m['ops_per_step']:.0f} ops per step"
                               + (f" over {params} parameter tensors)" if params else ")"),
                               **{"class": cls, "fusable": cls in FUSABLE_OPTIMIZERS})
        site.count, site.ms, site.steps_seen = n, m["ms_per_step"] * n, set(range(n))
        sites.append(site)
    return sites


@fact("optim.advice_sites", "Optimizer choices that affect convergence rather than speed: Adam with "
                            "weight_decay (L2) instead of AdamW, no learning-rate schedule.")
def advice_sites(ctx: Context) -> list[Site]:
    sites = []
    for opt in ctx.probe("optimizers"):
        decay = opt.get("options", {}).get("weight_decay") or 0
        if opt["class"] == "Adam" and decay > 0:
            sites.append(site_from_probe(ctx, opt.get("site"), f"Adam(weight_decay={decay}) couples L2 with "
                                                               "the adaptive step; AdamW decouples it"))
    return sites


@fact("optim.has_scheduler", "Whether the script built a learning-rate scheduler.")
def has_scheduler(ctx: Context) -> bool:
    return bool(ctx.probe("schedulers"))
