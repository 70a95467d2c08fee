"""Host-to-device copies: pageable memory and blocking copies (tips T04, T22, T23)."""
from __future__ import annotations

import re

from ...calls import DEVICE_COPIES, creates_on_host_text
from ...trace.nesting import innermost
from ..emulated import PAGEABLE_GBPS, copy_sites, emulated
from ..registry import Context, Missing, fact
from ..sites import Site, SiteCollector, stacked_only
from .launches import runtime_of_device
from .waits import host_waits


def _is_device_move(call) -> bool:
    text = call.call.replace(" ", "")
    if call.name == "cuda":
        return True
    return call.name == "to" and any(k in text for k in ("device", "cuda", "'gpu'", "accelerator"))


@fact("copy.h2d", "Host-to-device copies per step on a GPU trace: count, bytes, ms, and how many "
                  "came from pageable memory.")
def h2d_summary(ctx: Context) -> dict:
    if not ctx.is_gpu:
        raise Missing("no GPU activity in the trace")
    n = len(ctx.steps)
    out = {"count": 0, "bytes": 0, "ms": 0.0, "pageable_count": 0, "pageable_bytes": 0, "pageable_ms": 0.0}
    for ev in ctx.need_trace().device:
        if ev.kind != "memcpy" or "HtoD" not in ev.name or ctx.step_of(ev.ts) is None:
            continue
        nbytes = ev.args.get("bytes", 0) if isinstance(ev.args.get("bytes"), int) else 0
        pageable = "Pageable" in ev.name
        for prefix, on in (("", True), ("pageable_", pageable)):
            if on:
                out[prefix + "count"] += 1
                out[prefix + "bytes"] += nbytes
                out[prefix + "ms"] += ev.dur / 1000.0
    return {k: v / n for k, v in out.items()}


WAITED = "pageable HtoD copy, and the GPU idle after the host waited for it"


def pageable_h2d(ctx: Context) -> list[tuple]:
    """On a GPU trace, each host-to-device copy from pageable memory with the op that made it (or its
    runtime call, or None when the trace does not link it): [(copy, owner)]."""
    cached = ctx.__dict__.get("_pageable_h2d")
    if cached is not None:
        return cached
    runtime_by_corr = runtime_of_device(ctx)
    copies = [e for e in ctx.need_trace().device if e.kind == "memcpy" and "HtoD" in e.name and "Pageable" in e.name]
    launches = [runtime_by_corr.get(c.args.get("correlation")) for c in copies]
    ops = ctx.host_of("op")
    owner = innermost(ops, [r for r in launches if r is not None], ctx.by_thread(ops))
    out = [(copy, owner.get(id(launch), launch) if launch is not None else None)
           for copy, launch in zip(copies, launches)]
    ctx.__dict__["_pageable_h2d"] = out
    return out


def _gpu_pageable_sites(ctx: Context) -> list[Site]:
    """Each pageable copy's time and, when the op that made it then waited for it (a blocking copy: torch
    synchronizes the stream after a pageable one), the GPU idle that wait exposed (sync.py's measure, which
    SYNC001 leaves to this rule)."""
    copies = pageable_h2d(ctx)
    owners = {id(o) for _, o in copies if o is not None}
    waited: dict[int, float] = {}
    for _, op, idle in host_waits(ctx) if owners else ():
        if op is not None and id(op) in owners:
            waited[id(op)] = waited.get(id(op), 0.0) + idle
    items = []
    for copy, anchor in copies:
        if anchor is None:
            continue  # no host side to attribute: counted in copy.h2d only
        wait = waited.pop(id(anchor), 0.0)
        items.append((anchor, copy, (copy.dur + wait) / 1000.0, WAITED if wait > 0 else "pageable HtoD copy"))
    collector = SiteCollector(ctx, fallback_calls=DEVICE_COPIES)
    collector.add_all(items)
    return collector.result()


def _device_moves(ctx: Context) -> list[tuple]:
    """(step, frame, call) for each `.to(device)`/`.cuda()` call in the user's code that ran in a
    measured step (its aten::to op attributed to that function; the call found in its source). Read once
    per context: the copy sites and the host-made sites both walk them."""
    if "_device_moves" not in ctx.__dict__:
        ctx.__dict__["_device_moves"] = list(_find_device_moves(ctx))
    return ctx.__dict__["_device_moves"]


def _find_device_moves(ctx: Context):
    if not ctx.frames:
        raise Missing("the trace has no Python stacks to find the lines")
    ops = ctx.need_trace().named("aten::to".__eq__, kind="op")
    attributions = ctx.frames.attribute_all(ops)
    for op in ops:
        att, step = attributions.get(id(op)), ctx.step_of(op.ts)
        if att is None or step is None or att.via not in ("to", "cuda"):
            continue
        f = att.frame
        for call in ctx.source.calls(f.path, f.line, f.func, {att.via}) or []:
            if _is_device_move(call):
                yield step, f, call


def _made_on_host(ctx: Context, f, call) -> bool:
    """Whether the tensor a device move copies was made by a host factory (`torch.randn(...)`), in the call
    or in an assignment of its name in that function."""
    origins = [call.receiver] + ctx.source.assignments(f.path, f.line, f.func).get(call.receiver, [])
    return any(creates_on_host_text(o) for o in origins)


