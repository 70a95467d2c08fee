"""An activation-checkpointing plan, found by running it (tip T14, `perfaudit plan --checkpoint`,
`api.plan_checkpoint`): the script runs as it is for its step's device memory and the modules its step calls;
the script's own module classes called more than once a step (a transformer's blocks, a ResNet's stages) are
the candidates, the most called first and, among those called as often, the outermost; the script runs again
with each candidate checkpointed (collect/checkpointing.py: its forward under
`torch.utils.checkpoint.checkpoint(..., use_reentrant=False)`), at most MAX_TRIES; the candidate that freed the
most memory is offered, with the recompute it costs (the step measured here; not projected: on a host-bound
step the projection moves more from run to run than a recompute adds), if it freed at least MIN_FREED of the
peak. When the step does not fit (the target less its CUDA context and a 10 % margin, or `budget`), only as many
of the class's instances are checkpointed as the memory its every-instance run freed per call says are needed,
the fewest first (less recompute), and that run is the plan if it fit: a few more if not (pytorch#194696's
"checkpoint a few more layers, rerun", done by the plan). A plan is a run: nothing is offered from the first run
alone."""
from __future__ import annotations

import math
import os
from collections import Counter
from dataclasses import dataclass, field, replace

import torch

from ..collect.run.options import RunOptions
from ..static.cuda_path import has_cuda_path
from .plan_runs import NoRun, observe, usable_bytes
from .stops import StopRequested, raise_on_signals, signal_name

MAX_TRIES = 2       # candidate classes run
MIN_FREED = 0.05    # of the peak allocated, freed at least, for a plan
SUBSET_TRIES = 2    # runs with a subset of the instances checkpointed, each a few more than the last


@dataclass
class Run:
    """One run: the classes checkpointed in it, what its step held and took."""
    classes: list[str]
    allocated: int
    reserved: int
    cpu_step_ms: float | None
    run_dir: str
    calls: int = 0          # of the checkpointed class, a step
    first: int | None = None  # only the first this many instances checkpointed (None: every one)


@dataclass
class CheckpointPlan:
    script: str
    target: str = ""
    device_total: int = 0
    context: int = 0
    budget: int | None = None          # bytes a step may reserve, the user's (else the target's, less the margin)
    source: str = ""
    runs: list[Run] = field(default_factory=list)
    candidates: list[tuple[str, int]] = field(default_factory=list)   # (class, calls a step)
    offered: Run | None = None
    defined_at: int | None = None      # the offered class's `class` line in the script
    why_not: str | None = None
    interrupted: int | None = None

    @property
    def baseline(self) -> Run | None:
        return self.runs[0] if self.runs else None

    @property
    def usable(self) -> float:
        """Bytes a step may reserve: the budget, else the target's memory less the context and the margin."""
        return usable_bytes(self.device_total, self.context, self.budget)

    def fits(self, run: Run) -> bool:
        return run.reserved <= self.usable


def plan_checkpoint(script: str, args: list[str], options: RunOptions, on_progress=None,
                    budget: int | None = None) -> CheckpointPlan:
    plan = CheckpointPlan(script, budget=budget)
    if options.device == "auto":
        options = replace(options, device="emulate-cuda" if has_cuda_path(script) else "cpu")
    try:
        with raise_on_signals():
            # no projection: a host-bound step's projection moves more from run to run than a recompute adds
            return _plan(plan, script, args, replace(options, warmup=2, steps=2, full=False, target="none"),
                         on_progress)
    except StopRequested as stop:
        plan.interrupted, plan.why_not = stop.signum, f"interrupted ({signal_name(stop.signum)})"
        return plan


def _plan(plan: CheckpointPlan, script: str, args: list[str], options: RunOptions, on_progress) -> CheckpointPlan:
    base = _run(script, args, options, [], plan, on_progress)
    if base is None:
        return plan
    plan.candidates = _candidates(base.order)
    if not plan.candidates:
        plan.why_not = ("no module class of the script's own is called more than once a step: nothing repeats to "
                        "checkpoint (torch's own layers are not candidates)")
        return plan
    tried = []
    for name, calls in plan.candidates[:MAX_TRIES]:
        seen = _run(script, args, options, [name], plan, on_progress)
        if seen is None:
            if plan.interrupted:
                return plan
            continue
        seen.run.calls = calls
        tried.append(seen.run)
    best = min(tried, key=lambda r: r.allocated, default=None)
    if best is None:
        return plan
    if not plan.fits(base.run) and plan.usable > 0:
        return _to_fit(plan, script, args, options, base.run, best, on_progress)
    if best.allocated > (1 - MIN_FREED) * base.run.allocated:
        plan.why_not = (f"checkpointing {', '.join(best.classes)} freed "
                        f"{max(base.run.allocated - best.allocated, 0) / 1e6:.1f} MB of the step's "
                        f"{base.run.allocated / 1e6:.1f} MB peak: under {MIN_FREED:.0%}, not worth its recompute")
        return plan
    plan.offered, plan.why_not = best, None
    plan.defined_at = _class_line(script, best.classes[0])
    return plan


