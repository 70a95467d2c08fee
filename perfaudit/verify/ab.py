"""The A/B runs of `perfaudit verify`: the script as it is (A) and with fixes (B, or one B per fix),
interleaved over several rounds (A B A B …) so that drift of the machine hits both, each run a fresh
process with the same seeds and the same step window, no profiler. The user's files are never
written: B's child reads the fixed sources from the verify folder."""
from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from ..collect.runner import RunOptions, RunResult, run_script
from ..fix.catalog import FIX_KINDS
from ..fix.plan import FixPlan
from ..outcome import describe, is_failure
from .stats import MIN_STEPS, LossCheck, SpeedChange, loss_check, speed_change


@dataclass
class Variant:
    name: str                 # "A", "B" (all fixes), or a rule id (one fix)
    plan: FixPlan | None      # None: the script as it is

    @property
    def same_maths(self) -> bool:
        return self.plan is not None and all(FIX_KINDS[c.kind].same_maths for c in self.plan.changes)


@dataclass
class Runs:
    times: list[list[float]] = field(default_factory=list)    # seconds per measured step, per round
    losses: list[list[float | None]] = field(default_factory=list)  # per round, per step
    device: str | None = None
    failure: str | None = None                               # the first run that did not reach its window


@dataclass
class FixVerdict:
    name: str
    rules: list[str]
    changes: list                  # fix.Change
    speed: SpeedChange | None = None
    loss: LossCheck | None = None
    broke: str | None = None       # B failed where A ran: what happened

    @property
    def passed(self) -> bool:
        return self.broke is None and (self.loss is None or self.loss.passed)


@dataclass
class Verification:
    script: str
    args: list[str]
    rounds: int
    warmup: int
    steps: int
    device: str | None
    verdicts: list[FixVerdict]
    folder: str
    baseline_failure: str | None = None   # A itself did not reach its window
    notes: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.baseline_failure is None and all(v.passed for v in self.verdicts)


def _describe(result: RunResult) -> str | None:
    """Why a run gave no usable step times (it failed, or ended before its window), or None."""
    outcome = result.outcome or {}
    if is_failure(outcome):
        return describe(outcome) or f"it ended: {outcome.get('outcome')}"
    if not (result.timing and result.timing.get("step_times_s")):
        return f"it ended ({outcome.get('outcome', 'unknown')}) before any step was measured"
    return None


def _write_sources(plan: FixPlan, folder: str) -> dict[str, str]:
    os.makedirs(folder, exist_ok=True)
    served = {}
    for i, f in enumerate(plan.files):
        path = os.path.join(folder, f"{i}-{os.path.basename(f.path)}")
        with open(path, "w", encoding="utf-8") as out:
            out.write(f.fixed)
        served[f.path] = path
    return served


def run_ab(script: str, args: list[str], variants: list[Variant], folder: str, options: RunOptions,
           rounds: int, on_progress: Callable[[str], None] | None = None) -> Verification:
    say = on_progress or (lambda text: None)
    served = {v.name: _write_sources(v.plan, os.path.join(folder, f"fixed-{v.name}")) if v.plan else {}
              for v in variants}
    runs = {v.name: Runs() for v in variants}
    for r in range(1, rounds + 1):
        for v in variants:
            if runs[v.name].failure:
                continue
            say(f"round {r}/{rounds}: {'as it is' if v.plan is None else 'with ' + v.name}")
            opts = replace(options, out_dir=os.path.join(folder, f"{v.name}{r}"), patched=served[v.name],
                           mode="timing", seed=options.seed if options.seed is not None else 0)
            result = run_script(script, args, opts)
            failure = _describe(result)
            if failure:
                runs[v.name].failure = failure
                continue
            runs[v.name].times.append(result.timing["step_times_s"])
            runs[v.name].losses.append(result.timing["losses"])
            runs[v.name].device = result.timing.get("device")
        if runs["A"].failure:
            break
    a = runs["A"]
    verification = Verification(script, args, rounds, options.warmup, options.steps, a.device, [], folder,
                                baseline_failure=a.failure)
    if a.failure:
        return verification
    for v in variants[1:]:
        b = runs[v.name]
        verdict = FixVerdict(v.name, v.plan.rules, v.plan.changes)
        if b.failure:
            verdict.broke = b.failure
        else:
            verdict.speed = speed_change(a.times, b.times)
            verdict.loss = loss_check(a.losses, b.losses, v.same_maths)
        verification.verdicts.append(verdict)
    if any(v.speed and v.speed.verdict == "too few steps" for v in verification.verdicts):
        verification.notes.append(f"an interval needs at least {MIN_STEPS} measured steps per variant: raise "
                                  f"--steps or --rounds (now {options.steps} × {rounds})")
    return verification
