"""The largest batch that fits a GPU, found by running it (tip T12, `perfaudit plan`, `api.plan_batch`): the script
is run at its own batch and at twice it, each for its two warm-up steps' device memory (emulated on a CPU-only machine,
measured on a GPU); the memory a sample adds is the difference, not assumed from the first run alone; the
largest batch whose step fits the target with a margin follows, and the script is run again at that batch
before the plan is offered: a plan that did not fit when it ran is not offered (the next smaller one is tried,
from the three points). On a CPU-only machine the emulated device's tensors live in this machine's memory,
and its math runs on this CPU: the batch run is also bounded by the memory available here and by a step time,
and the plan says which bound it met. Every DataLoader's batch_size is scaled (collect/batch_scale.py); a
script that makes its batches by hand gets no plan, and is told why."""
from __future__ import annotations

import os
from dataclasses import dataclass, field, replace

from ..collect.run.options import RunOptions
from ..facts.registry import Missing
from ..static.batch_option import batch_option
from ..static.cuda_path import has_cuda_path
from .plan_runs import MARGIN, NoRun, observe, usable_bytes
from .stops import StopRequested, raise_on_signals, signal_name

HOST_SHARE = 0.5         # of this machine's available memory an emulated run may fill
MAX_STEP_S = 30.0        # a batch run's CPU step at most this long (the run makes four or five)
TRIES = 2                # batch runs before giving up on a plan
STEPS_PER_EPOCH = 4      # a batch of at most this share of the dataset: an epoch of one step is no plan


@dataclass
class Point:
    """One run at one batch: what its step held (bytes) and what the projection made of it."""
    batch: int                         # the samples a batch held (its bytes against the first run's)
    allocated: int
    reserved: int
    cpu_step_ms: float | None
    projected_step_ms: float | None
    run_dir: str
    bottleneck: str | None = None      # the projected step's (data, host, sync, copies, gpu, communication)
    batch_bytes: int = 0
    dataset_len: int | None = None

    @property
    def samples_per_s(self) -> float | None:
        return 1e3 * self.batch / self.projected_step_ms if self.projected_step_ms else None


@dataclass
class BatchPlan:
    script: str
    target: str = ""
    device_total: int = 0
    context: int = 0
    source: str = ""                   # "emulated" or "measured"
    site: dict | None = None           # the training DataLoader's file and line
    option: tuple[str, int] | None = None  # the script's option that sets its batch_size, and its line
    points: list[Point] = field(default_factory=list)
    per_sample_bytes: float | None = None
    largest_by_fit: int | None = None  # what the two points say the GPU holds (not run when bounded here)
    offered: Point | None = None       # the batch that ran and fit
    bounded_by: str | None = None      # "the GPU", "this machine's memory", "the CPU step time", "the dataset"
    why_not: str | None = None         # no plan, and why
    interrupted: int | None = None     # the signal that stopped it (Ctrl-C): what ran before is kept
    out_of_memory: bool = False        # the last run died of an out-of-memory error (a real GPU's)
    budget: int | None = None          # bytes a step may reserve, the user's (--memory-budget)

    @property
    def usable(self) -> float:
        """Bytes a step may reserve: the budget, else the target's memory less the context, less the margin."""
        return usable_bytes(self.device_total, self.context, self.budget)


def plan_batch(script: str, args: list[str], options: RunOptions, on_progress=None,
               budget: int | None = None) -> BatchPlan:
    plan = BatchPlan(script, budget=budget)
    if options.device == "auto":  # as `run` resolves it: the CUDA path emulated where the script has one
        options = replace(options, device="emulate-cuda" if has_cuda_path(script) else "cpu")
    try:
        with raise_on_signals():  # the house's stop policy (stops.py): a run in flight is stopped by the runner
            return _plan(plan, script, args, options, on_progress)
    except StopRequested as stop:  # between two runs: the runs that ended are the plan's so far
        plan.interrupted, plan.why_not = stop.signum, f"interrupted ({signal_name(stop.signum)})"
        return plan


