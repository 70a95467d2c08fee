"""`perfaudit verify SCRIPT --plan PLAN.json`: a plan of `perfaudit plan` (its `-o` JSON) checked the way verify
checks a fix. The script runs as it is (A) and with the plan (B: the larger batch through the script's own option
when the plan names one, else every DataLoader's batch scaled; or the planned blocks checkpointed) in verify's
interleaved timing rounds, no profiler: the step time (per sample, for a batch plan) and the loss (a checkpointing
plan must not change it; a batch plan changes the optimisation, so only divergence fails it). Then each runs once
more on the device the plan was made for (the GPU here, else the emulated CUDA device) for its step's peak device
memory: B must hold no more than the plan predicted (+TOLERANCE), fit the target (a batch plan), run without an
out-of-memory error, and, for a batch plan, take the batch the plan asked for."""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field, replace

from ..collect.run.options import RunOptions
from ..collect.run.rundir import finish_run_dir, make_run_dir
from ..errors import UsageError
from ..static.cuda_path import has_cuda_path
from .ab import Rounds, Variant, Verification, run_ab
from .plan_runs import MARGIN, NoRun, observe, usable_bytes
from .stats import MIN_STEPS, LossCheck

TOLERANCE = 0.10     # B's peak allocated may exceed the plan's by this share before verify fails it
MAX_PLAN_BYTES = 16 << 20
MIN_B_STEPS = 3      # a batch plan's B measures at least this many steps a run


@dataclass
class PlanSpec:
    """What a plan file asks for, read from `perfaudit plan -o` (hostile input: every field checked)."""
    kind: str                              # "batch" | "checkpoint"
    target: str
    source: str                            # "emulated" | "measured": where the plan's memory came from
    predicted_allocated: int               # the offered run's peak allocated, bytes
    base_batch: int = 1
    batch: int = 1
    option: str | None = None              # the script's option that sets the batch
    classes: list[str] = field(default_factory=list)
    first: int | None = None               # only the first this many instances checkpointed
    baseline_allocated: int | None = None
    budget: int | None = None              # the plan's --memory-budget, bytes


@dataclass
class Peak:
    allocated: int
    reserved: int
    device_total: int
    context: int
    batch_bytes: int | None = None         # a batch plan: what the training loader's batches held, bytes


@dataclass
class PlanVerification:
    spec: PlanSpec
    timing: Verification
    args_b: list[str]
    peak_a: Peak | None = None
    peak_b: Peak | None = None
    failures: list[str] = field(default_factory=list)   # why the plan does not pass
    notes: list[str] = field(default_factory=list)
    device: str = ""                        # where the peaks were taken
    b_window: dict = field(default_factory=dict)   # B's own warm-up and measured steps (a batch plan's)

    @property
    def passed(self) -> bool:
        return self.timing.passed and not self.failures and self.peak_b is not None

    @property
    def batch_held(self) -> int | None:
        """The samples B's training batches held, from their bytes against A's (A's is the plan's own batch)."""
        a, b = self.peak_a, self.peak_b
        if self.spec.kind != "batch" or not (a and b and a.batch_bytes and b.batch_bytes):
            return None
        return round(self.spec.base_batch * b.batch_bytes / a.batch_bytes)

    @property
    def usable(self) -> float | None:
        """Bytes a step may reserve: the plan's budget, else the GPU's memory less its context and the margin."""
        p = self.peak_b
        if not (self.spec.budget or (p and p.device_total)):
            return None
        return usable_bytes(p.device_total if p else 0, p.context if p else 0, self.spec.budget)


