"""Facts about the model's structure, read from the live process (tip T03)."""
from __future__ import annotations

from .registry import Context, fact
from .sites import Site, site_from_probe


@fact("model.bias_before_norm", "Conv/Linear layers with a bias whose output feeds BatchNorm directly "
                                "(seen by forward hooks over one step), at the line that built them.")
def bias_before_norm(ctx: Context) -> list[Site]:
    sites: dict[tuple, Site] = {}
    for i, entry in enumerate(ctx.probe("bias_before_norm")):
        where = entry.get("site") or {}
        # a layer built before the session has no site: each is its own (the static pass may place them)
        key = (where.get("path"), where.get("line") if where.get("path") else i, entry["layer"], entry["norm"])
        if key not in sites:
            sites[key] = site_from_probe(ctx, where, f"{entry['layer']}(bias=True) -> {entry['norm']}",
                                         bias_params=0, layers=0)
            sites[key].over_steps = 1  # the layers seen running in the one step the hooks watched
        site = sites[key]
        site.count += 1
        site.extra["bias_params"] += entry.get("bias_params", 0)
        site.extra["layers"] += 1
    return list(sites.values())


@fact("model.bias_lines_without_norm", "The [path, line] of lines that built Conv/Linear layers with a bias "
                                       "that ran with no BatchNorm after them (a helper called with and without "
                                       "a norm, a model's head): bias=False there would change the model.")
def bias_lines_without_norm(ctx: Context) -> list[list]:
    entries = ctx.probe("bias_without_norm") if "bias_without_norm" in ctx.probes else []
    return [list(key) for key in sorted({(e["site"]["path"], e["site"]["line"]) for e in entries
                                         if isinstance(e.get("site"), dict) and e["site"].get("path")
                                         and e["site"].get("line")})]
