"""The report of `perfaudit plan`: the largest batch that fits the GPU with a margin, the runs it rests on (each
batch that ran, what its step held), the bound it met, and the edit; and of `plan --checkpoint`: each block
checkpointed in a run of its own, what it freed and what its recompute cost; console and JSON. Every figure says
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
    from ..verify.checkpoint_plan import CheckpointPlan
    from ..verify.plan_verify import PlanVerification

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
                  "with it (linearly, with warm-up) and check the loss; `perfaudit verify SCRIPT --plan FILE` checks a "
                  "plan written with `-o FILE` (speed per sample, loss, peak)",
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
            "margin": 0.10, "usable_bytes": plan.usable, "budget_bytes": plan.budget, "memory_source": plan.source,
            "site": {"file": site.get("path"), "line": site.get("line")} if site else None,
            "option": {"name": plan.option[0], "line": plan.option[1]} if plan.option else None,
            "points": [point(p) for p in plan.points], "per_sample_bytes": plan.per_sample_bytes,
            "largest_by_fit": plan.largest_by_fit, "offered": point(plan.offered), "bounded_by": plan.bounded_by,
            "why_not": plan.why_not}


def render_json(plan: BatchPlan) -> str:
    return json.dumps(to_dict(plan), indent=2)


def _ms(value: float | None, where: str) -> str:
    return f"{value:.2f} ms {where}" if value else f"? ms {where}"


def render_checkpoint_console(plan: CheckpointPlan, console: Console) -> None:
    source = "measured on this GPU" if plan.source == "measured" else "emulated CUDA device (an estimate)"
    console.print(f"[bold]perfaudit plan --checkpoint[/] activation checkpointing of the script's repeated blocks "
                  f"(tip T14), each run before it is offered; memory: {source}", highlight=False)
    base = plan.baseline
    for r in plan.runs:
        label = ("as it is" if not r.classes else f"{', '.join(r.classes)} checkpointed ({r.calls} calls a step)"
                 if r.first is None else f"the first {r.first} {', '.join(r.classes)} checkpointed (of {r.calls})")
        change = (f" ({r.allocated / base.allocated - 1:+.0%})" if base and r is not base and base.allocated else "")
        console.print(f"  ran {escape(label)}: step peak {r.allocated / GB:.3f} GB allocated{change}, "
                      f"{r.reserved / GB:.3f} GB reserved; {_ms(r.cpu_step_ms, 'a step here')}", highlight=False)
    if base is not None and not plan.fits(base) and plan.usable > 0:
        console.print(f"  as it is the step does not fit: {base.reserved / GB:.3f} GB reserved, over the "
                      f"{plan.usable / GB:.3f} GB it may hold ({_held(plan)})", highlight=False)
    o = plan.offered
    if o is None or base is None:
        console.print(f"\n[bold]no plan[/]: {escape(plan.why_not or 'nothing was freed')}", highlight=False)
        return
    name = o.classes[0]
    freed = base.allocated - o.allocated
    cost = (f"; the step {o.cpu_step_ms / base.cpu_step_ms - 1:+.0%} here (its forward recomputed in backward)"
            if o.cpu_step_ms and base.cpu_step_ms else "")
    which = escape(name) if o.first is None else f"the first {o.first} of the {o.calls} {escape(name)} calls"
    fit = f", and the step fits ({o.reserved / GB:.3f} GB reserved)" if not plan.fits(base) and plan.fits(o) else ""
    console.print(f"\n[bold]checkpoint {which}[/]: it ran, and freed {freed / 1e6:.1f} MB of the step's "
                  f"peak ({freed / base.allocated:.0%}){cost}{fit}", highlight=False)
    where = f" (class {name} at {os.path.basename(plan.script)}:{plan.defined_at})" if plan.defined_at else ""
    call = f"torch.utils.checkpoint.checkpoint({name.lower()}, x, use_reentrant=False)"
    how = (f"where the model calls each {escape(name)}{escape(where)}, `x = {call}`" if o.first is None else
           f"where the model calls its {escape(name)}s{escape(where)}, the first {o.first} in forward order only: "
           f"`x = {call} if i < {o.first} else {name.lower()}(x)`")
    room = ("" if fit else "; the memory freed makes room for a larger batch (`perfaudit plan`)")
    console.print(f"  change: {how} (a library model: its `gradient_checkpointing_enable()`){room}; `perfaudit verify "
                  "SCRIPT --plan FILE` checks a plan written with `-o FILE`", highlight=False)


def _held(plan: CheckpointPlan) -> str:
    if plan.budget:
        return "--memory-budget"
    return f"{plan.target} less the CUDA context and a 10 % margin"


def checkpoint_dict(plan: CheckpointPlan) -> dict:
    def run(r):
        return None if r is None else {"checkpointed": r.classes, "calls_per_step": r.calls, "first": r.first,
                                       "peak_allocated_bytes": r.allocated, "peak_reserved_bytes": r.reserved,
                                       "cpu_step_ms": r.cpu_step_ms, "run_dir": r.run_dir, "ran": True}
    return {"perfaudit_version": __version__, "plan": "checkpoint", "tip": "T14", "script": plan.script,
            "target": plan.target, "device_total_bytes": plan.device_total, "memory_source": plan.source,
            "usable_bytes": plan.usable, "budget_bytes": plan.budget,
            "candidates": [{"class": n, "calls_per_step": c} for n, c in plan.candidates],
            "runs": [run(r) for r in plan.runs], "offered": run(plan.offered),
            "class_line": plan.defined_at, "why_not": plan.why_not}


def render_verification(v: PlanVerification, console: Console) -> None:
    """`perfaudit verify --plan`: the plan's step time and loss against the script as it is, and its peak."""
    from .verify_report import _SPEED_STYLE, _interval, print_rounds
    spec, t = v.spec, v.timing
    what = "batch plan (tip T12)" if spec.kind == "batch" else "checkpointing plan (tip T14)"
    console.print(f"[bold]perfaudit verify --plan[/] {escape(t.script)}: the {what} against the script as it is",
                  highlight=False)
    if t.baseline_failure:
        console.print(f"[red]the script as it is did not reach its window: {escape(t.baseline_failure)}[/]")
        return
    extra = f"; B runs with `{escape(' '.join(v.args_b))}`" if v.args_b != t.args else ""
    if v.b_window:
        extra += (f"; B takes {v.b_window['warmup']} + {v.b_window['steps']} of its larger batches (about as many "
                  "samples)")
    print_rounds(t, console, extra)
    for verdict in t.verdicts:
        console.print(f"\n[bold]{escape(verdict.name)}[/]:", highlight=False)
        if verdict.broke:
            console.print(f"  [bold red]BROKE THE SCRIPT[/]: with the plan {escape(verdict.broke)}; A ran fine")
            continue
        s, loss = verdict.speed, verdict.loss
        if s is not None and s.n_a and s.n_b:
            style, said = _SPEED_STYLE.get(s.verdict, ""), s.verdict
            if spec.kind == "batch":
                console.print(f"  throughput {1e3 / s.mean_a_ms:,.1f} → {1e3 / s.mean_b_ms:,.1f} samples/s here "
                              f"(batch {spec.base_batch} → {spec.batch}; time per sample {s.change_pct:+.1f}%): "
                              f"[{style}]{said}[/]", highlight=False)
            else:
                console.print(f"  step time  {s.mean_a_ms:.2f} → {s.mean_b_ms:.2f} ms ({s.change_pct:+.1f}%, the "
                              f"recompute): [{style}]{said}[/]", highlight=False)
            interval = (f"[{100 * s.low_ms / s.mean_a_ms:+.1f}%, {100 * s.high_ms / s.mean_a_ms:+.1f}%] of the time "
                        "per sample" if spec.kind == "batch" and s.mean_a_ms and s.low_ms == s.low_ms
                        else _interval(s.low_ms, s.high_ms))
            console.print(f"             95% interval of the change {interval}, {s.n_a} + {s.n_b} steps", highlight=False)
        elif s is not None:  # every run of A or of B waited for a CPU held by other processes: none counted
            which = "A and B" if not (s.n_a or s.n_b) else "A" if not s.n_a else "B"
            measure = f"batch {spec.base_batch} → {spec.batch}" if spec.kind == "batch" else "the recompute"
            console.print(f"  {'throughput' if spec.kind == 'batch' else 'step time '} [yellow]not measured[/] "
                          f"({measure}): every run of {which} waited for a CPU held by other processes (see the "
                          "notes); run verify again on a quieter machine, or with more --rounds", highlight=False)
        if loss is not None:
            style = "green" if loss.passed else "bold red"
            console.print(f"  loss       [{style}]{'LOSS CHANGED: ' if not loss.passed else ''}{loss.verdict}[/]: "
                          f"{escape(loss.detail)}", highlight=False)
    a, b = v.peak_a, v.peak_b
    if a is not None and b is not None:
        change = f" ({b.allocated / a.allocated - 1:+.0%})" if a.allocated else ""
        console.print(f"  peak       {a.allocated / 1e6:,.1f} → {b.allocated / 1e6:,.1f} MB allocated{change}, "
                      f"{b.reserved / 1e6:,.1f} MB reserved with the plan; the plan predicted "
                      f"{spec.predicted_allocated / 1e6:,.1f} MB ({escape(v.device)})", highlight=False)
        if v.usable:
            share = b.reserved / v.usable
            console.print(f"             {share:.0%}" if share >= 0.01 else f"             {share:.2%}"
                          + f" of the {v.usable / 1e9:.3g} GB a step may hold "
                          + ("(--memory-budget)" if spec.budget else "(less the CUDA context and a 10 % margin)"),
                          highlight=False)
    for note in [*t.notes, *v.notes]:
        console.print(f"\nnote: {escape(note)}", highlight=False)
    for failure in v.failures:
        console.print(f"\n[bold red]PLAN FAILED[/]: {escape(failure)}", highlight=False)
    verdict_text = ("the plan ran as predicted: apply it" if v.passed else
                    "stopped before the plan was judged" if t.interrupted else "verify failed: see above")
    console.print(f"\nruns: {escape(t.folder)}  — {verdict_text}", highlight=False)


def verification_dict(v: PlanVerification) -> dict:
    from .verify_report import to_dict as timing_dict

    def peak(p):
        return None if p is None else {"peak_allocated_bytes": p.allocated, "peak_reserved_bytes": p.reserved,
                                       "device_total_bytes": p.device_total, "cuda_context_bytes": p.context}
    spec = v.spec
    return {"perfaudit_version": __version__, "plan": spec.kind, "script": v.timing.script, "args_b": v.args_b,
            "passed": v.passed, "failures": v.failures, "notes": v.notes,
            "batch": {"from": spec.base_batch, "to": spec.batch, "held": v.batch_held} if spec.kind == "batch" else None,
            "checkpointed": spec.classes or None,
            "memory": {"where": v.device, "predicted_peak_allocated_bytes": spec.predicted_allocated,
                       "usable_bytes": v.usable, "a": peak(v.peak_a), "b": peak(v.peak_b)},
            "speed_per": "sample" if spec.kind == "batch" else "step", "b_window": v.b_window or None,
            "timing": timing_dict(v.timing)}