def _plan(plan: BatchPlan, script: str, args: list[str], options: RunOptions, on_progress) -> BatchPlan:
    base_options = replace(options, warmup=2, steps=1, full=False, batch_scale=None)
    first = _point(script, args, base_options, 1.0, plan, on_progress)
    if first is None:
        return plan
    batch = first.batch
    if plan.site and plan.site.get("path") and isinstance(plan.site.get("line"), int):
        plan.option = batch_option(plan.site["path"], plan.site["line"])
    second = _point(script, args, replace(base_options, target="none"), 2.0, plan, on_progress)
    if second is None:
        return plan
    if second.batch != 2 * batch:
        plan.why_not = (f"the second run's loader gave batches of {second.batch}, not {2 * batch}: the dataset "
                        "holds fewer samples than twice the batch, or the script sets the batch another way")
        return plan
    per_sample = (second.allocated - first.allocated) / batch
    plan.per_sample_bytes = per_sample
    if per_sample <= 0:
        plan.why_not = "the step's memory did not grow with the batch: nothing to plan by it"
        return plan
    ratio = max(second.reserved / second.allocated, 1.0) if second.allocated else 1.0
    fixed = first.allocated - per_sample * batch
    plan.largest_by_fit = _round(int((plan.usable / ratio - fixed) / per_sample))
    if plan.largest_by_fit <= 2 * batch:
        plan.why_not = (f"the step already fills the {plan.target}: at most {max(plan.largest_by_fit, 0)} samples fit "
                        f"with a {MARGIN:.0%} margin, no more than the {2 * batch} measured (activation "
                        "checkpointing or mixed precision free room: MEM002)")
        return plan
    wanted, plan.bounded_by = plan.largest_by_fit, "the GPU"
    host = _host_bound(first, per_sample, fixed, ratio, plan)
    if host is not None and host < wanted:
        wanted, plan.bounded_by = host, "this machine's memory"
    if first.dataset_len and first.dataset_len // STEPS_PER_EPOCH < wanted:
        wanted, plan.bounded_by = _round(first.dataset_len // STEPS_PER_EPOCH), "the dataset"
    if first.cpu_step_ms:
        by_time = _round(int(batch * MAX_STEP_S * 1e3 / first.cpu_step_ms))
        if by_time < wanted:
            wanted, plan.bounded_by = by_time, "the CPU step time"
    for _ in range(TRIES):
        if wanted <= 2 * batch:
            plan.why_not = (f"{plan.bounded_by} holds no batch larger than the {2 * batch} already measured "
                            f"(the {plan.target} would hold {plan.largest_by_fit})")
            return plan
        tried = _point(script, args, base_options, wanted / batch, plan, on_progress)
        if tried is None and plan.out_of_memory:  # a GPU ran out of memory at it: a quarter smaller
            plan.out_of_memory, wanted = False, _round(int(wanted * 0.75))
            continue
        if tried is None:
            return plan
        if tried.batch != wanted:
            plan.why_not = (f"a loader asked for batches of {wanted} gave {tried.batch} samples: the script "
                            "or its dataset sets the batch another way")
            return plan
        if tried.reserved <= plan.usable:
            plan.offered = tried
            return plan
        # it did not fit: the third point corrects the slope, and a smaller batch runs
        per_sample = (tried.allocated - first.allocated) / (wanted - batch)
        ratio = max(tried.reserved / tried.allocated, 1.0)
        wanted = min(_round(int((plan.usable / ratio - fixed) / per_sample)), _round(int(wanted * 0.9)))
    plan.why_not = f"no batch that ran fit the {plan.target} with a {MARGIN:.0%} margin"
    return plan


def _round(n: int) -> int:
    """A batch a user would pick: a multiple of 8 from 16 on (tensor cores' tiles), else as it is."""
    return n - n % 8 if n >= 16 else n


def _host_bound(first: Point, per_sample: float, fixed: float, ratio: float, plan: BatchPlan) -> int | None:
    """On the emulated device the batch's tensors are this machine's: the largest batch whose step fits in
    HOST_SHARE of its available memory (None on a GPU, or where the OS does not say)."""
    if plan.source != "emulated":
        return None
    available = available_memory()
    if available is None:
        return None
    return _round(int((HOST_SHARE * available / ratio - fixed) / per_sample))


def available_memory() -> int | None:
    """Bytes of memory available to a new process on this machine (Linux's MemAvailable), or None."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _point(script: str, args: list[str], options: RunOptions, scale: float, plan: BatchPlan,
           on_progress) -> Point | None:
    """The script run with every loader's batch times `scale`: its batch and its step's device memory; None
    (and `plan.why_not`) when the run said nothing of either."""
    out_dir = os.path.join(options.out_dir, f"batch-x{scale:g}") if options.out_dir else None
    try:
        seen = observe(script, args, replace(options, batch_scale=scale if scale != 1.0 else None, out_dir=out_dir),
                       f"at {scale:g}x the batch", on_progress)
    except NoRun as no:
        plan.why_not, plan.out_of_memory = no.why, no.out_of_memory
        plan.interrupted = no.stop_signal or plan.interrupted
        return None
    ctx, memory = seen.ctx, seen.memory
    loaders = [d for d in ctx.probes.get("dataloaders") or [] if isinstance(d, dict) and d.get("batch_bytes")]
    if not loaders or not isinstance(loaders[0].get("batch_size"), int):
        plan.why_not = ("the training batches come from no DataLoader with a batch_size: the plan scales a "
                        "DataLoader's batch_size (a script that makes its batches by hand is not changed)")
        return None
    loader = max(loaders, key=lambda d: d.get("window_batches", 0))
    plan.target, plan.device_total = memory["target"], int(memory["device_total_bytes"])
    plan.context = int(memory.get("cuda_context_bytes") or 0)
    plan.source = "measured" if memory.get("measured") else "emulated"
    plan.site = plan.site or loader.get("site")
    projected, bottleneck = None, None
    if options.target != "none":
        try:
            projection = ctx.get("projection")
            projected, bottleneck = projection["step_ms"], projection["bottleneck"]
        except Missing:
            pass
    batch, nbytes = int(loader["batch_size"]), int(loader["batch_bytes"])
    if plan.points and plan.points[0].batch_bytes:  # what the batch held, not what the loader was asked for
        batch = round(plan.points[0].batch * nbytes / plan.points[0].batch_bytes)
    length = loader.get("dataset_len")
    point = Point(batch, int(memory["peak_allocated_bytes"]), int(memory["peak_reserved_bytes"]), seen.cpu_step_ms,
                  projected, seen.run_dir, bottleneck, nbytes,
                  length if isinstance(length, int) and not isinstance(length, bool) else None)
    plan.points.append(point)
    return point