def _cpu_copy_sites(ctx: Context) -> list[Site]:
    """On a CPU run: the lines that move each batch to the device, from the trace's aten::to ops and
    the source (no copy happens on the CPU, but the same line pays on a GPU)."""
    loaders = ctx.probes.get("dataloaders", [])
    if not loaders:
        return []  # no batches from a DataLoader: other moves are COPY002's (tensors made on the host)
    batch_bytes = max((d.get("batch_bytes", 0) for d in loaders), default=0)
    unpinned = [] if source_pins(ctx) else [d for d in loaders if not d.get("pin_memory")]
    sites: dict[tuple, Site] = {}
    for step, f, call in _device_moves(ctx):
        blocking = call.kwargs.get("non_blocking") is not True
        if (not blocking and not unpinned) or _made_on_host(ctx, f, call):  # COPY002's, not a batch
            continue
        path = ctx.source.display_path(f.path)
        site = sites.setdefault((path, call.line), Site(
            path, call.line, f.func, call.code, f"{call.call}", True,
            extra={"blocking": blocking, "pageable": bool(unpinned), "estimated": True, "lines": [call.line]}))
        if step not in ctx.unstacked_steps:
            site.steps_seen.add(step)
    per_site_ms = batch_bytes / (PAGEABLE_GBPS * 1e9) * 1000.0 / max(len(sites), 1) if unpinned else 0.0
    for site in sites.values():
        site.count = len(site.steps_seen)
        site.ms = per_site_ms * site.count  # estimate, not measured: see PAGEABLE_GBPS
    return stacked_only(ctx, sorted(sites.values(), key=lambda s: (-s.ms, s.line or 0)))


@fact("copy.pageable_sites", "Lines whose host-to-device copies come from pageable memory or block "
                             "the host: measured on a GPU trace, estimated on a CPU run.", needs=("stacks",))
def pageable_sites(ctx: Context) -> list[Site]:
    ctx.need_trace()
    ctx.steps
    if ctx.is_gpu:
        return _gpu_pageable_sites(ctx)
    if emulated(ctx):  # the CUDA branch ran on the emulated device: its copies, not the source's text
        return copy_sites(ctx, {"loader", "sample", "host", "data"}, only_costly=True)
    return _cpu_copy_sites(ctx)


_PINS = re.compile(r"pin_memory[\"']?\s*[=:]\s*(?!False\b)[\w(\[]")


def source_pins(ctx: Context) -> bool:
    """Whether the script's code asks for pinned memory on some path (`pin_memory=True`,
    `pin_memory=torch.cuda.is_available()`, `{"pin_memory": use_cuda}` in kwargs built for CUDA), in the
    script or a module of the user's it imported: on the GPU its loader pins."""
    script = ctx.meta.get("script")
    files = ([script] if isinstance(script, str) else []) + list(ctx.probes.get("user_files") or [])
    return any(_PINS.search(ctx.source.text(path)) for path in dict.fromkeys(files))


@fact("copy.kinds", "What the copy sites reported are: any blocking (no non_blocking=True), any from "
                    "pageable memory (an unpinned DataLoader), any a DataLoader's batch (on the emulated device, "
                    "which knows; else assumed), so that the fix names only what is missing.",
      needs=("stacks",))
def copy_kinds(ctx: Context) -> dict:
    sites = ctx.get("copy.pageable_sites")
    return {"blocking": any(s.extra.get("blocking", True) for s in sites),
            "pageable": any(s.extra.get("pageable", True) for s in sites),
            "from_loader": any(s.extra.get("origin", "loader") in ("loader", "sample") for s in sites)}


@fact("data.unpinned_loaders", "DataLoaders that fed batches during the run with pin_memory=False (on a CPU "
                               "run, none when the source pins on its CUDA path).")
def unpinned_loaders(ctx: Context) -> list[dict]:
    if not ctx.is_gpu and not emulated(ctx) and source_pins(ctx):
        return []
    return [d for d in ctx.probe("dataloaders") if not d.get("pin_memory") and not d.get("batches_on_device")]


@fact("copy.host_created_sites", "Lines that create a tensor on the host and move it to the device in "
                                 "every step (torch.randn(...).to(device)), from the trace and the source.", needs=("stacks",))
def host_created_sites(ctx: Context) -> list[Site]:
    ctx.need_trace()
    ctx.steps
    if emulated(ctx):
        return copy_sites(ctx, {"made"}, only_costly=False)
    sites: dict[tuple, Site] = {}
    for step, f, call in _device_moves(ctx):  # in a loop or in a helper the step calls: steps_seen says
        if not _made_on_host(ctx, f, call):
            continue
        path = ctx.source.display_path(f.path)
        site = sites.setdefault((path, call.line), Site(path, call.line, f.func, call.code, call.call,
                                                        extra={"lines": [call.line]}))
        site.steps_seen.add(step)
    for site in sites.values():
        site.count = len(site.steps_seen)
    return list(sites.values())
