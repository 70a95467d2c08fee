"""DistributedDataParallel set up for the worst case (tip T27), from DDP's own record in the live
process (its options, backend, parameters that got no gradient) and its forwards per optimizer step."""
from __future__ import annotations

from ..registry import Context, fact
from ..sites import Site, site_from_probe
from .ranks import rank_stats


def _models(ctx: Context) -> list[dict]:
    return ctx.probe("ddp")


@fact("ddp.unused_search_needless", "DDP models built with find_unused_parameters=True although every "
                                    "parameter received a gradient (DDP's unused_parameter_size was 0); the "
                                    "search's host time in the measured steps is the site's.")
def unused_search_needless(ctx: Context) -> list[Site]:
    needless = []
    for m in _models(ctx):
        if not m.get("find_unused_parameters"):
            continue
        unused = m.get("unused_parameter_size")
        if unused is None:
            unused = m.get("params_without_grad")
        if unused == 0:
            needless.append(m)
    searches = _unused_searches(ctx) if needless else []
    walks = sum(1 for e in searches if e.name.startswith("<built-in"))
    sites = []
    for m in needless:
        seen = f", searched for {walks / len(ctx.steps):.0f} time(s) a step" if walks else ""
        site = site_from_probe(ctx, m.get("site"), f"no unused parameter{seen}")
        site.count = 1
        if searches:  # the trace names no model: one DDP model (the usual case) made them all
            site.count, site.steps_seen = max(walks, 1), set(range(len(ctx.steps)))
            site.ms = sum(e.dur for e in searches) / 1000.0 / len(needless)
        sites.append(site)
    return sites


def _unused_searches(ctx: Context) -> list:
    """DDP's search after each forward, in the measured steps: the outputs gathered (`_find_tensors`, Python)
    and the autograd graph walked from them (Reducer.prepare_for_backward); outermost calls only. Without
    find_unused_parameters DDP calls prepare_for_backward([]), which walks nothing."""
    found = [e for e in ctx.need_trace().python  # in trace order
             if e.name.startswith("<built-in method prepare_for_backward") or e.name.endswith(": _find_tensors")]
    out, end = [], float("-inf")
    for step in ctx.steps:
        for e in ctx.within(found, step.ts, step.end):
            if e.ts >= end:
                out.append(e)
                end = e.end
    return out


@fact("ddp.sync_per_step", "DDP forwards per optimizer step that asked for gradient synchronisation: more "
                           "than one is gradient accumulation without no_sync() (an all-reduce per micro-step).")
def sync_per_step(ctx: Context) -> list[Site]:
    n = len(ctx.steps)
    sites = []
    for m in _models(ctx):
        synced, unsynced = _in_measured_steps(ctx, m, "sync"), _in_measured_steps(ctx, m, "nosync")
        per_step = synced / n
        if per_step <= 1.0:
            continue
        stats = rank_stats(ctx)
        collective_ms = (stats or {}).get("collective_ms") or 0.0
        site = site_from_probe(ctx, m.get("site"), f"{per_step:.1f} synchronised forwards per optimizer step")
        site.count = synced
        site.steps_seen = set(range(n))
        # all but one of the all-reduces of a step are not needed: their share of the collective time
        site.ms = collective_ms * (per_step - 1) / per_step * n
        site.extra.update(syncs_per_step=per_step, nosync_per_step=unsynced / n)
        sites.append(site)
    return sites


def _in_measured_steps(ctx: Context, model: dict, kind: str) -> int:
    """Forwards of one kind ("sync", "nosync") in the measured steps (a step left out of the figures, an
    evaluation pass say, is left out here too); the window's total for a probe without per-step counts."""
    by_step = model.get(f"window_{kind}_forwards_by_step")
    if isinstance(by_step, dict):
        return sum(int(by_step.get(str(s.number), 0)) for s in ctx.steps)
    return int(model.get(f"window_{kind}_forwards", 0))


# the reducer's range around its copy of an all-reduced bucket back into the gradients (reducer.cpp), which
# gradient_as_bucket_view=True has no need of: there the gradients are views into the buckets
COPY_BACK = "torch.distributed.ddp.reducer::copy_bucket_to_grad"


def bucket_copy_spans(ctx: Context) -> list[tuple[float, float]]:
    """DDP's copies of the all-reduced buckets back into the gradients in the measured steps (µs of the trace)."""
    copies = ctx.need_trace().named(lambda name: name == COPY_BACK)
    return [(e.ts, e.end) for step in ctx.steps for e in ctx.within(copies, step.ts, step.end) if e.end <= step.end]


@fact("ddp.bucket_view_off", "DDP models with gradient_as_bucket_view=False (the default): every gradient "
                             "is copied into DDP's buckets and back; MB of gradients copied, and the copies "
                             "back the trace shows in the measured steps (their time is the site's).")
def bucket_view_off(ctx: Context) -> list[Site]:
    sites = []
    models = [m for m in _models(ctx) if m.get("gradient_as_bucket_view") is False]
    copies = bucket_copy_spans(ctx) if models else []
    n = len(ctx.steps)
    for m in models:
        mb = (m.get("param_bytes") or 0) / 2**20
        seen = f"; {len(copies) / n:.0f} copies back a step" if copies else ""
        site = site_from_probe(ctx, m.get("site"), f"gradient_as_bucket_view=False ({mb:.1f} MB of gradients{seen})")
        site.count = 1
        if copies:  # the trace names no model: one DDP model (the usual case) has them all
            site.count, site.steps_seen = len(copies), set(range(n))
            site.ms = sum(end - start for start, end in copies) / 1000.0 / len(models)
        site.extra.update(gradient_mb=mb)
        sites.append(site)
    return sites
