"""The report of `perfaudit plan`: the largest batch that fits the GPU with a margin, the runs it rests on (each
batch that ran, what its step held), the bound it met, and the edit; console and JSON. Every figure says
whether it ran (measured on a GPU, or on the emulated device) or is the fit's (not run)."""
from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape

from .. import __version__

if TYPE_CHECKING:
    from ..verify.batch_plan import BatchPlan, Point

GB = 1e9
BOUND = {"data": "the DataLoader", "host": "the host's Python and launches", "sync": "host-device syncs",
         "copies": "host-to-device copies", "communication": "communication", "gpu": "the GPU's math"}


def _where(plan: BatchPlan) -> str:
    site = plan.site or {}
    path = site.get("path")
    if not path:
        return "the training DataLoader"
    shown = os.path.relpath(path) if not os.path.relpath(path).startswith("..") else path
    return f"{shown}:{site.get('line')}"


def _rate(p: Point) -> str:
    rate = p.samples_per_s
    return f"; projected {p.projected_step_ms:.2f} ms/step, {rate:,.0f} samples/s" if rate else ""


def render_console(plan: BatchPlan, console: Console) -> None:
    source = "measured on this GPU" if plan.source == "measured" else "emulated CUDA device (an estimate)"
    console.print(f"[bold]perfaudit plan[/] the largest batch that fits {escape(plan.target or 'the GPU')} with "
                  f"a 10 % margin (tip T12), each batch run before it is offered; memory: {source}", highlight=False)
    for p in plan.points:
        console.print(f"  ran batch {p.batch:>6}: step peak {p.allocated / GB:.2f} GB allocated, "
                      f"{p.reserved / GB:.2f} GB reserved{_rate(p)}", highlight=False)
    if plan.per_sample_bytes is not None and plan.largest_by_fit is not None:
        console.print(f"  each sample adds {plan.per_sample_bytes / 1e6:.2f} MB; by the fit (not run) the "
                      f"{escape(plan.target)} holds a batch of about {plan.largest_by_fit:,}", highlight=False)
    if plan.offered is None:
        console.print(f"\n[bold]no plan[/]: {escape(plan.why_not or 'nothing fit')}", highlight=False)
        return
    o, first = plan.offered, plan.points[0]
    gain = (f" ({o.samples_per_s / first.samples_per_s:.1f}x the samples/s of batch {first.batch}, projected)"
            if o.samples_per_s and first.samples_per_s else "")
    console.print(f"\n[bold]batch {o.batch}[/] fits: it ran, its step reserved {o.reserved / GB:.2f} GB of the "
                  f"{plan.usable / GB:.1f} GB a step may hold ({escape(plan.target)} less the CUDA context and the "
                  f"margin){gain}", highlight=False)
    if o.samples_per_s and first.samples_per_s and o.samples_per_s < 1.1 * first.samples_per_s:
        console.print(f"  not faster, projected: at batch {o.batch} the step is bound by "
                      f"{escape(BOUND.get(o.bottleneck or '', 'something else than the math'))}, which a larger "
                      "batch does not shorten per sample: `perfaudit run` names it; the batch pays once it is fixed",
                      highlight=False)
    if plan.bounded_by == "the dataset" and first.dataset_len:
        console.print(f"  bounded by the dataset, not by the GPU: at most a quarter of its {first.dataset_len:,} "
                      "samples, so that an epoch keeps 4 steps (larger batches were not run)", highlight=False)
    elif plan.bounded_by and plan.bounded_by != "the GPU":
        console.print(f"  bounded by {escape(plan.bounded_by)}, not by the GPU (larger batches were not run here)",
                      highlight=False)
    if plan.option:
        name, line = plan.option
        change = (f"run it with `-- {name} {o.batch}` (was {first.batch}; its option at "
                  f"{os.path.basename(plan.script)}:{line}, read by the DataLoader at {_where(plan)})")
    else:
        change = f"batch_size={o.batch} at {_where(plan)} (was {first.batch})"
    console.print(f"  change: {escape(change)}; a larger batch changes the optimisation: scale the learning rate "
                  "with it (linearly, with warm-up) and check the loss; `perfaudit verify` measures the step",
                  highlight=False)


def to_dict(plan: BatchPlan) -> dict:
    def point(p):
        return None if p is None else {"batch": p.batch, "peak_allocated_bytes": p.allocated,
                                       "peak_reserved_bytes": p.reserved, "projected_step_ms": p.projected_step_ms,
                                       "samples_per_s": p.samples_per_s, "cpu_step_ms": p.cpu_step_ms,
                                       "bottleneck": p.bottleneck, "run_dir": p.run_dir, "ran": True}
    site = plan.site or {}
    return {"perfaudit_version": __version__, "plan": "batch", "tip": "T12", "script": plan.script,
            "target": plan.target, "device_total_bytes": plan.device_total, "cuda_context_bytes": plan.context,
            "margin": 0.10, "usable_bytes": plan.usable, "memory_source": plan.source,
            "site": {"file": site.get("path"), "line": site.get("line")} if site else None,
            "option": {"name": plan.option[0], "line": plan.option[1]} if plan.option else None,
            "points": [point(p) for p in plan.points], "per_sample_bytes": plan.per_sample_bytes,
            "largest_by_fit": plan.largest_by_fit, "offered": point(plan.offered), "bounded_by": plan.bounded_by,
            "why_not": plan.why_not}


def render_json(plan: BatchPlan) -> str:
    return json.dumps(to_dict(plan), indent=2)