def read_plan(path: str) -> PlanSpec:
    """The plan a `perfaudit plan -o` file offers; UsageError (one line) when it is not one, or offers nothing."""
    try:
        if os.path.getsize(path) > MAX_PLAN_BYTES:
            raise UsageError(f"{path}: not a plan file of `perfaudit plan -o` (over {MAX_PLAN_BYTES >> 20} MB)")
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except UsageError:
        raise
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        why = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        raise UsageError(f"cannot read the plan {path}: {why}") from None
    if not isinstance(data, dict) or data.get("plan") not in ("batch", "checkpoint"):
        raise UsageError(f"{path}: not a plan file of `perfaudit plan -o` (no \"plan\": \"batch\" or \"checkpoint\")")
    offered = data.get("offered")
    if offered is None:
        why_not = data.get("why_not")
        raise UsageError(f"{path}: the plan offers nothing to verify"
                         + (f" ({why_not[:200]})" if isinstance(why_not, str) and why_not else ""))
    if not isinstance(offered, dict):
        raise UsageError(f"{path}: its \"offered\" is not a run")
    spec = PlanSpec(data["plan"], _text(data.get("target")) or "auto", _text(data.get("memory_source")) or "emulated",
                    _count(offered.get("peak_allocated_bytes"), path, "offered.peak_allocated_bytes"))
    budget = data.get("budget_bytes")
    spec.budget = _count(budget, path, "budget_bytes", least=1) if budget is not None else None
    if spec.kind == "batch":
        points = data.get("points")
        first = points[0] if isinstance(points, list) and points and isinstance(points[0], dict) else None
        if first is None:
            raise UsageError(f"{path}: a batch plan without the run at the script's own batch (\"points\")")
        spec.base_batch = _count(first.get("batch"), path, "points[0].batch", least=1)
        spec.batch = _count(offered.get("batch"), path, "offered.batch", least=1)
        option = data.get("option")
        name = option.get("name") if isinstance(option, dict) else None
        spec.option = name if isinstance(name, str) and name.startswith("-") and name.isprintable() else None
    else:
        classes = offered.get("checkpointed")
        if not (isinstance(classes, list) and classes and all(isinstance(c, str) and c.isidentifier() for c in classes)):
            raise UsageError(f"{path}: a checkpointing plan without the classes it checkpoints (\"offered.checkpointed\")")
        spec.classes = classes
        first = offered.get("first")
        spec.first = _count(first, path, "offered.first", least=1) if first is not None else None
        runs = data.get("runs")
        base = runs[0] if isinstance(runs, list) and runs and isinstance(runs[0], dict) else {}
        spec.baseline_allocated = _count(base.get("peak_allocated_bytes"), path, "runs[0].peak_allocated_bytes") \
            if base.get("peak_allocated_bytes") is not None else None
    return spec


def _text(value) -> str | None:
    return value[:200] if isinstance(value, str) and value.isprintable() else None