def _to_fit(plan: CheckpointPlan, script: str, args: list[str], options: RunOptions, base: Run, every: Run,
            on_progress) -> CheckpointPlan:
    """The step does not fit: the fewest instances of the best class whose checkpointing makes it fit, run."""
    name = every.classes[0]
    if not plan.fits(every):
        plan.why_not = (f"even with every {name} checkpointed the step reserved {every.reserved / 1e9:.2f} GB, over "
                        f"the {plan.usable / 1e9:.2f} GB it may hold: a smaller batch or mixed precision (AMP001) "
                        "frees more")
        return plan
    per_call = (base.allocated - every.allocated) / max(every.calls, 1)   # freed, a call checkpointed
    ratio = max(base.reserved / base.allocated, 1.0) if base.allocated else 1.0
    first = math.ceil((base.allocated - plan.usable / ratio) / per_call) if per_call > 0 else every.calls
    for _ in range(SUBSET_TRIES):
        if first >= every.calls:
            break
        seen = _run(script, args, replace(options, checkpoint_first=first), [name], plan, on_progress)
        if seen is None:
            if plan.interrupted:
                return plan
            break
        run, run.calls, run.first = seen.run, every.calls, first
        if plan.fits(run):
            plan.offered = run
            break
        freed = base.allocated - run.allocated  # what these instances freed, measured: a few more next
        per_call = freed / first if freed > 0 else per_call
        ratio = max(run.reserved / run.allocated, 1.0) if run.allocated else ratio
        first = max(first + 1, math.ceil((base.allocated - plan.usable / ratio) / per_call))
    if plan.offered is None:
        plan.offered = every  # every instance: it ran, and it fit
    plan.why_not, plan.defined_at = None, _class_line(script, name)
    return plan


def _class_line(script: str, name: str) -> int | None:
    """The line of `class NAME` in the script (a class from a module it imports: None)."""
    import ast
    try:
        with open(script, encoding="utf-8", errors="replace") as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, ValueError, RecursionError, MemoryError):  # a user's file, read as hostile
        return None
    return next((n.lineno for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == name), None)


@dataclass
class _Seen:
    run: Run
    order: list[str]


def _candidates(order: list[str]) -> list[tuple[str, int]]:
    """The script's own module classes called more than once in the traced step, the most called first; among
    those called as often, the one called last (hooks fire after a forward: the outermost) first."""
    counts = Counter(order)
    last = {name: i for i, name in enumerate(order)}
    own = [name for name, n in counts.items() if n > 1 and not hasattr(torch.nn, name)]
    own.sort(key=lambda name: (-counts[name], -last[name]))
    return [(name, counts[name]) for name in own]


def _run(script: str, args: list[str], options: RunOptions, classes: list[str], plan: CheckpointPlan,
         on_progress) -> _Seen | None:
    label = (f"with {', '.join(classes)} checkpointed" if classes else "as it is") + (
        f" (its first {options.checkpoint_first})" if options.checkpoint_first else "")
    folder = "checkpoint-" + ("-".join(classes) or "none") + (f"-first{options.checkpoint_first}"
                                                               if options.checkpoint_first else "")
    out_dir = os.path.join(options.out_dir, folder) if options.out_dir else None
    try:
        seen = observe(script, args, replace(options, checkpoint_classes=classes or None, out_dir=out_dir), label,
                       on_progress)
    except NoRun as no:
        plan.why_not, plan.interrupted = no.why, no.stop_signal or plan.interrupted
        return None
    memory = seen.memory
    plan.target, plan.device_total = memory["target"], int(memory["device_total_bytes"])
    plan.context = int(memory.get("cuda_context_bytes") or 0)
    plan.source = "measured" if memory.get("measured") else "emulated"
    run = Run(classes, int(memory["peak_allocated_bytes"]), int(memory["peak_reserved_bytes"]), seen.cpu_step_ms,
              seen.run_dir)
    plan.runs.append(run)
    order = seen.ctx.probes.get("module_order")
    return _Seen(run, [n for n in order if isinstance(n, str)] if isinstance(order, list) else [])