def _count(value, path: str, name: str, least: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < least or value > 1 << 60:
        raise UsageError(f"{path}: {name} is not a count ({str(value)[:40]!r})")
    return value


def with_option(args: list[str], name: str, value: int) -> list[str]:
    """The script's arguments with `name` set to `value` (its last `name V` or `name=V` replaced, else added)."""
    out = list(args)
    for i in range(len(out) - 1, -1, -1):
        if out[i] == name and i + 1 < len(out):
            out[i + 1] = str(value)
            return out
        if out[i].startswith(name + "="):
            out[i] = f"{name}={value}"
            return out
    return out + [name, str(value)]


def verify_plan(script: str, args: list[str], spec: PlanSpec, options: RunOptions, rounds: Rounds | int = 3,
                on_progress=None) -> PlanVerification:
    """A/B timing rounds of SCRIPT as it is and with the plan, then one run of each for its peak device memory.
    The user's files are not written."""
    say = on_progress or (lambda text: None)
    folder = make_run_dir(options.out_dir, options.keep_runs)
    b = _variant_b(spec, args, options, rounds.min if isinstance(rounds, Rounds) else rounds)
    a = Variant("A", None, samples=spec.base_batch if spec.kind == "batch" else 1)
    result = PlanVerification(spec, Verification(script, args, 0, options.warmup, options.steps, None, [], folder),
                              b.args if b.args is not None else args,
                              b_window={k: v for k, v in (b.overrides or {}).items() if k in ("warmup", "steps")})
    try:
        result.timing = run_ab(script, args, [a, b], folder, options, rounds, say)
        if not (result.timing.interrupted or result.timing.baseline_failure):
            _judge_runs(script, args, spec, b, options, folder, result, say)
    finally:
        finish_run_dir(folder)
    return result


def _judge_runs(script: str, args: list[str], spec: PlanSpec, b: Variant, options: RunOptions, folder: str,
                result: PlanVerification, say) -> None:
    timing = result.timing
    verdict = timing.verdicts[0] if timing.verdicts else None
    if verdict is not None and spec.kind == "batch":
        verdict.loss = batch_loss(verdict.loss, spec)
    if verdict is not None and verdict.broke is None:
        _peaks(script, args, spec, b, options, folder, result, say)


def batch_loss(loss: LossCheck | None, spec: PlanSpec) -> LossCheck | None:
    """A batch plan changes the loss by design (a mean, or a sum, over more samples): divergence alone fails it."""
    if loss is None or loss.verdict == "diverged":
        return loss
    return LossCheck("not compared", f"a batch of {spec.batch} instead of {spec.base_batch} changes the optimisation "
                     "(each step's loss is a mean, or a sum, over more samples, and fewer steps make an epoch): the "
                     "loss is only checked to stay finite; scale the learning rate with the batch and watch the loss "
                     "curve of a longer run", True)


def _variant_b(spec: PlanSpec, args: list[str], options: RunOptions, rounds: int = 3) -> Variant:
    if spec.kind == "checkpoint":
        which = f"the first {spec.first} " if spec.first else ""
        return Variant(f"checkpoint {which}{', '.join(spec.classes)}", None, keeps_maths=True,
                       overrides={"checkpoint_classes": spec.classes, "checkpoint_first": spec.first})
    # B's runs take about as many samples as A's, not as many steps: a batch 12x larger is a step 12x longer on
    # a CPU, and its runs would last 12x as long (at least MIN_B_STEPS measured, for an interval over the rounds)
    factor = spec.base_batch / spec.batch
    least = max(MIN_B_STEPS, math.ceil(MIN_STEPS / max(rounds, 1)))  # an interval's steps over the rounds
    window = {"steps": max(least, math.ceil(options.steps * factor)), "warmup": max(1, math.ceil(
        options.warmup * factor))} if factor < 1 else {}
    if spec.option:  # the change as the user would make it: the script's own option
        return Variant(f"{spec.option} {spec.batch}", None, args=with_option(args, spec.option, spec.batch),
                       samples=spec.batch, keeps_maths=False, overrides=window or None)
    return Variant(f"batch {spec.batch}", None, overrides={"batch_scale": spec.batch / spec.base_batch, **window},
                   samples=spec.batch, keeps_maths=False)


def _peaks(script: str, args: list[str], spec: PlanSpec, b: Variant, options: RunOptions, folder: str,
           result: PlanVerification, say) -> None:
    """A and B once each on the plan's device, for the step's peak device memory; the verdicts on B's."""
    device = options.device
    if device == "auto":
        device = "emulate-cuda" if has_cuda_path(script) else "cpu"
    peak_options = replace(options, mode="profile", warmup=2, steps=1, full=False, device=device,
                           target=spec.target if spec.source == "emulated" else options.target, seed=options.seed,
                           with_stack=False, record_shapes=False)
    peaks: dict[str, Peak] = {}
    for name, variant in (("A", None), ("B", b)):
        say(f"the step's peak device memory {'as it is' if variant is None else 'with the plan'}")
        run_args = variant.args if variant is not None and variant.args is not None else args
        extra = (variant.overrides or {}) if variant is not None else {}
        try:
            seen = observe(script, run_args, replace(peak_options, out_dir=os.path.join(folder, f"{name}-peak"),
                                                     **extra), "as it is" if variant is None else "with the plan", None)
        except NoRun as no:
            if no.stop_signal:
                result.timing.interrupted = no.stop_signal
                result.timing.stopped_because = no.why
            elif name == "B" and no.out_of_memory:
                result.failures.append(f"with the plan the step ran out of device memory ({no.why})")
            else:
                result.failures.append(f"no peak device memory: {no.why}")
            return
        memory = seen.memory
        result.device = ("measured on " if memory.get("measured") else "emulated CUDA device, ") + str(memory["target"])
        peaks[name] = Peak(int(memory["peak_allocated_bytes"]), int(memory["peak_reserved_bytes"]),
                           int(memory.get("device_total_bytes") or 0), int(memory.get("cuda_context_bytes") or 0),
                           _batch_bytes(seen.ctx))
    result.peak_a, result.peak_b = peaks["A"], peaks["B"]
    _judge(result)


def _batch_bytes(ctx) -> int | None:
    """What the training loader's batches held, bytes (the loader that gave the window most batches)."""
    loaders = [d for d in ctx.probes.get("dataloaders") or [] if isinstance(d, dict) and d.get("batch_bytes")]
    return int(max(loaders, key=lambda d: d.get("window_batches", 0))["batch_bytes"]) if loaders else None


def _judge(result: PlanVerification) -> None:
    spec, a, b = result.spec, result.peak_a, result.peak_b
    assert a is not None and b is not None
    limit = (1 + TOLERANCE) * spec.predicted_allocated
    if b.allocated > limit:
        result.failures.append(f"with the plan the step held {b.allocated / 1e6:,.1f} MB, more than the "
                               f"{spec.predicted_allocated / 1e6:,.1f} MB the plan predicted (+{TOLERANCE:.0%} allowed)")
    usable = result.usable
    if usable is not None and b.reserved > usable:
        result.failures.append(f"with the plan the step reserved {b.reserved / 1e9:.3f} GB, more than the "
                               f"{usable / 1e9:.3f} GB a step may hold"
                               + ("" if spec.budget else f" (the GPU less its CUDA context and a {MARGIN:.0%} margin)"))
    held = result.batch_held
    if held is not None and held != spec.batch:
        result.failures.append(f"the training loader's batches held {held} samples, not the {spec.batch} the "
                               "plan asks for: the change did not reach the loader")
    if spec.kind == "checkpoint" and b.allocated >= a.allocated:
        result.failures.append(f"checkpointing freed nothing here: the step held {b.allocated / 1e6:,.1f} MB with it "
                               f"and {a.allocated / 1e6:,.1f} MB without")
    if result.device.startswith("measured") and spec.source == "emulated":
        result.notes.append("the plan's memory was the emulated device's estimate; these peaks are this GPU's own")
